#!/usr/bin/env bash
# mpirun with the flags dslide wants for one rank per node and OpenMP threads inside it:
# ranks mapped by node, not bound to one core (OpenMP threads need the node's cores),
# OMP_NUM_THREADS exported (default: cores per node / ranks per node), and root allowed.
# Usage: launch/run/mpirun.sh -np P [--hostfile FILE] PROGRAM ARGS...
#
# Stops: SIGTERM, SIGINT, SIGHUP, SIGUSR1 or SIGPIPE (a scheduler, `kill`, Ctrl-C, a closed
# terminal) to this script reaches every rank as SIGUSR1, which Open MPI's mpirun forwards
# without ending the job: every rank finishes its step, the stop checkpoint is written, and
# the script exits with the job's code (75 when the checkpoint landed). mpirun itself
# answers SIGTERM by passing it to the ranks and killing them odls_base_sigkill_timeout
# seconds later (1 s by default), often in the middle of the checkpoint; so it runs in a
# session of its own, where a Ctrl-C in the terminal does not reach it. A second signal
# reaches every rank as a second SIGUSR1: each exits at once, with 75 where its stop's
# checkpoint is written (mpirun, given the raw signal, crashed or reported the job killed;
# where mpirun crashes in its own finalisation after such exits, the codes the ranks here
# noted in DSLIDE_STOP_NOTE give the launcher's);
# a third is passed on to mpirun as it is, which ends the job at once (a second SIGPIPE,
# which every later write to a closed output raises, changes nothing).
# A stop asked at any time is honoured: SIGUSR1 goes to mpirun once every local rank has its
# handler for it (a rank that has none yet would die of it, and mpirun drops a signal that
# comes before the ranks are started); where the ranks are not all on this node (a hostfile
# or a host list, or no -np), once the local ones have had theirs for 2 s. A program that
# never handles SIGUSR1 gets it 10 s after the stop was asked.
# The job's output goes through a relay: when it cannot be written because its reader has
# gone (`... | head`), the job is asked to stop as for SIGPIPE, and the rest is read and
# dropped so that mpirun never meets the closed pipe (it aborts on one, without a
# checkpoint). The relay and the watcher that passes stops on run outside this script's
# process group: should the script be killed outright (SIGKILL, also to its whole group, as
# `timeout -s KILL` does), the watcher asks the ranks to stop, so that they stop with their
# checkpoint instead of training on, orphaned.

# Stop signals are taken from the first line on, and passed on once mpirun runs.
stops=0 traps=0 pid='' ctl=''
stop() {  # SIGNAL
  traps=$((traps + 1))
  if ((stops == 0)); then
    stops=1
    echo "mpirun.sh: $1: asking every rank to stop after its step (SIGUSR1); a second signal makes every rank exit now" >&2 || true
    tell stop
    return 0
  fi
  # (Before mpirun runs, the first one stops it; later SIGPIPEs, which every write to a
  # closed output raises, change nothing.)
  [[ $1 != PIPE && -n $pid ]] || return 0
  stops=$((stops + 1))
  if ((stops == 2)); then
    # A second stop signal to every rank: each exits at once, 75 where its stop's checkpoint
    # is written (a scheduler requeues on it), 138 where not.
    echo "mpirun.sh: $1 again: every rank exits now (a second SIGUSR1); a third signal ends mpirun itself" >&2 || true
    tell sent
    kill -USR1 "$pid" 2>/dev/null || true
  else
    kill -"$1" "$pid" 2>/dev/null || true
  fi
}
# Tells the watcher (below) to pass a stop on; should it be gone, SIGUSR1 goes to mpirun now.
tell() {  # stop|sent|end
  [[ -n $ctl ]] || return 0
  { echo "$1" >&"$ctl"; } 2>/dev/null && return 0
  [[ $1 != stop ]] || kill -USR1 "$pid" 2>/dev/null || true
}
# shellcheck disable=SC2064  # each trap names its signal
for sig in TERM INT HUP USR1 PIPE; do trap "stop $sig" "$sig"; done
set -euo pipefail
np=1
np_given=0
args=()
while (($#)); do
  case "$1" in
    -np|-n) np="$2"; np_given=1; args+=("$1" "$2"); shift 2 ;;
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
# How many ranks run on this node: -np's, unless some may run elsewhere (0: not known).
local_ranks=$np
((np_given)) || local_ranks=0
[[ -z "${HOSTFILE:-}" ]] || local_ranks=0
for a in "$@"; do
  case "$a" in
    -H|-host|--host|-hostfile|--hostfile|-machinefile|--machinefile|--default-hostfile|-default-hostfile)
      local_ranks=0 ;;
  esac
done

# The relay: mpirun's output to this script's, in a session of its own.
relay() {  # LAUNCHER
  trap '' PIPE  # a closed output is a write error (EPIPE), not the end of the relay
  local s f
  cat 2>/dev/null && exit 0
  if [[ -p /dev/stdout || -S /dev/stdout ]]; then  # the reader has gone
    read -r s 2>/dev/null </proc/$$/stat || true
    read -ra f <<<"${s##*) }"
    # The launcher asks the job to stop; where it has gone, its watcher has.
    [[ ${f[1]:-} != "$1" ]] || kill -PIPE "$1" 2>/dev/null || true
  else
    echo "mpirun.sh: writing the job's output failed: the rest of it is dropped" >&2 || true
  fi
  exec cat >/dev/null
}
exec {out}> >(trap '' INT TERM HUP; exec setsid bash -c "$(declare -f relay); relay \"\$@\"" mpirun.sh-relay $$)
relay_pid=$!
# The ranks here that exit on a second stop signal append their exit code to this file
# (DSLIDE_STOP_NOTE): Open MPI's mpirun can crash in its own finalisation after ranks end so
# (a segmentation fault in PMIx_server_finalize), which loses their codes.
note=$(mktemp "${TMPDIR:-/tmp}/dslide-stop.XXXXXX" 2>/dev/null) || note=''
export DSLIDE_STOP_NOTE=$note
setsid mpirun "${args[@]}" "${hostfile_args[@]}" --bind-to none --oversubscribe "${root[@]}" \
  -x OMP_NUM_THREADS -x DSLIDE_STOP_NOTE "$@" >&"$out" {out}>&- &
pid=$!
exec {out}>&-

# The watcher, in a session of its own: reads the launcher's requests, one a line (stop;
# sent: a second signal went to mpirun itself; end), and takes the end of its input while
# mpirun runs for the launcher killed. It holds a stop until the ranks can take it.
watch_job() {  # LAUNCHER MPIRUN LOCAL_RANKS
  local job=$2 need=$3 start asked=0 sent=0 gone=0 asked_at=0 ready_at=-1 tick=1 msg n
  trap '' PIPE
  start=$(started "$job") || return 0
  while [[ $(started "$job") == "$start" ]]; do
    if ((gone)); then
      sleep 0.05
    elif read -r -t "$tick" msg; then
      case $msg in
        stop) ((asked)) || asked_at=$SECONDS; asked=1 ;;
        sent) sent=1 ;;
        end) return 0 ;;
      esac
    elif (($? < 128)); then  # the end of the input: the launcher has gone
      gone=1
      if ((!asked)); then
        asked=1 asked_at=$SECONDS
        echo "mpirun.sh: the launcher was killed: asking every rank to stop after its step (SIGUSR1)" >&2
      fi
    fi
    ((asked && !sent)) || { ((gone && sent)) && return 0; continue; }
    tick=0.05
    n=$(ranks_ready "$job")
    if ((need > 0 ? n >= need : n > 0)); then
      ((ready_at >= 0)) || ready_at=$SECONDS
    else
      ready_at=-1
    fi
    if ((need > 0 && n >= need || need == 0 && ready_at >= 0 && SECONDS - ready_at >= 2)); then
      kill -USR1 "$job" 2>/dev/null || true
      sent=1
    elif ((SECONDS - asked_at >= 10)); then
      echo "mpirun.sh: $n of the ranks here handle SIGUSR1 10 s after the stop was asked: sending it anyway" >&2
      kill -USR1 "$job" 2>/dev/null || true
      sent=1
    fi
  done
}
# The start time of a live process (fails for a finished one, also for a zombie).
started() {  # PID
  local s f
  read -r s 2>/dev/null <"/proc/$1/stat" || return 1
  read -ra f <<<"${s##*) }"
  [[ ${f[0]} != Z ]] || return 1
  echo "${f[19]}"
}
# How many processes below PID handle SIGUSR1 (the ranks whose handlers are installed).
ranks_ready() {  # PID
  local -A kids=()
  local p pp k v n=0 todo=("$1")
  while read -r p pp; do kids[$pp]+=" $p"; done < <(ps -A -o pid= -o ppid= 2>/dev/null)
  while ((${#todo[@]})); do
    p=${todo[-1]}
    unset 'todo[-1]'
    for k in ${kids[$p]:-}; do
      todo+=("$k")
      while read -r v pp; do
        [[ $v == SigCgt: ]] && { (( 16#${pp: -4} & 0x200 )) && n=$((n + 1)); break; }
      done 2>/dev/null <"/proc/$k/status" || true
    done
  done
  echo "$n"
}
exec {ctl}> >(trap '' INT TERM HUP; exec setsid bash -c "$(declare -f watch_job started ranks_ready); watch_job \"\$@\"" \
  mpirun.sh-watch $$ "$pid" "$local_ranks" >/dev/null)
watch_pid=$!
if ((stops)); then tell stop; fi

# `wait` returns early when a trapped signal arrives: wait again until mpirun has ended (a
# second wait for it once it has ended returns its code again).
while :; do
  seen=$traps rc=0
  wait "$pid" || rc=$?
  ((rc > 128 && traps != seen)) || break
done
# mpirun ended by a signal after the second stop signal: the codes the ranks here noted.
# Every rank's (np of them, all on this node) 75: the stop's checkpoint is written, as
# mpirun would have reported had it not crashed.
if ((stops >= 2 && rc > 128)) && [[ -n $note && -s $note ]]; then
  codes=$(sort -u "$note" | tr '\n' ' ')
  if [[ $codes == "075 " ]] && ((local_ranks > 0)) && (($(wc -l <"$note") >= local_ranks)); then
    echo "mpirun.sh: mpirun ended with $rc after every rank exited on the second stop signal" \
         "with its stop's checkpoint written: exit 75" >&2 || true
    rc=75
  fi
fi
[[ -z $note ]] || rm -f "$note"
trap '' PIPE
tell end
exec {ctl}>&-
ctl=''
wait "$watch_pid" 2>/dev/null || true
wait "$relay_pid" 2>/dev/null || true  # the job's output, to its end
exit "$rc"
