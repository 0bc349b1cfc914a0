#!/usr/bin/env bash
# Slurm batch job, launcher mode: poprun_py starts one instance per Slurm task over the allocation's
# nodes ($SLURM_JOB_NODELIST); mpiexec reaches them through srun (-launcher slurm).
#   sbatch launch/jobs/slurm_launcher_mode.sh [config] [training options]
#   sbatch -N 1 --ntasks-per-node 2 -c 1 launch/jobs/slurm_launcher_mode.sh dense --set run.epochs=1   # one small node
# Options given to sbatch override the #SBATCH lines. Variables (sbatch --export=ALL,NAME=value):
#   REPLICAS_PER_INSTANCE  replicas each instance drives (default 2): --num-replicas = tasks x this,
#                          which must equal the config's data.replicas (or add --set data.replicas=N)
#   RESUME                 auto (default): continue from the newest checkpoint in run.run_dir; none: start over
# The launcher's log (run.json, per-instance logs) goes to runs/slurm-<job id> in the submit directory.
# --requeue, --open-mode=append and --signal=B:USR1@120 work as in slurm_srun.sh: SIGUSR1 reaches
# poprun_py (this script), which passes it to every instance (scancel --batch --signal=USR1 does the same).
#SBATCH --job-name=poprun_py
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=2
#SBATCH --cpus-per-task=8
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
instances=$SLURM_NTASKS
exec poprun_py -H "$SLURM_JOB_NODELIST" --num-instances "$instances" \
    --num-replicas "$(( instances * ${REPLICAS_PER_INSTANCE:-2} ))" \
    --mpi-global-args "-launcher slurm" --grace-period 60 --max-restarts 2 --log-dir "runs/slurm-$SLURM_JOB_ID" \
    python -m launch.train --config "$config" --resume "${RESUME:-auto}" "$@"
