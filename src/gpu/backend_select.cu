// The GPU backend's selection: the query hashes of a batch, each sample's candidates from
// the LSH tables, and the active set of the per-rank budget (labels first, then the batch's
// shared fill), all on the device.
#include "gpu/gpu_backend_instantiate.h"

namespace dslide::gpu {

template <class X>
void GpuBackendT<X>::Select(int layer, bool with_labels, int64_t iter) {
  Layer& L = *layers_[layer];
  const LayerSpec& s = L.spec;
  const DevRows& in = InRows(layer);
  DevRows& out = batch_[layer]->out;
  const int64_t B = in.B;
  out.B = B;
  out.dense = false;
  out.width = 0;
  if (s.dense()) return SelectAll(s, B, &out);
  DSLIDE_ASSERT(L.hash != nullptr, "layer ", layer + 1, " selects before its tables are built");
  // From the labels' shape (SetLabels): the most labels of a sample, and with it the most
  // any sample can get (its budget, raised by the floor of negatives), which the batch's
  // shared fill covers; as on the CPU backend.
  const bool with_lab = with_labels && has_labels_;
  const int64_t max_forced = with_lab ? label_shape_.most : 0;
  const int64_t cap = BudgetSampler::ActiveCap(s.budget, max_forced, s.min_negatives, s.local());
  const int64_t n_lab = with_lab ? label_shape_.total : 0;
  const int32_t* li = with_lab ? lab_ids_.data() : nullptr;
  ShardDraw draw;
  draw.begin = s.begin;
  draw.end = s.end;
  draw.cap = cap;
  draw.iter = iter;
  draw.seed = opt_.seed;
  draw.lane = (uint64_t(layer) << 32) | spec_.rank;
  DrawBatchFill(s, draw, n_lab, li);
  out.cap = cap;
  out.n.Resize(std::max<int64_t>(B, 1));
  out.ids.Resize(B * cap);
  out.vals.Resize(B * cap);
  // The log-Q correction's chances, written beside the ids (training with labels).
  Batch& bt = *batch_[layer];
  bt.log_q_valid = with_lab && CorrectsLogQ(s, opt_);
  if (bt.log_q_valid) {
    bt.log_q.Resize(B * cap);
    if (batch_q_of_ != B) {
      std::vector<float> q;
      BatchLabelChances(opt_.label_share, B, &q);
      batch_q_.Resize(static_cast<int64_t>(q.size()));
      x_.Upload(&batch_q_, q.data(), static_cast<int64_t>(q.size()));
      batch_q_of_ = B;
    }
  }

  // Device side: each sample's buckets (HashQueries: the query rows [x, 1]), per-sample
  // scratch, and the labels this shard owns as each sample's forced ids.
  const int64_t n = s.local();
  const int L_ = static_cast<int>(opt_.lsh.l);
  // Bucket positions of a sample (Select) are 32-bit.
  DSLIDE_CHECK(static_cast<int64_t>(L_) * opt_.lsh.bucket_capacity < (int64_t{1} << 31),
               "the GPU backend needs L * bucket capacity < 2^31");
  const int64_t cand_cap =
      std::max<int64_t>(static_cast<int64_t>(L_) * opt_.lsh.bucket_capacity, 2 * cap > n ? n : 0);
  int64_t set = 1;
  while (set < 2 * (max_forced + static_cast<int64_t>(L_) * opt_.lsh.bucket_capacity + cap) + 2)
    set *= 2;
  forced_ids_.Resize(std::max<int64_t>(n_lab, 1));
  set_keys_.Resize(B * set);
  set_counts_.Resize(B * set);
  set_stamps_.Resize(B * set);
  set_first_.Resize(B * set);
  n_forced_.Resize(std::max<int64_t>(B, 1));
  boff_.Resize(B * (L_ + 1));
  cand_.Resize(B * cand_cap);
  order_.Resize(B * L_);
  HashQueries(L, in);
  gpu::Select k;
  k.policy = SelectionPolicy(opt_.lsh);
  k.tables = Tables(L);
  k.draw = draw;
  k.B = B;
  k.n = n;
  k.budget = s.budget;
  k.min_neg = s.min_negatives;
  k.set = set;
  k.cand_cap = cand_cap;
  k.L = L_;
  k.bkt = bkt_.data();
  k.lo = with_lab ? lab_off_.data() : nullptr;
  k.li = li;
  k.forced_ids = forced_ids_.data();
  k.n_forced = n_forced_.data();
  k.boff = boff_.data();
  k.keys = set_keys_.data();
  k.counts = set_counts_.data();
  k.first = set_first_.data();
  k.cand = cand_.data();
  k.order = order_.data();
  k.stamps = set_stamps_.data();
  k.shared = shared_.data();
  k.shared_n = shared_n_.data();
  k.out = out.ids.data();
  k.out_n = out.n.data();
  k.batch_q = bt.log_q_valid ? batch_q_.data() : nullptr;
  k.log_q = bt.log_q_valid ? bt.log_q.data() : nullptr;
  // The counting strategies' per-sample sort (top-k) and compaction (threshold) scratch.
  int64_t sort_cap = 1;
  while (sort_cap < cand_cap) sort_cap *= 2;
  const bool counting = opt_.lsh.query != QueryStrategy::kVanilla;
  sort_keys_.Resize(counting ? B * sort_cap : 1);
  k.sort_keys = sort_keys_.data();
  k.sort_cap = sort_cap;
  x_.Launch(k);
}

template <class X>
auto GpuBackendT<X>::QueryRows(const DevRows& in, int64_t in_dim) -> const DevRows& {
  if (in.dense) return in;
  const int64_t B = in.B, icap = in.cap, cap = in.cap + 1;
  q_.B = B;
  q_.cap = cap;
  q_.n.Resize(std::max<int64_t>(B, 1));
  q_.ids.Resize(B * cap);
  q_.vals.Resize(B * cap);
  const int64_t* xn = in.n.data();
  const int32_t* xid = in.ids.data();
  const float* xv = in.vals.data();
  int64_t* qn = q_.n.data();
  int32_t* qid = q_.ids.data();
  float* qv = q_.vals.data();
  x_.For(B * cap, [=] DSLIDE_HD(int64_t t) {
    const int64_t i = t / cap, e = t % cap;
    if (e == 0) qn[i] = xn[i] + 1;
    const bool x = e < xn[i], bias = e == xn[i];
    qid[t] = x ? xid[i * icap + e] : bias ? static_cast<int32_t>(in_dim) : 0;
    qv[t] = x ? xv[i * icap + e] : bias ? 1.0f : 0.0f;
  });
  return q_;
}

template <class X>
void GpuBackendT<X>::HashQueries(Layer& L, const DevRows& in) {
  const int64_t B = in.B, nh = L.dhash.num_hashes;
  const DevRows& q = QueryRows(in, L.spec.in_dim);
  acc_.Resize(B * nh);
  arg_.Resize(B * nh);
  bkt_.Resize(B * L.dhash.l);
  QueryHash k;
  k.h = L.dhash;
  k.q = q.View();
  k.in_dim = L.spec.in_dim;
  k.acc = acc_.data();
  k.arg = arg_.data();
  k.bkt = bkt_.data();
  x_.Launch(k);
}

template <class X>
void GpuBackendT<X>::SelectAll(const LayerSpec& s, int64_t B, DevRows* out) {
  const int64_t local = s.local(), begin = s.begin;
  out->cap = std::max<int64_t>(1, local);
  out->n.Resize(std::max<int64_t>(B, 1));
  out->ids.Resize(B * out->cap);
  out->vals.Resize(B * out->cap);
  int64_t* n = out->n.data();
  int32_t* ids = out->ids.data();
  const int64_t cap = out->cap;
  x_.For(B * cap, [=] DSLIDE_HD(int64_t t) {
    ids[t] = static_cast<int32_t>(begin + t % cap);
    if (t % cap == 0) n[t / cap] = local;
  });
}

template <class X>
void GpuBackendT<X>::DrawBatchFill(const LayerSpec& s, const ShardDraw& draw, int64_t n_lab,
                                   const int32_t* li) {
  // The batch's shared fill (BatchListInto's result) drawn by one block: its sort scratch a
  // power of two over the fill's draws and the labels.
  const int64_t cap = draw.cap;
  const bool batch_fill = opt_.lsh.fill == FillPolicy::kBatch;
  const int64_t room = batch_fill ? BatchFillRoom(s.local(), cap) : 0;
  fill_.Resize(std::max<int64_t>(room, 1));
  fill_own_.Resize(std::max<int64_t>(2 * n_lab, 1));
  shared_.Resize(std::max<int64_t>(n_lab + room, 1));
  shared_n_.Resize(2);  // the list's length, the labels leading it
  int64_t pow2 = 1;
  while (pow2 < std::max(std::min(cap, s.local()), n_lab)) pow2 *= 2;
  fill_sort_.Resize(batch_fill ? pow2 : 1);
  BatchFill k;
  k.on = batch_fill;
  k.draw = draw;
  k.n_lab = n_lab;
  k.li = li;
  k.fill = fill_.data();
  k.own = fill_own_.data();
  k.shared = shared_.data();
  k.shared_n = shared_n_.data();
  k.scratch = fill_sort_.data();
  k.pow2 = pow2;
  x_.Launch(k);
}

#define DSLIDE_GPU_MEMBERS(X)                                                            \
  template void GpuBackendT<X>::Select(int layer, bool with_labels, int64_t iter);       \
  template void GpuBackendT<X>::HashQueries(Layer& L, const DevRows& in);                \
  template void GpuBackendT<X>::SelectAll(const LayerSpec& s, int64_t B, DevRows* out);  \
  template void GpuBackendT<X>::DrawBatchFill(const LayerSpec& s, const ShardDraw& draw, \
                                              int64_t n_lab, const int32_t* li);         \
  template auto GpuBackendT<X>::QueryRows(const DevRows& in, int64_t in_dim)->const DevRows&;
DSLIDE_GPU_INSTANTIATE(DSLIDE_GPU_MEMBERS)

}  // namespace dslide::gpu
