// The CPU backend's active index: a batch's (neuron, sample) entries sorted by neuron, and
// the entries with a non-zero delta that a backward pass walks.
#include "cpu/cpu_backend.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>

#include "common/error.h"
#include "common/parallel.h"
#include "cpu/cpu_layer.h"
#include "cpu/cpu_tuning.h"
#include "cpu/kernels/simd.h"

namespace dslide::cpu {

void CpuBackend::IndexBatch(Layer& L, const BatchRows& in, const BatchRows& delta) {
  DSLIDE_ASSERT(!L.batch.pending, "Backward called twice on a layer without an Update between");
  // The batch's entries by neuron: the forward pass's index when the deltas sit on its
  // entries, else one sorted from the deltas' own ids; then those with a non-zero delta.
  if (!ActiveMatches(L, delta)) L.batch.active.Build(delta, L.spec.begin, L.spec.local());
  KeepNonZero(L, delta);
  L.batch.saved_in = in;
  L.batch.pending = true;
}

void CpuBackend::Layer::ActiveIndex::Build(const BatchRows& out, int64_t begin, int64_t n) {
  // Each part counts its samples' entries per id and marks the ids it meets in a bitmap;
  // ranges of the bitmaps' words (their marked ids only, not every id of the range) turn the
  // counts into each part's offsets; each part scatters its entries. A row lists its
  // entries by sample.
  ActiveIndex& a = *this;
  const int64_t B = out.samples(), words = (n + 63) / 64;
  constexpr int64_t kIdsAhead = CpuTuning::kIndexIdsAhead;
  const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(NumThreads(), B));
  a.count.resize(parts);
  for (auto& c : a.count)
    if (static_cast<int64_t>(c.size()) != n) c.assign(n, 0);
  a.mark.resize(parts);
  for (auto& m : a.mark)
    if (static_cast<int64_t>(m.size()) != words) m.assign(words, 0);
  a.batch_off = out.off;
  a.batch_n = out.n;
  std::vector<int64_t>& start = a.start;  // of each sample's entries, packed
  start.assign(B + 1, 0);
  for (int64_t i = 0; i < B; ++i) start[i + 1] = start[i] + out.n[i];
  const int64_t total = start[B];
  DSLIDE_ASSERT(total < std::numeric_limits<int32_t>::max());
  a.batch_ids.resize(total);
  ParallelFor(parts, [&](int64_t t) {
    int32_t* cnt = a.count[t].data();
    uint64_t* mark = a.mark[t].data();
    for (int64_t i = B * t / parts; i < B * (t + 1) / parts; ++i) {
      const int32_t* ids = out.ids.data() + out.off[i];
      std::memcpy(a.batch_ids.data() + start[i], ids, sizeof(int32_t) * out.n[i]);
      for (int64_t k = 0; k < out.n[i]; ++k) {
        if (k + kIdsAhead < out.n[i]) __builtin_prefetch(cnt + ids[k + kIdsAhead] - begin, 1);
        const int64_t r = ids[k] - begin;
        ++cnt[r];
        mark[r >> 6] |= uint64_t{1} << (r & 63);
      }
    }
  });
  // fn(r) for the marked neurons r of words [w0, w1), ascending.
  auto each_marked = [&](int64_t w0, int64_t w1, auto&& fn) {
    for (int64_t w = w0; w < w1; ++w) {
      uint64_t bits = 0;
      for (int64_t t = 0; t < parts; ++t) bits |= a.mark[t][w];
      for (; bits != 0; bits &= bits - 1) fn(w * 64 + __builtin_ctzll(bits));
    }
  };
  // Word ranges: their active rows and entries, then (after the prefix sums) the rows,
  // their offsets, and each part's first slot in each row.
  std::vector<int64_t> nrow(parts + 1, 0), nent(parts + 1, 0);
  ParallelFor(parts, [&](int64_t b) {
    int64_t rows = 0, entries = 0;
    each_marked(words * b / parts, words * (b + 1) / parts, [&](int64_t r) {
      for (int64_t t = 0; t < parts; ++t) entries += a.count[t][r];
      ++rows;
    });
    nrow[b + 1] = rows;
    nent[b + 1] = entries;
  });
  for (int64_t b = 0; b < parts; ++b) {
    nrow[b + 1] += nrow[b];
    nent[b + 1] += nent[b];
  }
  a.rows.resize(nrow[parts]);
  a.off.resize(nrow[parts] + 1);
  a.off[nrow[parts]] = total;
  ParallelFor(parts, [&](int64_t b) {
    int64_t q = nrow[b], o = nent[b];
    each_marked(words * b / parts, words * (b + 1) / parts, [&](int64_t r) {
      a.rows[q] = static_cast<int32_t>(r);
      a.off[q++] = o;
      for (int64_t t = 0; t < parts; ++t) {
        const int32_t ct = a.count[t][r];
        a.count[t][r] = static_cast<int32_t>(o);
        o += ct;
      }
    });
  });
  a.entry.resize(total);
  ParallelFor(parts, [&](int64_t t) {
    int32_t* cur = a.count[t].data();
    for (int64_t i = B * t / parts; i < B * (t + 1) / parts; ++i) {
      const int32_t* ids = out.ids.data() + out.off[i];
      for (int64_t k = 0; k < out.n[i]; ++k) {
        if (k + kIdsAhead < out.n[i]) __builtin_prefetch(cur + ids[k + kIdsAhead] - begin, 1);
        a.entry[cur[ids[k] - begin]++] = {static_cast<int32_t>(i), static_cast<int32_t>(k)};
      }
    }
    uint64_t* mark = a.mark[t].data();
    for (int32_t r : a.rows) {
      cur[r] = 0;
      mark[r >> 6] = 0;
    }
  });
  a.valid = true;
}

bool CpuBackend::ActiveMatches(const Layer& L, const BatchRows& rows) const {
  const Layer::ActiveIndex& a = L.batch.active;
  if (!a.valid || rows.off != a.batch_off || rows.n != a.batch_n) return false;
  std::atomic<bool> same{true};
  ParallelFor(rows.samples(), 16, [&](int64_t i) {
    if (std::memcmp(a.batch_ids.data() + a.start[i], rows.ids.data() + rows.off[i],
                    sizeof(int32_t) * rows.n[i]) != 0)
      same.store(false, std::memory_order_relaxed);
  });
  return same.load();
}

void CpuBackend::KeepNonZero(Layer& L, const BatchRows& delta) {
  const Layer::ActiveIndex& a = L.batch.active;
  // One gather of the deltas: each row's non-zero ones, with their samples, go to the row's
  // own place in kept_* (the index's offsets) and the row's count to `keep`. A softmax layer
  // has no zero deltas, so these are the entries as they stand (swapped in); otherwise the
  // rows with any are packed after their predecessors.
  const int64_t nrows = static_cast<int64_t>(a.rows.size());
  const int64_t total = a.off[nrows];
  std::vector<int64_t>& keep = L.batch.keep;
  keep.resize(nrows);
  L.batch.kept_sample.resize(total);
  L.batch.kept_delta.resize(total);
  constexpr int64_t kChunk = CpuTuning::kGatherChunk;
  constexpr int64_t kGatherAhead = CpuTuning::kGatherAhead;
  std::atomic<int64_t> kept{0};
  ParallelFor((nrows + kChunk - 1) / kChunk, [&](int64_t c) {
    int64_t mine = 0;
    for (int64_t q = c * kChunk; q < std::min(nrows, (c + 1) * kChunk); ++q) {
      int64_t p = a.off[q];
      for (int64_t e = a.off[q]; e < a.off[q + 1]; ++e) {
        if (e + kGatherAhead < total) {
          const Layer::ActiveIndex::Entry ahead = a.entry[e + kGatherAhead];
          __builtin_prefetch(delta.vals.data() + delta.off[ahead.sample] + ahead.slot);
        }
        const float d = delta.vals[delta.off[a.entry[e].sample] + a.entry[e].slot];
        L.batch.kept_sample[p] = a.entry[e].sample;
        L.batch.kept_delta[p] = d;
        p += d != 0.0f;
      }
      keep[q] = p - a.off[q];
      mine += keep[q];
    }
    kept.fetch_add(mine, std::memory_order_relaxed);
  });
  if (kept.load() == total) {
    L.batch.ent_sample.swap(L.batch.kept_sample);
    L.batch.ent_delta.swap(L.batch.kept_delta);
    L.batch.grad_rows = a.rows;
    L.batch.grad_off = a.off;
    return;
  }
  L.batch.grad_rows.clear();
  L.batch.grad_off.clear();
  std::vector<int64_t>& from = L.batch.keep_from;  // per kept row, its entries' place in kept_*
  from.clear();
  int64_t o = 0;
  for (int64_t q = 0; q < nrows; ++q) {
    if (keep[q] == 0) continue;
    L.batch.grad_rows.push_back(a.rows[q]);
    L.batch.grad_off.push_back(o);
    from.push_back(a.off[q]);
    o += keep[q];
  }
  L.batch.grad_off.push_back(o);
  L.batch.ent_sample.resize(o);
  L.batch.ent_delta.resize(o);
  ParallelFor(static_cast<int64_t>(L.batch.grad_rows.size()), kChunk, [&](int64_t k) {
    const int64_t n = L.batch.grad_off[k + 1] - L.batch.grad_off[k];
    std::copy_n(L.batch.kept_sample.data() + from[k], n,
                L.batch.ent_sample.data() + L.batch.grad_off[k]);
    std::copy_n(L.batch.kept_delta.data() + from[k], n,
                L.batch.ent_delta.data() + L.batch.grad_off[k]);
  });
}

}  // namespace dslide::cpu
