// hnswlib is included here only: its headers define their distance functions as statics.
#include "train/output_index.h"

#include <hnswlib/hnswlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include "common/atomic_file.h"
#include "common/error.h"
#include "common/parallel.h"
#include "common/rng.h"

namespace dslide {

struct OutputIndex::Graph {
  explicit Graph(int64_t width) : space(static_cast<size_t>(width)) {}
  hnswlib::InnerProductSpace space;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> hnsw;
};

namespace {

using Clock = std::chrono::steady_clock;

/// The indexed vectors' floats: the weights and the bias, padded to 16 (hnswlib's widest
/// kernel) with zeros.
int64_t Width(int64_t dim) { return (dim + 1 + 15) / 16 * 16; }

/// The power of two s >= max_i |b_i| (1 where that is at most 1) that the indexed vectors
/// divide the biases by, the queries' last entry s restoring the logit: [w, b / s] . [h, s]
/// = w . h + b, exactly (a division and a product by a power of two). The graph links rows by
/// their own inner products, in which b_i b_j would otherwise outweigh the weights' part
/// where the biases are large: a one-vs-rest layer starts from the labels' log-odds (-13 for
/// a label of one point in 480,000), and its graph then linked rows by their frequency, not
/// by the directions the queries search.
float BiasScale(const float* b, int64_t rows) {
  float m = 0.0f;
  for (int64_t i = 0; i < rows; ++i)
    if (std::isfinite(b[i])) m = std::max(m, std::fabs(b[i]));
  if (m <= 1.0f) return 1.0f;
  int e = 0;
  std::frexp(m, &e);  // m = f 2^e, f in [0.5, 1)
  return std::ldexp(1.0f, e);
}

/// Each row's vector [w, b / scale, 0...] into a buffer of Width(dim) floats.
class RowVectors {
 public:
  RowVectors(const float* w, const float* b, int64_t rows, int64_t dim, float scale)
      : w_(w), b_(b), rows_(rows), dim_(dim), scale_(scale) {}
  void Fill(int64_t i, float* v) const {
    std::copy(w_ + i * dim_, w_ + (i + 1) * dim_, v);
    v[dim_] = b_[i] / scale_;
    std::fill(v + dim_ + 1, v + Width(dim_), 0.0f);
  }
  /// fn(i, vector) for rows [first, rows) on the threads.
  template <class Fn>
  void ForEach(int64_t first, Fn&& fn) const {
    std::vector<std::vector<float>> buffers(NumThreads(), std::vector<float>(Width(dim_)));
    ParallelFor(rows_ - first, 64, [&](int64_t i) {
      float* v = buffers[ThreadId()].data();
      Fill(first + i, v);
      fn(first + i, v);
    });
  }

 private:
  const float *w_, *b_;
  int64_t rows_, dim_;
  float scale_;
};

}  // namespace

OutputIndex::OutputIndex(int64_t rows, int64_t dim, const OutputIndexOptions& options)
    : rows_(rows), dim_(dim), width_(Width(dim)), options_(options) {
  DSLIDE_CHECK(rows > 0 && dim > 0, "the output index needs rows (", rows, ") and inputs (", dim,
               ")");
  DSLIDE_CHECK(rows < std::numeric_limits<int32_t>::max(),
               "the output index holds fewer than 2^31 rows, got ", rows);
  graph_ = std::make_unique<Graph>(width_);
}

OutputIndex::OutputIndex(const float* w, const float* b, int64_t rows, int64_t dim,
                         const OutputIndexOptions& options)
    : OutputIndex(rows, dim, options) {
  const auto t0 = Clock::now();
  graph_->hnsw = std::make_unique<hnswlib::HierarchicalNSW<float>>(
      &graph_->space, static_cast<size_t>(rows), static_cast<size_t>(options.m),
      static_cast<size_t>(options.ef_construction));
  // The first row alone (the graph's entry), then the rest on the threads, as hnswlib's own
  // Python binding inserts them (it locks the links it changes; its draw of a row's level
  // is not synchronised, which only decides that row's layer: a build on several threads
  // differs from run to run either way).
  FitBiases(b);
  const RowVectors vectors(w, b, rows, dim, bias_scale_);
  std::vector<float> v0(width_);
  vectors.Fill(0, v0.data());
  graph_->hnsw->addPoint(v0.data(), 0);
  vectors.ForEach(1, [&](int64_t i, const float* v) {
    graph_->hnsw->addPoint(v, static_cast<hnswlib::labeltype>(i));
  });
  NumberRows();
  seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
}

std::unique_ptr<OutputIndex> OutputIndex::Load(const std::string& path, const float* w,
                                               const float* b, int64_t rows, int64_t dim,
                                               const OutputIndexOptions& options,
                                               std::string* stale) {
  const auto t0 = Clock::now();
  std::unique_ptr<OutputIndex> index(new OutputIndex(rows, dim, options));
  Graph& g = *index->graph_;
  try {
    g.hnsw = std::make_unique<hnswlib::HierarchicalNSW<float>>(&g.space, path, false,
                                                               static_cast<size_t>(rows));
  } catch (const std::exception& e) {
    throw Error(path + ": not an output index dslide can read (" + e.what() + ")");
  }
  // The width of the rows as the file lays them out (hnswlib takes data_size_ from the
  // space it is given, the layout from the file), its row count and its graph's settings.
  const hnswlib::HierarchicalNSW<float>& h = *g.hnsw;
  const size_t file_floats = (h.label_offset_ - h.offsetData_) / sizeof(float);
  if (h.label_offset_ < h.offsetData_ || file_floats != static_cast<size_t>(index->width_) ||
      h.cur_element_count != static_cast<size_t>(rows)) {
    *stale = "an index of " + std::to_string(h.cur_element_count) + " rows of " +
             std::to_string(file_floats) + " floats, the model's shard has " +
             std::to_string(rows) + " rows of " + std::to_string(index->width_);
    return nullptr;
  }
  if (h.M_ != static_cast<size_t>(options.m) ||
      h.ef_construction_ != std::max<size_t>(options.ef_construction, h.M_)) {
    *stale = "a graph of m " + std::to_string(h.M_) + " and build ef " +
             std::to_string(h.ef_construction_) + ", asked for m " + std::to_string(options.m) +
             " and build ef " + std::to_string(options.ef_construction);
    return nullptr;
  }
  // Every row as this model's weights make it, bit for bit: an index of other weights
  // (an older model, another shard) would return wrong candidates without a sound.
  std::vector<char> wrong(rows, 0);
  index->FitBiases(b);
  RowVectors(w, b, rows, dim, index->bias_scale_).ForEach(0, [&](int64_t i, const float* v) {
    const auto it = g.hnsw->label_lookup_.find(static_cast<hnswlib::labeltype>(i));
    wrong[i] = it == g.hnsw->label_lookup_.end() ||
               std::memcmp(g.hnsw->getDataByInternalId(it->second), v,
                           static_cast<size_t>(index->width_) * sizeof(float)) != 0;
  });
  const auto bad = std::find(wrong.begin(), wrong.end(), 1);
  if (bad != wrong.end()) {
    *stale = "the index does not hold the model's row " + std::to_string(bad - wrong.begin()) +
             " (an index of other weights or of another shard)";
    return nullptr;
  }
  index->NumberRows();
  index->seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
  index->loaded_ = true;
  return index;
}

OutputIndex::~OutputIndex() = default;

void OutputIndex::Save(const std::string& path) const {
  const hnswlib::HierarchicalNSW<float>& h = *graph_->hnsw;
  // What saveIndex writes: its header, every row's level-0 block, then each row's upper
  // links with their size. It checks no write; the file's size does (a full disk).
  uintmax_t expected = 6 * sizeof(size_t) + sizeof(int) + sizeof(hnswlib::tableint) +
                       3 * sizeof(size_t) + sizeof(double) + sizeof(size_t) +
                       h.cur_element_count * h.size_data_per_element_;
  for (size_t i = 0; i < h.cur_element_count; ++i)
    expected += sizeof(unsigned int) +
                (h.element_levels_[i] > 0 ? h.size_links_per_element_ * h.element_levels_[i] : 0);
  WriteAtomically(path, [&](const std::string& tmp) {
    graph_->hnsw->saveIndex(tmp);
    std::error_code ec;
    const uintmax_t got = std::filesystem::file_size(tmp, ec);
    DSLIDE_CHECK(
        !ec && got == expected, path, ": the output index could not be written (",
        ec ? ec.message()
           : std::to_string(got) + " of " + std::to_string(expected) + " bytes: is the disk full?",
        ")");
  });
}

int64_t OutputIndex::candidates() const {
  return std::min<int64_t>(options_.ef + static_cast<int64_t>(boosted_.size()), rows_);
}

void OutputIndex::FitBiases(const float* b) {
  bias_scale_ = options_.one_vs_rest ? BiasScale(b, rows_) : 1.0f;
  boosted_.clear();
  if (bias_scale_ <= 1.0f) return;  // softmax rows, or biases within [-1, 1]
  std::vector<int32_t> order(rows_);
  for (int64_t i = 0; i < rows_; ++i) order[i] = static_cast<int32_t>(i);
  const int64_t n = std::min<int64_t>(kBoostedRows, rows_);
  const auto higher = [b](int32_t x, int32_t y) {
    const float bx = std::isfinite(b[x]) ? b[x] : -std::numeric_limits<float>::infinity();
    const float by = std::isfinite(b[y]) ? b[y] : -std::numeric_limits<float>::infinity();
    return bx > by || (bx == by && x < y);
  };
  std::partial_sort(order.begin(), order.begin() + n, order.end(), higher);
  boosted_.assign(order.begin(), order.begin() + n);
}

void OutputIndex::NumberRows() {
  internal_.resize(rows_);
  for (const auto& [label, id] : graph_->hnsw->label_lookup_) internal_[label] = id;
}

double OutputIndex::Logit(int32_t row, const float* h) const {
  const float* v =
      reinterpret_cast<const float*>(graph_->hnsw->getDataByInternalId(internal_[row]));
  // Four sums side by side: one chain of dependent additions would take its latency dim_
  // times over.
  double acc[4] = {};
  int64_t c = 0;
  for (; c + 4 <= dim_; c += 4)
    for (int u = 0; u < 4; ++u) acc[u] += static_cast<double>(v[c + u]) * h[c + u];
  for (; c < dim_; ++c) acc[0] += static_cast<double>(v[c]) * h[c];
  return static_cast<double>(v[dim_] * bias_scale_) + ((acc[0] + acc[1]) + (acc[2] + acc[3]));
}

int64_t OutputIndex::Search(const float* h, int32_t* rows, float* logits) const {
  thread_local std::vector<float> q;
  q.assign(width_, 0.0f);
  std::copy(h, h + dim_, q.begin());
  q[dim_] = bias_scale_;
  // hnswlib's searchKnn, without what it adds here: it counts hops and distances in two
  // atomics every thread increments, and after loadIndex, which leaves its count of deleted
  // rows uninitialised, it may take the walk that checks each row for deletion. No row is
  // ever deleted from this graph. (The same candidates; no change in time was measured.)
  const hnswlib::HierarchicalNSW<float>& g = *graph_->hnsw;
  const void* query = q.data();
  hnswlib::tableint at = g.enterpoint_node_;
  float nearest = g.fstdistfunc_(query, g.getDataByInternalId(at), g.dist_func_param_);
  for (int level = g.maxlevel_; level > 0; --level) {  // greedy, down the upper layers
    for (bool moved = true; moved;) {
      moved = false;
      hnswlib::linklistsizeint* links = g.get_linklist(at, level);
      const int size = g.getListCount(links);
      const auto* next = reinterpret_cast<const hnswlib::tableint*>(links + 1);
      for (int i = 0; i < size; ++i) {
        const float d = g.fstdistfunc_(query, g.getDataByInternalId(next[i]), g.dist_func_param_);
        if (d < nearest) {
          nearest = d;
          at = next[i];
          moved = true;
        }
      }
    }
  }
  // At most options.ef rows: the walk keeps no more than the list it is given.
  auto found = g.searchBaseLayerST<false, false>(
      at, query, static_cast<size_t>(std::min<int64_t>(options_.ef, rows_)));
  int64_t n = static_cast<int64_t>(found.size());
  // The queue gives the farthest first.
  for (int64_t j = n - 1; j >= 0; --j, found.pop()) {
    rows[j] = static_cast<int32_t>(g.getExternalLabel(found.top().second));
    logits[j] = static_cast<float>(Logit(rows[j], h));
  }
  // The rows of the largest biases, scored whatever the walk found (FitBiases).
  const int64_t walked = n;
  for (int32_t r : boosted_) {
    if (std::find(rows, rows + walked, r) != rows + walked) continue;
    rows[n] = r;
    logits[n] = static_cast<float>(Logit(r, h));
    ++n;
  }
  return n;
}

OutputIndex::Tail OutputIndex::DrawTail(uint64_t seed) const {
  Tail t;
  if (options_.tail <= 0) return t;
  Rng rng(seed);
  t.rows.resize(options_.tail);
  t.w.resize(static_cast<size_t>(options_.tail) * dim_);
  t.b.resize(options_.tail);
  for (int r = 0; r < options_.tail; ++r) {
    t.rows[r] = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(rows_)));
    const float* v =
        reinterpret_cast<const float*>(graph_->hnsw->getDataByInternalId(internal_[t.rows[r]]));
    std::copy(v, v + dim_, t.w.begin() + static_cast<int64_t>(r) * dim_);
    t.b[r] = v[dim_] * bias_scale_;
  }
  return t;
}

double OutputIndex::TailSum(const float* h, float mx, const int32_t* cand, int64_t n,
                            const Tail& t) const {
  const auto draws = static_cast<int64_t>(t.rows.size());
  if (draws == 0 || n >= rows_) return 0.0;
  // The candidates in order, each draw looked up by bisection.
  thread_local std::vector<int32_t> sorted;
  sorted.assign(cand, cand + n);
  std::sort(sorted.begin(), sorted.end());
  double sum = 0;
  constexpr int kLanes = 16;
  for (int64_t r = 0; r < draws; ++r) {
    if (std::binary_search(sorted.begin(), sorted.end(), t.rows[r])) continue;
    const float* w = t.w.data() + r * dim_;
    float acc[kLanes] = {};
    int64_t c = 0;
    for (; c + kLanes <= dim_; c += kLanes)
      for (int u = 0; u < kLanes; ++u) acc[u] += w[c + u] * h[c + u];
    float z = t.b[r];
    for (; c < dim_; ++c) z += w[c] * h[c];
    for (float a : acc) z += a;
    sum += std::exp(static_cast<double>(z) - static_cast<double>(mx));
  }
  return sum * static_cast<double>(rows_) / static_cast<double>(draws);
}

}  // namespace dslide
