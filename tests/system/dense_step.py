"""One Adam step of the dense network in PyTorch from dslide's state of step t, against
dslide's state of step t + 1 (tests/system/dense_step_test.sh). Usage: dense_step.py DATA STATE_T
STATE_T1 T HIDDEN [LOSS]: LOSS softmax (the default: the target spread over a point's labels) or
one-vs-rest (a binary cross-entropy per output, summed over the outputs). Exits 1 when any parameter or moment differs by more than the tolerance,
or when the step did not move the weights (nothing compared)."""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "launch", "peers"))
from xc_text import parse, read_lines  # noqa: E402

data, dir0, dir1, t0, hidden = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
loss_kind = sys.argv[6] if len(sys.argv) > 6 else "softmax"
torch.set_num_threads(1)
d, c, lines = read_lines(data)


def load(folder):
    def arr(name, shape):
        return torch.tensor(np.fromfile(os.path.join(folder, name + ".bin"), dtype="<f4").reshape(shape))
    s = {}
    for p, (rows, cols) in (("l0", (hidden, d)), ("l1", (c, hidden))):
        for a in ("w", "m", "v"):
            s[p + a] = arr(f"{p}_{a}", (rows, cols))
        for a in ("b", "mb", "vb"):
            s[p + a] = arr(f"{p}_{a}", (rows,))
    return s


s0, s1 = load(dir0), load(dir1)
params = {k: torch.nn.Parameter(s0[k].clone()) for k in ("l0w", "l0b", "l1w", "l1b")}
moments = {"l0w": ("l0m", "l0v"), "l0b": ("l0mb", "l0vb"), "l1w": ("l1m", "l1v"), "l1b": ("l1mb", "l1vb")}
opt = torch.optim.Adam(list(params.values()), lr=1e-3)
for k, p in params.items():
    opt.state[p] = {"step": torch.tensor(float(t0)), "exp_avg": s0[moments[k][0]].clone(),
                    "exp_avg_sq": s0[moments[k][1]].clone()}
points = [parse(line) for line in lines]
X = torch.zeros(len(points), d)
T = torch.zeros(len(points), c)
for i, (labels, ids, vals) in enumerate(points):
    for f, v in zip(ids, vals):
        X[i, f] = v
    for lab in labels:
        T[i, lab] = 1.0 / len(labels)
h = torch.relu(X @ params["l0w"].t() + params["l0b"])
z = h @ params["l1w"].t() + params["l1b"]
if loss_kind == "one-vs-rest":
    Y = (T > 0).float()
    loss = torch.nn.functional.binary_cross_entropy_with_logits(z, Y, reduction="none").sum(dim=1).mean()
else:
    loss = -(T * torch.log_softmax(z, dim=1)).sum(dim=1).mean()
opt.zero_grad()
loss.backward()
opt.step()
bad = False
for k, p in params.items():
    diff = (p.detach() - s1[k]).abs().max().item()
    moved = (s1[k] - s0[k]).abs().max().item()
    m, v = opt.state[p]["exp_avg"], opt.state[p]["exp_avg_sq"]
    dm = (m - s1[moments[k][0]]).abs().max().item() / max(m.abs().max().item(), 1e-30)
    dv = (v - s1[moments[k][1]]).abs().max().item() / max(v.abs().max().item(), 1e-30)
    print(f"{k}: |torch - dslide| {diff:.2e} (the step moved it by up to {moved:.2e}); "
          f"moments apart {dm:.1e}, {dv:.1e} (relative)")
    # A step moves a weight by about lr (1e-3); float rounding in the two orders of summation
    # leaves 1e-6 of it.
    if diff > 1e-6 or dm > 1e-4 or dv > 1e-4 or moved < 1e-4:
        bad = True
sys.exit(1 if bad else 0)
