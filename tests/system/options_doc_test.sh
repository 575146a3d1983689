#!/usr/bin/env bash
# docs/options.md is what launch/dev/options-doc.sh generates from this build's option table.
# Usage: options_doc_test.sh DSLIDE SOURCE_DIR WORKDIR
set -uo pipefail
dslide=$1 src=$2 work=$3
mkdir -p "$work"
bash "$src/launch/dev/options-doc.sh" "$dslide" "$work/options.md" 2>/dev/null || { echo "FAIL: options-doc.sh"; exit 1; }
if ! diff -u "$src/docs/options.md" "$work/options.md"; then
  echo "FAIL: docs/options.md differs from the option table: run launch/dev/options-doc.sh and commit it"
  exit 1
fi
grep -q -- "--label-order" "$src/docs/options.md" || { echo "FAIL: docs/options.md lacks --label-order"; exit 1; }
echo "ok: docs/options.md matches the option table ($(wc -l < "$src/docs/options.md") lines)"
