#!/usr/bin/env bash
# The fault cases of the reliability section of docs/user-guide.md, through the command line:
# preemption by a real signal (one rank, and mpirun forwarding SIGUSR1 to two), a second
# signal, a full disk (injected; and a real tmpfs where it can be mounted), divergence, an
# unwritable checkpoint folder, --save, the final checkpoint, and --metrics appending.
# Usage: reliability_cli.sh DSLIDE MPIEXEC WORKDIR [MPIEXEC FLAGS...]
set -uo pipefail
dslide=$1 mpiexec=$2 work=$3
shift 3
mpiflags=("$@")
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
# shellcheck source=cli_lib.sh
source "$here/cli_lib.sh"  # fail, expect_*, wait_iter; syn.* and ${train[@]}

# 1. SIGTERM mid-run: the step finishes, a checkpoint is written, exit 75 with the resume hint;
#    the resumed run ends where an uninterrupted one does. 2,000 iterations (several seconds
#    on a fast machine) so that the signal, sent once iteration 5 is printed, cannot arrive
#    after the end when this shell is starved on a loaded machine (400 could: 1.5 s).
n=2000
"$dslide" "${train[@]}" --iterations $n --log-every $n >out_whole.txt 2>&1 || fail "uninterrupted run"
"$dslide" "${train[@]}" --iterations $n --log-every 1 --checkpoint-dir ck --metrics m.jsonl >out_term.txt 2>&1 &
pid=$!
wait_iter out_term.txt 5
kill -TERM $pid
wait $pid
expect_rc $? 75 "SIGTERM"
expect_in out_term.txt "stopped by SIGTERM at iteration [0-9]* of $n; checkpoint written to ck/ckpt-" "SIGTERM"
expect_in out_term.txt "continue with --resume ck" "SIGTERM"
[[ -n $(ls -d ck/ckpt-* 2>/dev/null) ]] || fail "SIGTERM: no checkpoint"
"$dslide" "${train[@]}" --iterations $n --log-every $n --checkpoint-dir ck --resume ck --metrics m.jsonl \
  >out_resumed.txt 2>&1 || fail "resume after SIGTERM"
want=$(grep "^test" out_whole.txt)
got=$(grep "^test" out_resumed.txt)
[[ -n $want && "${want% points in*}" == "${got% points in*}" ]] ||
  fail "resumed run: '$got', uninterrupted: '$want'"
[[ $(grep -c '"event":"start"' m.jsonl) == 2 && $(grep -c '"event":"resume"' m.jsonl) == 1 &&
   $(grep -c '"event":"stopped"' m.jsonl) == 1 ]] || fail "--metrics did not keep both runs"
pass "SIGTERM: exit 75, checkpoint, resumed to the uninterrupted result ($got)"

# 2. A second signal exits at once, without a checkpoint (a wider model, so that the step
#    and the checkpoint after the first signal leave time for the second).
"$dslide" "${train[@]}" --hidden 2048 --iterations 100000 --log-every 1 --checkpoint-dir ck2 >out_twice.txt 2>&1 &
pid=$!
wait_iter out_twice.txt 2
kill -TERM $pid
for _ in $(seq 200); do grep -q "stop requested" out_twice.txt && break; sleep 0.01; done
kill -TERM $pid
wait $pid
expect_rc $? 143 "two signals"
expect_in out_twice.txt "second stop signal: exiting now" "two signals"
pass "a second signal: exit 143 at once"

# 3. mpirun forwards SIGUSR1 (Slurm's --signal) to every rank: all stop after the same step,
#    one checkpoint with both shards.
"$mpiexec" -n 2 "${mpiflags[@]}" -x OMP_NUM_THREADS=1 "$dslide" "${train[@]}" --iterations 100000 --log-every 1 \
  --checkpoint-dir ck3 >out_mpi.txt 2>&1 &
pid=$!
wait_iter out_mpi.txt 5
kill -USR1 $pid
wait $pid
expect_rc $? 75 "mpirun SIGUSR1"
expect_in out_mpi.txt "stopped by SIGUSR1 at iteration" "mpirun SIGUSR1"
ck=$(ls -d ck3/ckpt-* | tail -1)
[[ -f $ck/rank-00000.h5 && -f $ck/rank-00001.h5 && -f $ck/meta.h5 ]] || fail "mpirun SIGUSR1: incomplete $ck"
pass "mpirun -n 2 and SIGUSR1: exit 75, $ck with both shards"

# 3b. SIGTERM to mpirun: Open MPI 4 waits S seconds, passes SIGTERM to the ranks and kills
#     them S seconds later (S = odls_base_sigkill_timeout, 1 by default: too tight on a loaded
#     machine, so 3 here). While it waits, mpirun no longer forwards the ranks' output: a
#     progress line every step would fill the pipe and block rank 0, so one every 50.
"$mpiexec" -n 2 "${mpiflags[@]}" --mca odls_base_sigkill_timeout 3 -x OMP_NUM_THREADS=1 "$dslide" "${train[@]}" \
  --iterations 100000 --log-every 50 \
  --checkpoint-dir ck3b >out_mpiterm.txt 2>&1 &
pid=$!
wait_iter out_mpiterm.txt 5
kill -TERM $pid
wait $pid
expect_in out_mpiterm.txt "stopped by SIGTERM at iteration" "mpirun SIGTERM"
ck=$(ls -d ck3b/ckpt-* | tail -1)
[[ -f $ck/rank-00000.h5 && -f $ck/rank-00001.h5 && -f $ck/meta.h5 ]] || fail "mpirun SIGTERM: incomplete $ck"
pass "mpirun -n 2 and SIGTERM: $ck with both shards"

# 4. A write that fails as on a full disk: exit 1 with the reason, no partial folder, the
#    earlier checkpoint kept and resumable.
DSLIDE_FAULT=enospc:0:20 "$dslide" "${train[@]}" --iterations 40 --checkpoint-dir ck4 --checkpoint-every 10 \
  >out_enospc.txt 2>&1
expect_rc $? 1 "ENOSPC"
expect_in out_enospc.txt "No space left on device" "ENOSPC"
expect_in out_enospc.txt "checkpoints written before are kept (newest: ck4/ckpt-000000000010)" "ENOSPC"
[[ $(ls ck4) == "ckpt-000000000010" ]] || fail "ENOSPC: ck4 holds $(ls ck4)"
"$dslide" "${train[@]}" --iterations 12 --checkpoint-dir ck4 --resume ck4 >out_enospc2.txt 2>&1 ||
  fail "resume after ENOSPC"
pass "injected ENOSPC: exit 1, no .tmp, resumable from ckpt-10"

# 4b. A real full disk: a 12 MB tmpfs holds one checkpoint of this model (8 MB), not two.
mkdir -p tfs
if mount -t tmpfs -o size=12m tmpfs tfs 2>/dev/null; then
  "$dslide" "${train[@]}" --iterations 40 --checkpoint-dir tfs/ck --checkpoint-every 10 --keep-checkpoints 5 \
    >out_tmpfs.txt 2>&1
  rc=$?
  ls_tfs=$(ls tfs/ck)
  umount tfs
  expect_rc $rc 1 "tmpfs"
  expect_in out_tmpfs.txt "No space left on device" "tmpfs"
  [[ $ls_tfs == "ckpt-000000000010" ]] || fail "tmpfs: holds $ls_tfs"
  pass "a full tmpfs: exit 1 (no crash), no .tmp, ckpt-10 kept"
else
  echo "skip: a tmpfs cannot be mounted here (not root, or no CAP_SYS_ADMIN)"
fi

# 5. Divergence: stops with exit 3 before the diverged model is checkpointed.
"$dslide" "${train[@]}" --iterations 200 --lr 1e6 --checkpoint-dir ck5 --checkpoint-every 1 >out_div.txt 2>&1
expect_rc $? 3 "divergence"
expect_in out_div.txt "training diverged at iteration" "divergence"
at=$(grep -oE "diverged at iteration [0-9]+" out_div.txt | grep -oE "[0-9]+$")
for c in ck5/ckpt-*; do
  [[ -e $c ]] || continue
  (( 10#${c##*-} < at )) || fail "divergence: $c written at or after iteration $at"
done
pass "--lr 1e6: exit 3 at iteration $at, no checkpoint of it"

# 6. An unusable checkpoint folder is reported before training, with the system's reason.
touch afile
"$dslide" "${train[@]}" --iterations 50 --checkpoint-dir afile/ck --checkpoint-every 10 >out_dir.txt 2>&1
expect_rc $? 1 "unwritable folder"
expect_in out_dir.txt "option --checkpoint-dir: cannot create afile/ck (Not a directory)" "unwritable folder"
grep -q "^iter " out_dir.txt && fail "unwritable folder: training started"
pass "--checkpoint-dir under a file: refused before the first step"

# 7. A run shorter than --checkpoint-every says so and still ends with a checkpoint; --save
#    writes the final model for eval.
"$dslide" "${train[@]}" --iterations 30 --checkpoint-dir ck7 --checkpoint-every 500 --save model7 >out_save.txt 2>&1 ||
  fail "--save"
expect_in out_save.txt "only the final checkpoint will be written" "--checkpoint-every beyond the run"
[[ -d ck7/ckpt-000000000030 ]] || fail "no final checkpoint"
"$dslide" eval --model model7 --test syn.test.txt >out_eval.txt 2>&1 || fail "eval --model of --save"
expect_in out_eval.txt "iteration 30" "--save"
pass "final checkpoint, --save usable by eval"

# 8. --save replaces its folder, so it refuses one that is not a checkpoint, and the
#    checkpoint folder itself; a trailing slash is the same folder.
mkdir -p notes && echo x >notes/mine.txt
"$dslide" "${train[@]}" --iterations 5 --save notes >out_save2.txt 2>&1
expect_rc $? 1 "--save over a folder"
expect_in out_save2.txt "option --save: notes exists and is not a checkpoint folder" "--save over a folder"
[[ -f notes/mine.txt ]] || fail "--save removed notes/mine.txt"
"$dslide" "${train[@]}" --iterations 5 --checkpoint-dir ck8 --save ck8/ >out_save3.txt 2>&1
expect_rc $? 1 "--save = --checkpoint-dir"
expect_in out_save3.txt "is or holds --checkpoint-dir" "--save = --checkpoint-dir"
"$dslide" "${train[@]}" --iterations 5 --save model7/ >out_save4.txt 2>&1 || fail "--save DIR/ over a checkpoint"
"$dslide" eval --model model7 --test syn.test.txt >out_eval2.txt 2>&1 || fail "eval after --save DIR/"
expect_in out_eval2.txt "iteration 5" "--save DIR/"
pass "--save refuses a non-checkpoint folder and the checkpoint folder; DIR/ replaces DIR"

# 9. A damaged meta.h5 of the newest checkpoint: --resume warns and resumes from the one before.
"$dslide" "${train[@]}" --iterations 20 --checkpoint-dir ck9 --checkpoint-every 10 >/dev/null 2>&1 || fail "ck9"
printf 'x' | dd of=ck9/ckpt-000000000020/meta.h5 bs=1 seek=600 conv=notrunc status=none
"$dslide" "${train[@]}" --iterations 25 --checkpoint-dir ck9 --resume ck9 >out_meta.txt 2>&1 ||
  fail "resume past a damaged meta.h5"
expect_in out_meta.txt "skipping the damaged checkpoint ck9/ckpt-000000000020" "damaged meta.h5"
expect_in out_meta.txt "resumed from ck9/ckpt-000000000010" "damaged meta.h5"
pass "--resume past a damaged meta.h5: from ckpt-10"
# 10. A test file of 0 points is an error naming it (it used to report P@1 0.0000).
printf '0 2000 3000\n' >empty.txt
"$dslide" "${train[@]/syn.test.txt/empty.txt}" --iterations 2 >out_empty.txt 2>&1
expect_rc $? 1 "empty test file"
expect_in out_empty.txt "empty.txt: no points to score" "empty test file"
"$dslide" eval --model model7 --test empty.txt >out_empty2.txt 2>&1
expect_rc $? 1 "eval of an empty test file"
expect_in out_empty2.txt "empty.txt: no points to score" "eval of an empty test file"
pass "a test file of 0 points: refused by train and eval"
echo "all reliability cases passed"
