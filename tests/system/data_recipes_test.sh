#!/usr/bin/env bash
# The dataset recipes of launch/data on small local copies of their sources (no network):
# debian_deps.py and debian_tags.py on a Packages and a Translation-en file,
# wordnet_hypernyms.py on a data.noun.
# Each writes XC files whose headers match their lines, numbers labels by training frequency,
# keeps only features of at least --min-df training points, splits debian-deps by source
# package, and dslide reads what they wrote.
set -euo pipefail
dslide=${1:?usage: data_recipes_test.sh DSLIDE}
here=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "data_recipes: $*" >&2; exit 1; }

# --- debian-deps: two sources with two binaries each, and a package without dependencies
# (left out). The debtags serve debian-tags below.
cat >"$work/Packages" <<'P'
Package: liba1
Source: liba
Depends: libc6 (>= 2.34), libfoo | libbar
Section: libs
Tag: role::shared-lib, devel::library
Description: library A runtime
Description-md5: aaa

Package: liba-dev
Source: liba
Depends: liba1 (= 1.0), libc6-dev, libc6:any
Section: libdevel
Tag: devel::library,
 role::devel-lib
Description: library A development files
Description-md5: bbb

Package: toolb
Depends: libc6, liba1
Section: utils
Tag: special::not-yet-tagged
Description: a tool built on library A
Description-md5: ccc

Package: toolb-doc
Source: toolb
Depends: libc6
Section: doc
Tag: role::documentation
Description: the tool's documentation
Description-md5: ddd

Package: nodeps
Section: misc
Description: a package without dependencies
Description-md5: eee
P
cat >"$work/Translation-en" <<'T'
Package: liba1
Description-md5: aaa
Description-en: library A runtime
 Library A does things, library things.

Package: toolb
Description-md5: ccc
Description-en: a tool built on library A
 The tool uses library A for things.
T
python3 "$here/launch/data/debian_deps.py" "$work/deb" --packages "$work/Packages" \
  --translations "$work/Translation-en" --test-frac 0.5 --seed 3 --min-df 1 2>/dev/null
read -r n d c <"$work/deb/train.txt"
read -r nt dt ct <"$work/deb/test.txt"
[[ $d == "$dt" && $c == "$ct" ]] || fail "debian-deps: the files' dimensions differ"
(( n + nt == 4 )) || fail "debian-deps: $n + $nt points, 4 packages have dependencies"
(( $(wc -l <"$work/deb/feature_names.txt") == d )) || fail "debian-deps: feature names"
(( $(wc -l <"$work/deb/label_names.txt") == c )) || fail "debian-deps: label names"
# One source per side, its binaries together: the training features (names split at - . +)
# are those of one source's two binaries alone.
has() { grep -qx "$1" "$work/deb/feature_names.txt"; }
if has n:toolb; then
  has n:doc && ! has n:liba1 && ! has n:dev || fail "debian-deps: toolb's binaries split"
else
  has n:liba1 && has n:dev && ! has n:doc || fail "debian-deps: liba's binaries split"
fi
(( n == 2 && nt == 2 )) || fail "debian-deps: $n training and $nt test points, 2 and 2 expected"
# The most frequent training label is label 0; libc6:any is libc6; alternatives are labels.
first=$(head -1 "$work/deb/label_names.txt")
[[ $first == libc6 || $first == liba1 ]] || fail "debian-deps: label 0 is $first"
grep -qx libc6 "$work/deb/label_names.txt" || fail "debian-deps: no libc6 label"
! grep -q ':any' "$work/deb/label_names.txt" || fail "debian-deps: an architecture qualifier kept"
grep -q '^s:' "$work/deb/feature_names.txt" && grep -q '^n:' "$work/deb/feature_names.txt" ||
  fail "debian-deps: no section or name features"
"$dslide" convert --in "$work/deb/train.txt" --out "$work/deb/train.dsb" >/dev/null ||
  fail "debian-deps: dslide does not read the training file"

# --- debian-tags on the same index: the packages with a debtag (liba1's two; toolb's with
# a special:: marker alone, left out; toolb-doc's one; nodeps has none), split by source
# package.
python3 "$here/launch/data/debian_tags.py" "$work/tags" --packages "$work/Packages" \
  --translations "$work/Translation-en" --test-frac 0 --min-df 1 2>/dev/null
read -r n d c <"$work/tags/train.txt"
(( n == 3 )) || fail "debian-tags: $n points, 3 packages have a debtag"
! grep -q '^special::' "$work/tags/label_names.txt" || fail "debian-tags: a special:: marker kept"
(( c == 4 )) || fail "debian-tags: $c labels, expected 4"
[[ $(head -1 "$work/tags/label_names.txt") == devel::library ]] ||
  fail "debian-tags: label 0 is not the most frequent tag, devel::library"
# The words of liba1's description (short and long), as counts: "library" three times.
lib=$(grep -nx library "$work/tags/feature_names.txt" | cut -d: -f1)
[[ -n $lib ]] && grep -q " $((lib - 1)):3\( \|$\)" "$work/tags/train.txt" ||
  fail "debian-tags: liba1's description words are not counted"
python3 "$here/launch/data/debian_tags.py" "$work/tags2" --packages "$work/Packages" \
  --translations "$work/Translation-en" --test-frac 0.5 --seed 3 --min-df 1 2>/dev/null
# One source per side: the training features are the words of one source's binaries alone.
tag_has() { grep -qx "$1" "$work/tags2/feature_names.txt"; }
if tag_has runtime; then
  tag_has development && ! tag_has documentation || fail "debian-tags: liba's binaries split"
else
  tag_has documentation && ! tag_has development || fail "debian-tags: toolb's binaries split"
fi
"$dslide" convert --in "$work/tags/train.txt" --out "$work/tags/train.dsb" >/dev/null ||
  fail "debian-tags: dslide does not read the training file"

# --- wordnet-hypernyms: entity (no hypernym: left out), two children, a grandchild, an
# instance.
mkdir -p "$work/wn"
cat >"$work/wn/data.noun" <<'N'
  1 This software and database is being provided to you, the LICENSEE, by
  2 Princeton University under the following license.
00001740 03 n 01 entity 0 002 ~ 00001930 n 0000 ~ 00002137 n 0000 | that which is perceived or known
00001930 03 n 01 physical_entity 0 002 @ 00001740 n 0000 ~ 00002452 n 0000 | an entity that has physical existence
00002137 03 n 02 abstraction 0 abstract_entity 0 001 @ 00001740 n 0000 | a general concept formed by extracting common features
00002452 03 n 01 thing 0 001 @ 00001930 n 0000 | a separate and self-contained entity
00002600 03 n 01 Rock-of-Ages 0 001 @i 00002452 n 0000 | a thing of legend; "the rock stood"
N
python3 "$here/launch/data/wordnet_hypernyms.py" "$work/wno" --wordnet-dir "$work/wn" \
  --test-frac 0 --min-df 1 2>/dev/null
read -r n d c <"$work/wno/train.txt"
(( n == 4 )) || fail "wordnet-hypernyms: $n points, 4 synsets have hypernyms"
# Labels: entity (3 points: two children and the grandchild), physical_entity (2), thing (1).
(( c == 3 )) || fail "wordnet-hypernyms: $c labels, expected 3"
head -1 "$work/wno/label_names.txt" | grep -q '^00001740 entity$' ||
  fail "wordnet-hypernyms: label 0 is not entity: $(head -1 "$work/wno/label_names.txt")"
grep -q '^l:rock$' "$work/wno/feature_names.txt" && grep -q '^g:legend$' "$work/wno/feature_names.txt" ||
  fail "wordnet-hypernyms: lemma or gloss features missing"
grep -q '^0,1,2 \|^1,2 \|^0,1 ' "$work/wno/train.txt" ||
  fail "wordnet-hypernyms: no point with a parent and a grandparent"
"$dslide" convert --in "$work/wno/train.txt" --out "$work/wno/train.dsb" >/dev/null ||
  fail "wordnet-hypernyms: dslide does not read the training file"
echo "data_recipes: ok"
