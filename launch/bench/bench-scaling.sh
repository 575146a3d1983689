#!/usr/bin/env bash
# Distributed SLIDE on P = 1, 2, 4 ranks, Amazon-670K shape: ranks on one host ("unshaped":
# shared memory and loopback) and on simulated nodes joined by a shaped link (netns-cluster,
# needs root). Prints a Markdown table per link: ms per iteration, bytes sent per rank per
# iteration, communication time, peak RSS and model state per rank, P@1; and how many times
# fewer bytes than the all-reduce of a Horovod-style step (4 bytes per parameter).
# Usage: launch/bench/bench-scaling.sh [extra dslide bench options]
# Environment: RANKS ("1 2 4"), LINKS ("unshaped 1gbit"; any netns-cluster --rate),
#   ITERS (100), SHAPE (amazon-670k), OUT (folder for the raw JSON; default a temp folder).
# On one machine the ranks share its cores (threads per rank = cores / P), so ms per
# iteration shows the protocol's cost, not a P-node speed-up.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=build/dslide
[[ -x $bin ]] || { echo "bench-scaling: build first (launch/setup/build.sh)" >&2; exit 2; }
ranks=${RANKS:-1 2 4} links=${LINKS:-unshaped 1gbit} iters=${ITERS:-100} shape=${SHAPE:-amazon-670k}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
args=(bench --shape "$shape" --iterations "$iters" --eval-every 0 --eval-points 500
      --log-every "$iters" "$@")
field() { sed -n "s/.*\"$2\":\([-0-9.e+]*\).*/\1/p" "$1" | tail -1; }
for link in $links; do
  for p in $ranks; do
    f=$out/$link-p$p.json
    echo "== $link, $p rank(s)" >&2
    if [[ $link == unshaped ]]; then
      OMP_NUM_THREADS= launch/run/mpirun.sh -np "$p" "$bin" "${args[@]}" | tee /dev/stderr | grep '^{' > "$f"
    else
      if ! launch/run/netns-run.sh "$p" "$link" "$bin" "${args[@]}" | tee /dev/stderr | grep '^{' > "$f"; then
        echo "bench-scaling: the $link runs need netns-cluster and root; skipped" >&2
        rm -f "$f"
        break
      fi
    fi
  done
done
for link in $links; do
  ls "$out/$link"-p*.json >/dev/null 2>&1 || continue
  echo
  echo "### $shape, link: $link ($iters iterations, batch 256)"
  echo
  echo "| ranks | ms/iter (median) | ms/iter (mean) | bytes sent/rank/iter | comm ms/iter | peak RSS/rank (MB) | model state/rank (MB) | P@1 | dense all-reduce / bytes sent |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for p in $ranks; do
    f=$out/$link-p$p.json
    [[ -s $f ]] || continue
    awk -v p="$p" -v med="$(field "$f" ms_per_iter)" -v mean="$(field "$f" ms_per_iter_mean)" \
        -v b="$(field "$f" bytes_sent_per_iter)" -v c="$(field "$f" comm_ms_per_iter)" \
        -v rss="$(field "$f" peak_rss_mb)" -v st="$(field "$f" state_mb)" \
        -v p1="$(field "$f" p_at_1)" -v d="$(field "$f" dense_allreduce_bytes)" 'BEGIN {
      ratio = b > 0 ? sprintf("%.0fx", d / b) : "-"
      printf "| %d | %.1f | %.1f | %.2f MB | %.1f | %.0f | %.0f | %.4f | %s |\n", p, med, mean, b / 1e6, c, rss, st, p1, ratio
    }'
  done
done
echo
echo "raw JSON: $out" >&2
