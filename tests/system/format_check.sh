#!/usr/bin/env bash
# The tree is formatted by its .clang-format: clang-format --dry-run --Werror over every C++
# and CUDA source of src/ and tests/. Skipped (77) without clang-format 14, whose output the
# tree follows (other versions format some constructs differently). launch/dev/lint.sh --fix
# formats the tree.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cf=${CLANG_FORMAT:-clang-format}
if ! command -v "$cf" >/dev/null; then
  echo "skipped: $cf is not installed (launch/setup/install-deps.sh --test installs it)"
  exit 77
fi
ver=$("$cf" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
if [[ $ver != 14 ]]; then
  echo "skipped: clang-format $ver; the tree is formatted with clang-format 14"
  exit 77
fi
cd "$root" || exit 1
mapfile -t files < <(find src tests \( -name '*.cpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)
((${#files[@]} > 50)) || { echo "FAIL: only ${#files[@]} sources found under $root"; exit 1; }
if ! "$cf" --dry-run --Werror "${files[@]}"; then
  echo "FAIL: the files above are not formatted by .clang-format (launch/dev/lint.sh --fix)"
  exit 1
fi
echo "ok: ${#files[@]} sources formatted by .clang-format (clang-format $ver)"
