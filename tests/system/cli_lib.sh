# Shared by the command-line fault scripts (reliability_cli.sh, reliability_round2.sh,
# reliability_round3.sh):
# sourced after `cd WORKDIR` with $dslide set. Checks that end the script on failure with
# the tail of every out*.txt, and the small generated task the scripts train on.
fail() { echo "FAIL: $*"; for f in out*.txt; do [[ -f $f ]] && { echo "--- $f"; tail -20 "$f"; }; done; exit 1; }
pass() { echo "ok: $*"; }
expect_rc() { [[ $1 == "$2" ]] || fail "$3: exit code $1, expected $2"; }
expect_in() { grep -q -- "$2" "$1" || fail "$3: '$2' not in $1"; }
expect_not_in() { ! grep -q -- "$2" "$1" || fail "$3: '$2' in $1"; }

# Waits until FILE has a progress line of iteration >= N (at most 120 s).
wait_iter() {
  for _ in $(seq 1200); do
    grep -qE "^iter ([0-9]+)/" "$1" 2>/dev/null &&
      (( $(grep -oE "^iter [0-9]+" "$1" | tail -1 | cut -d' ' -f2) >= $2 )) && return 0
    sleep 0.1
  done
  fail "no progress to iteration $2 in $1"
}

# syn.train.txt / syn.test.txt: 3,000 + 500 points, 2,000 features, 3,000 labels; `train`
# is the command line the scripts start from.
"$dslide" gen --points 3000 --test-points 500 --features 2000 --labels 3000 --nnz 20 --out syn >/dev/null ||
  fail "gen"
train=(train --train syn.train.txt --test syn.test.txt --threads 1)
