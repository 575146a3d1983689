#!/usr/bin/env bash
# The default job: installs and builds if needed, generates synthetic data (20,000 labels),
# trains it on 2 MPI ranks with default options, holding back 10 % of the training points
# for validation and keeping the best validated model, scores the test set once, writes
# predictions for the test inputs, and says where everything is and what to run next.
# Extra arguments go to `dslide train` (e.g. --epochs 3, --device gpu).
set -euo pipefail
cd "$(dirname "$0")/../.."
bash launch/setup/install-deps.sh
[[ -x build/dslide ]] || bash launch/setup/build.sh -DDSLIDE_BUILD_TESTS=OFF
mkdir -p out
[[ -f out/demo.train.txt ]] || ./build/dslide gen --points 40000 --features 5000 --labels 20000 \
  --nnz 30 --labels-per-point 3 --seed 1 --out out/demo
rm -rf out/demo-model out/demo.jsonl
bash launch/run/mpirun.sh -np 2 ./build/dslide train --train out/demo.train.txt \
  --test out/demo.test.txt --valid-fraction 0.1 --epochs 10 \
  --checkpoint-dir out/demo-model --metrics out/demo.jsonl "$@"
bash launch/run/mpirun.sh -np 2 ./build/dslide predict --model out/demo-model/best \
  --input out/demo.test.txt --top-k 5 --out out/demo.predictions.tsv
cat <<EOF

Done.
  model (best validation P@1):  out/demo-model/best   (last state: out/demo-model/ckpt-*)
  metrics (JSON lines):          out/demo.jsonl
  predictions (top 5 per row):   out/demo.predictions.tsv   (ROW<TAB>LABEL:PROBABILITY ...)
Next:
  ./build/dslide predict --model out/demo-model/best --input FILE --top-k 5 --out preds.tsv
  ./build/dslide eval --model out/demo-model/best --test out/demo.test.txt
  ./build/dslide export --model out/demo-model/best --out model.h5
  ./build/dslide train --train YOUR.train.txt --test YOUR.test.txt --valid-fraction 0.1   # early stopping
  sudo launch/bench/scaling            # dslide against real Horovod (launch/setup/setup-horovod.sh) and its own baselines
EOF
