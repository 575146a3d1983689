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

/// The factor that L2-normalises row `x` (the norm of the whole row; 0 for a row of no norm).
float UnitScale(const SparseView& x) {
  double norm = 0;
  for (int64_t j = 0; j < x.n; ++j) norm += static_cast<double>(x.vals[j]) * x.vals[j];
  return norm > 0 ? static_cast<float>(1.0 / std::sqrt(norm)) : 0.0f;
}

/// One label's dual coordinate descent over `n` points, rows[k] (k itself where rows is null)
/// with y[k] +1 or -1: w[0..d] (the bias last), zero on entry, holds on return the primal
/// solution w = sum_k alpha_k y_k (x_rows[k], 1).
void SolveLabel(const UnitRows& u, const int64_t* rows, const int8_t* y, int64_t n,
                const LinearOvrOptions& o, uint64_t seed, double* w) {
  const Dataset& d = *u.data;
  const int64_t dim = d.num_features;
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
      const int64_t k = index[s], i = rows != nullptr ? rows[k] : k;
      const double yi = y[k];
      const int64_t b = d.feat_off[i], e = d.feat_off[i + 1];
      double wx = w[dim];
      for (int64_t j = b; j < e; ++j) wx += w[d.feat_ids[j]] * u.vals[j];
      const double g = yi * wx - 1.0 + diag * alpha[k];
      double pg = g;
      if (alpha[k] == 0) {
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
        const double old = alpha[k];
        alpha[k] = std::max(old - g / (u.sq[i] + 1.0 + diag), 0.0);
        const double step = (alpha[k] - old) * yi;
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

LinearOvr::LinearOvr(int64_t features, int64_t labels, int list, std::vector<int64_t> offsets,
                     std::vector<int32_t> feature_ids, std::vector<float> values,
                     std::vector<float> biases)
    : features_(features),
      labels_(labels),
      shortlist_(true),
      list_(list),
      w_(std::move(values)),
      off_(std::move(offsets)),
      feat_(std::move(feature_ids)),
      bias_(std::move(biases)) {
  DSLIDE_ASSERT(features_ >= 0 && labels_ > 0 && list_ > 0 &&
                    off_.size() == static_cast<size_t>(labels_ + 1) &&
                    bias_.size() == static_cast<size_t>(labels_) && off_.front() == 0 &&
                    off_.back() == static_cast<int64_t>(feat_.size()) && w_.size() == feat_.size(),
                "shortlist linear model's weights");
  dense_row_.assign(labels_, -1);
  int64_t rows = 0;
  for (int64_t l = 0; l < labels_; ++l)
    if ((off_[l + 1] - off_[l]) * kDenseRowShare > features_) dense_row_[l] = rows++;
  dense_.assign(static_cast<size_t>(rows * features_), 0.0f);
  for (int64_t l = 0; l < labels_; ++l) {
    if (dense_row_[l] < 0) continue;
    float* row = dense_.data() + dense_row_[l] * features_;
    for (int64_t e = off_[l]; e < off_[l + 1]; ++e) row[feat_[e]] = w_[e];
  }
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
    std::vector<double> wl(dim + 1, 0.0);
    SolveLabel(u, nullptr, y.data(), n, options, StreamSeed(options.seed, 0x4c494e4541520000ULL, l),
               wl.data());
    for (int64_t f = 0; f <= dim; ++f) w[f * labels + l] = static_cast<float>(wl[f]);
  });
  return LinearOvr(dim, labels, std::move(w));
}

LinearOvr LinearOvr::TrainShortlist(const Dataset& train, const std::vector<int32_t>& lists,
                                    int len, double prune, const LinearOvrOptions& options) {
  DSLIDE_CHECK(options.c > 0 && options.eps > 0 && options.max_epochs > 0,
               "linear model: C, eps and the epochs must be positive");
  const int64_t n = train.size(), dim = train.num_features, labels = train.num_labels;
  DSLIDE_CHECK(n > 0 && labels > 0, "linear model: no training points or labels");
  DSLIDE_ASSERT(len > 0 && lists.size() == static_cast<size_t>(n * len), "shortlists");
  const UnitRows u = Normalise(train);
  // Each label's points, ascending, and its sign there: its own points and those whose list
  // holds it (a label both in a point's labels and in its list counts once, positive).
  const auto each_pair = [&](int64_t i, auto&& f) {
    const int32_t* y = train.Labels(i);
    const int64_t ny = train.NumLabels(i);
    for (int64_t j = 0; j < ny; ++j) f(y[j], int8_t{1});
    for (int j = 0; j < len; ++j) {
      const int32_t id = lists[i * len + j];
      if (id < 0) break;
      if (std::find(y, y + ny, id) == y + ny) f(id, int8_t{-1});
    }
  };
  std::vector<int64_t> off(labels + 1, 0);
  for (int64_t i = 0; i < n; ++i)
    each_pair(i, [&](int32_t l, int8_t) {
      DSLIDE_ASSERT(l >= 0 && l < labels, "a label out of range");
      ++off[l + 1];
    });
  for (int64_t l = 0; l < labels; ++l) off[l + 1] += off[l];
  std::vector<int64_t> rows(off.back());
  std::vector<int8_t> sign(off.back());
  std::vector<int64_t> fill(off.begin(), off.end() - 1);
  for (int64_t i = 0; i < n; ++i)
    each_pair(i, [&](int32_t l, int8_t y) {
      rows[fill[l]] = i;
      sign[fill[l]++] = y;
    });
  std::vector<std::vector<std::pair<int32_t, float>>> kept(labels);
  std::vector<float> bias(labels, -1.0f);  // a label of no point: every point lacks it
  ParallelFor(labels, [&](int64_t l) {
    const int64_t b = off[l], m = off[l + 1] - off[l];
    if (m == 0) return;
    // Zero between labels: each solve leaves non-zeros only on its points' features, and
    // collecting them zeroes them again.
    thread_local std::vector<double> w;
    if (static_cast<int64_t>(w.size()) < dim + 1) w.assign(dim + 1, 0.0);
    SolveLabel(u, rows.data() + b, sign.data() + b, m, options,
               StreamSeed(options.seed, 0x53484f52544c0000ULL, l), w.data());
    auto& out = kept[l];
    for (int64_t k = b; k < b + m; ++k) {
      const int64_t i = rows[k];
      for (int64_t j = train.feat_off[i]; j < train.feat_off[i + 1]; ++j) {
        const int32_t f = train.feat_ids[j];
        if (w[f] == 0) continue;
        if (std::fabs(w[f]) > prune) out.emplace_back(f, static_cast<float>(w[f]));
        w[f] = 0;
      }
    }
    std::sort(out.begin(), out.end());
    bias[l] = static_cast<float>(w[dim]);
    w[dim] = 0;
  });
  std::vector<int64_t> offsets(labels + 1, 0);
  for (int64_t l = 0; l < labels; ++l)
    offsets[l + 1] = offsets[l] + static_cast<int64_t>(kept[l].size());
  std::vector<int32_t> feature_ids(offsets.back());
  std::vector<float> values(offsets.back());
  for (int64_t l = 0; l < labels; ++l) {
    for (size_t j = 0; j < kept[l].size(); ++j) {
      feature_ids[offsets[l] + j] = kept[l][j].first;
      values[offsets[l] + j] = kept[l][j].second;
    }
    std::vector<std::pair<int32_t, float>>().swap(kept[l]);
  }
  return LinearOvr(dim, labels, len, std::move(offsets), std::move(feature_ids), std::move(values),
                   std::move(bias));
}

void LinearOvr::Rescore(const Dataset& data, int len, const std::vector<int32_t>& ids,
                        std::vector<double>* probs) const {
  DSLIDE_ASSERT(shortlist_ && len > 0 && ids.size() == static_cast<size_t>(data.size() * len),
                "shortlist rescoring");
  probs->assign(ids.size(), 0.0);
  ParallelFor(data.size(), 16, [&](int64_t i) {
    const SparseView v = data.Features(i);
    const float scale = UnitScale(v);
    for (int j = 0; j < std::min(len, list_); ++j) {
      const int32_t l = ids[i * len + j];
      if (l < 0) break;
      DSLIDE_ASSERT(l < labels_, "a listed label out of range");
      // The row's features looked up in the label's: a dense row's at once, else in its
      // sorted ones (a row holds a few features). The same terms in the same order either
      // way (a compiler's contraction into fused multiply-adds may round them apart in the
      // last bit; a label's path is the model's, so a model scores alike every time).
      float s = bias_[l];
      if (dense_row_[l] >= 0) {
        const float* row = dense_.data() + dense_row_[l] * features_;
        for (int64_t j2 = 0; j2 < v.n; ++j2)
          if (v.ids[j2] < features_) s += row[v.ids[j2]] * (v.vals[j2] * scale);
      } else {
        const int32_t* first = feat_.data() + off_[l];
        const int32_t* last = feat_.data() + off_[l + 1];
        for (int64_t j2 = 0; j2 < v.n; ++j2) {
          const int32_t* at = std::lower_bound(first, last, v.ids[j2]);
          if (at != last && *at == v.ids[j2]) s += w_[at - feat_.data()] * (v.vals[j2] * scale);
        }
      }
      // Above 0, the reranker's value of the labels it does not rescore: at share 1 (and
      // alone) its list ranks first.
      (*probs)[i * len + j] = Probability(s) + kMarginOrder;
    }
  });
}

void LinearOvr::Margins(const SparseView& x, float* scores) const {
  DSLIDE_ASSERT(!shortlist_, "a shortlist model scores its lists (Rescore)");
  const float* bias = w_.data() + features_ * labels_;
  // The norm of the whole row: eval and predict check that the rows have the model's features.
  const float scale = UnitScale(x);
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
  DSLIDE_ASSERT(!shortlist_ && len > 0 && len <= labels_ && row0 >= 0 && row0 + n <= data.size(),
                "linear top-k");
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
