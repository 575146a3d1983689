#include "model/linear_ovr.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "common/error.h"
#include "common/parallel.h"
#include "common/rng.h"
#include "model/topk.h"

namespace dslide {

namespace {

/// The rows of a dataset L2-normalised (a row of no norm stays zero), as CSR.
struct UnitRows {
  const Dataset* data = nullptr;
  std::vector<float> vals;  ///< feat_vals scaled, row by row
  std::vector<double> sq;   ///< each row's squared norm after scaling (0 or about 1)
};

UnitRows Normalise(const Dataset& d) {
  UnitRows u;
  u.data = &d;
  u.vals.resize(d.feat_vals.size());
  u.sq.assign(d.size(), 0.0);
  ParallelFor(d.size(), 256, [&](int64_t i) {
    double norm = 0;
    for (int64_t j = d.feat_off[i]; j < d.feat_off[i + 1]; ++j)
      norm += static_cast<double>(d.feat_vals[j]) * d.feat_vals[j];
    const double scale = norm > 0 ? 1.0 / std::sqrt(norm) : 0.0;
    double sq = 0;
    for (int64_t j = d.feat_off[i]; j < d.feat_off[i + 1]; ++j) {
      u.vals[j] = static_cast<float>(d.feat_vals[j] * scale);
      sq += static_cast<double>(u.vals[j]) * u.vals[j];
    }
    u.sq[i] = sq;
  });
  return u;
}

/// One label's dual coordinate descent: on return w[0..d] (the bias last) holds the primal
/// solution w = sum_i alpha_i y_i (x_i, 1). `y` is +1 or -1 per point.
void SolveLabel(const UnitRows& u, const std::vector<int8_t>& y, const LinearOvrOptions& o,
                uint64_t seed, std::vector<double>* w_out) {
  const Dataset& d = *u.data;
  const int64_t n = d.size(), dim = d.num_features;
  std::vector<double>& w = *w_out;
  w.assign(dim + 1, 0.0);
  // The squared hinge's dual: min 1/2 a'(Q + D)a - e'a, a >= 0, Q_ij = y_i y_j x_i'x_j,
  // D = 1 / (2C) on the diagonal (no upper bound).
  const double diag = 0.5 / o.c;
  std::vector<double> alpha(n, 0.0);
  std::vector<int64_t> index(n);
  for (int64_t i = 0; i < n; ++i) index[i] = i;
  Rng rng(seed);
  int64_t active = n;
  // Shrinking needs only the upper threshold: without an upper bound on alpha, only points
  // at alpha = 0 leave the active set.
  double pg_max_old = std::numeric_limits<double>::infinity();
  for (int64_t epoch = 0; epoch < o.max_epochs; ++epoch) {
    for (int64_t s = 0; s + 1 < active; ++s)
      std::swap(index[s], index[s + static_cast<int64_t>(rng.Below(active - s))]);
    double pg_max_new = -std::numeric_limits<double>::infinity();
    double pg_min_new = std::numeric_limits<double>::infinity();
    for (int64_t s = 0; s < active; ++s) {
      const int64_t i = index[s];
      const double yi = y[i];
      const int64_t b = d.feat_off[i], e = d.feat_off[i + 1];
      double wx = w[dim];
      for (int64_t j = b; j < e; ++j) wx += w[d.feat_ids[j]] * u.vals[j];
      const double g = yi * wx - 1.0 + diag * alpha[i];
      double pg = g;
      if (alpha[i] == 0) {
        if (g > pg_max_old) {  // shrink: at its bound and likely to stay there
          --active;
          std::swap(index[s], index[active]);
          --s;
          continue;
        }
        pg = std::min(g, 0.0);
      }
      pg_max_new = std::max(pg_max_new, pg);
      pg_min_new = std::min(pg_min_new, pg);
      if (std::fabs(pg) > 1e-12) {
        const double old = alpha[i];
        alpha[i] = std::max(old - g / (u.sq[i] + 1.0 + diag), 0.0);
        const double step = (alpha[i] - old) * yi;
        for (int64_t j = b; j < e; ++j) w[d.feat_ids[j]] += step * u.vals[j];
        w[dim] += step;
      }
    }
    if (pg_max_new - pg_min_new <= o.eps) {
      if (active == n) break;
      active = n;  // converged on the active set: check every point once more
      pg_max_old = std::numeric_limits<double>::infinity();
      continue;
    }
    pg_max_old = pg_max_new > 0 ? pg_max_new : std::numeric_limits<double>::infinity();
  }
}

}  // namespace

LinearOvr::LinearOvr(int64_t features, int64_t labels, std::vector<float> w)
    : features_(features), labels_(labels), w_(std::move(w)) {
  DSLIDE_ASSERT(
      features_ >= 0 && labels_ > 0 && w_.size() == static_cast<size_t>((features_ + 1) * labels_),
      "linear model's weights");
}

LinearOvr LinearOvr::Train(const Dataset& train, const LinearOvrOptions& options) {
  DSLIDE_CHECK(options.c > 0 && options.eps > 0 && options.max_epochs > 0,
               "linear model: C, eps and the epochs must be positive");
  const int64_t n = train.size(), dim = train.num_features, labels = train.num_labels;
  DSLIDE_CHECK(n > 0 && labels > 0, "linear model: no training points or labels");
  const UnitRows u = Normalise(train);
  // Each label's points (CSC of the labels).
  std::vector<int64_t> off(labels + 1, 0);
  for (int32_t l : train.labels) ++off[l + 1];
  for (int64_t l = 0; l < labels; ++l) off[l + 1] += off[l];
  std::vector<int64_t> pos(off.back()), fill(off.begin(), off.end() - 1);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = train.label_off[i]; j < train.label_off[i + 1]; ++j)
      pos[fill[train.labels[j]]++] = i;
  std::vector<float> w(static_cast<size_t>((dim + 1) * labels), 0.0f);
  ParallelFor(labels, [&](int64_t l) {
    if (off[l] == off[l + 1]) {  // never seen: every point a negative, the margin -1
      w[dim * labels + l] = -1.0f;
      return;
    }
    std::vector<int8_t> y(n, -1);
    for (int64_t j = off[l]; j < off[l + 1]; ++j) y[pos[j]] = 1;
    std::vector<double> wl;
    SolveLabel(u, y, options, StreamSeed(options.seed, 0x4c494e4541520000ULL, l), &wl);
    for (int64_t f = 0; f <= dim; ++f) w[f * labels + l] = static_cast<float>(wl[f]);
  });
  return LinearOvr(dim, labels, std::move(w));
}

void LinearOvr::Margins(const SparseView& x, float* scores) const {
  const float* bias = w_.data() + features_ * labels_;
  double norm = 0;
  for (int64_t j = 0; j < x.n; ++j) norm += static_cast<double>(x.vals[j]) * x.vals[j];
  // The norm of the whole row: eval and predict check that the rows have the model's features.
  const float scale = norm > 0 ? static_cast<float>(1.0 / std::sqrt(norm)) : 0.0f;
  std::copy(bias, bias + labels_, scores);
  for (int64_t j = 0; j < x.n; ++j) {
    if (x.ids[j] >= features_) continue;
    const float v = x.vals[j] * scale;
    const float* row = w_.data() + static_cast<int64_t>(x.ids[j]) * labels_;
    for (int64_t l = 0; l < labels_; ++l) scores[l] += v * row[l];
  }
}

double LinearOvr::Probability(float margin) {
  const double s = margin;
  return std::clamp((1.0 + s) / 2.0, 0.0, 1.0) + kMarginOrder * s / (1.0 + std::fabs(s));
}

void LinearOvr::TopK(const Dataset& data, int64_t row0, int64_t n, int len,
                     std::vector<int32_t>* ids, std::vector<double>* probs) const {
  DSLIDE_ASSERT(len > 0 && len <= labels_ && row0 >= 0 && row0 + n <= data.size(), "linear top-k");
  ids->assign(n * len, -1);
  probs->assign(n * len, 0.0);
  ParallelFor(n, 16, [&](int64_t i) {
    std::vector<float> s(labels_);
    Margins(data.Features(row0 + i), s.data());
    TopKSelector sel;
    for (int64_t l = 0; l < labels_; ++l) sel.Push(s[l], static_cast<int32_t>(l));
    std::vector<float> top(len);
    sel.Take(len, ids->data() + i * len, top.data());
    for (int j = 0; j < len; ++j) (*probs)[i * len + j] = Probability(top[j]);
  });
}

}  // namespace dslide
