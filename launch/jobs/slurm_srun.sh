#!/usr/bin/env bash
# Slurm batch job, in-MPI mode: srun starts one task per instance and each becomes a poprun_py instance.
#   sbatch launch/jobs/slurm_srun.sh [config] [training options]
#   sbatch -N 1 --ntasks-per-node 2 -c 1 launch/jobs/slurm_srun.sh dense --set run.epochs=1   # one small node
# Options given to sbatch override the #SBATCH lines. Variables (sbatch --export=ALL,NAME=value):
#   REPLICAS_PER_TASK  replicas each task drives (default 2): --num-replicas = tasks x this, which must
#                      equal the config's data.replicas (or add --set data.replicas=N)
#   RESUME             auto (default): continue from the newest checkpoint in run.run_dir; none: start over
# --requeue lets Slurm requeue the job (preemption, node failure, scontrol requeue); --open-mode=append
# keeps the output of every run in one file; --signal=B:USR1@120 sends SIGUSR1 to this script (srun
# passes it to every task) 120 s before the time limit: training checkpoints after the next update
# and ends with status 0; requeued or resubmitted, it resumes from that checkpoint (README "Slurm").
#SBATCH --job-name=poprun_py-srun
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --cpus-per-task=4
#SBATCH --time=02:00:00
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --signal=B:USR1@120
set -euo pipefail
if [[ -z "${SLURM_JOB_ID:-}" || -z "${SLURM_NTASKS:-}" ]]; then
    echo "$0: not inside a Slurm job (SLURM_JOB_ID and SLURM_NTASKS are unset): submit it with" \
         "sbatch $0 [config] [training options], e.g. sbatch -N 1 --ntasks-per-node 2 -c 1 $0 dense;" \
         "without Slurm run poprun_py directly: poprun_py --num-instances 2 --num-replicas 4 poprun-train" >&2
    exit 2
fi
config=${1:-default}
shift $(( $# > 0 ? 1 : 0 ))
# --kill-on-bad-exit stops every task when one fails; poprun_py also calls MPI_Abort on an uncaught error.
# --mpi=pmi2 (or pmix) lets mpi4py's MPI find its peers; use the flavour your site's MPI was built with.
exec srun --mpi=pmi2 --kill-on-bad-exit=1 poprun_py --num-replicas "$(( SLURM_NTASKS * ${REPLICAS_PER_TASK:-2} ))" \
    python -m launch.train --config "$config" --resume "${RESUME:-auto}" "$@"
