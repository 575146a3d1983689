// The rules behind "auto"; docs/user-guide.md ("Defaults and how they were chosen") has the
// measurements.
#include "train/auto_settings.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "common/error.h"

namespace dslide {

int64_t AutoBudget(int64_t neurons, bool log_q) {
  // 4 sqrt(n) with the log-Q correction, 2 sqrt(n) without, at least 256; sub-linear growth,
  // so that 10^7 outputs cost 12,650 (6,325) active neurons per sample. Uncorrected, twice
  // 2 sqrt(n) learned about as much per step (P@1 within 0.015 at every evaluation of 1,500
  // iterations on two word tasks and the Amazon-670K shape) at 1.5-1.8 times the cost. The
  // corrected estimator's variance falls with the budget: at 2 sqrt(n) it stayed 0.012-0.024
  // below the dense layer on the Debian and WordNet sets, at 4 sqrt(n) within 0.01 of it or
  // above on every real sampled set (docs/user-guide.md, "Budget").
  const double beta = std::ceil((log_q ? 4.0 : 2.0) * std::sqrt(static_cast<double>(neurons)));
  return std::min(neurons, std::max<int64_t>(256, static_cast<int64_t>(beta)));
}

double SparsityForBudget(int64_t budget, int64_t neurons) {
  DSLIDE_ASSERT(budget >= 1 && budget <= neurons);
  if (budget == neurons) return 1.0;
  double s = static_cast<double>(budget) / static_cast<double>(neurons);
  // ceil(s * n) must give the budget back: step down past any rounding up.
  while (ModelSpec::Budget(s, neurons) > budget) s = std::nextafter(s, 0.0);
  while (ModelSpec::Budget(s, neurons) < budget) s = std::nextafter(s, 1.0);
  return s;
}

void AutoLsh(int64_t neurons, bool sparse_input, LshConfig* lsh) {
  // SimHash for the dense activations a hidden layer passes on (DWTA, made for sparse
  // inputs, scored far below it there), DWTA for a layer that reads the sparse data. K = 6,
  // vanilla queries: larger K and top-k ranking did not score better at 10^3 to 6.7 x 10^5
  // outputs and cost more. Tables: a vanilla query takes whole buckets until the candidates'
  // share is met. Where the buckets overflow (more than 2^K x bucket capacity neurons) 4 to 7
  // full buckets meet it and L = 8 scored as L = 50 (the D-SLIDE paper's) on gcide8-skipgram
  // and a 42.5K-word task, 0.01 below it on the Amazon-670K shape, at 0.56-0.64 times the time
  // per step. Where they do not, a bucket holds n / 2^K neurons (15 for delicious' 983), 8
  // tables leave LSH slots to the fill, and L = 50 it is: delicious with LSH forced, test P@1
  // 0.609 / 0.626 / 0.636 / 0.642 at L = 8 / 16 / 32 / 50 (dense 0.648), 3.5-4.2 ms per step
  // at every L (docs/user-guide.md). Uncorrected (--log-q false), half of the
  // slots beyond the labels go to LSH candidates, half to the fill (the batch's labels,
  // then uniform neurons): with LSH candidates alone, training collapsed below the
  // most-popular-label baseline at 2 x 10^5 and 6.7 x 10^5 outputs; with uniform negatives
  // alone, delicious lost 0.05 P@1. With the log-Q correction a quarter: the fill's batch
  // labels and uniform draws reach the labels the candidates miss, which the correction
  // weighs up (0.25 scored as 0.5 or above on the Debian, WordNet and word sets).
  if (lsh->family == HashFamily::kAuto)
    lsh->family = sparse_input ? HashFamily::kDwta : HashFamily::kSrp;
  if (lsh->k == 0) lsh->k = 6;
  if (lsh->l == 0) {
    const double full = std::ldexp(static_cast<double>(lsh->bucket_capacity), lsh->k);
    lsh->l = static_cast<double>(neurons) > full ? 8 : 50;
  }
  if (lsh->query == QueryStrategy::kAuto) lsh->query = QueryStrategy::kVanilla;
  // With --fill stop nothing fills the rest of the slots: the candidates take them all.
  if (lsh->lsh_share == 0)
    lsh->lsh_share = lsh->fill == FillPolicy::kStop ? 1.0 : lsh->log_q ? 0.25 : 0.5;
}

void ResolveAuto(TrainConfig* cfg, int64_t input_dim, int64_t output_dim) {
  (void)input_dim;
  const size_t n = cfg->hidden.size() + 1;
  auto width = [&](size_t l) { return l + 1 < n ? cfg->hidden[l] : output_dim; };
  // A new model deals labels evenly to the ranks (label_map.h); a resumed one keeps its
  // checkpoint's order (AdoptCheckpointSettings sets it first).
  if (cfg->label_order == LabelOrder::kAuto) cfg->label_order = LabelOrder::kSpread;
  if (cfg->lr == 0) cfg->lr = cfg->reranked ? kRerankLr : kAutoLr;
  if (cfg->sparsity_auto()) {
    // The output layer (the softmax over the labels, where the cost is) by its size; the
    // hidden layers densely, as in the SLIDE papers' experiments, which keeps scoring
    // (eval, predict) exact and independent of how points are batched.
    const int64_t out = output_dim;
    cfg->sparsity = {
        out >= cfg->dense_below ? SparsityForBudget(AutoBudget(out, cfg->lsh.log_q), out) : 1.0};
  }
  // The LSH settings follow the widest sparse layer.
  const std::vector<double> s = cfg->LayerSparsity(n);
  int64_t widest = 0;
  bool sparse_input = false;
  for (size_t l = 0; l < n; ++l)
    if (s[l] < 1.0 && width(l) > widest) {
      widest = width(l);
      sparse_input = l == 0;
    }
  AutoLsh(widest > 0 ? widest : output_dim, sparse_input, &cfg->lsh);
}

double AutoDropout(const TrainConfig& cfg, int64_t train_points) {
  // Where validation sets the length (early stopping) and an epoch is short, training runs
  // through many epochs and overfits without it; one epoch, or the few of a large set that
  // early stopping allows, underfit with it.
  const int64_t epoch = (train_points + cfg.batch - 1) / std::max(1, cfg.batch);
  return cfg.stops_early() && train_points > 0 && epoch <= kAutoDropoutEpochIterations
             ? kAutoDropout
             : 0.0;
}

double MeanLabelsPerPoint(const Dataset& data) {
  int64_t labelled = 0;
  for (int64_t i = 0; i < data.size(); ++i) labelled += data.NumLabels(i) > 0 ? 1 : 0;
  return labelled > 0 ? static_cast<double>(data.labels.size()) / static_cast<double>(labelled)
                      : 0.0;
}

OutputLoss AutoLoss(bool weighed_negatives, double mean_labels) {
  return weighed_negatives && mean_labels >= kAutoOneVsRestLabels ? OutputLoss::kOneVsRest
                                                                  : OutputLoss::kSoftmax;
}

int AutoEnsemble(const TrainConfig& cfg, int64_t train_points) {
  if (cfg.ensemble > 0) return cfg.ensemble;
  // A small set trains in seconds, and its test P@1 moves by up to 0.04 from seed to seed:
  // members trained on different splits average that out at a cost that stays small.
  // In points, not batches: what a member costs, and how much its model moves with the
  // seed, follow the data's size whatever the batch.
  return cfg.stops_early() && train_points > 0 && train_points <= kAutoEnsemblePoints
             ? kAutoEnsemble
             : 1;
}

bool AutoLinear(const TrainConfig& cfg, int members, int64_t features, int64_t labels,
                int64_t nonzeros) {
  if (cfg.linear == 0 || members < 2) return false;
  const double weights = static_cast<double>(features + 1) * static_cast<double>(labels);
  if (cfg.linear == 1) {
    DSLIDE_CHECK(weights <= static_cast<double>(kMaxLinearWeights),
                 "option --linear true: ", features, " features and ", labels, " labels make ",
                 weights, " linear weights, more than the ", kMaxLinearWeights, " it holds");
    return true;
  }
  const double work = static_cast<double>(labels) * static_cast<double>(nonzeros);
  return labels < cfg.dense_below && weights <= static_cast<double>(kAutoLinearWeights) &&
         work <= static_cast<double>(kAutoLinearWork);
}

bool AutoRerank(const TrainConfig& cfg, int members, int64_t train_points, int64_t labels) {
  if (cfg.rerank == 0 || members != 1 || !cfg.resume_dir.empty()) return false;
  if (cfg.rerank == 1) return true;
  return cfg.stops_early() && train_points > 0 && labels >= cfg.dense_below &&
         static_cast<double>(train_points) * static_cast<double>(labels) <=
             static_cast<double>(kAutoRerankScores);
}

int AutoEnsembleOfFile(const TrainConfig& cfg, int64_t file_points) {
  return AutoEnsemble(cfg, cfg.valid_file.empty()
                               ? file_points - HoldoutPoints(file_points, cfg.valid_fraction)
                               : file_points);
}

double FirstLayerLrScale(const Dataset& data) {
  double sum = 0;
  int64_t points = 0;
  for (int64_t i = 0; i < data.size(); ++i) {
    const SparseView x = data.Features(i);
    if (x.n == 0) continue;
    for (int64_t k = 0; k < x.n; ++k) sum += std::abs(static_cast<double>(x.vals[k]));
    ++points;
  }
  if (points == 0 || sum <= 0) return 1.0;
  return std::max(1.0, kFirstLayerL1 / (sum / static_cast<double>(points)));
}

std::vector<float> LabelPriorBiases(const LayerSpec& out, const LabelMap& labels,
                                    const Dataset& data, OutputLoss loss) {
  if (loss == OutputLoss::kOneVsRest) {
    // The log-odds of f = (points with the label + 1) / (points + 2).
    const std::vector<float> f = LabelShares(out, labels, data);
    const double points = static_cast<double>(std::max<int64_t>(1, data.size()));
    std::vector<float> b(f.size());
    for (size_t k = 0; k < f.size(); ++k) {
      const double c = static_cast<double>(f[k]) * points;
      b[k] = static_cast<float>(std::log((c + 1.0) / (points - c + 1.0)));
    }
    return b;
  }
  std::vector<double> share(static_cast<size_t>(out.local()), 0.0);
  for (int64_t i = 0; i < data.size(); ++i) {
    const int64_t n = data.NumLabels(i);
    const int32_t* lab = data.Labels(i);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t neuron = labels.Neuron(lab[j]);
      if (neuron >= out.begin && neuron < out.end) share[neuron - out.begin] += 1.0 / n;
    }
  }
  const double points = static_cast<double>(data.size()), c = static_cast<double>(out.out_dim);
  std::vector<float> b(share.size());
  for (size_t k = 0; k < share.size(); ++k)
    b[k] = static_cast<float>(std::min(0.0, std::log((share[k] + 1.0) / (points + c) * c)));
  return b;
}

std::vector<float> LabelShares(const LayerSpec& out, const LabelMap& labels, const Dataset& data) {
  std::vector<double> count(static_cast<size_t>(out.local()), 0.0);
  for (int64_t i = 0; i < data.size(); ++i) {
    const int32_t* lab = data.Labels(i);
    for (int64_t j = 0; j < data.NumLabels(i); ++j) {
      if (j > 0 && lab[j] == lab[j - 1]) continue;  // a label repeated on a line counts once
      const int64_t neuron = labels.Neuron(lab[j]);
      if (neuron >= out.begin && neuron < out.end) count[neuron - out.begin] += 1.0;
    }
  }
  const double points = static_cast<double>(std::max<int64_t>(1, data.size()));
  std::vector<float> share(count.size());
  for (size_t k = 0; k < count.size(); ++k) share[k] = static_cast<float>(count[k] / points);
  return share;
}

LayerSlots OutputSlots(const ModelSpec& spec, int64_t min_negatives, const Dataset& data) {
  const LayerSpec& out = spec.layers.back();
  const int P = spec.ranks;
  LayerSlots r;
  r.budget = ModelSpec::Budget(out.sparsity, out.out_dim);
  r.min_negatives = out.dense() ? 0 : min_negatives;
  // Every rank's block and budget, as ModelSpec::Make derives them.
  std::vector<int64_t> begin(P + 1), budget(P);
  for (int q = 0; q <= P; ++q) begin[q] = ModelSpec::BlockBegin(out.out_dim, q, P);
  for (int q = 0; q < P; ++q) {
    const int64_t n = begin[q + 1] - begin[q];
    budget[q] = out.dense() ? n : std::min(n, std::max<int64_t>(1, (r.budget + P - 1) / P));
  }
  const int64_t floor_per_rank = out.dense() ? 0 : (min_negatives + P - 1) / P;
  double active = 0, negatives = 0;
  r.min_negatives_seen = out.out_dim;
  std::vector<int64_t> labels_on(P);
  for (int64_t i = 0; i < data.size(); ++i) {
    std::fill(labels_on.begin(), labels_on.end(), 0);
    const int32_t* lab = data.Labels(i);
    for (int64_t j = 0; j < data.NumLabels(i); ++j)
      ++labels_on[std::upper_bound(begin.begin(), begin.end(), spec.labels.Neuron(lab[j])) -
                  begin.begin() - 1];
    int64_t a = 0;
    bool raised = false;
    for (int q = 0; q < P; ++q) {
      const int64_t n = begin[q + 1] - begin[q];
      const int64_t got =
          out.dense() ? n
                      : std::max(labels_on[q],
                                 std::min(n, std::max(budget[q], labels_on[q] + floor_per_rank)));
      raised |= got > budget[q];
      a += got;
    }
    const int64_t neg = a - data.NumLabels(i);
    active += static_cast<double>(a);
    negatives += static_cast<double>(neg);
    r.min_negatives_seen = std::min(r.min_negatives_seen, neg);
    r.raised += raised ? 1 : 0;
  }
  if (data.size() > 0) {
    r.mean_active = active / static_cast<double>(data.size());
    r.mean_negatives = negatives / static_cast<double>(data.size());
  } else {
    r.min_negatives_seen = 0;
  }
  return r;
}

std::string DescribeLayers(const ModelSpec& spec, const TrainConfig& resolved,
                           const TrainConfig& asked, const LayerSlots& out_slots) {
  std::ostringstream os;
  const int P = spec.ranks;
  const LshConfig& a = asked.lsh;
  const LshConfig& c = resolved.lsh;
  auto mark = [](bool is_auto) { return is_auto ? "*" : ""; };
  bool any_auto = false;
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    const LayerSpec& s = spec.layers[l];
    char buf[512];
    std::snprintf(buf, sizeof buf, "  layer %zu (%s): %lld neurons", l + 1,
                  !s.is_output                              ? "hidden, ReLU"
                  : resolved.loss == OutputLoss::kOneVsRest ? "output, one-vs-rest"
                                                            : "output, softmax",
                  (long long)s.out_dim);
    os << buf;
    const bool auto_s = asked.sparsity_auto();
    any_auto |= auto_s;
    if (s.dense()) {
      os << ", dense" << mark(auto_s)
         << (auto_s && s.out_dim < resolved.dense_below ? " (narrower than --dense-below)" : "");
    } else {
      const int64_t beta = ModelSpec::Budget(s.sparsity, s.out_dim);
      std::snprintf(buf, sizeof buf, ", budget %lld%s per sample (s=%.4g)", (long long)beta,
                    mark(auto_s), s.sparsity);
      os << buf;
      if (P > 1) os << ", " << s.budget << " per rank";
      if (P > 1 && s.is_output)
        os << " (labels dealt to ranks: " << ToString(resolved.label_order) << ")";
      if (s.is_output) os << ", >= " << resolved.min_negatives << " negatives beyond its labels";
      if (s.is_output && out_slots.budget > 0) {
        std::snprintf(buf, sizeof buf,
                      " (mean %.1f of %.1f active slots, fewest %lld; %lld points raised)",
                      out_slots.mean_negatives, out_slots.mean_active,
                      (long long)out_slots.min_negatives_seen, (long long)out_slots.raised);
        os << buf;
      }
      const bool auto_lsh = a.family == HashFamily::kAuto || a.k == 0 || a.l == 0 ||
                            a.query == QueryStrategy::kAuto || a.lsh_share == 0;
      any_auto |= auto_lsh;
      os << ", LSH " << ToString(c.family) << mark(a.family == HashFamily::kAuto) << " K=" << c.k
         << mark(a.k == 0) << " L=" << c.l << mark(a.l == 0) << " " << ToString(c.query)
         << mark(a.query == QueryStrategy::kAuto) << ", LSH share " << c.lsh_share
         << mark(a.lsh_share == 0) << " (the rest: fill " << ToString(c.fill) << ")";
      if (s.is_output)
        os << (c.log_q ? ", log-Q corrected" : ", not log-Q corrected (--log-q false)");
    }
    if (s.is_output && asked.loss == OutputLoss::kAuto && resolved.loss == OutputLoss::kOneVsRest &&
        !asked.settings_from_checkpoint)
      os << " (--loss auto: one-vs-rest for at least " << kAutoOneVsRestLabels
         << " labels a training point, the layer dense or log-Q corrected)";
    if (!s.is_output && resolved.dropout > 0)
      os << ", dropout " << resolved.dropout << " in training"
         << (asked.dropout < 0 ? " (--dropout auto: early stopping over epochs of at most " +
                                     std::to_string(kAutoDropoutEpochIterations) + " iterations)"
                               : std::string());
    os << "\n";
  }
  if (any_auto) os << "  (* chosen by auto from the layer's size)\n";
  if (asked.settings_from_checkpoint)
    os << "  (settings left to auto continue those of the resumed checkpoint)\n";
  return os.str();
}

}  // namespace dslide
