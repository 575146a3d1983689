#!/usr/bin/env bash
# Writes docs/options.md: every option of every dslide command, as `dslide COMMAND --help`
# prints it from the option table (src/config), so the page cannot drift from the parser.
# The `options_doc` test regenerates it and fails when the committed page differs.
#
#   launch/dev/options-doc.sh [DSLIDE [OUT]]     (defaults: build/dslide, docs/options.md)
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-build/dslide}
out=${2:-docs/options.md}
[[ -x $bin ]] || { echo "options-doc: build first (launch/setup/build.sh), or pass the binary" >&2; exit 2; }
commands=(train eval predict bench gen convert export)
{
  echo "# Options"
  echo
  echo "Every option of every command, as \`dslide COMMAND --help\` prints it: generated from the"
  echo "option table by \`launch/dev/options-doc.sh\` (the \`options_doc\` test checks that this page"
  echo "matches the parser). An INI file given with \`--config FILE\` takes the same keys without"
  echo "the dashes (\`lr = 0.001\`); keys under a \`[COMMAND]\` header apply to that command only,"
  echo "keys before any header to every command (a command's own header wins over them), and"
  echo "the command line wins over the file."
  echo
  for c in "${commands[@]}"; do echo "- [\`dslide $c\`](#dslide-$c)"; done
  for c in "${commands[@]}"; do
    echo
    echo "## dslide $c"
    echo
    echo '```text'
    "$bin" "$c" --help | sed 's/[[:space:]]*$//'
    echo '```'
  done
} > "$out.tmp"
mv "$out.tmp" "$out"
echo "options-doc: wrote $out ($(wc -l < "$out") lines)" >&2
