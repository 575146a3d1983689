#!/usr/bin/env bash
# Format and static checks. `launch/dev/lint.sh` checks: the tree is formatted by .clang-format
# (clang-format 14) and clang-tidy finds nothing of .clang-tidy's checks in src/ (C++ files
# of the compile database in build/; CUDA files are checked through their host executor).
# `launch/dev/lint.sh --fix` formats the tree in place first.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [[ ${1:-} == --fix ]]; then
  find src tests \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) -print0 |
    xargs -0 clang-format -i
fi
bash tests/system/format_check.sh
[[ -f build/compile_commands.json ]] || { echo "lint: build first (launch/setup/build.sh)" >&2; exit 2; }
mapfile -t tus < <(sed -n 's/.*"file": "\(.*\/src\/.*\.cpp\)".*/\1/p' build/compile_commands.json | sort -u)
echo "clang-tidy: ${#tus[@]} translation units" >&2
printf '%s\n' "${tus[@]}" | xargs -P "$(nproc)" -n 1 clang-tidy -p build --quiet
echo "ok: clang-tidy found nothing"
