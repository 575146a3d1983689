#!/usr/bin/env python3
"""Builds a text-to-tags multi-label set from Debian's package index: predict a binary
package's debtags (Tag: `interface::commandline`, `use::editing`, ...) from the words of
its description, as raw counts, the shape of question-to-tags sets.

Reads the index of one suite and component (Packages and Translation-en, as apt fetches
them; from --mirror, or local files with --packages/--translations), keeps the packages
with at least one debtag (`special::*` markers, such as `special::not-yet-tagged`, are not
labels), and splits them by source package (--test-frac of the sources, drawn with --seed),
so that the binaries built from one source are never on both sides; each file's points are
in random order. Features: lower-case word tokens of the short and long description, as
counts; a feature is kept where at least --min-df training points have it. Labels are the
tags seen in training, numbered by descending training frequency; a test point keeps those,
and one left without any is dropped (counted in SOURCE.md).

Writes OUT/train.txt and OUT/test.txt (XC format, ids 0-based and ascending), and
OUT/feature_names.txt, OUT/label_names.txt (line i = id i) and OUT/SOURCE.md (where the
index came from, its Release date and SHA-256, the statistics).

Usage: debian_tags.py OUT [--mirror http://deb.debian.org/debian] [--suite bookworm]
                          [--component main] [--arch amd64] [--test-frac 0.2] [--seed 1]
                          [--min-df 2] [--packages FILE] [--translations FILE]
"""
import argparse
import collections
import hashlib
import lzma
import os
import random
import re
import sys

from debian_deps import WORD, fetch, paragraphs
from xc_sets import write_sets


def tags(fields):
    out = []
    for tag in fields.get("Tag", "").replace("\n", " ").split(","):
        tag = tag.strip()
        if tag and not tag.startswith("special::"):
            out.append(tag)
    return sorted(set(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--mirror", default="http://deb.debian.org/debian")
    ap.add_argument("--suite", default="bookworm")
    ap.add_argument("--component", default="main")
    ap.add_argument("--arch", default="amd64")
    ap.add_argument("--test-frac", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-df", type=int, default=2)
    ap.add_argument("--packages", help="a local Packages file (plain or .xz) instead of the mirror's")
    ap.add_argument("--translations", help="a local Translation-en file (plain or .xz)")
    a = ap.parse_args()

    base = f"{a.mirror}/dists/{a.suite}"

    def load(local, remote):
        if local:
            raw = open(local, "rb").read()
            where = local
        else:
            where = f"{base}/{remote}"
            print(f"debian_tags: fetching {where}", file=sys.stderr)
            raw = fetch(where)
        sha = hashlib.sha256(raw).hexdigest()
        if raw[:6] == b"\xfd7zXZ\x00":
            raw = lzma.decompress(raw)
        return raw.decode("utf-8", "replace"), where, sha

    release_date = "unknown (local files)"
    if not a.packages:
        rel = fetch(f"{base}/Release").decode("utf-8", "replace")
        m = re.search(r"^Date: (.*)$", rel, re.M)
        release_date = m.group(1) if m else "unknown"
    pk_text, pk_where, pk_sha = load(a.packages, f"{a.component}/binary-{a.arch}/Packages.xz")
    tr_text, tr_where, tr_sha = load(a.translations, f"{a.component}/i18n/Translation-en.xz")

    long_desc = {}
    for f in paragraphs(tr_text):
        if "Package" in f and "Description-en" in f:
            long_desc[(f["Package"], f.get("Description-md5", ""))] = f["Description-en"]

    points = []  # (source, name, words, tags)
    for f in paragraphs(pk_text):
        if "Package" not in f:
            continue
        labels = tags(f)
        if not labels:
            continue
        desc = long_desc.get((f["Package"], f.get("Description-md5", "")), f.get("Description", ""))
        words = collections.Counter(WORD.findall(desc.lower()))
        source = f.get("Source", f["Package"]).split(" ")[0]
        points.append((source, f["Package"], words, labels))
    points.sort(key=lambda p: p[1])
    sources = sorted({p[0] for p in points})
    rng = random.Random(a.seed)
    rng.shuffle(sources)
    test_sources = set(sources[: int(round(a.test_frac * len(sources)))])
    train = [p for p in points if p[0] not in test_sources]
    test = [p for p in points if p[0] in test_sources]
    rng.shuffle(train)
    rng.shuffle(test)

    st = write_sets(a.out, [(p[2], p[3]) for p in train], [(p[2], p[3]) for p in test],
                    a.min_df)
    labels, label_count = st["labels"], st["count"]
    n_train, n_test, dropped = st["train"], st["test"], st["dropped"]
    with open(os.path.join(a.out, "label_names.txt"), "w") as out:
        out.write("\n".join(labels) + "\n")

    top = label_count[labels[0]] / len(train)
    avg_labels = sum(len(p[3]) for p in train) / len(train)
    with open(os.path.join(a.out, "SOURCE.md"), "w") as out:
        out.write(f"""# debian-tags

Predict a Debian binary package's debtags (each tag a label; `special::*` markers left
out) from the words of its description, as counts. Built by `launch/data/debian_tags.py`
(see its help for every rule).

- Index: {pk_where} (SHA-256 {pk_sha}) and {tr_where} (SHA-256 {tr_sha}); Release date
  {release_date}; architecture {a.arch}.
- Split by source package, {a.test_frac} of the sources to test (seed {a.seed}); features
  kept where at least {a.min_df} training points have them.
- {n_train} training points, {n_test} test points ({dropped} test points whose tags were
  all unseen in training dropped), {st['features']} features, {len(labels)} labels,
  {avg_labels:.2f} labels per training point.
- Labels are numbered by descending training frequency; the most popular,
  `{labels[0]}`, is in {top:.3f} of the training points.
- Licence: the package index is published by the Debian project; descriptions are those of
  the packages' maintainers, under the packages' own licences; the tags are the Debtags
  project's.
""")
    print(f"debian_tags: {n_train} train, {n_test} test ({dropped} dropped), "
          f"{st['features']} features, {len(labels)} labels -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
