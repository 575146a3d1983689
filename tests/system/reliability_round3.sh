#!/usr/bin/env bash
# The third round of fault cases (docs/user-guide.md: Reliability), through the command line:
# a run owns its checkpoint folder, every signal that ends a run on a terminal or a
# scheduler lands its checkpoint (also through launch/run/mpirun.sh, even when the launcher is
# killed outright), no output path may name an input or a checkpoint file, an empty path
# is refused; a point with 200,000 labels trains at the pace of its size, a signal is
# answered from the start and a second one said once, sizes that cannot fit are refused
# before anything is allocated, gen stops at the first write to a full disk, and --metrics
# on a full disk costs the metrics alone.
# Usage: reliability_round3.sh DSLIDE MPIEXEC LAUNCHER WORKDIR [MPIEXEC FLAGS...]
set -uo pipefail
dslide=$1 mpiexec=$2 launcher=$3 work=$4
shift 4
mpiflags=("$@")
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
# shellcheck source=cli_lib.sh
source "$here/cli_lib.sh"  # fail, expect_*, wait_iter; syn.* and ${train[@]}

# 1. A fresh run into a folder holding another run's checkpoints is refused before its
#    first step, the checkpoints untouched; --resume of that folder continues it.
"$dslide" "${train[@]}" --iterations 20 --checkpoint-dir ck1 --checkpoint-every 10 >out_first.txt 2>&1 ||
  fail "first run"
"$dslide" "${train[@]}" --iterations 10 --checkpoint-dir ck1 >out_fresh.txt 2>&1
expect_rc $? 1 "a fresh run into another run's checkpoints"
expect_in out_fresh.txt "ck1 holds checkpoints of another run (newest: ck1/ckpt-000000000020); continue that run with --resume ck1" \
  "a fresh run into another run's checkpoints"
expect_not_in out_fresh.txt "^iter " "a fresh run into another run's checkpoints"
[[ $(ls ck1) == $'ckpt-000000000010\nckpt-000000000020' ]] || fail "ck1 changed: $(ls ck1)"
"$dslide" "${train[@]}" --iterations 30 --checkpoint-dir ck1 --resume ck1 >out_resume1.txt 2>&1 ||
  fail "--resume of the folder"
[[ -d ck1/ckpt-000000000030 ]] || fail "no checkpoint 30 after --resume"
pass "a fresh run into another run's checkpoints: refused, nothing pruned; --resume continues"

# 2. Two runs at once on one folder: the second is refused, naming the first.
"$dslide" "${train[@]}" --iterations 100000 --log-every 1 --checkpoint-dir ck2 >out_long.txt 2>&1 &
pid=$!
wait_iter out_long.txt 2
"$dslide" "${train[@]}" --iterations 10 --checkpoint-dir ck2 >out_second.txt 2>&1
expect_rc $? 1 "a second run on a folder in use"
expect_in out_second.txt "ck2 is in use by another run (process $pid on " "a second run on a folder in use"

# 3. SIGHUP (a closed terminal) lands the checkpoint and exits 75, as SIGTERM does.
kill -HUP $pid
wait $pid
expect_rc $? 75 "SIGHUP"
expect_in out_long.txt "stopped by SIGHUP at iteration [0-9]* of 100000; checkpoint written to ck2/ckpt-" "SIGHUP"
pass "a second run on a folder in use: refused; SIGHUP: checkpoint, exit 75"

# 4. A closed output (`dslide train | head`): SIGPIPE stops the run with its checkpoint.
"$dslide" "${train[@]}" --iterations 100000 --log-every 1 --checkpoint-dir ck4 2>out_pipe.txt | head -1 >/dev/null
rcs=("${PIPESTATUS[@]}")
expect_rc "${rcs[0]}" 75 "a closed output"
expect_in out_pipe.txt "stop requested" "a closed output"
[[ -n $(ls -d ck4/ckpt-* 2>/dev/null) ]] || fail "a closed output: no checkpoint in ck4"
pass "a closed output: checkpoint, exit 75"

# 5. SIGKILL to launch/run/mpirun.sh: the ranks still stop after their step with their
#    checkpoint instead of training on, orphaned.
ck5=$PWD/ck5  # an absolute path: the ranks' command lines name this test's folder alone
OMP_NUM_THREADS=1 bash "$launcher" -np 2 "$dslide" "${train[@]}" --iterations 100000 --log-every 1 \
  --checkpoint-dir "$ck5" >out_killed.txt 2>&1 &
lpid=$!
wait_iter out_killed.txt 2
{ kill -KILL $lpid && wait $lpid; } 2>/dev/null
# A complete checkpoint (renamed from its .tmp folder when every shard is written).
complete() { find "$ck5" -maxdepth 1 -name 'ckpt-*' ! -name '*.tmp' 2>/dev/null | sort | tail -1; }
for _ in $(seq 300); do [[ -n $(complete) ]] && break; sleep 0.1; done
for _ in $(seq 300); do pgrep -f -- "$ck5" >/dev/null || break; sleep 0.1; done
! pgrep -f -- "$ck5" >/dev/null || { pkill -KILL -f -- "$ck5"; fail "SIGKILL to the launcher: ranks still running 30 s later"; }
ck=$(complete)
[[ -n $ck ]] || fail "SIGKILL to the launcher: no checkpoint"
[[ -f $ck/rank-00000.h5 && -f $ck/rank-00001.h5 && -f $ck/meta.h5 ]] || fail "SIGKILL to the launcher: incomplete $ck"
pass "SIGKILL to launch/run/mpirun.sh: the ranks stopped with $(basename "$ck")"

# 6. No output over an input or into a checkpoint: each refused, the file intact.
cp syn.test.txt in.txt
ck=ck1/ckpt-000000000030
expect_refused() {  # WHAT PATTERN COMMAND...
  local what=$1 pattern=$2
  shift 2
  "$@" >out_refused.txt 2>&1
  expect_rc $? 1 "$what"
  expect_in out_refused.txt "$pattern" "$what"
}
expect_refused "predict --out = --input" "option --out: ./in.txt is --input's file (in.txt)" \
  "$dslide" predict --model ck1 --input in.txt --out ./in.txt
cmp -s in.txt syn.test.txt || fail "predict --out = --input: the input changed"
ln -s in.txt link.txt
expect_refused "convert through a link" "option --out: in.txt is --in's file (link.txt)" \
  "$dslide" convert --in link.txt --out in.txt
cmp -s in.txt syn.test.txt || fail "convert: the input changed"
sum=$(md5sum "$ck/meta.h5" "$ck/rank-00000.h5")
expect_refused "predict --out a checkpoint's meta.h5" "lies in the checkpoint folder .*$ck" \
  "$dslide" predict --model ck1 --input in.txt --out "$ck/meta.h5"
expect_refused "export --out the newest shard" "lies in the checkpoint folder .*$ck" \
  "$dslide" export --model ck1 --out "$ck/rank-00000.h5"
expect_refused "export --out a checkpoint folder" "is a checkpoint folder" \
  "$dslide" export --model ck1 --out "$ck"
[[ $(md5sum "$ck/meta.h5" "$ck/rank-00000.h5") == "$sum" ]] || fail "the checkpoint changed"
expect_refused "--metrics = --train" "option --metrics: syn.train.txt is --train's file" \
  "$dslide" "${train[@]}" --iterations 5 --metrics syn.train.txt
"$dslide" eval --model ck1 --test syn.test.txt >out_eval.txt 2>&1 || fail "eval after the refusals"
pass "outputs over inputs or checkpoints: refused, inputs and checkpoint intact"

# 7. An empty path (an unset variable in a job script) is refused, not read as "none".
"$dslide" "${train[@]}" --iterations 5 --checkpoint-dir "" >out_empty.txt 2>&1
expect_rc $? 1 "--checkpoint-dir ''"
expect_in out_empty.txt "option --checkpoint-dir: an empty value (leave the option out to go without it)" \
  "--checkpoint-dir ''"
"$dslide" predict --model ck1 --input in.txt --out "" >out_empty2.txt 2>&1
expect_rc $? 1 "predict --out ''"
expect_in out_empty2.txt "option --out: an empty value" "predict --out ''"
pass "empty paths: refused naming the option"

# 8. bench trains as train does: a stop signal lands its checkpoint too.
"$dslide" bench --train syn.train.txt --test syn.test.txt --threads 1 --iterations 100000 \
  --log-every 1 --checkpoint-dir ck8 >out_bench.txt 2>&1 &
pid=$!
wait_iter out_bench.txt 2
kill -TERM $pid
wait $pid
expect_rc $? 75 "SIGTERM to bench"
expect_in out_bench.txt "stopped by SIGTERM at iteration [0-9]* of 100000; checkpoint written to ck8/ckpt-" \
  "SIGTERM to bench"
pass "SIGTERM to bench: checkpoint, exit 75"

# 9. Divergence on data with a huge feature value under a large --lr: the advice names both
#    causes (it said a smaller --lr would not help).
awk 'NR == 40 { sub(/:[^ ]*$/, ":1e20") } { print }' syn.train.txt >huge.txt
"$dslide" "${train[@]/syn.train.txt/huge.txt}" --iterations 20 --lr 100 >out_huge.txt 2>&1
rc=$?
[[ $rc == 1 || $rc == 3 ]] || fail "1e20 in the data and --lr 100: exit $rc"
expect_in out_huge.txt "huge.txt:40.*scale or clip the features, and try a smaller --lr (now 100)" \
  "1e20 in the data and --lr 100"
pass "divergence on a huge feature value under --lr 100: both causes named"

# 10. Resuming on other training data of the same dimensions says so (it resumed silently).
"$dslide" "${train[@]}" --iterations 10 --checkpoint-dir ck10 >out_data1.txt 2>&1 || fail "ck10"
"$dslide" "${train[@]/syn.train.txt/huge.txt}" --iterations 12 --checkpoint-dir ck10 --resume ck10 \
  --lr 1e-9 >out_data2.txt 2>&1
expect_in out_data2.txt "note: the training data differs from the data ck10/ckpt-000000000010 was trained on (3000 points then, 3000 now, the same count but other contents or order)" \
  "resume on other data"
"$dslide" "${train[@]}" --iterations 14 --checkpoint-dir ck10 --resume ck10/ckpt-000000000010 >out_data3.txt 2>&1 ||
  fail "resume on the original data"
expect_not_in out_data3.txt "training data differs" "resume on the same data"
pass "resuming on other training data: a note naming the checkpoint"

# 11. A --checkpoint-dir that is not one folder for every rank (each node's own disk; here
#     each rank in a working folder of its own): refused before training, not at the first
#     checkpoint after it.
mkdir -p node_a node_b
one_rank() {  # WDIR: one rank's part of the MPMD command line, in the array `rank`
  rank=(-n 1 --wdir "$PWD/$1" "$dslide" train --train "$PWD/syn.train.txt" --test "$PWD/syn.test.txt"
        --threads 1 --iterations 10 --checkpoint-dir ck11)
}
one_rank node_a
rank_a=("${rank[@]}")
one_rank node_b
"$mpiexec" "${mpiflags[@]}" -x OMP_NUM_THREADS=1 "${rank_a[@]}" : "${rank[@]}" >out_local.txt 2>&1
expect_rc $? 1 "a node-local --checkpoint-dir"
expect_in out_local.txt "option --checkpoint-dir: ck11 is not one folder that every rank shares (1 of 2 ranks" \
  "a node-local --checkpoint-dir"
expect_not_in out_local.txt "^iter " "a node-local --checkpoint-dir"
pass "a --checkpoint-dir that the ranks do not share: refused before training"

# 12. One point with 200,000 labels (of 400,000): its softmax finds its labels' slots in
#     n log k, not n k (6 s a step here, over 15 minutes with 2 million labels, deaf to
#     signals meanwhile), so 60 steps end well within the limit and a stop signal ends the
#     run after its step.
awk 'BEGIN { n = 64; srand(7); print n, 1000, 400000
  for (i = 0; i < n; ++i) {
    if (i == 1) { printf "0"; for (l = 1; l < 200000; ++l) printf ",%d", 2 * l }
    else printf "%d,%d", int(rand() * 400000), int(rand() * 400000)
    for (f = 0; f < 10; ++f) printf " %d:1", (i * 10 + f) % 1000
    printf "\n" } }' >many.txt
many=(train --train many.txt --test many.txt --threads 1 --hidden 16 --batch 64)
timeout 120 "$dslide" "${many[@]}" --iterations 60 --log-every 10 >out_many.txt 2>&1
expect_rc $? 0 "60 steps on a point with 200,000 labels within 120 s"
expect_in out_many.txt "^iter 60/60" "a point with 200,000 labels"
"$dslide" "${many[@]}" --iterations 100000 --log-every 1 --checkpoint-dir ck12 >out_many_stop.txt 2>&1 &
pid=$!
wait_iter out_many_stop.txt 3
kill -TERM $pid
for _ in $(seq 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -0 $pid 2>/dev/null && { kill -KILL $pid; fail "a point with 200,000 labels: running 30 s after SIGTERM"; }
wait $pid
expect_rc $? 75 "SIGTERM on a point with 200,000 labels"
expect_in out_many_stop.txt "stopped by SIGTERM at iteration [0-9]* of 100000; checkpoint written to ck12/ckpt-" \
  "SIGTERM on a point with 200,000 labels"
pass "a point with 200,000 labels: 60 steps within 120 s; SIGTERM: checkpoint, exit 75"

# 13. A stop signal that comes before the handlers could be installed (here: sent to the
#     process before it starts, held blocked through its exec) is answered once they are:
#     exit 75 with a line, before the first step, writing nothing (it was held for ever, and
#     the run trained to its end; one arriving in the first fraction of a second ended the
#     process by the signal, exit 143 or 138, without a word).
perl -MPOSIX -e 'sigprocmask(SIG_BLOCK, POSIX::SigSet->new(SIGTERM)); kill "TERM", $$; exec @ARGV or die' \
  "$dslide" "${train[@]}" --iterations 20 --checkpoint-dir ck13 >out_early.txt 2>&1
expect_rc $? 75 "SIGTERM at the start"
expect_in out_early.txt "stopped by SIGTERM before the first step (iteration 0 of 20): nothing was trained, nothing was saved" \
  "SIGTERM at the start"
[[ -z $(ls -d ck13/ckpt-* 2>/dev/null) ]] || fail "SIGTERM at the start: a checkpoint in ck13"
pass "SIGTERM at the start: exit 75 before the first step, with a line"

# 14. A second signal to every rank of a job says so once (each rank said it). Both signals
#     reach each rank at once: the ranks are paused while they are sent.
"$mpiexec" "${mpiflags[@]}" -n 2 -x OMP_NUM_THREADS=1 "$dslide" "${train[@]}" --iterations 100000 \
  --log-every 1 >out_second_signal.txt 2>&1 &
pid=$!
wait_iter out_second_signal.txt 2
mapfile -t ranks < <(pgrep -P $pid)
((${#ranks[@]} == 2)) || { kill -KILL $pid; fail "a second signal: ${#ranks[@]} ranks under mpiexec, expected 2"; }
kill -STOP "${ranks[@]}"
kill -USR1 "${ranks[@]}"
kill -TERM "${ranks[@]}"
kill -CONT "${ranks[@]}"
wait $pid
[[ $(grep -c "second stop signal: exiting now" out_second_signal.txt) == 1 ]] ||
  fail "a second signal to 2 ranks: $(grep -c "second stop signal" out_second_signal.txt) lines, expected 1"
pass "a second signal to 2 ranks: one line"

# 15. Sizes that cannot fit are refused before anything is allocated, naming the option and
#     the sizes (here under a 4 GB address-space limit; the model took 20 s of filling
#     arrays to fail, the generated data minutes to say "out of memory").
(
  ulimit -v 4000000
  "$dslide" "${train[@]}" --iterations 5 --hidden 1000000 >out_huge_model.txt 2>&1
  expect_rc $? 1 "--hidden 1000000 under ulimit -v"
  "$dslide" bench --points 2000000000 --threads 1 >out_huge_data.txt 2>&1
  expect_rc $? 1 "bench --points 2000000000 under ulimit -v"
) || exit 1
expect_in out_huge_model.txt "cannot allocate the model of --hidden 1000000 and syn.train.txt's 2000 features and 3000 labels: its weights and Adam moments (5001003000 parameters) and a batch's activations and gradients (--batch 256: 5860 MB) need 62 GB; this process can have .* (the address-space limit RLIMIT_AS (ulimit -v)" \
  "--hidden 1000000 under ulimit -v"
expect_in out_huge_data.txt "option --points: 2000000000 points and 1000 test points of 75 features each (--nnz), generated in memory, need at least 1170 GB; this process can have .* RLIMIT_AS" \
  "bench --points 2000000000 under ulimit -v"
pass "a model or generated data beyond the memory limit: refused before allocating, naming the option"

# 16. gen onto a full disk (its temporary file a link to /dev/full, where every write fails
#     with ENOSPC) stops at the first write that fails, naming the file and the line, and
#     leaves nothing (it formatted every line and failed only at the close).
ln -s /dev/full full.train.txt.tmp
"$dslide" gen --points 200000 --test-points 100 --features 2000 --labels 3000 --nnz 20 --out full \
  >out_full.txt 2>&1
expect_rc $? 1 "gen onto a full disk"
expect_in out_full.txt "full.train.txt: write failed at line [0-9]* of 200001 (No space left on device)" \
  "gen onto a full disk"
line=$(sed -n 's/.*write failed at line \([0-9]*\) of.*/\1/p' out_full.txt)
((line < 200001)) || fail "gen onto a full disk: stopped at line $line of 200001"
[[ -z $(ls full.* 2>/dev/null) ]] || fail "gen onto a full disk: left $(ls full.*)"
pass "gen onto a full disk: stopped at line $line of 200001, nothing left"

# 17. --metrics on a full disk (a link to /dev/full) does not end training: one warning names
#     the file and the reason, the run trains to the end and writes its checkpoints (it ended
#     with exit 1 at the first record, and no checkpoint).
ln -s /dev/full full.jsonl
"$dslide" "${train[@]}" --iterations 20 --checkpoint-dir ck_full --checkpoint-every 10 \
  --metrics full.jsonl >out_mfull.txt 2>&1
expect_rc $? 0 "--metrics on a full disk"
expect_in out_mfull.txt "warning: --metrics full.jsonl: write failed (No space left on device): no more metrics are recorded there; training goes on" \
  "--metrics on a full disk"
[[ $(grep -c "warning: --metrics" out_mfull.txt) == 1 ]] || fail "--metrics on a full disk: the warning more than once"
[[ -d ck_full/ckpt-000000000020 ]] || fail "--metrics on a full disk: no checkpoint of iteration 20"
pass "--metrics on a full disk: a warning, training and checkpoints go on"

# 18. A checkpoint that cannot be written ends the run's --metrics with an "error" record
#     naming why (the run stopped with exit 1 and the reason, but the records ended without it).
DSLIDE_FAULT=enospc:0:20 "$dslide" "${train[@]}" --iterations 40 --checkpoint-dir ck_err --checkpoint-every 10 \
  --metrics err.jsonl >out_ckerr.txt 2>&1
expect_rc $? 1 "a checkpoint write that fails, with --metrics"
[[ $(tail -1 err.jsonl) == *'"event":"error"'*'"iter":20'*'could not be written'*'"checkpoint":"ck_err/ckpt-000000000010"'* ]] ||
  fail "a failed checkpoint write: the last record is $(tail -1 err.jsonl)"
pass "a failed checkpoint write: the metrics end with an error record naming it"

# 19. Nothing is written into a run's checkpoint folder (it holds the run's .dslide-lock):
#     --save beside its checkpoints (eval and --resume of the folder took the saved model for
#     the newest checkpoint), an output onto the lock file (a second run then took the
#     folder while the first trained).
expect_refused "--save into a run's checkpoint folder" \
  "option --save: ck1/ckpt-000000000600 lies in the checkpoint folder ck1 of a run (it holds .dslide-lock)" \
  "$dslide" "${train[@]}" --iterations 3 --seed 9 --save ck1/ckpt-000000000600
[[ ! -e ck1/ckpt-000000000600 ]] || fail "--save into a run's checkpoint folder: written"
expect_refused "predict --out the lock file" "option --out: ck1/.dslide-lock lies in the checkpoint folder" \
  "$dslide" predict --model ck1 --input in.txt --out ck1/.dslide-lock
expect_refused "predict --out into a run's checkpoint folder" "lies in the checkpoint folder .*ck1 of a run" \
  "$dslide" predict --model ck1 --input in.txt --out ck1/preds.tsv
pass "outputs into a run's checkpoint folder: refused"

# 20. An output path that is a FIFO is written into, one that is a link replaces the link's
#     target (both were replaced by a regular file: the reader of the FIFO got nothing, the
#     link's target stayed as it was); a folder is refused before anything is written.
mkfifo preds.fifo
timeout 60 cat preds.fifo >fifo_read.tsv &  # a FIFO replaced by a file: no writer ever comes
reader=$!
"$dslide" predict --model ck1 --input in.txt --out preds.fifo >out_fifo.txt 2>&1 || fail "predict --out a FIFO"
wait "$reader"
[[ -p preds.fifo ]] || fail "predict --out a FIFO: no longer a FIFO"
[[ $(wc -l <fifo_read.tsv) -ge 500 ]] || fail "predict --out a FIFO: the reader got $(wc -l <fifo_read.tsv) lines"
echo old >target.tsv
ln -s target.tsv linked.tsv
"$dslide" predict --model ck1 --input in.txt --out linked.tsv >out_link.txt 2>&1 || fail "predict --out a link"
[[ -L linked.tsv ]] || fail "predict --out a link: the link was replaced"
cmp -s target.tsv fifo_read.tsv || fail "predict --out a link: its target does not hold the predictions"
mkdir -p a_folder
expect_refused "predict --out a folder" "cannot write a_folder: it is a folder" \
  "$dslide" predict --model ck1 --input in.txt --out a_folder
[[ -z $(ls a_folder*.tmp 2>/dev/null) ]] || fail "predict --out a folder: left $(ls a_folder*.tmp)"
pass "outputs onto a FIFO, a link, a folder: written into, through, refused"

# 21. A run whose checkpoints cannot be written beside the model (the copy of its widest
#     layer's weights and moments, here with --state bf16 moments in the model and a 2 GB
#     address-space limit) is refused before it trains (it trained, then lost the run at its
#     final checkpoint: "out of memory (an allocation failed)").
(
  ulimit -v 2000000
  "$dslide" "${train[@]}" --iterations 2 --hidden 30000 --state bf16 --checkpoint-dir ck_mem >out_stage.txt 2>&1
  expect_rc $? 1 "checkpoints that cannot fit beside the model"
) || exit 1
expect_in out_stage.txt "checkpoints (writing a copy of one layer's weights and Adam moments) need 1.0 GB; this process can have .* RLIMIT_AS" \
  "checkpoints that cannot fit beside the model"
expect_not_in out_stage.txt "^iter " "checkpoints that cannot fit beside the model"
pass "checkpoints that cannot fit beside the model: refused before training"

# 22. --metrics onto a file whose last record was cut short (a full disk, a killed run): the
#     new records start on a line of their own (they were appended to the cut one: no line
#     of the file read as JSON any more).
printf '{"event":"progress","iter":1' >cut.jsonl
"$dslide" "${train[@]}" --iterations 5 --metrics cut.jsonl >out_cut.txt 2>&1 || fail "--metrics onto a cut record"
[[ $(sed -n 2p cut.jsonl) == '{"event":"start"'* ]] ||
  fail "--metrics onto a cut record: line 2 is $(sed -n 2p cut.jsonl | cut -c1-80)"
pass "--metrics onto a cut record: the new records on lines of their own"
