// Settings and helpers shared by the learning tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/layer_backend.h"
#include "backend_driver.h"
#include "config/config.h"
#include "data/dataset.h"
#include "train/trainer.h"

namespace dslide::testing {

/// LSH settings for the tests' label spaces (up to ~10^4, hidden width 128): SimHash, K = 6,
/// L = 100, top-k queries.
inline void UseSimHashTopK(LshConfig* lsh) {
  lsh->family = HashFamily::kSrp;
  lsh->k = 6;
  lsh->l = 100;
  lsh->query = QueryStrategy::kTopK;
}

/// A generated problem of `points` training points: `features` inputs, `labels` outputs,
/// about `nnz` non-zero features and 1..`labels_per_point` labels per point.
inline GenConfig SyntheticShape(int64_t features, int64_t labels, int nnz, int labels_per_point,
                                int64_t points) {
  GenConfig g;
  g.features = features;
  g.labels = labels;
  g.nnz = nnz;
  g.labels_per_point = labels_per_point;
  g.points = points;
  g.ResolveShape();
  return g;
}

/// The points of step `it` with batch size b: it * b, it * b + 1, ... (mod n).
inline std::vector<int64_t> Batch(int64_t it, int64_t b, int64_t n) {
  std::vector<int64_t> pts(b);
  for (int64_t i = 0; i < b; ++i) pts[i] = (it * b + i) % n;
  return pts;
}

/// Steps two trainers on the same batches; fails, naming the step, where their losses
/// differ by more than rel_tol relative to max(1, |loss of b|). Call inside
/// ASSERT_NO_FATAL_FAILURE.
inline void StepInLockstep(Trainer& a, Trainer& b, const Dataset& data, int iters, int64_t batch,
                           double rel_tol) {
  for (int it = 0; it < iters; ++it) {
    const std::vector<int64_t> pts = Batch(it, batch, data.size());
    const double la = a.Step(data, pts), lb = b.Step(data, pts);
    ASSERT_NEAR(la, lb, rel_tol * std::max(1.0, std::abs(lb))) << "iteration " << it + 1;
  }
}

/// This rank's weights and biases of every layer of `t`, one after another.
inline std::vector<float> AllWeights(Trainer& t) {
  std::vector<float> all, w, b;
  for (size_t l = 0; l < t.spec().layers.size(); ++l) {
    GetLayer(t.backend(), static_cast<int>(l), &w, &b);
    all.insert(all.end(), w.begin(), w.end());
    all.insert(all.end(), b.begin(), b.end());
  }
  return all;
}

/// The largest absolute difference between the weights and biases of layer l of two
/// backends that hold the same shard (fails where the shapes differ).
inline double MaxLayerDiff(const LayerBackend& a, const LayerBackend& b, int l) {
  std::vector<float> wa, ba, wb, bb;
  GetLayer(a, l, &wa, &ba);
  GetLayer(b, l, &wb, &bb);
  EXPECT_EQ(wa.size(), wb.size()) << "layer " << l;
  EXPECT_EQ(ba.size(), bb.size()) << "layer " << l;
  double d = 0;
  for (size_t i = 0; i < std::min(wa.size(), wb.size()); ++i)
    d = std::max(d, std::abs(double(wa[i]) - wb[i]));
  for (size_t i = 0; i < std::min(ba.size(), bb.size()); ++i)
    d = std::max(d, std::abs(double(ba[i]) - bb[i]));
  return d;
}

}  // namespace dslide::testing
