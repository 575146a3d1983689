#!/usr/bin/env bash
# Stop signals through launch/run/mpirun.sh (docs/user-guide.md: Reliability): every signal
# that ends a run on a terminal or a scheduler lands the checkpoint of a 2-rank job, and
# nothing of the job or of the launcher is left running: SIGUSR1 and SIGPIPE to the
# launcher, a closed output (`mpirun.sh ... | grep -m1 ...`), SIGKILL to the launcher's whole
# process group, and SIGTERM in the first fraction of a second.
# Usage: launcher_signals.sh DSLIDE LAUNCHER WORKDIR [CASE...]  (the cases by number; all without)
set -uo pipefail
dslide=$1 launcher=$2 work=$3
shift 3
cases=("$@")
((${#cases[@]})) || cases=(0 1 2 3 4 5)
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
work=$PWD
# shellcheck source=cli_lib.sh
source "$here/cli_lib.sh"  # fail, expect_*, wait_iter; syn.* and ${train[@]}
export OMP_NUM_THREADS=1
# Every rank names its --checkpoint-dir, an absolute path in this folder; the launcher's
# helpers name its process id.
run() {  # CKDIR: the 2-rank command line training into CKDIR, in the array `job`
  job=(bash "$launcher" -np 2 "$dslide" "${train[@]}" --log-every 1 --checkpoint-dir "$1")
}
procs() {  # CKDIR [LAUNCHER_PID]: the processes of that run still there
  pgrep -f -- "$1( |$)"
  [[ -z ${2:-} ]] || pgrep -f -- "mpirun.sh-(relay|watch) $2( |$)"
}
# Nothing of the run left within 30 s (what is left is killed, and the case fails).
none_left() {  # WHAT CKDIR [LAUNCHER_PID]
  local left what
  for _ in $(seq 300); do [[ -z $(procs "$2" "${3:-}") ]] && return 0; sleep 0.1; done
  left=$(procs "$2" "${3:-}" | tr '\n' ' ')
  what=$(ps -o pid=,args= -p "$(echo $left | tr ' ' ',')" 2>/dev/null | cut -c1-120)
  # shellcheck disable=SC2086  # the process ids, one word each
  kill -KILL $left 2>/dev/null
  fail "$1: still running 30 s later:"$'\n'"$what"
}
# Waits for PID (a child) to end, at most SECONDS (then kills the run and fails); sets `rc`.
finish() {  # WHAT PID SECONDS CKDIR
  for _ in $(seq $(($3 * 10))); do kill -0 "$2" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$2" 2>/dev/null; then
    local left
    left=$(procs "$4" "$2" | tr '\n' ' ')
    # shellcheck disable=SC2086
    kill -KILL "$2" $left 2>/dev/null
    fail "$1: the launcher still running $3 s later"
  fi
  wait "$2"
  rc=$?
}
# The newest complete checkpoint of CKDIR, with both shards, in `ckpt` (fails without one).
complete_checkpoint() {  # WHAT CKDIR
  ckpt=$(find "$2" -maxdepth 1 -name 'ckpt-*' ! -name '*.tmp' 2>/dev/null | sort | tail -1)
  [[ -n $ckpt ]] || fail "$1: no checkpoint in $2"
  [[ -f $ckpt/rank-00000.h5 && -f $ckpt/rank-00001.h5 && -f $ckpt/meta.h5 ]] || fail "$1: incomplete $ckpt"
  ckpt=$(basename "$ckpt")
}

# 0. Through the launcher, a run ends with its own code and all of its output.
case0() {
  run "$work/ck0"
  "${job[@]}" --iterations 20 >out_end.txt 2>&1
  expect_rc $? 0 "a run to its end"
  expect_in out_end.txt "^iter 20/20 " "a run to its end"
  expect_in out_end.txt "^test  iter 20 | P@1" "a run to its end"
  "${job[@]}" --iterations 20 --no-such-option >out_bad.txt 2>&1
  expect_rc $? 1 "a run with an unknown option"
  none_left "a run to its end" "$work/ck0"
  pass "a run through the launcher: exit 0 with its last line; an error: exit 1"
}

# 1. SIGUSR1 or SIGPIPE to the launcher is a stop as SIGTERM is: the checkpoint lands and the
#    launcher exits 75 (it died of the signal at once, exit 138 or 141, with no line of its
#    own; its watcher stopped the ranks, but the job's code was lost).
case1() {
  for sig in USR1 PIPE; do
    ck=$work/ck_$sig
    run "$ck"
    "${job[@]}" --iterations 100000 >"out_$sig.txt" 2>&1 &
    lpid=$!
    wait_iter "out_$sig.txt" 2
    kill -"$sig" $lpid
    finish "SIG$sig to the launcher" $lpid 60 "$ck"
    expect_rc $rc 75 "SIG$sig to the launcher"
    expect_in "out_$sig.txt" "mpirun.sh: $sig: asking every rank to stop after its step (SIGUSR1)" "SIG$sig to the launcher"
    expect_in "out_$sig.txt" "stopped by SIGUSR1 at iteration [0-9]* of 100000; checkpoint written to $ck/ckpt-" \
      "SIG$sig to the launcher"
    none_left "SIG$sig to the launcher" "$ck" $lpid
    complete_checkpoint "SIG$sig to the launcher" "$ck"
    pass "SIG$sig to the launcher: exit 75, $ckpt"
  done
}

# 2. A closed output (`mpirun.sh ... | grep -m1 ...`, as `| head -1`): the job stops with its checkpoint, exit 75,
#    as a one-rank run does (mpirun met the closed pipe: "mpirun: SIGPIPE detected on fd 13 -
#    aborting", a crash in PMIx_Finalize, exit 139, no checkpoint).
case2() {
  ck=$work/ck_closed
  run "$ck"
  # The reader leaves after the first progress line (training has begun: a stop now lands a
  # checkpoint; one that closed before the first step would stop the run with nothing saved).
  ( "${job[@]}" --iterations 100000 2>out_closed.txt | grep -m1 '^iter ' >out_closed_head.txt
    echo "${PIPESTATUS[0]}" >rc_closed.txt ) &
  spid=$!
  finish "a closed output" $spid 60 "$ck"
  expect_rc "$(cat rc_closed.txt)" 75 "a closed output"
  expect_in out_closed_head.txt "^iter 1/100000" "a closed output"
  expect_in out_closed.txt "mpirun.sh: PIPE: asking every rank to stop" "a closed output"
  expect_in out_closed.txt "stopped by SIGUSR1 at iteration [0-9]* of 100000; checkpoint written to $ck/ckpt-" \
    "a closed output"
  expect_not_in out_closed.txt "SIGPIPE detected" "a closed output"
  none_left "a closed output" "$ck"
  complete_checkpoint "a closed output" "$ck"
  pass "a closed output: exit 75, $ckpt"
}

# 3. SIGKILL to the launcher's whole process group (what `timeout -s KILL` does): the job
#    stops with its checkpoint within seconds, nothing left (the watcher died with the group,
#    and mpirun and both ranks trained on, orphaned).
case3() {
  ck=$work/ck_group
  run "$ck"
  setsid "${job[@]}" --iterations 100000 >out_group.txt 2>&1 &
  lpid=$!  # setsid runs the launcher as the leader of a new group: its id is the group's
  wait_iter out_group.txt 2
  { kill -KILL -- -$lpid; wait $lpid; } 2>/dev/null
  none_left "SIGKILL to the launcher's group" "$ck" $lpid
  expect_in out_group.txt "stopped by SIGUSR1 at iteration [0-9]* of 100000; checkpoint written to $ck/ckpt-" \
    "SIGKILL to the launcher's group"
  complete_checkpoint "SIGKILL to the launcher's group" "$ck"
  pass "SIGKILL to the launcher's group: the job stopped with $ckpt"
}

# 4. SIGTERM in the first fraction of a second is honoured: exit 75, stopped before the first
#    step or with a checkpoint after it, never trained to the end (it was forwarded before
#    the ranks had started or had their handlers: "mpirun: Forwarding signal 10 to job", then
#    300 iterations and exit 0; or the ranks died of it, exit 138, without a word).
case4() {
  for d in 0.01 0.02 0.03 0.05 0.1 0.2; do
    ck=$work/ck_early_$d
    out=out_early_$d.txt
    run "$ck"
    "${job[@]}" --iterations 300 >"$out" 2>&1 &
    lpid=$!
    sleep "$d"
    kill -TERM $lpid
    finish "SIGTERM after ${d} s" $lpid 120 "$ck"
    none_left "SIGTERM after ${d} s" "$ck" $lpid
    if [[ $rc == 143 && ! -s $out ]]; then  # before the launcher's first line: nothing started
      pass "SIGTERM after ${d} s: the launcher ended before it started anything"
      continue
    fi
    expect_rc $rc 75 "SIGTERM after ${d} s"
    expect_not_in "$out" "^iter 300/300" "SIGTERM after ${d} s"
    if grep -q "stopped by SIGUSR1 before the first step (iteration 0 of 300): nothing was trained" "$out"; then
      pass "SIGTERM after ${d} s: exit 75 before the first step"
    else
      expect_in "$out" "stopped by SIGUSR1 at iteration [0-9]* of 300; checkpoint written to $ck/ckpt-" \
        "SIGTERM after ${d} s"
      complete_checkpoint "SIGTERM after ${d} s" "$ck"
      pass "SIGTERM after ${d} s: exit 75, $ckpt"
    fi
  done
}

# 5. A second SIGTERM to the launcher once the stop's checkpoint is written (rank 0 held there
#    by DSLIDE_FAULT=hold): every rank exits at once and the launcher with 75, what a
#    scheduler requeues on (mpirun, given the raw SIGTERM, crashed, exit 139, or the job
#    ended killed).
case5() {
  ck=$work/ck_twice
  run "$ck"
  DSLIDE_FAULT=hold:0:1 "${job[@]}" --iterations 100000 >out_twice.txt 2>&1 &
  lpid=$!
  wait_iter out_twice.txt 2
  kill -TERM $lpid
  # The stop's checkpoint, complete: rank 0 then waits 10 s before it exits.
  for _ in $(seq 300); do
    [[ -n $(find "$ck" -maxdepth 2 -path '*/ckpt-*/meta.h5' ! -path '*.tmp/*' 2>/dev/null) ]] && break
    sleep 0.1
  done
  sleep 0.5
  local t0=$SECONDS
  kill -TERM $lpid
  finish "a second SIGTERM after the stop's checkpoint" $lpid 60 "$ck"
  expect_rc $rc 75 "a second SIGTERM after the stop's checkpoint"
  ((SECONDS - t0 < 8)) || fail "a second SIGTERM: the job waited out rank 0's hold ($((SECONDS - t0)) s)"
  expect_in out_twice.txt "mpirun.sh: TERM again: every rank exits now" "a second SIGTERM"
  none_left "a second SIGTERM after the stop's checkpoint" "$ck" $lpid
  complete_checkpoint "a second SIGTERM after the stop's checkpoint" "$ck"
  pass "a second SIGTERM after the stop's checkpoint: exit 75 at once, $ckpt"
}

for c in "${cases[@]}"; do "case$c"; done
