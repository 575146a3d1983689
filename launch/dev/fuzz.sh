#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build-fuzz/ and runs each for a bounded time
# (FUZZ_SECONDS, default 60) from the seed corpus in tests/fuzz/corpus/. A crash, leak or
# sanitizer report fails the run and leaves the input under build-fuzz/findings/: turn it
# into a regression test (tests/fuzz/regressions/ are replayed on every run).
set -euo pipefail
cd "$(dirname "$0")/../.."
seconds=${FUZZ_SECONDS:-60}
if ! command -v clang++ >/dev/null; then
  echo "fuzz: installing clang and libomp-dev" >&2
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends clang libomp-dev >/dev/null
fi
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDSLIDE_FUZZ=ON \
  -DDSLIDE_BUILD_TESTS=OFF -DDSLIDE_CUDA=OFF -DDSLIDE_NATIVE=OFF >/dev/null
cmake --build build-fuzz -j "$(nproc)" --target fuzz_xc_reader fuzz_checkpoint
mkdir -p build-fuzz/findings
for target in xc_reader checkpoint; do
  corpus=build-fuzz/corpus-$target
  mkdir -p "$corpus"
  cp -n tests/fuzz/corpus/${target%_reader}/* "$corpus"/ 2>/dev/null || true
  regressions=(tests/fuzz/regressions/$target/*)
  if [[ -e ${regressions[0]} ]]; then
    echo "== fuzz_$target: replaying ${#regressions[@]} regression input(s)"
    "build-fuzz/fuzz_$target" "${regressions[@]}"
  fi
  echo "== fuzz_$target: ${seconds}s"
  "build-fuzz/fuzz_$target" -max_total_time="$seconds" -max_len=65536 -timeout=10 \
    -rss_limit_mb=4096 -artifact_prefix=build-fuzz/findings/$target- -print_final_stats=1 "$corpus" 2>&1 |
    grep -E "^#[0-9]+ *DONE|stat::number_of_executed_units|ERROR|SUMMARY|Test unit written" || true
  if ls build-fuzz/findings/$target-* >/dev/null 2>&1; then
    echo "fuzz: fuzz_$target found a failing input: $(ls build-fuzz/findings/$target-*)" >&2
    exit 1
  fi
done
echo "fuzz: no findings"
