#!/usr/bin/env bash
# Ensembles through the command line (docs/user-guide.md: Ensembles): --ensemble auto trains
# 3 members on a small set with validation and 1 without; predict and eval of the folder give
# the mean of the members' probabilities (checked against the members' own predictions), the
# P@1 that train reported; what cannot take an ensemble (resume, export, approximate scoring)
# says so; the files are read once, so FIFOs serve as well as files.
# Under mpiexec -n 2 the ensemble of a dense output layer is the one of 1 rank. Section 8: one
# network and its reranker (--rerank), in the same folder layout.
# Usage: ensemble_cli.sh DSLIDE WORKDIR [MPIEXEC MPIEXEC_FLAGS...]
set -uo pipefail
dslide=$1 work=$2
mpiexec=${3:-}
mpiflags=("${@:4}")
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAIL: $*"; for f in out*.txt; do [[ -f $f ]] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }
pass() { echo "ok: $*"; }
expect_rc() { [[ $1 == "$2" ]] || fail "$3: exit code $1, expected $2"; }
expect_in() { grep -q -- "$2" "$1" || fail "$3: '$2' not in $1"; }
# agree PRED TEST TRAIN_OUT EVAL_OUT LINE: the P@1 of predict's top 1s (PRED) on TEST equals
# the one train said on its test line starting LINE and the one eval said.
agree() {
  python3 - "$@" <<'PY'
import re, sys
pred, test, trained, evaled, line = sys.argv[1:6]
rows = [l.rstrip("\n").split("\t", 1)[1].split() for l in open(pred)]
labels = [set(int(v) for v in l.split(" ", 1)[0].split(",") if v and ":" not in v)
          for l in open(test).readlines()[1:]]
p1 = sum(int(r[0].split(":")[0]) in y for r, y in zip(rows, labels)) / len(rows)
said = float(re.search("^" + re.escape(line) + r" \| P@1 ([0-9.]+)", open(trained).read(), re.M).group(1))
got = float(re.search(r"P@1 ([0-9.]+)", open(evaled).read()).group(1))
assert abs(p1 - said) < 1e-4 and abs(p1 - got) < 1e-4, (p1, said, got)
print(f"P@1 {p1:.4f} in train, eval and predict")
PY
}

# 2,000 points of 40 labels: 1,800 after the tenth held back, 8 batches an epoch.
"$dslide" gen --points 2000 --test-points 300 --features 500 --labels 40 --nnz 10 --out e \
  >/dev/null || fail "gen"
run=(train --train e.train.txt --test e.test.txt --threads 1 --hidden 32)

# 1. auto with validation and --epochs auto on a small set: 3 members, seeds 1, 2, 3 (the
#    networks alone here: --linear false; section 7 has the linear member).
"$dslide" "${run[@]}" --valid-fraction 0.1 --patience 1 --linear false --checkpoint-dir ens \
  --metrics m.jsonl >out_auto.txt 2>&1
expect_rc $? 0 "--ensemble auto"
expect_in out_auto.txt "^ensemble of 3 models\* (--ensemble auto" "--ensemble auto"
for m in 1 2 3; do
  expect_in out_auto.txt "^ensemble member $m of 3: --seed $m, checkpoints in ens/member-$m" "member $m"
  [[ -d ens/member-$m/best ]] || fail "member $m: no best model in ens/member-$m"
done
expect_in out_auto.txt "^test  ensemble of 3 | P@1 " "the ensemble's test line"
tail -1 m.jsonl | grep -q '"set":"test","ensemble":3,"linear":0,' || fail "the ensemble's record: $(tail -1 m.jsonl)"
if grep -q "linear member" out_auto.txt || [[ -e ens/linear ]]; then fail "--linear false solved a linear member"; fi
pass "--ensemble auto trains 3 members on a small set with validation"

# 2. predict and eval of the folder: the mean of the members' probabilities (every label of
#    each, 40 <= the lists' 100), and the P@1 train said.
"$dslide" predict --model ens --input e.test.txt --top-k 40 --out ens.tsv --threads 1 >out_pred.txt 2>&1
expect_rc $? 0 "predict of the ensemble"
expect_in out_pred.txt "an ensemble of 3 models" "predict of the ensemble"
for m in 1 2 3; do
  "$dslide" predict --model ens/member-$m/best --input e.test.txt --top-k 40 --out m$m.tsv \
    --threads 1 >/dev/null 2>&1 || fail "predict of member $m"
done
"$dslide" eval --model ens --test e.test.txt --threads 1 >out_eval.txt 2>&1
expect_rc $? 0 "eval of the ensemble"
python3 - ens.tsv m1.tsv m2.tsv m3.tsv e.test.txt out_auto.txt out_eval.txt <<'PY' || fail "the ensemble's probabilities"
import re, sys
ens, members, test, trained, evaled = sys.argv[1], sys.argv[2:5], sys.argv[5], sys.argv[6], sys.argv[7]
def read(fn):
    rows = []
    for line in open(fn):
        body = line.rstrip("\n").split("\t", 1)[1].split()
        rows.append([(int(a), float(b)) for a, b in (t.split(":") for t in body)])
    return rows
e, ms = read(ens), [read(f) for f in members]
assert any(a != b for a, b in zip(ms[0], ms[1])), "members 1 and 2 predict alike"
worst = 0
for i, row in enumerate(e):
    want = {}
    for m in ms:
        for l, p in m[i]:
            want[l] = want.get(l, 0) + p / 3
    assert len(row) == 40, (i, len(row))
    for l, p in row:
        worst = max(worst, abs(p - want[l]) / want[l] if want[l] > 0 else p)
    assert [l for l, _ in row[:1]] == [max(want, key=lambda l: (want[l], -l))] or \
        abs(row[0][1] - row[1][1]) < 1e-6 * row[0][1], (i, row[:2])
assert worst < 2e-5, worst
labels = [set(int(v) for v in line.split(" ", 1)[0].split(",") if v and ":" not in v)
          for line in open(test).readlines()[1:]]
p1 = sum(row[0][0] in y for row, y in zip(e, labels)) / len(e)
said = float(re.search(r"^test  ensemble of 3 \| P@1 ([0-9.]+)", open(trained).read(), re.M).group(1))
got = float(re.search(r"P@1 ([0-9.]+)", open(evaled).read()).group(1))
assert abs(p1 - said) < 1e-4 and abs(p1 - got) < 1e-4, (p1, said, got)
print(f"ensemble probabilities within {worst:.1e} of the members' mean; P@1 {p1:.4f}")
PY
pass "predict and eval of the folder average the members (the P@1 train said)"

# 3. Without validation auto trains one model, as before: no member folders.
"$dslide" "${run[@]}" --epochs 1 --checkpoint-dir one >out_one.txt 2>&1
expect_rc $? 0 "--ensemble auto without validation"
[[ ! -e one/member-1 ]] && ls one | grep -q '^ckpt-' || fail "--ensemble auto without validation: $(ls one)"
if grep -q "ensemble" out_one.txt; then fail "--ensemble auto without validation spoke of an ensemble"; fi
# ... and a number sets it.
"$dslide" "${run[@]}" --epochs 1 --ensemble 2 --checkpoint-dir two >out_two.txt 2>&1
expect_rc $? 0 "--ensemble 2"
[[ -d two/member-2 && ! -e two/member-3 ]] || fail "--ensemble 2: $(ls two)"
pass "--ensemble auto trains one model without validation; --ensemble 2 two"

# 4. What takes one model says so.
"$dslide" "${run[@]}" --ensemble 2 --resume ens/member-1 >out_resume.txt 2>&1
expect_rc $? 1 "--ensemble 2 --resume"
expect_in out_resume.txt "option --ensemble 2: --resume continues one model" "--ensemble 2 --resume"
"$dslide" "${run[@]}" --iterations 5 --resume ens --ensemble 1 >out_resume1.txt 2>&1
expect_rc $? 1 "--resume of an ensemble's folder"
expect_in out_resume1.txt "option --resume: ens holds an ensemble of 3 models; --resume continues one" \
  "--resume of an ensemble's folder"
# No mixing of runs in one folder: eval and predict of it would read the other run's models.
"$dslide" "${run[@]}" --epochs 1 --checkpoint-dir ens >out_mix1.txt 2>&1
expect_rc $? 1 "one model into an ensemble's folder"
expect_in out_mix1.txt "option --checkpoint-dir: ens holds an ensemble of another run (ens/member-1 ...)" \
  "one model into an ensemble's folder"
"$dslide" "${run[@]}" --epochs 1 --ensemble 2 --checkpoint-dir one >out_mix2.txt 2>&1
expect_rc $? 1 "an ensemble into one model's folder"
expect_in out_mix2.txt "option --checkpoint-dir: one holds one model's checkpoints of another run" \
  "an ensemble into one model's folder"
mkdir -p three/member-3
"$dslide" "${run[@]}" --epochs 1 --ensemble 2 --checkpoint-dir three >out_mix3.txt 2>&1
expect_rc $? 1 "an ensemble of 2 beside a third member"
expect_in out_mix3.txt "option --checkpoint-dir: three holds three/member-3 of another run, which eval and predict" \
  "an ensemble of 2 beside a third member"
[[ ! -e three/member-1 ]] || fail "an ensemble of 2 beside a third member: trained before refusing"
"$dslide" "${run[@]}" --epochs 1 --ensemble 3 --checkpoint-dir ens >out_mix4.txt 2>&1
expect_rc $? 1 "an ensemble into another's folder"
expect_in out_mix4.txt "option --checkpoint-dir: ens holds ens/member-1 of another run" "an ensemble into another's folder"
for bad in 0 65 x; do
  "$dslide" "${run[@]}" --ensemble $bad >out_bad.txt 2>&1
  expect_rc $? 1 "--ensemble $bad"
  expect_in out_bad.txt "option --ensemble" "--ensemble $bad"
done
"$dslide" bench --train e.train.txt --test e.test.txt --iterations 5 --ensemble 2 >out_bench.txt 2>&1
expect_rc $? 1 "bench --ensemble 2"
expect_in out_bench.txt "option --ensemble 2: bench measures one model's training" "bench --ensemble 2"
"$dslide" export --model ens --out ens.h5 >out_export.txt 2>&1
[[ $? != 0 ]] || fail "export of an ensemble folder succeeded"
expect_in out_export.txt "holds an ensemble of 3 models; export writes one" "export of an ensemble"
"$dslide" predict --model ens --input e.test.txt --out a.tsv --approximate >out_ann.txt 2>&1
[[ $? != 0 ]] || fail "approximate predict of an ensemble succeeded"
expect_in out_ann.txt "holds an ensemble of 3 models; approximate scoring reads one" "approximate predict"
pass "resume, bench, export, approximate scoring and another run's folder refuse an ensemble by name; bad counts refused"

# 5. The files are read once and every member trains on a copy: training and test points from
#    FIFOs (read once) give the ensemble of the regular files, to the digits printed, and the
#    data's warning (a point without features) is given once, naming its line.
awk 'NR == 1 { $1 = $1 + 1; print; print "3"; next } { print }' e.train.txt >e.empty.txt
two=(--threads 1 --hidden 32 --valid-fraction 0.1 --patience 1 --ensemble 2)
"$dslide" train --train e.empty.txt --test e.test.txt "${two[@]}" --checkpoint-dir fr \
  >out_file.txt 2>&1 || fail "--ensemble 2 from regular files"
mkfifo e.fifo t.fifo
cat e.empty.txt >e.fifo &
cat e.test.txt >t.fifo &
"$dslide" train --train e.fifo --test t.fifo "${two[@]}" --checkpoint-dir ff >out_fifo.txt 2>&1
expect_rc $? 0 "--ensemble 2 from FIFOs"
wait
want=$(grep "^test  ensemble of 2" out_file.txt | cut -d'|' -f2)
got=$(grep "^test  ensemble of 2" out_fifo.txt | cut -d'|' -f2)
[[ -n $want && $got == "$want" ]] || fail "FIFOs: '$got' against the files' '$want'"
[[ $(grep -c "^warning: e.fifo: 1 of 2001 points have no features (the first at line 2)" out_fifo.txt) == 1 ]] ||
  fail "the FIFO's warning is not given once, naming line 2"
[[ $(grep -c "have no features" out_file.txt) == 1 ]] || fail "the file's warning is not given once"
pass "an ensemble reads its files once: from FIFOs as from files (P@k '$got'), one warning"

# 6. Two ranks (each a block of the 40 outputs, one thread each): the members train and the
#    ensemble scores as on one rank, to the digits printed.
if [[ -n $mpiexec ]]; then
  "$dslide" "${run[@]}" --valid-fraction 0.1 --patience 1 --ensemble 2 --checkpoint-dir r1 \
    >out_r1.txt 2>&1 || fail "--ensemble 2 on 1 rank"
  "$mpiexec" "${mpiflags[@]}" -n 2 -x OMP_NUM_THREADS=1 "$dslide" "${run[@]}" --valid-fraction 0.1 \
    --patience 1 --ensemble 2 --checkpoint-dir r2 >out_r2.txt 2>&1 || fail "--ensemble 2 on 2 ranks"
  one=$(grep "^test  ensemble of 2" out_r1.txt | cut -d'|' -f2)
  two=$(grep "^test  ensemble of 2" out_r2.txt | cut -d'|' -f2)
  [[ -n $one && $one == "$two" ]] || fail "2 ranks: '$two' against 1 rank's '$one'"
  "$mpiexec" "${mpiflags[@]}" -n 2 -x OMP_NUM_THREADS=1 "$dslide" predict --model r2 \
    --input e.test.txt --top-k 5 --out r2.tsv >/dev/null 2>&1 || fail "predict on 2 ranks"
  "$dslide" predict --model r1 --input e.test.txt --top-k 5 --out r1.tsv --threads 1 >/dev/null 2>&1 ||
    fail "predict on 1 rank"
  # The labels alike, the probabilities within float's rounding (a normaliser summed by
  # blocks of outputs on 2 ranks).
  python3 - r1.tsv r2.tsv <<'PY' || fail "2 ranks' ensemble predictions differ from 1 rank's"
import sys
rows = [[l.rstrip("\n").split("\t")[1].split() for l in open(f)] for f in sys.argv[1:]]
assert len(rows[0]) == len(rows[1]) == 300
for a, b in zip(*rows):
    pa = [(int(t.split(":")[0]), float(t.split(":")[1])) for t in a]
    pb = [(int(t.split(":")[0]), float(t.split(":")[1])) for t in b]
    assert [l for l, _ in pa] == [l for l, _ in pb] or \
        all(abs(x[1] - y[1]) <= 1e-5 * x[1] for x, y in zip(pa, pb)), (a, b)
    assert all(abs(x[1] - y[1]) <= 1e-5 * x[1] for x, y in zip(pa, pb)), (a, b)
PY
  pass "2 ranks train and score the ensemble as 1 rank does ($one)"
fi

# 7. The linear member (--linear auto: 40 labels, an ensemble): solved on every training point
#    into FOLDER/linear, its share chosen on the first member's validation points from the
#    grid; train, eval and predict of the folder agree; without its file the folder is the
#    networks' ensemble again; another run's linear member in a folder is refused by name.
"$dslide" "${run[@]}" --valid-fraction 0.1 --patience 1 --checkpoint-dir lin --metrics lm.jsonl \
  >out_lin.txt 2>&1
expect_rc $? 0 "--linear auto"
expect_in out_lin.txt "^ensemble linear member (--linear auto): one-vs-rest squared hinge, C 1, on the 2000 L2-normalised training points, solved in .*, saved in lin/linear; its share of the mean probability [0-9.]* (the best validation P@1 of the first member's mix on 200 points; 0: [0-9.]*, 0.25: [0-9.]*, 0.5: [0-9.]*, 0.75: [0-9.]*, 1: [0-9.]*)" \
  "the linear member's line"
expect_in out_lin.txt "^test  linear member alone | P@1 " "the linear member's own test line"
[[ -f lin/linear/linear.h5 && -f lin/linear/linear.h5.sum ]] || fail "no lin/linear/linear.h5: $(ls lin)"
tail -1 lm.jsonl | grep -q '"set":"test","ensemble":3,"linear":1,' || fail "the record: $(tail -1 lm.jsonl)"
share=$(sed -n 's/.*its share of the mean probability \([0-9.]*\) .*/\1/p' out_lin.txt)
"$dslide" eval --model lin --test e.test.txt --threads 1 >out_lin_eval.txt 2>&1
expect_rc $? 0 "eval of the folder with the linear member"
"$dslide" predict --model lin --input e.test.txt --top-k 5 --out lin.tsv --threads 1 >out_lin_pred.txt 2>&1
expect_rc $? 0 "predict of the folder with the linear member"
if [[ $share == 0 ]]; then
  expect_in out_lin.txt "^test  ensemble of 3 and the linear member | P@1 .* share 0: left out)" "share 0"
  expect_in out_lin_eval.txt "the linear member's share 0: left out)" "eval, share 0"
else
  expect_in out_lin_eval.txt "^eval ensemble of 3 and the linear member (lin/member-1 ...; the mean of their probabilities, the linear member's share $share)" \
    "eval names the linear member"
  expect_in out_lin_pred.txt "an ensemble of 3 models (lin/member-1 ...) and the linear member (its share $share)" \
    "predict names the linear member"
fi
agree lin.tsv e.test.txt out_lin.txt out_lin_eval.txt "test  ensemble of 3 and the linear member" ||
  fail "train, eval and predict of the linear member's folder disagree"
mv lin/linear lin.linear.away
"$dslide" eval --model lin --test e.test.txt --threads 1 >out_lin_nets.txt 2>&1
expect_rc $? 0 "eval of the folder without its linear member"
expect_in out_lin_nets.txt "^eval ensemble of 3 (lin/member-1 ...; the mean of their probabilities) on" \
  "the folder without its linear member"
mv lin.linear.away lin/linear
mkdir -p other && cp -r lin/linear other/
"$dslide" "${run[@]}" --epochs 1 --ensemble 2 --checkpoint-dir other >out_lin_mix.txt 2>&1
expect_rc $? 1 "an ensemble into a folder holding another run's linear member"
expect_in out_lin_mix.txt "option --checkpoint-dir: other holds other/linear, the linear member of another run" \
  "another run's linear member"
"$dslide" "${run[@]}" --epochs 1 --ensemble 1 --linear true >out_lin_one.txt 2>&1
expect_rc $? 1 "--linear true with one model"
expect_in out_lin_one.txt "option --linear true: the linear member joins an ensemble's networks" "--linear true, one model"
"$dslide" "${run[@]}" --epochs 1 --linear true >out_lin_auto1.txt 2>&1
expect_rc $? 1 "--linear true where --ensemble auto chooses one model"
expect_in out_lin_auto1.txt "option --linear true: the linear member joins an ensemble's networks, and --ensemble auto chose one model" \
  "--linear true, auto's one model"
"$dslide" "${run[@]}" --epochs 1 --ensemble 2 --linear maybe >out_lin_bad.txt 2>&1
expect_rc $? 1 "--linear maybe"
expect_in out_lin_bad.txt "linear" "--linear maybe"
pass "the linear member: solved, its share validated, saved; train, eval and predict agree (share $share); refusals named"

# 8. The reranker (--rerank auto: one model, validation with --epochs auto, at least
#    --dense-below labels): the network into FOLDER/member-1, the linear reranker of its lists
#    into FOLDER/linear; train, eval and predict of the folder agree; without its file the
#    folder is the network alone; what cannot take it says so. On 2 ranks (a dense output
#    layer) as on one.
"$dslide" gen --points 3000 --test-points 300 --features 500 --labels 1100 --nnz 10 --out big \
  >/dev/null || fail "gen of 1,100 labels"
rr=(train --train big.train.txt --test big.test.txt --hidden 32 --valid-fraction 0.1
  --ensemble 1)
"$dslide" "${rr[@]}" --threads 1 --checkpoint-dir rr --metrics rr.jsonl >out_rr.txt 2>&1
expect_rc $? 0 "--rerank auto"
expect_in out_rr.txt "^reranker\* (--rerank auto: early stopping, at least --dense-below labels)" "auto's line"
expect_in out_rr.txt "^the network: --seed 1, checkpoints in rr/member-1; its reranker after it" "the network's line"
expect_in out_rr.txt "of batch [0-9]*, lr 0.002 (--lr auto: a reranker follows)" "the network's rate"
expect_in out_rr.txt "training stops after 3 evaluations without a better P@1 (--patience auto: a reranker follows)" \
  "the network's patience"
expect_in out_rr.txt "^reranker (--rerank auto): one-vs-rest squared hinge, C 1, on the L2-normalised rows, each label on the points that have it and the points whose network list of 30 holds it (3000 training points listed in .*, solved in .*), saved in rr/linear; its share of the network's probability [0-9.]* (the best validation P@1 of the network's mix on 300 points; 0: [0-9.]*, 0.25: [0-9.]*, 0.5: [0-9.]*, 0.75: [0-9.]*, 1: [0-9.]*)" \
  "the reranker's line"
expect_in out_rr.txt "^test  reranker alone | P@1 " "the reranker's own test line"
expect_in out_rr.txt "^test  network and reranker | P@1 " "the reranked test line"
[[ -d rr/member-1/best && -f rr/linear/linear.h5 && -f rr/linear/linear.h5.sum ]] ||
  fail "no rr/member-1/best or rr/linear/linear.h5: $(ls rr rr/member-1)"
tail -1 rr.jsonl | grep -q '"set":"test","ensemble":1,"linear":0,"rerank":1,' || fail "the record: $(tail -1 rr.jsonl)"
share=$(sed -n "s/.*its share of the network's probability \([0-9.]*\) .*/\1/p" out_rr.txt)
"$dslide" eval --model rr --test big.test.txt --threads 1 >out_rr_eval.txt 2>&1
expect_rc $? 0 "eval of the reranked folder"
"$dslide" predict --model rr --input big.test.txt --top-k 5 --out rr.tsv --threads 1 >out_rr_pred.txt 2>&1
expect_rc $? 0 "predict of the reranked folder"
if [[ $share != 0 ]]; then
  expect_in out_rr_eval.txt "^eval network and reranker (rr/member-1, rr/linear; the reranker's share $share) on" \
    "eval names the reranker"
  expect_in out_rr_pred.txt "^predict: a network and its reranker (rr/member-1, rr/linear; the reranker's share $share)" \
    "predict names the reranker"
fi
agree rr.tsv big.test.txt out_rr.txt out_rr_eval.txt "test  network and reranker" ||
  fail "train, eval and predict of the reranked folder disagree"
mv rr/linear rr.linear.away
"$dslide" eval --model rr --test big.test.txt --threads 1 >out_rr_net.txt 2>&1
expect_rc $? 0 "eval of the folder without its reranker"
net=$(sed -n 's/^test  iter [0-9]* | \(P@1 [0-9.]*\) .*/\1/p' out_rr.txt)
expect_in out_rr_net.txt "^eval ensemble of 1 (rr/member-1 ...; the mean of their probabilities) on 1 rank(s): $net " \
  "the folder without its reranker is the network's"
mv rr.linear.away rr/linear
"$dslide" "${rr[@]}" --threads 1 --checkpoint-dir rr >out_rr_again.txt 2>&1
expect_rc $? 1 "a reranked run into a folder holding another"
expect_in out_rr_again.txt "option --checkpoint-dir: rr holds rr/linear, the linear member of another run" \
  "another run's reranker"
"$dslide" "${rr[@]}" --threads 1 --rerank false --checkpoint-dir rr >out_rr_single.txt 2>&1
expect_rc $? 1 "one model into a reranked folder"
expect_in out_rr_single.txt "option --checkpoint-dir: rr holds an ensemble of another run (rr/member-1" \
  "one model into a reranked folder"
"$dslide" "${rr[@]}" --threads 1 --rerank false >out_rr_off.txt 2>&1
expect_rc $? 0 "--rerank false"
if grep -q "reranker" out_rr_off.txt; then fail "--rerank false reranked"; fi
"$dslide" "${run[@]}" --epochs 1 --ensemble 2 --rerank true >out_rr_two.txt 2>&1
expect_rc $? 1 "--rerank true with 2 models"
expect_in out_rr_two.txt "option --rerank true: the reranker rescores one network's lists; give --ensemble 1" \
  "--rerank true, 2 models"
"$dslide" "${run[@]}" --valid-fraction 0.1 --rerank true >out_rr_auto3.txt 2>&1
expect_rc $? 1 "--rerank true where --ensemble auto chooses 3"
expect_in out_rr_auto3.txt "option --rerank true: the reranker rescores one network's lists, and --ensemble auto chose 3 models" \
  "--rerank true, auto's 3 models"
"$dslide" predict --model rr --input big.test.txt --top-k 5 --out rr_ann.tsv --approximate >out_rr_ann.txt 2>&1
expect_rc $? 1 "approximate predict of a reranked folder"
expect_in out_rr_ann.txt "option --approximate: rr holds a network and its reranker (rr/member-1, rr/linear); approximate scoring reads one model (--model rr/member-1)" \
  "approximate scoring of a reranked folder"
cp -r rr rr_more && rm -rf rr_more/member-1
"$dslide" "${rr[@]}" --threads 1 --rerank false --epochs 1 --checkpoint-dir rr_more/member-1 \
  >out_rr_more.txt 2>&1
expect_rc $? 0 "the network of a reranked folder trained again"
expect_in out_rr_more.txt "warning: rr_more/linear holds a linear model solved beside the networks before this run" \
  "the stale reranker named"
"$dslide" "${run[@]}" --epochs 1 --rerank true --resume rr/member-1 >out_rr_resume.txt 2>&1
expect_rc $? 1 "--rerank true --resume"
expect_in out_rr_resume.txt "option --rerank true: --resume continues one model" "--rerank true --resume"
pass "the reranker: listed, solved, its share validated, saved; train, eval and predict agree (share $share); refusals named"
if [[ -n $mpiexec ]]; then
  "$dslide" "${rr[@]}" --threads 1 --sparsity 1 --checkpoint-dir rd1 >out_rd1.txt 2>&1 ||
    fail "a reranked dense layer on 1 rank"
  "$mpiexec" "${mpiflags[@]}" -n 2 -x OMP_NUM_THREADS=1 "$dslide" "${rr[@]}" --sparsity 1 \
    --checkpoint-dir rd2 >out_rd2.txt 2>&1 || fail "a reranked dense layer on 2 ranks"
  on_one=$(grep "^test  network and reranker" out_rd1.txt | cut -d'|' -f2,3)
  on_two=$(grep "^test  network and reranker" out_rd2.txt | cut -d'|' -f2,3)
  [[ -n $on_one && $on_one == "$on_two" ]] || fail "2 ranks reranked: '$on_two' against 1 rank's '$on_one'"
  pass "2 ranks rerank as 1 rank does ($on_one)"
fi

# 9. A linear member of share 1 (one iteration of each network beside the linear member
#    solved to its optimum: the mix of the first member's validation points is best at 1)
#    leaves the networks no weight in the mix, so the members after the first are not
#    trained: the folder holds member-1 and linear/, the test line and the record say an
#    ensemble of 1, its P@1 is the linear member's alone, and train, eval and predict of the
#    folder agree. On 2 ranks as on one.
one=(--valid-fraction 0.1 --ensemble 3 --linear true --iterations 1)
"$dslide" "${run[@]}" "${one[@]}" --checkpoint-dir s1 --metrics s1.jsonl >out_s1.txt 2>&1
expect_rc $? 0 "a linear member of share 1"
expect_in out_s1.txt "its share of the mean probability 1 (the best validation P@1 of the first member's mix on 200 points" \
  "the share of 1"
expect_in out_s1.txt "^ensemble members 2-3 not trained: the linear member's share is 1 on the first member's validation points (its line below), which leaves the networks no weight in the mix" \
  "the members left out, said"
if grep -q "^ensemble member 2 of 3" out_s1.txt || [[ -e s1/member-2 ]]; then
  fail "member 2 trained beside a linear member of share 1: $(ls s1)"
fi
[[ -d s1/member-1/best && -f s1/linear/linear.h5 ]] || fail "no s1/member-1/best or s1/linear: $(ls s1)"
tail -1 s1.jsonl | grep -q '"set":"test","ensemble":1,"linear":1,"rerank":0,"linear_share":1,' ||
  fail "the record: $(tail -1 s1.jsonl)"
alone=$(sed -n 's/^test  linear member alone | \(P@1 [0-9.]* P@3 [0-9.]* P@5 [0-9.]*\) .*/\1/p' out_s1.txt)
expect_in out_s1.txt "^test  ensemble of 1 and the linear member | $alone | " \
  "the mix of share 1 scores as the linear member alone ($alone)"
"$dslide" eval --model s1 --test e.test.txt --threads 1 >out_s1_eval.txt 2>&1
expect_rc $? 0 "eval of the folder of one network and its linear member"
expect_in out_s1_eval.txt "^eval ensemble of 1 and the linear member (s1/member-1 ...; the mean of their probabilities, the linear member's share 1)" \
  "eval of the folder"
"$dslide" predict --model s1 --input e.test.txt --top-k 5 --out s1.tsv --threads 1 >out_s1_pred.txt 2>&1
expect_rc $? 0 "predict of the folder of one network and its linear member"
expect_in out_s1_pred.txt "^predict: an ensemble of 1 model (s1/member-1 ...) and the linear member (its share 1)" \
  "predict of the folder"
agree s1.tsv e.test.txt out_s1.txt out_s1_eval.txt "test  ensemble of 1 and the linear member" ||
  fail "train, eval and predict of the folder of share 1 disagree"
"$dslide" predict --model s1 --input e.test.txt --top-k 5 --out s1_ann.tsv --approximate >out_s1_ann.txt 2>&1
expect_rc $? 1 "approximate predict of a network and its linear member"
expect_in out_s1_ann.txt "option --approximate: s1 holds a network and its linear member (s1/member-1, s1/linear); approximate scoring reads one model (--model s1/member-1)" \
  "approximate scoring names the linear member"
pass "a linear member of share 1: members 2-3 not trained; train, eval and predict agree ($alone)"
if [[ -n $mpiexec ]]; then
  "$mpiexec" "${mpiflags[@]}" -n 2 -x OMP_NUM_THREADS=1 "$dslide" "${run[@]:0:5}" --hidden 32 \
    "${one[@]}" --checkpoint-dir s2 >out_s2.txt 2>&1 || fail "a linear member of share 1 on 2 ranks"
  expect_in out_s2.txt "^ensemble members 2-3 not trained" "2 ranks leave the members out"
  [[ -e s2/member-2 ]] && fail "2 ranks trained member 2: $(ls s2)"
  on_one=$(grep "^test  ensemble of 1 and the linear member" out_s1.txt | cut -d'|' -f2,3)
  on_two=$(grep "^test  ensemble of 1 and the linear member" out_s2.txt | cut -d'|' -f2,3)
  [[ -n $on_one && $on_one == "$on_two" ]] || fail "2 ranks, share 1: '$on_two' against 1 rank's '$on_one'"
  pass "2 ranks leave the members out as 1 rank does ($on_one)"
fi
