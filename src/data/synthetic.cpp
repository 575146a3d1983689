// Synthetic data generator: each label owns a random sparse prototype; a point mixes the
// prototypes of its 1..M Zipf-drawn labels with noise, so labels are predictable from features.
#include "data/synthetic.h"

#include <algorithm>
#include <cmath>
#include <new>
#include <unordered_map>

#include "common/error.h"
#include "common/memory_limit.h"
#include "common/rng.h"

namespace dslide {

namespace {

constexpr uint64_t kProtoStream = 0x70726f746fULL;
constexpr uint64_t kPointStream = 0x706f696e74ULL;
constexpr uint64_t kPermStream = 0x7065726dULL;

}  // namespace

Dataset GenerateSynthetic(const GenConfig& cfg, int64_t first_index, int64_t n) {
  const int64_t C = cfg.labels, D = cfg.features;
  // Cumulative Zipf weights over popularity ranks; a seeded affine map turns ranks into ids
  // so that popular labels are spread over the id range (and over ranks' shards).
  std::vector<double> cdf(C);
  double acc = 0;
  for (int64_t r = 0; r < C; ++r) cdf[r] = acc += std::pow(static_cast<double>(r + 1), -cfg.zipf);
  for (auto& c : cdf) c /= acc;
  Rng perm_rng(StreamSeed(cfg.seed, kPermStream));
  int64_t mult = static_cast<int64_t>(perm_rng.Below(C - 1)) + 1;
  while (std::__gcd(mult, C) != 1) mult = mult % (C - 1) + 1;
  const int64_t shift = static_cast<int64_t>(perm_rng.Below(C));
  auto rank_to_label = [&](int64_t r) {
    if (cfg.popular_first) return static_cast<int32_t>(r);
    return static_cast<int32_t>((static_cast<__int128>(r) * mult + shift) % C);
  };

  const int signal = std::max(1, static_cast<int>(std::lround(cfg.nnz * (1.0 - cfg.noise))));
  const int noise = cfg.nnz - signal > 0 ? cfg.nnz - signal : 0;
  const int proto_size = std::max(8, signal);

  Dataset d;
  d.num_features = D;
  d.num_labels = C;
  std::vector<int32_t> lbls, fids;
  std::vector<float> fvals;
  std::unordered_map<int32_t, float> acc_feat;
  int64_t i = 0;
  try {
    for (; i < n; ++i) {
      Rng rng(StreamSeed(cfg.seed, kPointStream, first_index + i));
      const int m = 1 + static_cast<int>(rng.Below(cfg.labels_per_point));
      lbls.clear();
      for (int tries = 0; static_cast<int>(lbls.size()) < m && tries < 8 * m; ++tries) {
        const double u = rng.Uniform();
        const int64_t r = std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin();
        const int32_t l = rank_to_label(std::min(r, C - 1));
        if (std::find(lbls.begin(), lbls.end(), l) == lbls.end()) lbls.push_back(l);
      }
      std::sort(lbls.begin(), lbls.end());
      acc_feat.clear();
      const int per_label = std::max(1, signal / static_cast<int>(lbls.size()));
      for (int32_t l : lbls) {
        // The label's prototype: proto_size features with weights in [0.5, 1.5), fixed by seed.
        const uint64_t proto_seed = StreamSeed(cfg.seed, kProtoStream, l);
        for (int j = 0; j < per_label; ++j) {
          const int slot = static_cast<int>(rng.Below(proto_size));
          Rng pr(StreamSeed(proto_seed, slot));
          const int32_t f = static_cast<int32_t>(pr.Below(D));
          const float w = static_cast<float>(0.5 + pr.Uniform());
          acc_feat[f] += w * static_cast<float>(0.8 + 0.4 * rng.Uniform());
        }
      }
      for (int j = 0; j < noise; ++j)
        acc_feat[static_cast<int32_t>(rng.Below(D))] += static_cast<float>(rng.Uniform());
      fids.clear();
      for (const auto& kv : acc_feat) fids.push_back(kv.first);
      std::sort(fids.begin(), fids.end());
      fvals.resize(fids.size());
      double norm = 0;
      for (size_t j = 0; j < fids.size(); ++j) {
        fvals[j] = acc_feat[fids[j]];
        norm += static_cast<double>(fvals[j]) * fvals[j];
      }
      const float inv = norm > 0 ? static_cast<float>(1.0 / std::sqrt(norm)) : 1.0f;
      for (auto& v : fvals) v *= inv;
      d.Add(fids, fvals, lbls);
    }
  } catch (const std::bad_alloc&) {
    throw Error(detail::Concat("out of memory after generating ", i, " of the ", n,
                               " points asked for (--points, --test-points)"));
  }
  return d;
}

void CheckGeneratedDataFits(const GenConfig& cfg, int64_t points, int64_t test_points) {
  // The label popularity table (a double per label), then per point two offsets, its labels
  // (1 to labels_per_point: the mean) and its features (up to nnz, ids and values: the
  // prototypes' and the noise's seldom meet).
  const int64_t per_point =
      16 + 4 * (1 + std::max(1, cfg.labels_per_point)) / 2 + 8 * std::max(1, cfg.nnz);
  const int64_t table = cfg.labels * 8, bytes = table + (points + test_points) * per_point;
  try {
    // Named by what takes the most: the labels' table or the points.
    CheckMemoryFits(bytes,
                    table * 2 > bytes
                        ? detail::Concat("option --labels: ", cfg.labels,
                                         " labels (a popularity table of 8 bytes each) and ",
                                         points + test_points, " points, generated in memory,")
                        : detail::Concat("option --points: ", points, " points and ", test_points,
                                         " test points of ", std::max(1, cfg.nnz),
                                         " features each (--nnz), generated in memory,"),
                    "need at least");
  } catch (const OutOfMemory& e) {
    throw Error(e.what());
  }
}

double MostPopularLabelP1(const Dataset& train, const Dataset& test, int64_t max_points) {
  std::vector<int64_t> count(train.num_labels, 0);
  for (int32_t l : train.labels) ++count[l];
  const int32_t best =
      static_cast<int32_t>(std::max_element(count.begin(), count.end()) - count.begin());
  const int64_t n = max_points > 0 ? std::min(max_points, test.size()) : test.size();
  int64_t hits = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t* l = test.Labels(i);
    hits += std::binary_search(l, l + test.NumLabels(i), best) ? 1 : 0;
  }
  return n ? static_cast<double>(hits) / n : 0.0;
}

}  // namespace dslide
