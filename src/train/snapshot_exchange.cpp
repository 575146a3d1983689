#include "train/snapshot_exchange.h"

#include <algorithm>
#include <numeric>

#include "model/activation.h"

namespace dslide {

void SnapshotExchange::Segments(const LayerSpec& s, const int64_t* local_n, int64_t B,
                                std::vector<int64_t>* seg, std::vector<int64_t>* rank_total) {
  const int P = comm_->size();
  seg->assign(static_cast<size_t>(P) * B, 0);
  if (s.dense()) {
    // Sizes are known from the sharding: no counts, no ids on the wire.
    for (int r = 0; r < P; ++r) {
      const int64_t w =
          ModelSpec::BlockBegin(s.out_dim, r + 1, P) - ModelSpec::BlockBegin(s.out_dim, r, P);
      std::fill(seg->begin() + r * B, seg->begin() + (r + 1) * B, w);
    }
  } else {
    comm_->Allgatherv(local_n, std::vector<int64_t>(P, B), seg->data(), Traffic::kActivations);
  }
  *rank_total = RankTotals(*seg);
}

void SnapshotExchange::Gather(const LayerSpec& s, const BatchRows& local, BatchRows* full,
                              std::vector<int64_t>* seg) {
  const int P = comm_->size();
  const int64_t B = local.samples();
  std::vector<int64_t> rank_total;
  Segments(s, local.n.data(), B, seg, &rank_total);
  // Pack this rank's snapshot sample-major.
  const int64_t mine = rank_total[comm_->rank()];
  pack_vals_.resize(mine);
  pack_ids_.resize(s.dense() ? 0 : mine);
  PackRows(local, pack_vals_.data(), s.dense() ? nullptr : pack_ids_.data());
  const int64_t total = std::accumulate(rank_total.begin(), rank_total.end(), int64_t{0});
  gathered_vals_.resize(total);
  comm_->Allgatherv(pack_vals_.data(), rank_total, gathered_vals_.data(), Traffic::kActivations);
  if (!s.dense()) {
    gathered_ids_.resize(total);
    comm_->Allgatherv(pack_ids_.data(), rank_total, gathered_ids_.data(), Traffic::kActivations);
  }
  // Regroup per sample: sample i's row is rank 0's segment, then rank 1's, ...
  full->off.resize(B);
  full->n.assign(B, 0);
  for (int64_t i = 0; i < B; ++i)
    for (int r = 0; r < P; ++r) full->n[i] += (*seg)[r * B + i];
  for (int64_t i = 0, o = 0; i < B; ++i) {
    full->off[i] = o;
    o += full->n[i];
  }
  full->ids.resize(total);
  full->vals.resize(total);
  std::vector<int64_t> src(P);
  for (int r = 0, o = 0; r < P; o += rank_total[r], ++r) src[r] = o;
  for (int64_t i = 0; i < B; ++i) {
    int64_t dst = full->off[i];
    for (int r = 0; r < P; ++r) {
      const int64_t c = (*seg)[r * B + i];
      std::copy(gathered_vals_.begin() + src[r], gathered_vals_.begin() + src[r] + c,
                full->vals.begin() + dst);
      if (!s.dense())
        std::copy(gathered_ids_.begin() + src[r], gathered_ids_.begin() + src[r] + c,
                  full->ids.begin() + dst);
      src[r] += c;
      dst += c;
    }
    if (s.dense())
      std::iota(full->ids.begin() + full->off[i], full->ids.begin() + full->off[i] + full->n[i], 0);
  }
  full->dense = s.dense();
  full->width = s.out_dim;
}

std::vector<int64_t> SnapshotExchange::RankTotals(const std::vector<int64_t>& seg) const {
  const int P = comm_->size();
  const int64_t B = static_cast<int64_t>(seg.size()) / P;
  std::vector<int64_t> rank_total(P, 0);
  for (int r = 0; r < P; ++r)
    for (int64_t i = 0; i < B; ++i) rank_total[r] += seg[r * B + i];
  return rank_total;
}

void SnapshotExchange::ScatterGrad(const BatchRows& full_grad, const std::vector<int64_t>& seg,
                                   const BatchRows& act, BatchRows* local_grad) {
  const int P = comm_->size();
  const int64_t B = full_grad.samples();
  const std::vector<int64_t> rank_total = RankTotals(seg);
  std::vector<int64_t> dst(P, 0);
  for (int r = 1; r < P; ++r) dst[r] = dst[r - 1] + rank_total[r - 1];
  // Rank-major layout: the exact inverse of Gather's regrouping.
  pack_vals_.resize(std::accumulate(rank_total.begin(), rank_total.end(), int64_t{0}));
  for (int64_t i = 0; i < B; ++i) {
    int64_t src = full_grad.off[i];
    for (int r = 0; r < P; ++r) {
      const int64_t c = seg[r * B + i];
      std::copy(full_grad.vals.begin() + src, full_grad.vals.begin() + src + c,
                pack_vals_.begin() + dst[r]);
      src += c;
      dst[r] += c;
    }
  }
  gathered_vals_.resize(rank_total[comm_->rank()]);
  comm_->ReduceScatterSum(pack_vals_.data(), rank_total, gathered_vals_.data(),
                          Traffic::kInputGrads);
  // Back into the strided layout of this rank's layer output.
  UnpackLike(gathered_vals_.data(), act, local_grad);
}

void SnapshotExchange::PassForward(LayerBackend* backend, const LayerSpec& s, int layer,
                                   std::vector<int64_t>* seg) {
  if (comm_->size() == 1) {
    backend->Chain(layer, layer + 1);  // the snapshot is this rank's own output
    return;
  }
  if (backend->Capabilities().row_exchange) {
    RowExchange& x = backend->InPlaceExchange();
    // The same protocol on the backend's packed buffers (device memory under CUDA-aware MPI).
    const std::vector<int64_t> n = x.OutputCounts(layer);
    std::vector<int64_t> rank_total;
    Segments(s, n.data(), static_cast<int64_t>(n.size()), seg, &rank_total);
    const int64_t total = std::accumulate(rank_total.begin(), rank_total.end(), int64_t{0});
    const ExchangeBuffers b = x.PackOutput(layer, !s.dense(), total);
    comm_->Allgatherv(b.send_vals, rank_total, b.recv_vals, Traffic::kActivations);
    if (!s.dense()) comm_->Allgatherv(b.send_ids, rank_total, b.recv_ids, Traffic::kActivations);
    x.UnpackInput(layer + 1, *seg, s.dense(), s.out_dim);
    return;
  }
  Gather(s, *backend->HostRows(layer, Rows::kOutput, Access::kRead),
         backend->HostRows(layer + 1, Rows::kInput, Access::kWrite), seg);
  backend->CommitRows(layer + 1, Rows::kInput);
}

void SnapshotExchange::PassBackward(LayerBackend* backend, int layer,
                                    const std::vector<int64_t>& seg) {
  if (comm_->size() == 1) {
    backend->Chain(layer, layer - 1);
    return;
  }
  if (backend->Capabilities().row_exchange) {
    RowExchange& x = backend->InPlaceExchange();
    const std::vector<int64_t> rank_total = RankTotals(seg);
    const ExchangeBuffers b = x.PackInputGrad(layer, rank_total[comm_->rank()]);
    comm_->ReduceScatterSum(b.send_vals, rank_total, b.recv_vals, Traffic::kInputGrads);
    x.UnpackDelta(layer - 1);
    return;
  }
  const BatchRows& act = *backend->HostRows(layer - 1, Rows::kOutput, Access::kRead);
  BatchRows* delta = backend->HostRows(layer - 1, Rows::kDelta, Access::kWrite);
  ScatterGrad(*backend->HostRows(layer, Rows::kInputGrad, Access::kRead), seg, act, delta);
  ReluBackward(act, delta);
  backend->CommitRows(layer - 1, Rows::kDelta);
}

}  // namespace dslide
