#!/usr/bin/env python3
"""Builds a long-tailed extreme-classification set from Debian's package index: predict a
binary package's dependencies from the words of its name, section, debtags and description.

Reads the index of one suite and component (Packages and Translation-en, as apt fetches
them; from --mirror, or local files with --packages/--translations), keeps the packages
with at least one dependency (Depends and Pre-Depends; each alternative of `a | b` is a
label, versions and architecture qualifiers dropped), and splits them by source package
(--test-frac of the sources, drawn with --seed), so that the binaries built from one source
(libfoo1, libfoo-dev, ...) are never on both sides; each file's points are in random order.
Features: lower-case word tokens of the short and long description (`w:`), the name split
at - . + (`n:`), the section (`s:`) and each debtag (`t:`), as counts; a feature is kept
where at least --min-df training points have it. Labels are the dependencies seen in
training, numbered by descending training frequency; a test point keeps those, and one left
without any is dropped (counted in SOURCE.md).

Writes OUT/train.txt and OUT/test.txt (XC format, ids 0-based and ascending), and
OUT/feature_names.txt, OUT/label_names.txt (line i = id i) and OUT/SOURCE.md (where the
index came from, its Release date and SHA-256, the statistics).

Usage: debian_deps.py OUT [--mirror http://deb.debian.org/debian] [--suite bookworm]
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
import urllib.request

from xc_sets import write_sets

WORD = re.compile(r"[a-z0-9][a-z0-9+]*")


def fetch(url):
    with urllib.request.urlopen(url, timeout=120) as r:
        return r.read()


def paragraphs(text):
    """Deb822 paragraphs as dicts (continuation lines joined with newlines)."""
    for block in text.split("\n\n"):
        fields, key = {}, None
        for line in block.split("\n"):
            if not line:
                continue
            if line[0] in " \t" and key is not None:
                fields[key] += "\n" + line[1:]
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if fields:
            yield fields


def dependencies(fields):
    out = []
    for key in ("Pre-Depends", "Depends"):
        for clause in fields.get(key, "").replace("\n", " ").split(","):
            for alt in clause.split("|"):
                name = alt.strip().split(" ")[0].split("(")[0].split(":")[0].strip()
                if name:
                    out.append(name)
    return sorted(set(out))


def tokens(fields, description):
    toks = collections.Counter()
    name = fields["Package"]
    for t in re.split(r"[-.+]", name):
        if t:
            toks["n:" + t] += 1
    toks["s:" + fields.get("Section", "none")] += 1
    for tag in fields.get("Tag", "").replace("\n", " ").split(","):
        if tag.strip():
            toks["t:" + tag.strip()] += 1
    for w in WORD.findall(description.lower()):
        toks["w:" + w] += 1
    return toks


def add_index_args(ap):
    """The options of a recipe that reads Debian's package index (this one and debian_tags.py)."""
    ap.add_argument("out")
    ap.add_argument("--mirror", default="http://deb.debian.org/debian")
    ap.add_argument("--suite", default="bookworm")
    ap.add_argument("--component", default="main")
    ap.add_argument("--arch", default="amd64")
    ap.add_argument("--test-frac", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-df", type=int, default=2)
    ap.add_argument("--packages",
                    help="a local Packages file (plain or .xz) instead of the mirror's")
    ap.add_argument("--translations", help="a local Translation-en file (plain or .xz)")


def read_index(a, tool):
    """The index that add_index_args' options `a` name: a dict of the Packages text
    (`packages`), the long descriptions by (package, Description-md5) (`long_desc`), where
    each file came from and its SHA-256 (`pk_where`, `pk_sha`, `tr_where`, `tr_sha`) and the
    suite's Release date (`release_date`). `tool` names the recipe in progress messages."""
    base = f"{a.mirror}/dists/{a.suite}"

    def load(local, remote):
        if local:
            raw = open(local, "rb").read()
            where = local
        else:
            where = f"{base}/{remote}"
            print(f"{tool}: fetching {where}", file=sys.stderr)
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
    return {"packages": pk_text, "long_desc": long_desc, "pk_where": pk_where, "pk_sha": pk_sha,
            "tr_where": tr_where, "tr_sha": tr_sha, "release_date": release_date}


def description(fields, long_desc):
    """A package's long description (its short one where the index has none)."""
    return long_desc.get((fields["Package"], fields.get("Description-md5", "")),
                         fields.get("Description", ""))


def index_points(index, labels_of, features_of):
    """(source package, name, features, labels) of every package of read_index's `index`
    that labels_of(fields) gives a label; features_of(fields, description) its features."""
    points = []
    for f in paragraphs(index["packages"]):
        if "Package" not in f:
            continue
        labels = labels_of(f)
        if not labels:
            continue
        source = f.get("Source", f["Package"]).split(" ")[0]
        points.append((source, f["Package"], features_of(f, description(f, index["long_desc"])),
                       labels))
    return points


def split_by_source(points, test_frac, seed):
    """Points (source, name, ...) split by source package: test_frac of the sources, drawn
    with `seed`, to test; each side in random order."""
    points.sort(key=lambda p: p[1])
    sources = sorted({p[0] for p in points})
    rng = random.Random(seed)
    rng.shuffle(sources)
    test_sources = set(sources[: int(round(test_frac * len(sources)))])
    train = [p for p in points if p[0] not in test_sources]
    test = [p for p in points if p[0] in test_sources]
    rng.shuffle(train)  # the files' order carries no alphabet: --eval-points takes a sample
    rng.shuffle(test)
    return train, test


def write_points(out, train, test, min_df):
    """write_sets of split_by_source's points (source, name, features, labels), and
    OUT/label_names.txt. Returns write_sets' dict, the most popular label's share of the
    training points and the mean labels per training point."""
    st = write_sets(out, [(p[2], p[3]) for p in train], [(p[2], p[3]) for p in test], min_df)
    with open(os.path.join(out, "label_names.txt"), "w") as f:
        f.write("\n".join(st["labels"]) + "\n")
    top = st["count"][st["labels"][0]] / len(train)
    return st, top, sum(len(p[3]) for p in train) / len(train)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_index_args(ap)
    a = ap.parse_args()
    index = read_index(a, "debian_deps")

    points = index_points(index, dependencies, tokens)
    train, test = split_by_source(points, a.test_frac, a.seed)

    st, top, avg_labels = write_points(a.out, train, test, a.min_df)
    labels, label_count = st["labels"], st["count"]
    n_train, n_test, dropped = st["train"], st["test"], st["dropped"]
    singles = sum(1 for l in labels if label_count[l] == 1)
    pk_where, pk_sha, tr_where, tr_sha, release_date = (
        index[k] for k in ("pk_where", "pk_sha", "tr_where", "tr_sha", "release_date"))
    with open(os.path.join(a.out, "SOURCE.md"), "w") as out:
        out.write(f"""# debian-deps

Predict a Debian binary package's dependencies (Depends and Pre-Depends, each alternative a
label) from the words of its name, section, debtags and description. Built by
`launch/data/debian_deps.py` (see its help for every rule).

- Index: {pk_where} (SHA-256 {pk_sha}) and {tr_where} (SHA-256 {tr_sha}); Release date
  {release_date}; architecture {a.arch}.
- Split by source package, {a.test_frac} of the sources to test (seed {a.seed}); features
  kept where at least {a.min_df} training points have them.
- {n_train} training points, {n_test} test points ({dropped} test points whose dependencies
  were all unseen in training dropped), {st['features']} features, {len(labels)} labels
  ({singles} of them in one training point), {avg_labels:.2f} labels per training point.
- Labels are numbered by descending training frequency; the most popular,
  `{labels[0]}`, is in {top:.3f} of the training points.
- Licence: the package index is published by the Debian project; descriptions are those of
  the packages' maintainers, under the packages' own licences.
""")
    print(f"debian_deps: {n_train} train, {n_test} test ({dropped} dropped), "
          f"{st['features']} features, {len(labels)} labels -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
