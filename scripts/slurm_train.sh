#!/usr/bin/env bash
# `tandem train` as a Slurm batch job (docs/recipes.md, On a Slurm cluster): one rank per task of
# the allocation, started by OpenMPI's mpirun, which takes the nodes and the tasks per node from
# the allocation, or by srun (TANDEM_LAUNCHER=srun). Five minutes before the time limit Slurm
# sends SIGUSR1 to this script (--signal=B:USR1@300); the script passes it on to the launcher,
# which passes it on to every rank, and the ranks stop together at the next step boundary with a
# checkpoint (exit status 138). The job is then put back in the queue, and its next start resumes
# from that checkpoint: the same command, on the same or any other number of ranks that divides
# the global batch. Where the cluster sets SlurmctldParameters=preempt_send_user_signal, a
# preemption sends the same signal at the start of the partition's GraceTime and takes the same
# path.
#
#   sbatch --nodes=8 --ntasks-per-node=8 --gpus-per-node=8 --time=24:00:00 \
#       scripts/slurm_train.sh configs/olmo3-7b-stage1.yaml backend=cuda precision=bf16 ...
#
#   TANDEM                 the tandem binary (default: tandem on PATH)
#   TANDEM_COMMUNICATOR    nccl for GPUs; passed on to every rank, as are OMP_NUM_THREADS and
#                          every TANDEM_* variable that is set
#   TANDEM_SLURM_REQUEUE   0: end the job after the checkpoint instead of requeueing it
#   TANDEM_LAUNCHER        mpirun (default) or srun: `srun --mpi=pmix --kill-on-bad-exit=1`
#                          (OpenMPI built with PMIx), every rank a task of the job step
#   TANDEM_MPIRUN_ARGS     more options for mpirun (e.g. --bind-to none), split at spaces
#   TANDEM_SRUN_ARGS       more options for srun, split at spaces
#
# A preemption without that setting sends SIGTERM at the start of the grace time to the job
# step's tasks alone: under srun these are the ranks, which stop with a checkpoint (status 143),
# and the script requeues the job; mpirun's ranks are no step's tasks and see nothing until the
# grace time ends, when mpirun ends them. scancel sends SIGTERM to this script too, which ends it
# (no requeue): under mpirun without a checkpoint (mpirun ends its ranks), under srun with one if
# the ranks reach a step boundary before SIGKILL (KillWait). To stop a job with a checkpoint and
# not requeue it: TANDEM_SLURM_REQUEUE=0 at submission and `scancel --batch --signal=USR1 JOBID`.
#SBATCH --job-name=tandem
#SBATCH --signal=B:USR1@300
#SBATCH --requeue
#SBATCH --open-mode=append
set -uo pipefail

tandem=${TANDEM:-tandem}
launcher_kind=${TANDEM_LAUNCHER:-mpirun}
case $launcher_kind in
  mpirun)
    exports=()
    for name in $(compgen -e); do
      [[ $name == TANDEM_* || $name == OMP_NUM_THREADS ]] && exports+=(-x "$name")
    done
    read -r -a mpirun_args <<<"${TANDEM_MPIRUN_ARGS:-}"
    mpirun "${mpirun_args[@]}" "${exports[@]}" "$tandem" train "$@" &
    ;;
  srun)
    # srun passes the whole environment on, and SIGUSR1 to every task.
    read -r -a srun_args <<<"${TANDEM_SRUN_ARGS:-}"
    srun --mpi=pmix --kill-on-bad-exit=1 "${srun_args[@]}" "$tandem" train "$@" &
    ;;
  *)
    echo "slurm_train.sh: TANDEM_LAUNCHER=$launcher_kind: expected mpirun or srun" >&2
    exit 2
    ;;
esac
launcher=$!
# Only the first SIGUSR1 is passed on: a second stop signal ends a rank at once, without a
# checkpoint.
signals=0
trap 'signals=$((signals + 1)); ((signals > 1)) || kill -USR1 "$launcher" 2>/dev/null' USR1

# A trapped signal ends `wait` early (status 128 + signal): wait until the launcher has ended.
while true; do
  seen=$signals
  wait "$launcher"
  status=$?
  ((signals != seen)) || break
done

# Why the ranks stopped with a checkpoint, where the reason wants the job requeued.
stopped_for=""
if ((status == 138 && signals > 0)); then
  stopped_for="SIGUSR1 (time limit or preemption)"
elif [[ $launcher_kind == srun ]] && ((status == 143 && signals == 0)); then
  stopped_for="SIGTERM to the ranks alone (a preemption's grace time)"
fi
requeue=${TANDEM_SLURM_REQUEUE:-1}
if [[ -n $stopped_for && $requeue != 0 && -n ${SLURM_JOB_ID:-} ]]; then
  echo "tandem: stopped with a checkpoint on $stopped_for; requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
