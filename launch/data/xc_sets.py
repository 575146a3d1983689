"""What the dataset recipes of launch/data share: numbering the features and labels of a
training set and writing the training and test files in the Extreme Classification
Repository text format (header `points features labels`, then `l1,l2 f:v f:v ...`, ids
0-based and ascending)."""
import collections
import os


def write_sets(out, train, test, min_df):
    """Writes OUT/train.txt, OUT/test.txt and OUT/feature_names.txt from points
    (features: a Counter of feature names to values, labels: a list of label keys).
    Features are kept where at least `min_df` training points have them, in name order;
    labels are those of the training points, numbered by descending training frequency (ties
    by key); a test point keeps the labels seen in training, and one left without any is
    dropped. Returns a dict: labels (the keys in id order), count (training points per
    label key), features, train and test (points written), dropped (test points left out),
    nnz_train and nnz_test (mean features per point written)."""
    df = collections.Counter()
    for feats, _ in train:
        df.update(feats.keys())
    names = sorted(t for t, c in df.items() if c >= min_df)
    fid = {t: i for i, t in enumerate(names)}
    count = collections.Counter(l for _, labels in train for l in labels)
    labels = sorted(count, key=lambda l: (-count[l], l))
    lid = {l: i for i, l in enumerate(labels)}
    os.makedirs(out, exist_ok=True)

    def write(name, pts):
        lines, dropped, nnz = [], 0, 0
        for feats, point_labels in pts:
            ls = sorted({lid[l] for l in point_labels if l in lid})
            if not ls:
                dropped += 1
                continue
            fs = sorted((fid[t], v) for t, v in feats.items() if t in fid)
            nnz += len(fs)
            lines.append(",".join(map(str, ls)) + " " + " ".join(f"{i}:{v}" for i, v in fs))
        with open(os.path.join(out, name), "w") as f:
            f.write(f"{len(lines)} {len(names)} {len(labels)}\n")
            f.write("\n".join(lines) + "\n")
        return len(lines), dropped, nnz / max(1, len(lines))

    n_train, _, nnz_train = write("train.txt", train)
    n_test, dropped, nnz_test = write("test.txt", test)
    with open(os.path.join(out, "feature_names.txt"), "w") as f:
        f.write("\n".join(names) + "\n")
    return {"labels": labels, "count": count, "features": len(names), "train": n_train,
            "test": n_test, "dropped": dropped, "nnz_train": nnz_train, "nnz_test": nnz_test}
