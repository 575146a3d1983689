#!/usr/bin/env python3
"""Builds a long-tailed extreme-classification set from WordNet 3.0: predict a noun synset's
direct hypernyms and their direct hypernyms (grandparents) from the words of its gloss and
lemmas.

Reads data.noun of WordNet 3.0 as Debian packages it (wordnet-base: `apt-get download` into
a temporary directory and `dpkg-deb -x`, unless --wordnet-dir names a directory that holds
data.noun), skipping the licence lines at its head (those that start with two spaces). One
point per noun synset. Labels: the synset's direct hypernyms (pointers `@` and `@i`,
instance hypernym) and their own direct hypernyms, as synset offsets, without repeats.
Features: lower-case word tokens ([a-z0-9]+) of the gloss (the text after `|`, example
sentences included), prefixed `g:`, and the lower-cased parts of each lemma split at `_`
and `-`, prefixed `l:`, as counts; a feature is kept where at least --min-df training points
have it. The points are shuffled with random.Random(--seed) and the first --test-frac of
them go to test; each file's points are in random order. Labels are the synsets seen as
labels in training, numbered by descending training frequency (ties by offset); a test
point keeps those, and one left without any is dropped (counted in SOURCE.md).

Writes OUT/train.txt and OUT/test.txt (XC format, ids 0-based and ascending), and
OUT/feature_names.txt (line i = feature i), OUT/label_names.txt (line i = `offset
lemma1,lemma2,...` of label i) and OUT/SOURCE.md (package version, SHA-256 of data.noun,
the rules, the statistics).

Usage: wordnet_hypernyms.py OUT [--wordnet-dir DIR] [--test-frac 0.2] [--seed 1]
                                [--min-df 2]
"""
import argparse
import collections
import glob
import gzip
import hashlib
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

from xc_sets import write_sets

WORD = re.compile(r"[a-z0-9]+")
PACKAGE = "wordnet-base"


def download(tmp):
    """Fetches and unpacks wordnet-base into tmp; returns (data dir, package version)."""
    for tool, pkg in (("apt-get", "apt"), ("dpkg-deb", "dpkg")):
        if shutil.which(tool) is None:
            sys.exit(f"wordnet_hypernyms: `{tool}` not found; install the `{pkg}` package "
                     f"(a Debian/Ubuntu system), or unpack {PACKAGE} yourself and pass "
                     f"--wordnet-dir DIR/usr/share/wordnet")
    print(f"wordnet_hypernyms: apt-get download {PACKAGE}", file=sys.stderr)
    r = subprocess.run(["apt-get", "download", PACKAGE], cwd=tmp,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    debs = glob.glob(os.path.join(tmp, f"{PACKAGE}_*.deb"))
    if r.returncode != 0 or not debs:
        sys.exit(f"wordnet_hypernyms: `apt-get download {PACKAGE}` failed (try `apt-get "
                 f"update` first, or pass --wordnet-dir):\n{r.stdout}")
    deb = debs[0]
    version = subprocess.run(["dpkg-deb", "-f", deb, "Version"], check=True,
                             stdout=subprocess.PIPE, text=True).stdout.strip()
    root = os.path.join(tmp, "root")
    subprocess.run(["dpkg-deb", "-x", deb, root], check=True)
    return os.path.join(root, "usr", "share", "wordnet"), version


def local_version(wndir):
    """The package version from the Debian changelog next to an unpacked wordnet-base, if any."""
    log = os.path.join(wndir, "..", "doc", PACKAGE, "changelog.Debian.gz")
    try:
        with gzip.open(log, "rt", errors="replace") as f:
            m = re.match(r"\S+ \(([^)]*)\)", f.readline())
            return m.group(1) if m else None
    except OSError:
        return None


def parse_noun(text):
    """data.noun as {offset: (lemmas, parents, gloss)}; parents are `@`/`@i` noun pointers."""
    synsets = {}
    for line in text.split("\n"):
        if not line or line.startswith("  "):
            continue
        body, _, gloss = line.partition(" | ")
        f = body.split()
        offset, n_words = f[0], int(f[3], 16)
        lemmas = [f[4 + 2 * i] for i in range(n_words)]
        k = 4 + 2 * n_words
        n_ptrs = int(f[k])
        parents = []
        for i in range(n_ptrs):
            sym, target, pos = f[k + 1 + 4 * i: k + 4 + 4 * i]
            if sym in ("@", "@i") and pos == "n":
                parents.append(target)
        synsets[offset] = (lemmas, parents, gloss.strip())
    return synsets


def tokens(lemmas, gloss):
    toks = collections.Counter()
    for w in WORD.findall(gloss.lower()):
        toks["g:" + w] += 1
    for lemma in lemmas:
        for part in re.split(r"[_-]", lemma.lower()):
            if part:
                toks["l:" + part] += 1
    return toks


def main():
    t0 = time.time()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--wordnet-dir", help="a directory holding WordNet 3.0's data.noun "
                    "(e.g. usr/share/wordnet of an unpacked wordnet-base) instead of downloading")
    ap.add_argument("--test-frac", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--min-df", type=int, default=2)
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        if a.wordnet_dir:
            wndir = a.wordnet_dir
            version = local_version(wndir)
            where = (f"the local directory {os.path.abspath(wndir)} (package version "
                     f"{version or 'unknown'})")
        else:
            wndir, version = download(tmp)
            where = f"Debian package `{PACKAGE}` version {version} (`apt-get download`)"
        path = os.path.join(wndir, "data.noun")
        if not os.path.exists(path):
            sys.exit(f"wordnet_hypernyms: no data.noun in {wndir}")
        raw = open(path, "rb").read()
    sha = hashlib.sha256(raw).hexdigest()
    synsets = parse_noun(raw.decode("utf-8", "replace"))

    points = []  # (offset, tokens, labels)
    no_labels = 0
    for off in sorted(synsets):
        lemmas, parents, gloss = synsets[off]
        labels = set(parents)
        for p in parents:
            labels.update(synsets[p][1] if p in synsets else ())
        if not labels:
            no_labels += 1  # the root, entity
            continue
        points.append((off, tokens(lemmas, gloss), sorted(labels)))
    rng = random.Random(a.seed)
    rng.shuffle(points)
    k = int(round(a.test_frac * len(points)))
    test, train = points[:k], points[k:]
    rng.shuffle(train)  # the files' order carries no offset order: --eval-points takes a sample
    rng.shuffle(test)

    st = write_sets(a.out, [(p[1], p[2]) for p in train], [(p[1], p[2]) for p in test],
                    a.min_df)
    labels, label_count = st["labels"], st["count"]
    n_train, n_test, dropped = st["train"], st["test"], st["dropped"]
    nnz_train, nnz_test = st["nnz_train"], st["nnz_test"]
    with open(os.path.join(a.out, "label_names.txt"), "w") as out:
        out.write("\n".join(f"{l} {','.join(synsets[l][0])}" for l in labels) + "\n")

    top = labels[0]
    top_share = label_count[top] / len(train)
    singles = sum(1 for l in labels if label_count[l] == 1)
    avg_labels = sum(len(p[2]) for p in train) / len(train)
    seconds = time.time() - t0
    with open(os.path.join(a.out, "SOURCE.md"), "w") as out:
        out.write(f"""# wordnet-hypernyms

Predict a WordNet noun synset's direct hypernyms (pointers `@` and `@i`, instance hypernym)
and their direct hypernyms (grandparents), as synset offsets, from the words of its gloss
(`g:`, example sentences included) and of its lemmas split at `_` and `-` (`l:`). One point
per noun synset. Built by `launch/data/wordnet_hypernyms.py` (see its help for every rule).

- Data: WordNet 3.0 `data.noun` from {where};
  SHA-256 of data.noun {sha}.
  {len(synsets)} noun synsets, {no_labels} without any hypernym (left out).
- Split: the points shuffled with `random.Random({a.seed})`, the first {a.test_frac} of them to
  test, each file shuffled; features kept where at least {a.min_df} training points have them.
- {n_train} training points, {n_test} test points ({dropped} test points whose labels were
  all unseen in training dropped), {st['features']} features, {len(labels)} labels
  ({singles} of them in one training point), {avg_labels:.2f} labels per training point,
  {nnz_train:.2f} nonzeros per training point and {nnz_test:.2f} per test point.
- Labels are numbered by descending training frequency (ties by offset); the most popular,
  `{top} {','.join(synsets[top][0])}`, is in {top_share:.3f} of the training points.
- Licence: WordNet 3.0 Copyright 2006 by Princeton University, under the WordNet licence
  (permissive: use, copy, modify and distribute for any purpose without fee, keeping the
  copyright notice; see the head of data.noun or https://wordnet.princeton.edu/license-and-commercial-use).
""")
    print(f"wordnet_hypernyms: {n_train} train, {n_test} test ({dropped} dropped), "
          f"{st['features']} features, {len(labels)} labels -> {a.out} in {seconds:.1f} s",
          file=sys.stderr)


if __name__ == "__main__":
    main()
