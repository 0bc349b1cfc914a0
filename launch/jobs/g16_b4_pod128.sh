#!/usr/bin/env bash
# Graphcore's G16 EfficientNet-B4 LARS recipe on IPU-POD128 (docs/sources.md §1.2, §1.3): 64 replicas x 2 IPUs,
# one instance per replica, global batch 6144. Hosts: set HOSTS (comma-separated, 8 expected).
# Extra arguments go to the training command, e.g. --set run.epochs=1 or --resume auto.
set -euo pipefail
exec python -m poprun_py --num-instances 64 --num-replicas 64 --ipus-per-replica 2 \
    ${HOSTS:+--host "$HOSTS"} --numa-aware yes \
    python -m launch.train --config g16-b4-pod128 "$@"
