#!/usr/bin/env bash
# --lr-decay through the command line (docs/user-guide.md, "Learning-rate decay"): auto
# multiplies the rate by 0.5 where the output layer is sampled, validation data is given and
# an epoch is at most 300 batches, at exactly the evaluations that are not better than the
# best so far, more than --lr-decay-margin below it and --lr-decay-patience (2) or more
# evaluations after it (checked against every evaluation record), and never at the run's
# last evaluation; a dense output layer, a run without validation and epochs of more than 300
# batches keep the rate; the rate reached is kept in checkpoints and a resumed run steps at
# it; bad values and a decay without validation are refused. Under mpiexec -n 2 a dense run
# with an explicit --lr-decay decays where 1 rank's does, with the same evaluations.
# Usage: lr_decay_cli.sh DSLIDE WORKDIR [MPIEXEC MPIEXEC_FLAGS...]
set -uo pipefail
dslide=$1 work=$2
mpiexec=${3:-}
mpiflags=("${@:4}")
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
# shellcheck source=cli_lib.sh
source "$here/cli_lib.sh"  # fail, expect_*; syn.* (3,000 labels: a sampled output layer)

# A high rate, evaluated often, without early stopping: the validation P@1 wanders below its
# best, by one point (1/600) and by more, one evaluation after the best and later. Under the
# softmax: one-vs-rest (--loss auto's choice for these multi-label points) rises steadily
# here and would leave the rule nothing to act on.
run=("${train[@]}" --valid-fraction 0.2 --eval-every 10 --patience 0 --lr 0.01 --loss softmax)

# The rule, from the metrics: every "valid" evaluation record in order, the best so far (a
# tie of P@1 goes to the lower loss), and the lr_decay records. Prints the number of decays.
check_rule() {  # metrics margin factor lr patience
  python3 - "$@" <<'EOF'
import json, sys
path, margin, factor, lr = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
patience = int(sys.argv[5])
recs = [json.loads(l) for l in open(path)]
total = next(r["iterations"] for r in recs if r.get("event") == "start")
evals = [r for r in recs if r.get("set") == "valid" and "ensemble" not in r]
decays = {r["iter"]: r for r in recs if r.get("event") == "lr_decay"}
best, best_loss, rate, n, since = -1.0, 0.0, lr, 0, 0
for e in evals:
    p, loss, it = e["p_at_1"], e["eval_loss"], e["iter"]
    better = p > best or (p == best and loss < best_loss)
    since = 0 if better else since + 1
    expect = not better and since >= patience and best - p > margin + 1e-9 and it < total
    if better:
        best, best_loss = p, loss
    if expect != (it in decays):
        sys.exit(f"iteration {it}: P@1 {p}, best {best}: decay expected {expect}, "
                 f"recorded {it in decays}")
    if expect:
        rate *= factor
        n += 1
        d = decays[it]
        if abs(d["lr"] - rate) > 1e-9 * rate or abs(d["best_p_at_1"] - best) > 1e-6:
            sys.exit(f"iteration {it}: recorded {d}, expected lr {rate}, best {best}")
print(n)
EOF
}

# 1. auto on a sampled output layer: 0.5, said at the start and recorded.
"$dslide" "${run[@]}" --iterations 160 --lr-decay-margin 0.002 --metrics a.jsonl \
  --checkpoint-dir ck >out_auto.txt 2>&1
expect_rc $? 0 "auto"
expect_in out_auto.txt "the learning rate is multiplied by 0.5 at an evaluation more than 0.002 below the best P@1 and 2 or more after it (--lr-decay auto)" "auto said"
grep -q '"lr_decay":0.5,' a.jsonl || fail "auto: the start record's lr_decay is not 0.5"
n=$(check_rule a.jsonl 0.002 0.5 0.01 2) || fail "auto: $n"
((n >= 2)) || fail "auto: $n decays; the run should cover at least two"
expect_in out_auto.txt "^learning rate x0.5 at iteration [0-9]*, now 0.005: the validation P@1 0.[0-9]* is more than 0.002 below the best" "the decay's line"
pass "--lr-decay auto: $n decays, each where the rule says"

# 2. An explicit factor, margin 0 and patience 1 (at the first evaluation below the best).
"$dslide" "${run[@]}" --iterations 120 --lr-decay 0.25 --lr-decay-margin 0 \
  --lr-decay-patience 1 --metrics b.jsonl >out_b.txt 2>&1
expect_rc $? 0 "--lr-decay 0.25"
n=$(check_rule b.jsonl 0 0.25 0.01 1) || fail "--lr-decay 0.25: $n"
((n >= 2)) || fail "--lr-decay 0.25 --lr-decay-margin 0 --lr-decay-patience 1: $n decays"
pass "--lr-decay 0.25 --lr-decay-margin 0 --lr-decay-patience 1: $n decays"

# 3. The rate reached is in the checkpoint: a resumed run says it and steps at it.
rate=$(python3 -c 'import json,sys
d=[json.loads(l) for l in open("a.jsonl")]
print("%g" % [r for r in d if r.get("event") == "lr_decay"][-1]["lr"])')
"$dslide" "${run[@]}" --iterations 180 --lr-decay-margin 0.002 --resume ck --checkpoint-dir ck \
  >out_resume.txt 2>&1
expect_rc $? 0 "resume"
expect_in out_resume.txt "^resumed from ck/[^ ]* at iteration 160 .*; the learning rate is $rate (--lr x" "the resumed rate"
pass "resumed at the rate reached, $rate"

# 4. A dense output layer (auto: 1) and a run without validation keep the rate.
"$dslide" "${run[@]}" --iterations 120 --sparsity 1 --lr-decay-margin 0 --metrics c.jsonl \
  >out_dense.txt 2>&1
expect_rc $? 0 "dense"
grep -q '"lr_decay":1,' c.jsonl || fail "dense: the start record's lr_decay is not 1"
expect_not_in out_dense.txt "learning rate x" "dense: auto decayed"
expect_not_in out_dense.txt "multiplied by" "dense: auto said a decay"
"$dslide" train --train syn.train.txt --test syn.test.txt --threads 1 --iterations 20 \
  --metrics d.jsonl >out_noval.txt 2>&1
expect_rc $? 0 "no validation"
grep -q '"lr_decay":1,' d.jsonl || fail "no validation: the start record's lr_decay is not 1"
# An epoch of more than 300 batches (auto: 1; early stopping then ends a run within few
# epochs): 2,400 training points in batches of 7 are 343 an epoch, in batches of 8 300.
"$dslide" "${train[@]}" --valid-fraction 0.2 --batch 7 --iterations 20 --metrics e.jsonl \
  >out_long.txt 2>&1
expect_rc $? 0 "long epochs"
grep -q '"lr_decay":1,' e.jsonl || fail "343 batches an epoch: the start record's lr_decay is not 1"
"$dslide" "${train[@]}" --valid-fraction 0.2 --batch 8 --iterations 20 --metrics f.jsonl \
  >out_short.txt 2>&1
expect_rc $? 0 "300 batches an epoch"
grep -q '"lr_decay":0.5,' f.jsonl || fail "300 batches an epoch: the start record's lr_decay is not 0.5"
pass "a dense output layer, a run without validation and epochs of more than 300 batches keep the rate"

# 5. Refusals.
"$dslide" train --train syn.train.txt --test syn.test.txt --lr-decay 0.5 >out_r1.txt 2>&1
expect_rc $? 1 "--lr-decay without validation"
expect_in out_r1.txt "option --lr-decay acts on the validation P@1: give --valid FILE or --valid-fraction F" "--lr-decay without validation"
for bad in 0 1.5 -0.5 half; do
  "$dslide" "${run[@]}" --lr-decay "$bad" >out_r2.txt 2>&1
  expect_rc $? 1 "--lr-decay $bad"
  expect_in out_r2.txt "option --lr-decay: invalid value '$bad' (expected auto or a factor in (0, 1])" "--lr-decay $bad"
done
"$dslide" "${run[@]}" --lr-decay-margin 2 >out_r3.txt 2>&1
expect_rc $? 1 "--lr-decay-margin 2"
expect_in out_r3.txt "option --lr-decay-margin: must be in \[0, 1\], got 2" "--lr-decay-margin 2"
"$dslide" "${run[@]}" --lr-decay-patience 0 >out_r4.txt 2>&1
expect_rc $? 1 "--lr-decay-patience 0"
expect_in out_r4.txt "lr-decay-patience" "--lr-decay-patience 0"
pass "bad values refused"

# 6. P ranks: a dense run decays where 1 rank's does, with the same evaluations.
if [[ -n $mpiexec ]]; then
  # (The softmax of `run`, whose curve on these points has a decay to compare.)
  dense=("${run[@]}" --iterations 120 --sparsity 1 --lr-decay 0.5
    --lr-decay-margin 0.002)
  "$dslide" "${dense[@]}" >out_one.txt 2>&1
  expect_rc $? 0 "dense, 1 rank"
  "$mpiexec" "${mpiflags[@]}" "$dslide" "${dense[@]}" >out_two.txt 2>&1
  expect_rc $? 0 "dense, 2 ranks"
  strip() { grep -E '^(valid|test) +iter|^learning rate' "$1" | sed 's/points in [0-9.]*s//'; }
  strip out_one.txt | grep -q '^learning rate' || fail "dense, 1 rank: no decay to compare"
  diff <(strip out_one.txt) <(strip out_two.txt) >/dev/null ||
    fail "2 ranks differ from 1: $(diff <(strip out_one.txt) <(strip out_two.txt) | head -5)"
  pass "2 ranks decay where 1 rank does, with the same evaluations"
fi
echo "lr_decay_cli: all passed"
