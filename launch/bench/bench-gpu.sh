#!/usr/bin/env bash
# dslide's GPU backend against PyTorch on the same GPU (launch/peers/torch_peer.py: dense fp32,
# dense TF32 with fused Adam, sampled softmax with the batch's labels plus shared uniform
# negatives) and against dslide's CPU backend on all cores: the same data, network,
# iterations and exact P@1 evaluation for every engine. Data sets: the Amazon-670K shape
# (generated), gcide8-skipgram and delicious (from DATA, where present) and a 10^7-label
# shape (generated). Prints every engine's JSON line, then one table per data set: ms per
# iteration, the GPU backend's traffic per step (bytes each way, host waits, launches), P@1
# after the iterations, and P@1 against training time.
# Usage: launch/bench/bench-gpu.sh [SET...]   (after a build with -DDSLIDE_CUDA=ON; SET: amazon,
#        gcide8, delicious, wide10m; all by default)
# Environment: ITERS (1500), EVAL_EVERY (ITERS/5), POINTS (100000, generated sets),
#   THREADS (all cores), DATA (../shared/data beside the repository), OUT (a temporary
#   folder), DEVICE (cuda; cpu runs the peers on the CPU, for a dry run), ENGINES (all:
#   dslide-gpu dslide-cpu dense dense-tf32 sampled), DSLIDE_BIN (build/dslide), PYTHON (a
#   python3 with PyTorch; python3).
set -uo pipefail
cd "$(dirname "$0")/../.."
bin=${DSLIDE_BIN:-build/dslide}
[[ -x $bin ]] || { echo "bench-gpu: build first (launch/setup/build.sh -DDSLIDE_CUDA=ON)" >&2; exit 2; }
iters=${ITERS:-1500} eval_every=${EVAL_EVERY:-$(( ${ITERS:-1500} / 5 ))}
points=${POINTS:-100000} threads=${THREADS:-$(nproc)} device=${DEVICE:-cuda} py=${PYTHON:-python3}
data=${DATA:-$(cd .. && pwd)/shared/data}
engines=${ENGINES:-dslide-gpu dslide-cpu dense dense-tf32 sampled}
# The GPU engine needs a binary with the GPU backend: say so rather than run the CPU's alone.
if [[ " $engines " == *" dslide-gpu "* ]] && ! "$bin" --version | grep -q '^backends:.* gpu'; then
  echo "bench-gpu: $bin has no GPU backend ($("$bin" --version | tail -1)): build it with" \
       "launch/setup/build.sh -DDSLIDE_CUDA=ON" >&2
  exit 2
fi
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
sets=("$@")
((${#sets[@]})) || sets=(amazon gcide8 delicious wide10m)
torch_ok=0
"$py" -c "import torch, sys; sys.exit(0 if '$device' == 'cpu' or torch.cuda.is_available() else 1)" \
  2>/dev/null && torch_ok=1
((torch_ok)) || echo "bench-gpu: no PyTorch for device '$device': the PyTorch peers are skipped" >&2

# The files of a set: "TRAIN TEST", generated where needed; empty when absent.
files() {
  case $1 in
    amazon)
      [[ -f $out/amazon.train.txt ]] ||
        "$bin" gen --shape amazon-670k --points "$points" --out "$out/amazon" >/dev/null || return
      echo "$out/amazon.train.txt $out/amazon.test.txt" ;;
    wide10m)
      [[ -f $out/wide10m.train.txt ]] ||
        "$bin" gen --shape amazon-670k --labels 10000000 --points "$points" \
          --out "$out/wide10m" >/dev/null || return
      echo "$out/wide10m.train.txt $out/wide10m.test.txt" ;;
    gcide8) [[ -f $data/gcide8-skipgram/train.txt ]] &&
      echo "$data/gcide8-skipgram/train.txt $data/gcide8-skipgram/test.txt" ;;
    delicious) [[ -f $data/delicious/train.txt ]] &&
      echo "$data/delicious/train.txt $data/delicious/test.txt" ;;
    *) echo "bench-gpu: unknown set $1" >&2; return 1 ;;
  esac
}

for set in "${sets[@]}"; do
  read -r train test < <(files "$set") || true
  if [[ -z ${train:-} ]]; then
    echo "bench-gpu: $set: no data (looked in $data), skipped" >&2
    continue
  fi
  echo "== $set: $train"
  for e in $engines; do
    log="$out/$set.$e.txt"
    case $e in
      dslide-gpu | dslide-cpu)
        dev=${e#dslide-}
        "$bin" bench --train "$train" --test "$test" --iterations "$iters" \
          --eval-every "$eval_every" --eval-points 1000 --device "$dev" --threads "$threads" \
          >"$log" 2>&1 ;;
      dense | dense-tf32 | sampled)
        ((torch_ok)) || continue
        "$py" launch/peers/torch_peer.py "$train" "$test" --mode "$e" --iterations "$iters" \
          --eval-every "$eval_every" --eval-points 1000 --device "$device" >"$log" 2>&1 ;;
      *) echo "bench-gpu: unknown engine $e" >&2; continue ;;
    esac
    rc=$?
    ((rc == 0)) || echo "bench-gpu: $set, $e failed (exit $rc; $log)" >&2
    grep '^{' "$log" | tail -1
  done
done

python3 - "$out" "$iters" "$engines" "${sets[@]}" <<'EOF'
import json, os, sys
out, iters, engines, sets = sys.argv[1], sys.argv[2], sys.argv[3].split(), sys.argv[4:]
def last_json(path):
    try:
        lines = [l for l in open(path) if l.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except OSError:
        return None
for s in sets:
    rows = [(e, last_json(os.path.join(out, f"{s}.{e}.txt"))) for e in engines]
    if not any(r for _, r in rows):
        continue
    print(f"\n{s}: {iters} iterations")
    print("| engine | ms/iter (median) | h2d B/iter | d2h B/iter | syncs/iter | launches/iter "
          "| P@1 | P@1 by training seconds |")
    print("|---|---|---|---|---|---|---|---|")
    gpu = next((r for e, r in rows if e == "dslide-gpu" and r), None)
    for e, r in rows:
        if r is None:
            print(f"| {e} | failed or not run | | | | | | |")
            continue
        g = lambda k: f"{r[k]:.0f}" if isinstance(r.get(k), (int, float)) else "-"
        if r.get("device") == "gpu":  # dslide's device traffic
            traffic = [g("h2d_bytes_per_iter"), g("d2h_bytes_per_iter"),
                       f"{r['syncs_per_iter']:.2f}", g("launches_per_iter")]
        else:
            traffic = ["-"] * 4
        # [iteration, P@1, wall seconds, ...]: the peers add their CPU seconds
        curve = " ".join(f"{c[1]:.3f}@{c[2]:.1f}s" for c in r.get("p_at_1_by_iter", []))
        print("| " + " | ".join([e, f"{r['ms_per_iter']:.2f}", *traffic, f"{r['p_at_1']:.4f}",
                                 curve]) + " |")
    if gpu:
        for e, r in rows:
            if r and e != "dslide-gpu":
                print(f"dslide-gpu vs {e}: {r['ms_per_iter'] / gpu['ms_per_iter']:.1f}x per step")
EOF
echo "bench-gpu: logs in $out"
