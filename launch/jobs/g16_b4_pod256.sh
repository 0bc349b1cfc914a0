#!/usr/bin/env bash
# Graphcore's G16 EfficientNet-B4 LARS recipe on IPU-POD256 (docs/sources.md §1.2, §1.3): 128 replicas x 2 IPUs,
# global batch 6144 (micro-batch 3 x accumulation 16 x 128 replicas), 16 host(s).
#   sbatch launch/jobs/g16_b4_pod256.sh [training options]       (or run it on a host, without Slurm)
# Training options go to launch.train, e.g. --set run.epochs=1 --set data.path=/data/imagenet.h5.
# Variables (under Slurm: sbatch --export=ALL,NAME=value):
#   HOSTS      comma-separated hosts or a Slurm node list; default: the allocation's nodes, else this host
#   INSTANCES  poprun_py instances (default 128, one per replica; a multiple of 4 that divides 128)
#   RESUME     auto (default): continue from the newest checkpoint in run.run_dir; none: start over
# Preemption: SIGUSR1 (below, or scancel --batch --signal=USR1) checkpoints after the next update and
# ends the job with status 0; requeued or resubmitted, it resumes (README "Slurm").
#SBATCH --job-name=g16-b4-pod256
#SBATCH --nodes=16
#SBATCH --exclusive
#SBATCH --time=48:00:00
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --signal=B:USR1@300
set -euo pipefail
hosts=${HOSTS:-${SLURM_JOB_NODELIST:-}}
exec python -m poprun_py --num-instances "${INSTANCES:-128}" --num-replicas 128 --ipus-per-replica 2 \
    ${hosts:+--host "$hosts"} ${SLURM_JOB_ID:+--mpi-global-args "-launcher slurm"} --numa-aware yes \
    python -m launch.train --config g16-b4-pod256 --resume "${RESUME:-auto}" "$@"
