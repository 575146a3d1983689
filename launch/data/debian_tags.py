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
import os
import sys

from debian_deps import (WORD, add_index_args, index_points, read_index, split_by_source,
                         write_points)


def tags(fields):
    out = []
    for tag in fields.get("Tag", "").replace("\n", " ").split(","):
        tag = tag.strip()
        if tag and not tag.startswith("special::"):
            out.append(tag)
    return sorted(set(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_index_args(ap)
    a = ap.parse_args()
    index = read_index(a, "debian_tags")

    points = index_points(index, tags,
                          lambda fields, text: collections.Counter(WORD.findall(text.lower())))
    train, test = split_by_source(points, a.test_frac, a.seed)

    st, top, avg_labels = write_points(a.out, train, test, a.min_df)
    labels = st["labels"]
    n_train, n_test, dropped = st["train"], st["test"], st["dropped"]
    pk_where, pk_sha, tr_where, tr_sha, release_date = (
        index[k] for k in ("pk_where", "pk_sha", "tr_where", "tr_sha", "release_date"))
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
