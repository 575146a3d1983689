// The trainer's exact scoring and its evaluation: every output neuron of a block of points
// scored on each rank, the normaliser and the k best merged over the ranks (Score), and P@k
// (and the loss over every output neuron) over a dataset, exact or LSH-sampled (Evaluate).
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <limits>
#include <numeric>

#include "common/parallel.h"
#include "common/rng.h"
#include "model/topk.h"
#include "train/batch_input.h"

namespace dslide {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

constexpr int64_t kEvalStreamBase = int64_t{1} << 40;
constexpr uint64_t kIndexTailStream = 0x7a11;  ///< the output index's normaliser draws

/// A point's scored candidates (n logits z of the neurons id): their k best into ids and sc
/// (best first, -1 padded), and this shard's softmax statistics over them: *mx their
/// largest logit (0 under one-vs-rest, whose sums are plain), the returned sum of
/// exp(z - max) (0 under one-vs-rest).
double ScoreCandidates(const float* z, const int32_t* id, int64_t n, int k, bool ovr,
                       TopKSelector* top, int32_t* ids, float* sc, float* mx) {
  top->Clear();
  top->PushAll(z, id, n);
  top->Take(k, ids, sc);
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) m = std::max(m, z[j]);
  double sum = 0;
  if (!ovr)
    for (int64_t j = 0; j < n; ++j) sum += std::exp(static_cast<double>(z[j] - m));
  *mx = ovr ? 0.0f : m;
  return sum;
}

}  // namespace

void Trainer::Score(const Dataset& data, int64_t b0, int64_t count, int k, Scores* out,
                    int64_t row0, ScoreMode mode, bool probabilities, bool loss) {
  const int P = model_comm_->size();
  const int last = static_cast<int>(spec_.layers.size()) - 1;
  std::vector<int64_t> points(count);
  std::iota(points.begin(), points.end(), b0);
  const int64_t stream = kEvalStreamBase + row0 + b0;
  ForwardHidden(data, points, nullptr, stream, /*through_output=*/false);
  const BatchLabels labels = Labels(data, points, spec_.labels);
  std::vector<int32_t> ids, all_ids;
  std::vector<float> sc, all_sc;
  SoftmaxStats st;
  const bool approximate = mode != ScoreMode::kExact;
  const OutputLoss kind = Loss();
  // The normaliser: an approximate mode's for the probabilities; the exact one's for the
  // loss, and for a softmax model's probabilities (a one-vs-rest model's are its sigmoids).
  const bool normalise =
      approximate ? probabilities : loss || (probabilities && kind != OutputLoss::kOneVsRest);
  if (mode == ScoreMode::kIndex) {
    DSLIDE_CHECK(index_ != nullptr,
                 "approximate scoring by the output index: the index is not built (or the "
                 "weights changed since)");
    ScoreIndexCandidates(count, k, stream, probabilities, &ids, &sc, &st);
  } else if (mode == ScoreMode::kLsh) {
    // The output layer's own selection (its LSH candidates, filled to the budget) scored
    // exactly: each point's k best among them, and the normaliser over them alone.
    backend_->Select(last, /*with_labels=*/false, stream);
    backend_->Forward(last);
    const BatchRows& z = *backend_->HostRows(last, Rows::kOutput, Access::kRead);
    ids.resize(count * k);
    sc.resize(count * k);
    st.Resize(count);
    TopKSelector top;
    const bool ovr = Loss() == OutputLoss::kOneVsRest;
    for (int64_t i = 0; i < count; ++i) {
      const double sum =
          ScoreCandidates(z.vals.data() + z.off[i], z.ids.data() + z.off[i], z.n[i], k, ovr, &top,
                          ids.data() + i * k, sc.data() + i * k, &st.mx[i]);
      st.red[i] = static_cast<float>(sum);
      st.red[count + i] = 0.0f;
    }
  } else {
    backend_->TopK(last, k, &ids, &sc, &labels, normalise ? &st : nullptr);
  }
  // The normaliser over all ranks (the largest logit, then every rank's sum rescaled to
  // it), for the exact loss and the probabilities: not gathered where neither is wanted.
  std::vector<double> log_z(count);
  out->loss.assign(count, std::numeric_limits<double>::quiet_NaN());
  if (normalise) {
    std::vector<float> mx = st.mx;
    model_comm_->Allreduce(mx.data(), count, ReduceOp::kMax, Traffic::kEval);
    for (int64_t i = 0; i < count; ++i)
      st.red[i] = st.mx[i] == -std::numeric_limits<float>::infinity()
                      ? 0.0f
                      : st.red[i] * std::exp(st.mx[i] - mx[i]);
    model_comm_->Allreduce(st.red.data(), 2 * count, ReduceOp::kSum, Traffic::kEval);
    // Under one-vs-rest mx is 0 (or -inf where a rank has no neurons): the sums are plain.
    for (int64_t i = 0; i < count; ++i) {
      log_z[i] = static_cast<double>(mx[i]) + std::log(static_cast<double>(st.red[i]));
      if (approximate || !loss) continue;  // no loss (NaN)
      const int64_t nl = labels.Count(i);
      out->loss[i] = nl == 0 ? 0.0
                     : kind == OutputLoss::kOneVsRest
                         ? st.red[i] - st.red[count + i]
                         : log_z[i] - st.red[count + i] / static_cast<double>(nl);
    }
  }
  all_ids.resize(static_cast<size_t>(P) * count * k);
  all_sc.resize(all_ids.size());
  const std::vector<int64_t> counts(P, count * k);
  model_comm_->Allgatherv(ids.data(), counts, all_ids.data(), Traffic::kEval);
  model_comm_->Allgatherv(sc.data(), counts, all_sc.data(), Traffic::kEval);
  out->ids.resize(count * k);
  out->logits.resize(count * k);
  MergeTopKLists(all_ids.data(), all_sc.data(), P, count, k, out->ids.data(), out->logits.data());
  spec_.labels.ToLabels(out->ids.data(), count * k);
  out->probs.clear();
  if (!probabilities) return;
  out->probs.resize(count * k);
  for (int64_t i = 0; i < count; ++i)
    for (int j = 0; j < k; ++j) {
      const double z = out->logits[i * k + j];
      out->probs[i * k + j] = out->ids[i * k + j] < 0          ? 0.0
                              : kind == OutputLoss::kOneVsRest ? Sigmoid(z)
                                                               : std::exp(z - log_z[i]);
    }
}

void Trainer::ScoreIndexCandidates(int64_t count, int k, int64_t stream, bool tail_sum,
                                   std::vector<int32_t>* ids, std::vector<float>* sc,
                                   SoftmaxStats* st) {
  const int last = static_cast<int>(spec_.layers.size()) - 1;
  const LayerSpec& out = spec_.layers[last];
  const BatchRows& x = *backend_->HostRows(last, Rows::kInput, Access::kRead);
  const int64_t dim = out.in_dim, nc = index_->candidates();
  const bool ovr = Loss() == OutputLoss::kOneVsRest;
  ids->resize(count * k);
  sc->resize(count * k);
  st->Resize(count);
  // The normaliser's draws, shared by the block's points (their weights stay in cache).
  const bool estimate = tail_sum && !ovr;
  const OutputIndex::Tail tail =
      !estimate
          ? OutputIndex::Tail{}
          : index_->DrawTail(StreamSeed(cfg_.seed, kIndexTailStream, static_cast<uint64_t>(stream),
                                        static_cast<uint64_t>(spec_.rank)));
  ParallelFor(count, 4, [&](int64_t i) {
    thread_local std::vector<float> h, logits;
    thread_local std::vector<int32_t> rows;
    thread_local TopKSelector top;
    h.assign(dim, 0.0f);
    logits.resize(nc);
    rows.resize(nc);
    // The point's last hidden layer, dense (a sampled hidden layer's row holds its active
    // neurons only).
    const SparseView r = x.Row(i);
    for (int64_t j = 0; j < r.n; ++j) h[x.dense ? j : r.ids[j]] = r.vals[j];
    const int64_t n = index_->Search(h.data(), rows.data(), logits.data());
    int32_t* best = ids->data() + i * k;
    double sum = ScoreCandidates(logits.data(), rows.data(), n, k, ovr, &top, best,
                                 sc->data() + i * k, &st->mx[i]);
    // The softmax's normaliser beyond the candidates, estimated from the block's draws.
    if (estimate && n > 0) sum += index_->TailSum(h.data(), st->mx[i], rows.data(), n, tail);
    st->red[i] = static_cast<float>(sum);
    st->red[count + i] = 0.0f;
    for (int j = 0; j < k; ++j)  // the shard's rows as the layer's neurons
      if (best[j] >= 0) best[j] += static_cast<int32_t>(out.begin);
  });
}

double Trainer::BuildOutputIndex(const OutputIndexOptions& options, const std::string& cache) {
  const int last = static_cast<int>(spec_.layers.size()) - 1;
  const LayerSpec& out = spec_.layers[last];
  index_.reset();
  LayerState w;
  backend_->SaveLayer(last, kWeights, &w);
  std::unique_ptr<OutputIndex> index;
  const auto t0 = Clock::now();
  // Every rank learns whether any failed (a file that is no index, a write refused): none
  // is left waiting in the collective below.
  std::exception_ptr failure;
  try {
    std::string stale;
    if (!cache.empty() && out.local() > 0 && std::filesystem::exists(cache))
      index = OutputIndex::Load(cache, w.w.data(), w.b.data(), out.local(), out.in_dim, options,
                                &stale);
    if (index == nullptr) {
      if (!stale.empty())
        std::fprintf(stderr, "dslide: warning: %s: %s; building it again\n", cache.c_str(),
                     stale.c_str());
      index =
          std::make_unique<OutputIndex>(w.w.data(), w.b.data(), out.local(), out.in_dim, options);
      if (!cache.empty() && out.local() > 0) index->Save(cache);
    }
  } catch (...) {  // a file that is no index, a write refused, memory, hnswlib's own errors
    failure = std::current_exception();
  }
  int failed = failure != nullptr;
  model_comm_->Allreduce(&failed, 1, ReduceOp::kMax, Traffic::kEval);
  if (failure != nullptr) std::rethrow_exception(failure);
  DSLIDE_CHECK(failed == 0, "another rank could not build or read its output index");
  double seconds = Seconds(t0);
  model_comm_->Allreduce(&seconds, 1, ReduceOp::kMax, Traffic::kEval);
  index_ = std::move(index);
  return seconds;
}

EvalResult Trainer::Evaluate(const Dataset& test, int64_t max_points, bool sampled,
                             const std::vector<int>& ks) {
  const auto t_start = Clock::now();
  const PhaseTimes saved = phases_;
  const int64_t n = max_points > 0 ? std::min(max_points, test.size()) : test.size();
  PrecisionCounter counter(ks);
  const int kmax = counter.max_k();
  const int64_t eb = EvalBlock();
  Scores scores;
  double loss = 0;
  int64_t labelled = 0;
  for (int64_t b0 = 0; b0 < n; b0 += eb) {
    const int64_t B = std::min(eb, n - b0);
    // Sampled: the output layer's own selection alone (Score's approximate), no loss.
    Score(test, b0, B, kmax, &scores, 0, sampled ? ScoreMode::kLsh : ScoreMode::kExact);
    for (int64_t i = 0; i < B; ++i) {
      const int64_t nl = test.NumLabels(b0 + i);
      counter.Add(scores.ids.data() + i * kmax, kmax, test.Labels(b0 + i), nl);
      if (!sampled && nl > 0) {  // the loss over every output neuron
        loss += scores.loss[i];
        ++labelled;
      }
    }
  }
  phases_ = saved;  // evaluation time is not training time
  EvalResult r = counter.Result();
  if (!sampled && labelled > 0) r.loss = loss / static_cast<double>(labelled);
  r.seconds = Seconds(t_start);
  return r;
}

}  // namespace dslide
