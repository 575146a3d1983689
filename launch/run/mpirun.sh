#!/usr/bin/env bash
# mpirun with the flags dslide wants for one rank per node and OpenMP threads inside it:
# ranks mapped by node, not bound to one core (OpenMP threads need the node's cores),
# OMP_NUM_THREADS exported (default: cores per node / ranks per node), and root allowed.
# Usage: launch/run/mpirun.sh -np P [--hostfile FILE] PROGRAM ARGS...
#
# Stops: SIGTERM, SIGINT or SIGHUP (a scheduler, `kill`, Ctrl-C, a closed terminal) to this
# script reaches every rank as SIGUSR1, which Open MPI's mpirun forwards without ending the
# job: every rank finishes its step, the stop checkpoint is written, and the script exits
# with the job's code (75 when the checkpoint landed). mpirun itself answers SIGTERM by
# passing it to the ranks and killing them odls_base_sigkill_timeout seconds later (1 s by
# default), often in the middle of the checkpoint; so it runs in a session of its own,
# where a Ctrl-C in the terminal does not reach it. A second signal is passed on as it is:
# mpirun ends the job at once. Should the script be killed outright (SIGKILL), a watcher
# sends the ranks SIGUSR1 within a second, so that they stop with their checkpoint.
set -euo pipefail
np=1
args=()
while (($#)); do
  case "$1" in
    -np|-n) np="$2"; args+=("$1" "$2"); shift 2 ;;
    *) break ;;
  esac
done
hostfile_args=()
if [[ -n "${HOSTFILE:-}" ]]; then hostfile_args=(--hostfile "$HOSTFILE" --map-by ppr:1:node); fi
if [[ -z "${OMP_NUM_THREADS:-}" ]]; then
  cores=$(nproc)
  if [[ -n "${HOSTFILE:-}" ]]; then OMP_NUM_THREADS=$cores; else OMP_NUM_THREADS=$(( cores / np > 0 ? cores / np : 1 )); fi
fi
export OMP_NUM_THREADS
root=()
[[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
setsid mpirun "${args[@]}" "${hostfile_args[@]}" --bind-to none --oversubscribe "${root[@]}" \
  -x OMP_NUM_THREADS "$@" &
pid=$!
stops=0
forward() {
  if ((stops++ == 0)); then
    echo "mpirun.sh: $1: asking every rank to stop after its step (SIGUSR1); a second signal ends the job at once" >&2
    kill -USR1 "$pid" 2>/dev/null || true
  else
    kill -"$1" "$pid" 2>/dev/null || true
  fi
}
trap 'forward TERM' TERM
trap 'forward INT' INT
trap 'forward HUP' HUP
# Should this script itself be killed (SIGKILL cannot be trapped), the ranks still stop
# after their step with their checkpoint instead of training on, orphaned.
launcher=$$
(
  trap '' HUP INT TERM
  while kill -0 "$launcher" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do sleep 1; done
  kill -0 "$launcher" 2>/dev/null || kill -USR1 "$pid" 2>/dev/null || true
) &
watch=$!
# `wait` returns early when a trapped signal arrives: wait again until mpirun has ended.
rc=0
while :; do
  wait "$pid" && rc=0 || rc=$?
  kill -0 "$pid" 2>/dev/null || break
done
kill "$watch" 2>/dev/null || true
exit "$rc"
