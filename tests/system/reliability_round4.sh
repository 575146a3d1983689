#!/usr/bin/env bash
# The fourth round of fault cases (docs/user-guide.md: Reliability), through the command
# line: --metrics into a pipe whose reader goes away or stops reading costs the metrics
# alone (the run neither hangs nor stops), and a FIFO no process reads is refused at the
# start; two writers of one output file: the second is refused, the first's file whole; a
# fresh run does not replace another run's best model.
# Usage: reliability_round4.sh DSLIDE WORKDIR
set -uo pipefail
dslide=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
# shellcheck source=cli_lib.sh
source "$here/cli_lib.sh"  # fail, expect_*, wait_iter; syn.* and ${train[@]}

# A run long enough to write far more records than a pipe holds (64 KiB: about 200 records).
long=("${train[@]}" --iterations 1500 --log-every 1 --checkpoint-dir)

# 1. A FIFO whose reader reads a few records and exits: the run was left blocked in a write
#    for good, deaf to SIGTERM (the FIFO opened read-write, the run its own reader). Now the
#    write fails (its reader has gone), one warning says so, and the run trains to the end.
mkfifo m1.fifo
head -c 2000 m1.fifo >/dev/null &
timeout -s KILL 120 "$dslide" "${long[@]}" ck1 --metrics m1.fifo >out_gone.txt 2>&1
expect_rc $? 0 "--metrics into a FIFO whose reader went away"
expect_in out_gone.txt "warning: --metrics m1.fifo: write failed (its reader has gone): no more metrics are recorded there; training goes on" \
  "--metrics into a FIFO whose reader went away"
expect_in out_gone.txt "^test " "--metrics into a FIFO whose reader went away"
[[ -d ck1/ckpt-000000001500 ]] || fail "--metrics into a FIFO whose reader went away: no final checkpoint"
pass "--metrics into a FIFO whose reader went away: one warning, the run trains to the end"

# 2. The same through process substitution, the form a shell user writes.
timeout -s KILL 120 "$dslide" "${long[@]}" ck2 --metrics >(head -c 2000 >/dev/null) >out_subst.txt 2>&1
expect_rc $? 0 "--metrics >(head -c 2000)"
expect_in out_subst.txt "write failed (its reader has gone)" "--metrics >(head -c 2000)"
pass "--metrics >(head -c 2000): one warning, the run trains to the end"

# 3. A reader that holds the FIFO open and never reads: the pipe fills, a record waits at
#    most 10 s for room, then the metrics give up and the run goes on; a SIGTERM meanwhile
#    lands the checkpoint (exit 75) instead of waiting on the pipe.
mkfifo m3.fifo
sleep 300 <m3.fifo &
holder=$!
timeout -s KILL 120 "$dslide" "${long[@]}" ck3 --metrics m3.fifo >out_full_pipe.txt 2>&1
expect_rc $? 0 "--metrics into a FIFO nobody reads"
expect_in out_full_pipe.txt "write failed (its reader has not read for 10 s)" "--metrics into a FIFO nobody reads"
expect_in out_full_pipe.txt "^test " "--metrics into a FIFO nobody reads"
kill $holder 2>/dev/null
mkfifo m3b.fifo
sleep 300 <m3b.fifo &
holder=$!
"$dslide" "${train[@]}" --iterations 100000 --log-every 1 --checkpoint-dir ck3b --metrics m3b.fifo \
  >out_full_term.txt 2>&1 &
pid=$!
sleep 3  # the pipe is full by now and a record waits for room
kill -TERM $pid
start=$SECONDS
wait $pid
rc=$?
kill $holder 2>/dev/null
expect_rc $rc 75 "SIGTERM while a record waits on a full pipe"
((SECONDS - start <= 5)) || fail "SIGTERM while a record waits on a full pipe: took $((SECONDS - start)) s"
[[ -n $(ls -d ck3b/ckpt-* 2>/dev/null) ]] || fail "SIGTERM while a record waits on a full pipe: no checkpoint"
pass "--metrics into a FIFO nobody reads: gives up after 10 s, the run goes on; SIGTERM lands the checkpoint at once"

# 4. A FIFO that no process reads: refused at the start, naming it and what to do (it was
#    opened as its own reader and the run hung once the pipe filled).
mkfifo m4.fifo
timeout -s KILL 60 "$dslide" "${train[@]}" --iterations 10 --metrics m4.fifo >out_noreader.txt 2>&1
expect_rc $? 1 "--metrics into a FIFO without a reader"
expect_in out_noreader.txt "option --metrics: no process reads the FIFO 'm4.fifo': start its reader first, or give a regular file" \
  "--metrics into a FIFO without a reader"
pass "--metrics into a FIFO without a reader: refused at the start"

# 5. Two predict runs onto one --out: while one writes (here a process that holds the lock
#    on preds.tsv.tmp, as a writer does), another is refused, naming the file and what to do,
#    and the existing preds.tsv stays as it was; once the first is gone the file is written
#    whole. (Both wrote preds.tsv.tmp, and one reported rows the file did not hold.)
"$dslide" "${train[@]}" --iterations 20 --checkpoint-dir ck5 >out_model.txt 2>&1 || fail "the model for predict"
predict=(predict --model ck5/ckpt-000000000020 --input syn.test.txt --out preds.tsv)
"$dslide" "${predict[@]}" --top-k 3 >out_predict1.txt 2>&1 || fail "the first predict"
cp preds.tsv preds.first.tsv
python3 -c 'import fcntl, sys, time
f = open("preds.tsv.tmp", "w"); fcntl.lockf(f, fcntl.LOCK_EX); open("locked", "w").close(); time.sleep(60)' &
holder=$!
for _ in $(seq 100); do [[ -e locked ]] && break; sleep 0.1; done
"$dslide" "${predict[@]}" --top-k 5 >out_predict2.txt 2>&1
rc=$?
kill $holder 2>/dev/null
wait $holder 2>/dev/null
expect_rc $rc 1 "a second predict onto the same --out"
expect_in out_predict2.txt "cannot write preds.tsv: another process is writing it (preds.tsv.tmp is locked); wait for it to end, or write elsewhere" \
  "a second predict onto the same --out"
cmp -s preds.tsv preds.first.tsv || fail "a second predict onto the same --out: preds.tsv changed"
"$dslide" "${predict[@]}" --top-k 5 >out_predict3.txt 2>&1 || fail "predict once the writer is gone"
[[ $(wc -l <preds.tsv) == 500 && $(head -1 preds.tsv | tr ' ' '\n' | wc -l) == 5 ]] ||
  fail "predict once the writer is gone: preds.tsv not its 500 rows of 5"
pass "two writers of one --out: the second refused, the file unchanged; written whole after"

# 6. A folder that holds another run's best model and no checkpoint (pruned, moved, or the
#    run killed before its first): a fresh run is refused before its first step, naming it,
#    and the best model stays; --resume of it continues. (It was replaced without a word.)
"$dslide" "${train[@]}" --iterations 30 --valid-fraction 0.2 --eval-every 10 --checkpoint-dir ck6 \
  >out_best_first.txt 2>&1 || fail "the run with a best model"
[[ -f ck6/best/meta.h5 ]] || fail "no ck6/best"
rm -rf ck6/ckpt-*
before=$(md5sum ck6/best/*.h5 | md5sum)
"$dslide" "${train[@]}" --iterations 30 --valid-fraction 0.2 --eval-every 10 --checkpoint-dir ck6 \
  >out_best_fresh.txt 2>&1
expect_rc $? 1 "a fresh run into a folder with another run's best model"
expect_in out_best_fresh.txt "option --checkpoint-dir: ck6 holds the best model of another run (ck6/best); continue from it with --resume ck6/best, or move it away, or choose another folder" \
  "a fresh run into a folder with another run's best model"
expect_not_in out_best_fresh.txt "^iter " "a fresh run into a folder with another run's best model"
[[ $(md5sum ck6/best/*.h5 | md5sum) == "$before" ]] || fail "ck6/best changed"
"$dslide" "${train[@]}" --iterations 40 --valid-fraction 0.2 --eval-every 10 --checkpoint-dir ck6 \
  --resume ck6/best >out_best_resume.txt 2>&1 || fail "--resume ck6/best"
pass "a fresh run into a folder with another run's best model: refused, the model kept; --resume continues"

# 7. A .gz cut short, at 20 places: each refused as cut, naming the file and the line where
#    it ends, by train and by predict (9 of 20 cuts were blamed on a data line: "bad feature
#    '41'", the line cut inside a token).
gzip -c syn.train.txt >full.txt.gz
size=$(stat -c %s full.txt.gz)
for i in $(seq 1 20); do
  head -c $((size * i / 21)) full.txt.gz >cut.txt.gz
  "$dslide" train --train cut.txt.gz --test syn.test.txt --threads 1 --iterations 1 >out_cut.txt 2>&1
  expect_rc $? 1 "training data cut at $((size * i / 21)) of $size bytes"
  expect_in out_cut.txt "cut.txt.gz:[0-9]*: the file ends inside its gzip stream (unexpected end of file): it was cut short; copy or compress it again" \
    "training data cut at $((size * i / 21)) of $size bytes"
done
"$dslide" predict --model ck5/ckpt-000000000020 --input cut.txt.gz --out cut.tsv >out_cut_predict.txt 2>&1
expect_rc $? 1 "predict of a cut .gz"
expect_in out_cut_predict.txt "cut.txt.gz:[0-9]*: the file ends inside its gzip stream" "predict of a cut .gz"
pass "a .gz cut short at 20 places: each refused as cut, by train and predict"

# 8. Sizes that cannot fit, named by what does not: bench with 2,000,000,000 labels is
#    refused before it generates its data, naming the model's options (it generated for 90 s
#    first); gen's table of 2,000,000,000 labels under a 4 GB address space names --labels
#    (it named --points).
timeout -s KILL 30 "$dslide" bench --labels 2000000000 --points 1000 --iterations 1 >out_bench_labels.txt 2>&1
expect_rc $? 1 "bench --labels 2000000000"
expect_in out_bench_labels.txt "the model of --hidden 128, 135909 features (--features) and 2000000000 labels (--labels), a rank's share of its 258017396480 parameters with their Adam moments, needs at least" \
  "bench --labels 2000000000"
(ulimit -v 4000000 && exec "$dslide" gen --points 100 --features 10 --nnz 5 --labels 2000000000 --out big) \
  >out_gen_labels.txt 2>&1
expect_rc $? 1 "gen --labels 2000000000 under ulimit -v"
expect_in out_gen_labels.txt "option --labels: 2000000000 labels (a popularity table of 8 bytes each) and 120 points, generated in memory, need at least 15 GB" \
  "gen --labels 2000000000 under ulimit -v"
pass "bench and gen with 2,000,000,000 labels: refused at once, naming --labels"

# 9. A sampled run resumed under a dense strategy: the strategy named, not --sparsity.
for s in dense-model-parallel data-parallel; do
  "$dslide" "${train[@]}" --iterations 30 --checkpoint-dir ck1 --resume ck1 --strategy $s >out_strategy.txt 2>&1
  expect_rc $? 1 "--strategy $s on resume"
  expect_in out_strategy.txt "meta.h5: the checkpoint was trained with --strategy sparse (layer 2 sparsity [0-9.]*); --strategy $s computes every layer densely: resume with --strategy sparse" \
    "--strategy $s on resume"
done
pass "a sampled run resumed under a dense strategy: refused naming --strategy"

# 10. A stop while the training data loads (here from a FIFO, which also shows a pipe read as
#     a file: its first bytes were taken by a look for the binary format's mark): one rank
#     stops reading within 4,096 lines, exit 75, nothing written (it read on to the end of
#     the data, minutes for a large set, before it stopped).
mkfifo load.fifo
"$dslide" train --train load.fifo --test syn.test.txt --threads 1 --iterations 10 --checkpoint-dir ck10 \
  >out_load.txt 2>&1 &
pid=$!
exec 8>load.fifo
echo "100000 2000 3000" >&8
tail -n +2 syn.train.txt | head -1000 >&8
sleep 0.5
kill -TERM $pid
for _ in 1 2 3 4 5; do tail -n +2 syn.train.txt >&8 2>/dev/null || break; done
for _ in $(seq 100); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
exec 8>&-
wait $pid
expect_rc $? 75 "a stop while the data loads"
expect_in out_load.txt "stopped by SIGTERM while reading load.fifo (line 4096 of 100001): nothing was trained, nothing was saved" \
  "a stop while the data loads"
[[ -z $(ls -A ck10 2>/dev/null | grep -v '^\.dslide-lock$') ]] || fail "a stop while the data loads: ck10 holds $(ls ck10)"
pass "a stop while the data loads: ends within 4,096 lines, exit 75, nothing written"

# 11. bench's generated data counted at its real size (the shape's features per point): 200
#     million points of the Amazon shape are refused at once where memory cannot hold them
#     (a bound of 28 bytes a point, 30 times too low, let it fill memory for a minute).
(ulimit -v 16000000 && exec timeout -s KILL 30 "$dslide" bench --points 200000000 --iterations 1) \
  >out_bench_points.txt 2>&1
expect_rc $? 1 "bench --points 200000000 under a 16 GB address space"
expect_in out_bench_points.txt "option --points: 200000000 points and 1000 test points of 75 features each (--nnz), generated in memory, need at least 117 GB" \
  "bench --points 200000000 under a 16 GB address space"
pass "bench --points 200000000: refused at once, at the data's size"

# 12. A hidden layer of 2^23 neurons on 10 features: its weights are 1.6 GB, its batch rows
#     48 GB. The memory check counts both and refuses it before allocating (it counted the
#     weights alone, and the kernel killed the run at 21.7 GB).
"$dslide" gen --points 300 --test-points 50 --features 10 --labels 5 --nnz 3 --out tiny >/dev/null ||
  fail "gen tiny"
(ulimit -v 16000000 && exec timeout -s KILL 60 "$dslide" train --train tiny.train.txt --test tiny.test.txt \
  --hidden 8388608 --iterations 1 --threads 1) >out_wide_hidden.txt 2>&1
expect_rc $? 1 "--hidden 8388608 under a 16 GB address space"
expect_in out_wide_hidden.txt "its weights and Adam moments (134217733 parameters) and a batch's activations and gradients (--batch 256: 49152 MB) need 50 GB" \
  "--hidden 8388608 under a 16 GB address space"
pass "a hidden layer of 2^23 neurons: refused at once, the batch's rows counted"

# 13. An INI file with train's keys before any section, given to eval: the line and the key
#     named, and where a command's own keys go (it said only "unrecognised option 'hidden'").
printf 'hidden = 64\nthreads = 1\n[train]\nlr = 0.01\n' >train_first.ini
"$dslide" eval --model ck5/ckpt-000000000020 --test syn.test.txt --config train_first.ini >out_ini.txt 2>&1
expect_rc $? 1 "eval --config with train's keys before any section"
expect_in out_ini.txt "config file 'train_first.ini' line 1: unrecognised option 'hidden': not an option of eval (keys before any section apply to every command: put a key of one command under its section, such as \[train\])" \
  "eval --config with train's keys before any section"
printf '[train]\nhidden = 64\n[eval]\nthreads = 1\n' >sections.ini
"$dslide" eval --model ck5/ckpt-000000000020 --test syn.test.txt --config sections.ini >out_ini2.txt 2>&1 ||
  fail "eval --config with train's keys under [train]"
pass "train's keys before any section, given to eval: the line named and where they go; under [train]: eval runs"

# 14. A second SIGTERM after the stop's checkpoint landed (DSLIDE_FAULT=term2: the first at
#     iteration 5, the second once the checkpoint is written): exit 75 and a line that says
#     the checkpoint is there (it said "exiting now, without a checkpoint" and exited 143, so
#     a scheduler that requeues on 75 lost the job).
DSLIDE_FAULT=term2:0:5 "$dslide" "${train[@]}" --iterations 1000 --checkpoint-dir ck14 >out_term2.txt 2>&1
expect_rc $? 75 "a second SIGTERM after the stop's checkpoint"
expect_in out_term2.txt "second stop signal: exiting now; the stop's checkpoint is written (ck14/ckpt-000000000005)" \
  "a second SIGTERM after the stop's checkpoint"
expect_not_in out_term2.txt "without a checkpoint" "a second SIGTERM after the stop's checkpoint"
[[ -f ck14/ckpt-000000000005/meta.h5 ]] || fail "a second SIGTERM after the stop's checkpoint: no checkpoint 5"
"$dslide" "${train[@]}" --iterations 10 --checkpoint-dir ck14 --resume ck14 >out_term2_resume.txt 2>&1 ||
  fail "--resume after a second SIGTERM"
pass "a second SIGTERM after the stop's checkpoint: exit 75, the checkpoint said and resumable"

# 15. A kept model older than the last step. --save's folder held the moments of the last
#     step, and --resume refused it as damaged (an Adam step past the checkpoint's iteration);
#     they are now written as of the kept iteration. CHECKPOINT_DIR/best, written at most 30 s
#     of training after a better model (here: once, at the end, from the kept snapshot), is
#     that model: eval of it gives the run's test P@1, and both folders resume. A stop signal
#     writes it too.
kept_run=("${train[@]}" --valid-fraction 0.2 --eval-every 10 --lr 0.2 --lr-decay 1 --patience 0)
"$dslide" "${kept_run[@]}" --iterations 150 --checkpoint-dir ck15 --save save15 >out_kept.txt 2>&1 ||
  fail "the run whose kept model is older than its last step"
kept=$(grep -oE "kept the model of iteration [0-9]+" out_kept.txt | grep -oE "[0-9]+$")
((kept > 0 && kept < 150)) || fail "the kept model is of iteration '$kept', not before the last (the case tests nothing)"
best_p1=$(grep -oE "^test  iter $kept \| P@1 [0-9.]+" out_kept.txt | grep -oE "[0-9.]+$")
[[ -n $best_p1 ]] || fail "no test line of the kept model: $(grep '^test' out_kept.txt)"
"$dslide" eval --model ck15/best --test syn.test.txt >out_kept_eval.txt 2>&1 || fail "eval of ck15/best"
expect_in out_kept_eval.txt "^eval ck15/best (iteration $kept, .*P@1 $best_p1 " "eval of ck15/best"
for folder in save15 ck15/best; do
  "$dslide" "${kept_run[@]}" --iterations 170 --resume "$folder" >out_kept_resume.txt 2>&1 ||
    fail "--resume $folder: $(grep -i 'damaged\|error' out_kept_resume.txt)"
  expect_in out_kept_resume.txt "resumed from $folder at iteration $kept " "--resume $folder"
done
DSLIDE_FAULT=term:0:95 "$dslide" "${kept_run[@]}" --iterations 1000 --checkpoint-dir ck15s >out_kept_stop.txt 2>&1
expect_rc $? 75 "a stop signal after better models"
stop_best=$(grep -oE "valid iter [0-9]+ .*\(best so far\)" out_kept_stop.txt | tail -1 | grep -oE "^valid iter [0-9]+" | grep -oE "[0-9]+$")
[[ -n $stop_best ]] || fail "a stop signal after better models: no better model before it"
"$dslide" eval --model ck15s/best --test syn.test.txt >out_kept_stop_eval.txt 2>&1 || fail "eval of ck15s/best"
expect_in out_kept_stop_eval.txt "^eval ck15s/best (iteration $stop_best," "a stop signal: ck15s/best"
pass "a kept model older than the last step: best/ is it, --save's folder and best/ resume; a stop writes best/"
