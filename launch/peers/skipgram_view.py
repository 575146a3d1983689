#!/usr/bin/env python3
"""Builds a skip-gram word task in XC format from a text corpus (one line of words, or any
whitespace-separated words; plain or .gz), as word2vec prepares its data: words seen fewer
than --min-count times are dropped, the rest numbered by descending count; one point per
token position, its single feature the centre word (`id:1`), its labels the distinct words
within +-window positions (the centre word excluded unless it recurs there). The corpus is cut
into blocks of --block tokens, the blocks shuffled with --seed, --max-tokens worth of them kept
and split test/train by --test-frac, so no window crosses between the sets.

Writes OUT/train.txt, OUT/test.txt and OUT/vocab.txt (`word count`, line i = id i).

Usage: skipgram_view.py CORPUS OUT [--min-count 5] [--window 2] [--block 1000]
                        [--max-tokens 600000] [--test-frac 0.2] [--seed 7]
"""
import argparse
import collections
import gzip
import os
import random
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--min-count", type=int, default=5)
    ap.add_argument("--window", type=int, default=2)
    ap.add_argument("--block", type=int, default=1000)
    ap.add_argument("--max-tokens", type=int, default=600000, help="0: every token")
    ap.add_argument("--test-frac", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    if a.min_count < 1 or a.window < 1 or a.block <= 2 * a.window or not 0 < a.test_frac < 1:
        ap.error("--min-count, --window >= 1, --block > 2 * window, 0 < --test-frac < 1")
    opener = gzip.open if a.corpus.endswith(".gz") else open
    with opener(a.corpus, "rt") as f:
        words = f.read().split()
    counts = collections.Counter(words)
    vocab = sorted((w for w, c in counts.items() if c >= a.min_count),
                   key=lambda w: (-counts[w], w))
    if not vocab:
        sys.exit(f"skipgram_view: no word of {a.corpus} occurs {a.min_count} times")
    ids = {w: i for i, w in enumerate(vocab)}
    tokens = [ids[w] for w in words if w in ids]
    blocks = [tokens[s:s + a.block] for s in range(0, len(tokens), a.block)]
    random.Random(a.seed).shuffle(blocks)
    if a.max_tokens > 0:
        blocks = blocks[:max(2, a.max_tokens // a.block)]
    n_test = max(1, int(round(len(blocks) * a.test_frac)))
    os.makedirs(a.out, exist_ok=True)
    c = len(vocab)
    for name, part in (("test", blocks[:n_test]), ("train", blocks[n_test:])):
        lines = []
        for blk in part:
            for p, w in enumerate(blk):
                ctx = sorted({blk[q] for q in range(max(0, p - a.window),
                                                    min(len(blk), p + a.window + 1)) if q != p})
                lines.append(",".join(map(str, ctx)) + f" {w}:1")
        with open(os.path.join(a.out, f"{name}.txt"), "w") as f:
            f.write(f"{len(lines)} {c} {c}\n")
            f.write("\n".join(lines) + "\n")
        print(f"{name}: {len(lines)} points")
    with open(os.path.join(a.out, "vocab.txt"), "w") as f:
        f.writelines(f"{w} {counts[w]}\n" for w in vocab)
    print(f"{c} words of count >= {a.min_count} ({len(tokens)} of {len(words)} tokens kept)")


if __name__ == "__main__":
    sys.exit(main())
