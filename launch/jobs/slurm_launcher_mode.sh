#!/usr/bin/env bash
# Slurm batch job, launcher mode: poprun_py starts the instances over the allocation's nodes.
#   sbatch launch/jobs/slurm_launcher_mode.sh [config]
#SBATCH --job-name=poprun_py
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=8
#SBATCH --time=02:00:00
#SBATCH --signal=B:USR1@120
set -euo pipefail
config=${1:-default}
instances=$(( SLURM_NNODES * SLURM_NTASKS_PER_NODE ))
# poprun_py forwards SIGUSR1 (the preemption warning above) to every instance; its grace period
# leaves the training command time to write a checkpoint before SIGKILL.
exec poprun_py -H "$SLURM_JOB_NODELIST" --num-instances "$instances" --num-replicas "$(( instances * 2 ))" \
    --mpi-global-args "-launcher slurm" --grace-period 60 --max-restarts 2 --log-dir "runs/slurm-$SLURM_JOB_ID" \
    python -m launch.train --config "$config"
