#!/usr/bin/env bash
# Graphcore's G16 EfficientNet-B4 LARS recipe on IPU-POD16 (docs/sources.md §1.2, §1.3): 8 replicas x 2 IPUs,
# global batch 6144 (micro-batch 3 x accumulation 256 x 8 replicas), 1 host(s).
#   sbatch launch/jobs/g16_b4_pod16.sh [training options]       (or run it on a host, without Slurm)
# Training options go to launch.train, e.g. --set run.epochs=1 --set data.path=/data/imagenet.h5.
# Variables (under Slurm: sbatch --export=ALL,NAME=value):
#   HOSTS      comma-separated hosts or a Slurm node list; default: the allocation's nodes, else this host
#   INSTANCES  poprun_py instances (default 8, one per replica, or a divisor of 8)
#   RESUME     auto (default): continue from the newest checkpoint in run.run_dir; none: start over
# Preemption: SIGUSR1 (below, or scancel --batch --signal=USR1) checkpoints after the next update and
# ends the job with status 0; requeued or resubmitted, it resumes (README "Slurm").
#SBATCH --job-name=g16-b4-pod16
#SBATCH --nodes=1
#SBATCH --exclusive
#SBATCH --time=48:00:00
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --signal=B:USR1@300
set -euo pipefail
hosts=${HOSTS:-${SLURM_JOB_NODELIST:-}}
exec python -m poprun_py --num-instances "${INSTANCES:-8}" --num-replicas 8 --ipus-per-replica 2 \
    ${hosts:+--host "$hosts"} ${SLURM_JOB_ID:+--mpi-global-args "-launcher slurm"} --numa-aware yes \
    python -m launch.train --config g16-b4-pod16 --resume "${RESUME:-auto}" "$@"
