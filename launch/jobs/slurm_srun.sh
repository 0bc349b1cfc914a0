#!/usr/bin/env bash
# Slurm batch job, in-MPI mode: srun starts one task per instance and each becomes a poprun_py instance.
#   sbatch launch/jobs/slurm_srun.sh [config]
#SBATCH --job-name=poprun_py-srun
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=4
#SBATCH --time=02:00:00
set -euo pipefail
config=${1:-default}
# --kill-on-bad-exit stops every task when one fails; poprun_py also calls MPI_Abort on an uncaught error.
# --mpi=pmi2 (or pmix) lets mpi4py's MPI find its peers; use the flavour your site's MPI was built with.
exec srun --mpi=pmi2 --kill-on-bad-exit=1 poprun_py --num-replicas "$(( SLURM_NTASKS * 2 ))" \
    python -m launch.train --config "$config"
