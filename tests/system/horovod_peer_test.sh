#!/usr/bin/env bash
# launch/peers/horovod_peer.py (the Horovod peer of launch/bench/scaling) in one process without Horovod:
# 3 steps on a tiny generated dataset; the JSON line must carry a finite loss and s/iter.
# Usage: horovod_peer_test.sh DSLIDE WORKDIR. Exits 77 (skipped) when no python here can
# import PyTorch: it tries the Horovod venv of launch/setup/setup-horovod.sh
# (DSLIDE_HOROVOD_VENV, default ~/.cache/dslide/horovod-venv), then /usr/bin/python3.
set -uo pipefail
dslide=$1 work=$2
here=$(cd "$(dirname "$0")/../.." && pwd)
venv=${DSLIDE_HOROVOD_VENV:-$HOME/.cache/dslide/horovod-venv}
py=
for cand in "$venv/bin/python" /usr/bin/python3; do
  if [[ -x $cand ]] && "$cand" -c 'import torch' 2>/dev/null; then py=$cand; break; fi
done
if [[ -z $py ]]; then
  echo "skipped: PyTorch is not importable by $venv/bin/python or /usr/bin/python3" \
       "(launch/setup/setup-horovod.sh installs it)"
  exit 77
fi
fail() { echo "FAIL: $*"; [[ -f $work/out.txt ]] && tail -20 "$work/out.txt"; exit 1; }
rm -rf "$work" && mkdir -p "$work" || exit 1
"$dslide" gen --points 600 --test-points 100 --features 300 --labels 40 --nnz 10 \
  --out "$work/syn" >/dev/null || fail "dslide gen"
"$py" "$here/launch/peers/horovod_peer.py" "$work/syn.train.txt" "$work/syn.test.txt" --no-horovod \
  --iterations 3 --batch 64 --eval-points 50 > "$work/out.txt" 2>&1 || fail "horovod_peer.py exited $?"
json=$(grep '^{' "$work/out.txt" | tail -1)
[[ -n $json ]] || fail "no JSON line"
"$py" - "$json" <<'PY' || fail "bad JSON: $json"
import json, math, sys
r = json.loads(sys.argv[1])
assert r["iterations"] == 3 and r["ranks"] == 1, r
for k in ("loss_first", "loss_last", "s_per_iter_median", "s_per_iter_mean", "samples_per_s", "peak_rss_mb"):
    assert isinstance(r[k], (int, float)) and math.isfinite(r[k]), (k, r.get(k))
assert r["s_per_iter_median"] > 0 and r["loss_last"] > 0, r
assert r["p_at_1_by_iter"] and r["p_at_1_by_iter"][-1][0] == 3, r["p_at_1_by_iter"]
assert 0 <= r["p_at_1"] <= 1, r["p_at_1"]
PY
# --time-limit stops the loop on the clock, evaluates there and reports the steps it ran.
"$py" "$here/launch/peers/horovod_peer.py" "$work/syn.train.txt" "$work/syn.test.txt" --no-horovod \
  --iterations 100000 --time-limit 0.3 --eval-every 50 --batch 64 --eval-points 50 \
  > "$work/limit.txt" 2>&1 || fail "horovod_peer.py --time-limit exited $?"
"$py" - "$(grep '^{' "$work/limit.txt" | tail -1)" <<'PY' || fail "bad --time-limit run: $(tail -3 "$work/limit.txt")"
import json, sys
r = json.loads(sys.argv[1])
n, curve = r["iterations"], r["p_at_1_by_iter"]
assert 1 <= n < 100000 and len(r["s_by_iter"]) == n, (n, len(r["s_by_iter"]))
assert curve[-1][0] == n and curve[-1][2] >= 0.3, curve[-1]
assert all(c[0] % 50 == 0 for c in curve[:-1]), curve
PY
echo "ok: horovod_peer.py --no-horovod with $py ($(sed 's/.*"torch":"\([^"]*\)".*/torch \1/' <<< "$json"))"
