// The trainer's exact scoring and its evaluation: every output neuron of a block of points
// scored on each rank, the normaliser and the k best merged over the ranks (Score), and P@k
// (and the loss over every output neuron) over a dataset, exact or LSH-sampled (Evaluate).
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "model/topk.h"
#include "train/batch_input.h"

namespace dslide {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

constexpr int64_t kEvalStreamBase = int64_t{1} << 40;

}  // namespace

void Trainer::Score(const Dataset& data, int64_t b0, int64_t count, int k, Scores* out,
                    int64_t row0, bool approximate) {
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
  if (approximate) {
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
      const float* v = z.vals.data() + z.off[i];
      top.Clear();
      top.PushAll(v, z.ids.data() + z.off[i], z.n[i]);
      top.Take(k, ids.data() + i * k, sc.data() + i * k);
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < z.n[i]; ++j) m = std::max(m, v[j]);
      double sum = 0;
      if (!ovr)
        for (int64_t j = 0; j < z.n[i]; ++j) sum += std::exp(static_cast<double>(v[j] - m));
      st.mx[i] = ovr ? 0.0f : m;
      st.red[i] = static_cast<float>(sum);
      st.red[count + i] = 0.0f;
    }
  } else {
    backend_->TopK(last, k, &ids, &sc, &labels, &st);
  }
  // The normaliser over all ranks: the largest logit, then every rank's sum rescaled to it.
  std::vector<float> mx = st.mx;
  model_comm_->Allreduce(mx.data(), count, ReduceOp::kMax, Traffic::kEval);
  for (int64_t i = 0; i < count; ++i)
    st.red[i] = st.mx[i] == -std::numeric_limits<float>::infinity()
                    ? 0.0f
                    : st.red[i] * std::exp(st.mx[i] - mx[i]);
  model_comm_->Allreduce(st.red.data(), 2 * count, ReduceOp::kSum, Traffic::kEval);
  // Under one-vs-rest mx is 0 (or -inf where a rank has no neurons): the sums are plain.
  const OutputLoss kind = Loss();
  std::vector<double> log_z(count);
  out->loss.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    log_z[i] = static_cast<double>(mx[i]) + std::log(static_cast<double>(st.red[i]));
    const int64_t nl = labels.Count(i);
    out->loss[i] = approximate ? std::numeric_limits<double>::quiet_NaN()
                   : nl == 0   ? 0.0
                   : kind == OutputLoss::kOneVsRest
                       ? st.red[i] - st.red[count + i]
                       : log_z[i] - st.red[count + i] / static_cast<double>(nl);
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
  out->probs.resize(count * k);
  for (int64_t i = 0; i < count; ++i)
    for (int j = 0; j < k; ++j) {
      const double z = out->logits[i * k + j];
      out->probs[i * k + j] = out->ids[i * k + j] < 0          ? 0.0
                              : kind == OutputLoss::kOneVsRest ? Sigmoid(z)
                                                               : std::exp(z - log_z[i]);
    }
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
    Score(test, b0, B, kmax, &scores, 0, /*approximate=*/sampled);
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
