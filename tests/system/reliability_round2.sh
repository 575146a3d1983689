#!/usr/bin/env bash
# The second round of fault cases (docs/user-guide.md: Reliability), through the command line: a stop
# through launch/run/mpirun.sh that lands its checkpoint, checkpoints that cannot be mixed,
# messages that say what happens (aborted jobs, divergence caused by the data, --metrics'
# error record), --save and --keep-best on a stop and on ties, and the smaller refusals.
# Usage: reliability_round2.sh DSLIDE MPIEXEC LAUNCHER WORKDIR [MPIEXEC FLAGS...]
set -uo pipefail
dslide=$1 mpiexec=$2 launcher=$3 work=$4
shift 4
mpiflags=("$@")
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
# shellcheck source=cli_lib.sh
source "$here/cli_lib.sh"  # fail, expect_*, wait_iter; syn.* and ${train[@]}
mpi2() { "$mpiexec" -n 2 "${mpiflags[@]}" -x OMP_NUM_THREADS=1 "$@"; }

# 1. SIGTERM to launch/run/mpirun.sh while 2 ranks write checkpoints of a 36M-parameter model
#    (435 MB with Adam's moments; mpirun itself would kill the ranks 1 s after its own
#    SIGTERM, and exit 1): the launcher passes the stop on as SIGUSR1, the checkpoint is
#    complete, the job exits 75, and it resumes.
"$dslide" gen --points 2000 --test-points 100 --features 20000 --labels 50000 --nnz 20 --out big >/dev/null ||
  fail "gen big"
big=(train --train big.train.txt --test big.test.txt --hidden 512 --threads 1 --eval-points 100)
OMP_NUM_THREADS=1 bash "$launcher" -np 2 "$dslide" "${big[@]}" --iterations 100000 --log-every 1 \
  --checkpoint-dir ckbig --checkpoint-every 2 >out_launcher.txt 2>&1 &
pid=$!
wait_iter out_launcher.txt 3
for _ in $(seq 600); do [[ -n $(ls -d ckbig/*.tmp 2>/dev/null) ]] && break; sleep 0.05; done
kill -TERM $pid
wait $pid
expect_rc $? 75 "SIGTERM to launch/run/mpirun.sh"
expect_in out_launcher.txt "asking every rank to stop" "SIGTERM to launch/run/mpirun.sh"
expect_in out_launcher.txt "stopped by SIGUSR1 at iteration [0-9]* of 100000; checkpoint written to ckbig/ckpt-" \
  "SIGTERM to launch/run/mpirun.sh"
at=$(grep -oE "stopped by SIGUSR1 at iteration [0-9]+" out_launcher.txt | grep -oE "[0-9]+$")
ck=$(printf "ckbig/ckpt-%012d" "$at")
[[ -f $ck/rank-00000.h5 && -f $ck/rank-00001.h5 && -f $ck/meta.h5 ]] || fail "launcher: incomplete $ck"
[[ -z $(ls -d ckbig/*.tmp 2>/dev/null) ]] || fail "launcher: a .tmp folder was left"
OMP_NUM_THREADS=1 bash "$launcher" -np 2 "$dslide" "${big[@]}" --iterations $((at + 1)) --log-every 1 \
  --checkpoint-dir ckbig --resume ckbig >out_launcher2.txt 2>&1 || fail "resume after the launcher's stop"
expect_in out_launcher2.txt "resumed from $ck at iteration $at" "resume after the launcher's stop"
rm -rf ckbig big.*
pass "SIGTERM to launch/run/mpirun.sh during checkpoints: exit 75, $ck complete, resumed"

# 2. A shard (and its checksum file) copied from another checkpoint is refused, naming both.
mpi2 "$dslide" "${train[@]}" --iterations 20 --checkpoint-dir ck2 --checkpoint-every 10 >out_mix.txt 2>&1 ||
  fail "two checkpoints"
cp ck2/ckpt-000000000010/rank-00001.h5* ck2/ckpt-000000000020/
"$dslide" eval --model ck2/ckpt-000000000020 --test syn.test.txt >out_mix_eval.txt 2>&1
expect_rc $? 1 "eval of a mixed checkpoint"
expect_in out_mix_eval.txt "rank-00001.h5 is a shard of the checkpoint of run [0-9a-f]* at iteration 10, not of this folder's checkpoint (run [0-9a-f]* at iteration 20" \
  "eval of a mixed checkpoint"
mpi2 "$dslide" "${train[@]}" --iterations 25 --checkpoint-dir ck2 --resume ck2 >out_mix_resume.txt 2>&1 ||
  fail "resume past a mixed checkpoint"
expect_in out_mix_resume.txt "skipping the damaged checkpoint ck2/ckpt-000000000020" "resume past a mixed checkpoint"
expect_in out_mix_resume.txt "resumed from ck2/ckpt-000000000010" "resume past a mixed checkpoint"
pass "a shard of checkpoint 10 in checkpoint 20: eval refuses it, --resume skips to 10"

# 3. An aborted 2-rank job (one rank fails): the failing rank says why; nobody promises a
#    checkpoint; rank 0's own failure ends --metrics with an error record.
DSLIDE_FAULT=throw:1:3 mpi2 -x DSLIDE_FAULT "$dslide" "${train[@]}" --iterations 50 --checkpoint-dir ck3 \
  >out_abort.txt 2>&1
[[ $? != 0 ]] || fail "aborted job: exit 0"
expect_in out_abort.txt "\[rank 1\] dslide error: injected fault" "aborted job"
expect_not_in out_abort.txt "writing a checkpoint" "aborted job"
expect_not_in out_abort.txt "stop requested" "aborted job"
DSLIDE_FAULT=throw:0:3 mpi2 -x DSLIDE_FAULT "$dslide" "${train[@]}" --iterations 50 --metrics m3.jsonl \
  >out_abort0.txt 2>&1
[[ $? != 0 ]] || fail "aborted job (rank 0): exit 0"
[[ $(tail -1 m3.jsonl) == *'"event":"error"'*'injected fault'* ]] || fail "no error record: $(tail -1 m3.jsonl)"
pass "aborted jobs: the failing rank's reason only; --metrics ends with the error"

# 4. Divergence caused by the data names the file and line; the --lr one names the layer on
#    one rank; the metrics' event gives the message's iteration.
awk 'NR == 40 { sub(/:[^ ]*$/, ":1e20") } { print }' syn.train.txt >huge.txt
"$dslide" "${train[@]/syn.train.txt/huge.txt}" --iterations 100 --metrics m4.jsonl >out_huge.txt 2>&1
rc=$?
[[ $rc == 1 || $rc == 3 ]] || fail "1e20 in the data: exit $rc"
expect_in out_huge.txt "warning: huge.txt:40: a feature value of 1e+20" "1e20 in the data"
expect_in out_huge.txt "training diverged.*huge.txt:40.*scale or clip the features" "1e20 in the data"
awk 'NR == 40 { sub(/:[^ ]*$/, ":3e38") } { print }' syn.train.txt >inf.txt
"$dslide" "${train[@]/syn.train.txt/inf.txt}" --iterations 100 >out_inf.txt 2>&1
[[ $? != 0 ]] || fail "3e38 in the data: exit 0"
expect_in out_inf.txt "training diverged.*inf.txt:40" "3e38 in the data"
"$dslide" "${train[@]}" --iterations 20 --lr 1e30 >out_lr.txt 2>&1
expect_rc $? 1 "--lr 1e30"
expect_in out_lr.txt "training diverged: .*layer [0-9]" "--lr 1e30"
expect_in out_lr.txt "Try a smaller --lr" "--lr 1e30"
"$dslide" "${train[@]}" --iterations 200 --lr 1e6 --log-every 50 --metrics m4b.jsonl >out_div.txt 2>&1
expect_rc $? 3 "--lr 1e6"
at=$(grep -oE "diverged at iteration [0-9]+" out_div.txt | grep -oE "[0-9]+$")
grep -q "\"event\":\"diverged\",\"iter\":$at," m4b.jsonl || fail "diverged event: not iteration $at: $(grep diverged m4b.jsonl)"
pass "divergence: the data's file:line, the layer on one rank, one iteration in message and metrics"

# 5. --save alone is written on a stop (a one-process run says so at the signal).
"$dslide" "${train[@]}" --iterations 100000 --log-every 1 --save saved5 >out_save.txt 2>&1 &
pid=$!
wait_iter out_save.txt 5
kill -TERM $pid
wait $pid
expect_rc $? 75 "--save on a stop"
expect_in out_save.txt "stop requested: ending after this step, saving the model to saved5" "--save on a stop"
expect_in out_save.txt "saved to saved5" "--save on a stop"
"$dslide" eval --model saved5 --test syn.test.txt >out_save_eval.txt 2>&1 || fail "eval of --save after a stop"
pass "--save on a stop: written and usable by eval"

# 6. --keep-best: equal validation P@1 goes to the lower validation loss.
head -1 syn.test.txt | awk '{ print 6, $2, $3 }' >valid6.txt
sed -n 2,7p syn.test.txt >>valid6.txt
"$dslide" "${train[@]}" --valid valid6.txt --keep-best 1 --iterations 300 --eval-every 10 --metrics m6.jsonl \
  >out_best.txt 2>&1 || fail "--keep-best run"
kept=$(grep -oE "kept the model of iteration [0-9]+" out_best.txt | grep -oE "[0-9]+$")
read -r want ties < <(grep '"set":"valid"' m6.jsonl | grep -v model_iter |
  sed -E 's/.*"iter":([0-9]+).*"p_at_1":([0-9.e+-]+).*"eval_loss":([0-9.e+-]+).*/\1 \2 \3/' |
  awk '{ if (n == 0 || $2 > p || ($2 == p && $3 < l)) { p = $2; l = $3; it = $1 }
         n++; c[$2]++ } END { print it, c[p] }')
[[ -n $kept && $kept == "$want" ]] || fail "--keep-best kept iteration $kept, the best (P@1, then loss) is $want"
((ties >= 2)) || fail "--keep-best: no tie of the best P@1 to break (the case tests nothing)"
pass "--keep-best: iteration $want of $ties with the best P@1, the lowest loss among them"

# 7. The smaller refusals, each with its message.
mkdir -p cfgdir
"$dslide" train --config cfgdir >out_cfg.txt 2>&1
expect_rc $? 1 "--config DIR"
expect_in out_cfg.txt "option --config: 'cfgdir' is a folder" "--config DIR"
printf 'iterations = 3\n[train]\ntrain = syn.train.txt\n[eval]\nk = 1\n' >sect.ini
"$dslide" train --config sect.ini --threads 1 >out_sect.txt 2>&1 || fail "[train] section"
expect_in out_sect.txt "3 iterations" "[train] section"
printf '[tarin]\ntrain = syn.train.txt\n' >bad.ini
"$dslide" train --config bad.ini >out_sect2.txt 2>&1
expect_rc $? 1 "unknown section"
expect_in out_sect2.txt "config file 'bad.ini' line 1: section '\[tarin\]' is not one of" "unknown section"
"$dslide" "${train[@]}" --iterations 20 --checkpoint-dir ck7 >/dev/null 2>&1 || fail "ck7"
"$dslide" "${train[@]}" --iterations 10 --resume ck7 >out_below.txt 2>&1
expect_rc $? 1 "--iterations below the checkpoint's"
expect_in out_below.txt "is at iteration 20, beyond the 10 iterations asked for" "--iterations below the checkpoint's"
"$dslide" "${train[@]}" --lr 1e39 --iterations 1 >out_lr39.txt 2>&1
expect_rc $? 1 "--lr 1e39"
expect_in out_lr39.txt "option --lr: must be a number > 0 that a float holds" "--lr 1e39"
"$dslide" eval --model ck7 --test syn.test.txt --k 1,5000 >out_k.txt 2>&1
expect_rc $? 1 "eval --k 5000"
expect_in out_k.txt "option --k: P@5000 needs at least 5000 labels" "eval --k 5000"
"$dslide" predict --model ck7 --input syn.test.txt --out p7.txt --top-k 5000 >out_topk.txt 2>&1
expect_rc $? 1 "predict --top-k 5000"
expect_in out_topk.txt "option --top-k: 5000 labels asked for, the model (ck7/ckpt-000000000020) has 3000" \
  "predict --top-k 5000"
[[ ! -e p7.txt ]] || fail "predict --top-k 5000: wrote p7.txt"
{ echo "3 2000 3000"; echo "1 0x10:1"; } >hex.txt
"$dslide" train --train hex.txt --iterations 1 >out_hex.txt 2>&1
expect_in out_hex.txt "hex.txt:2: bad feature '0x10:1'" "hex id"
{ echo "2 2000 3000"; echo "1 5:0x10"; echo "2 6:1"; } >hexv.txt
"$dslide" train --train hexv.txt --iterations 1 >out_hexv.txt 2>&1
expect_rc $? 1 "hex value"
expect_in out_hexv.txt "hexv.txt:2: bad value in '5:0x10'" "hex value"
{ echo "2 2000 3000"; echo "1 5:1"; echo "2 0: 1"; } >blank.txt
"$dslide" train --train blank.txt --iterations 1 >out_blank.txt 2>&1
expect_rc $? 1 "'0: 1'"
expect_in out_blank.txt "blank.txt:3: bad value in '0:'" "'0: 1'"
{ echo "3 2000 3000"; echo "1 5:1"; echo "2"; echo "3 7:1"; } >nofeat.txt
"$dslide" train --train nofeat.txt --iterations 1 --threads 1 >out_nofeat.txt 2>&1 || fail "no-feature rows"
expect_in out_nofeat.txt "warning: nofeat.txt: 1 of 3 points have no features (the first at line 3)" "no-feature rows"
echo "0 2000 3000" >zero.txt
"$dslide" train --train zero.txt --iterations 1 >out_zero.txt 2>&1
expect_rc $? 1 "0 points"
expect_in out_zero.txt "zero.txt:1: no points to train on" "0 points"
pass "--config DIR, sections, --iterations below a checkpoint, --lr 1e39, eval --k, predict --top-k, 0x10, '0: 1', rows without features, 0 points"

# 8. The start-up space check gives every rank the same estimate (a full tmpfs, where one can
#    be mounted).
mkdir -p tfs
if mount -t tmpfs -o size=1m tmpfs tfs 2>/dev/null; then
  mpi2 "$dslide" "${train[@]}" --iterations 5 --checkpoint-dir tfs/ck >out_space.txt 2>&1
  rc=$?
  umount tfs
  [[ $rc != 0 ]] || fail "a 1 MB tmpfs: exit 0"
  n=$(grep -oE "one checkpoint needs about [0-9]+ MB" out_space.txt | sort -u | wc -l)
  [[ $n == 1 && $(grep -c "one checkpoint needs about" out_space.txt) == 2 ]] || fail "space check: $n different estimates: $(grep -o 'dslide error.*' out_space.txt)"
  pass "a full tmpfs: one estimate on every rank"
else
  echo "skip: a tmpfs cannot be mounted here (not root, or no CAP_SYS_ADMIN)"
fi
echo "all second-round reliability cases passed"
