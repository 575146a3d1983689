// The trainer's step: the layer-synchronous D-SLIDE forward and backward (per layer, select
// and compute the shard's active neurons and exchange the snapshot, see snapshot_exchange.h;
// the softmax normaliser by all-reduce; the input gradients reduce-scattered back), the step
// around the strategy's update (step_strategy.h), table rebuilds, and the reading and checking
// of the steps' losses. Checkpoints are in trainer_checkpoint.cpp, scoring and evaluation in
// trainer_scoring.cpp, the training loop in training_loop.cpp.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>

#include "common/error.h"
#include "train/auto_settings.h"
#include "train/batch_input.h"

namespace dslide {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

}  // namespace

Trainer::Trainer(const TrainConfig& cfg, Communicator* comm, std::unique_ptr<LayerBackend> backend,
                 int64_t input_dim, int64_t output_dim, const Dataset* train)
    : asked_(cfg),
      cfg_(cfg),
      comm_(comm),
      strategy_(MakeStepStrategy(cfg.strategy)),
      model_comm_(strategy_->Replicated() ? &replica_comm_ : comm),
      exchange_(model_comm_),
      backend_(std::move(backend)),
      schedule_(cfg.lsh.rebuild_n0, cfg.lsh.rebuild_lambda) {
  ResolveAuto(&cfg_, input_dim, output_dim);
  // Settings left to auto that the training set chooses: rank 0's, broadcast to every rank
  // (`none` without a training set).
  auto from_training = [&](double none, const auto& of) {
    double v = comm_->rank() == 0 && train != nullptr ? of(*train) : none;
    comm_->Broadcast(&v, sizeof v, 0, Traffic::kControl);
    return v;
  };
  if (cfg_.first_lr_scale == 0)  // the training inputs' mean L1 norm
    cfg_.first_lr_scale = from_training(1.0, [](const Dataset& d) { return FirstLayerLrScale(d); });
  if (cfg_.dropout < 0)  // the training set's size
    cfg_.dropout =
        from_training(0.0, [&](const Dataset& d) { return AutoDropout(cfg_, d.size()); });
  spec_ = ModelSpec::Make(input_dim, cfg_.hidden, output_dim,
                          cfg_.LayerSparsity(cfg_.hidden.size() + 1), model_comm_->rank(),
                          model_comm_->size(), cfg_.min_negatives);
  if (cfg_.loss == OutputLoss::kAuto)  // a new model: the output layer and the training labels
    cfg_.loss =
        AutoLoss(spec_.layers.back().dense() || cfg_.lsh.log_q,
                 from_training(0.0, [](const Dataset& d) { return MeanLabelsPerPoint(d); }));
  spec_.labels = LabelMap(cfg_.label_order == LabelOrder::kSpread, output_dim);
  BackendOptions options = BackendOptionsOf(cfg_);
  // A resumed run's biases come from its checkpoint; its first layer's rate, like a new
  // run's, from the training inputs.
  // auto: the prior under one-vs-rest (LabelPriorBiases says why), zeros under the softmax.
  const bool prior = cfg_.output_bias == OutputBias::kPrior ||
                     (cfg_.output_bias == OutputBias::kAuto && cfg_.loss == OutputLoss::kOneVsRest);
  if (train != nullptr && prior && cfg_.resume_dir.empty())
    options.output_bias = LabelPriorBiases(spec_.layers.back(), spec_.labels, *train, cfg_.loss);
  // The log-Q correction's label shares, from the training set (a resumed run's too).
  if (train != nullptr && cfg_.lsh.log_q && !spec_.layers.back().dense())
    options.label_share = LabelShares(spec_.layers.back(), spec_.labels, *train);
  backend_->Init(spec_, options);
  tables_ = TablePlans(spec_, options.seed);
  if (cfg_.scoring_only)  // the weights are loaded next, then the tables built or imported
    tables_.PlanFirst();
  else
    tables_.BuildFirst(backend_.get());
  segs_.resize(spec_.layers.size());
  if (comm_->rank() == 0) {
    std::random_device rd;
    run_id_ = (uint64_t{rd()} << 32 | rd()) ^
              static_cast<uint64_t>(Clock::now().time_since_epoch().count());
    if (run_id_ == 0) run_id_ = 1;  // 0 reads as "no identity" (earlier versions)
  }
  comm_->Broadcast(&run_id_, sizeof run_id_, 0, Traffic::kControl);
}

void Trainer::ForwardHidden(const Dataset& data, const std::vector<int64_t>& points,
                            const BatchLabels* labels, int64_t stream, bool through_output,
                            const DropoutStep* dropout) {
  // The data rows and labels are all of the batch that goes into the backend.
  DataRows(data, points, backend_->HostRows(0, Rows::kInput, Access::kWrite));
  backend_->CommitRows(0, Rows::kInput);
  backend_->SetLabels(labels);
  const int n = static_cast<int>(spec_.layers.size());
  const int last = through_output ? n : n - 1;
  for (int l = 0; l < last; ++l) {
    const bool out = spec_.layers[l].is_output;
    auto t0 = Clock::now();
    backend_->Select(l, out && labels != nullptr, stream);
    auto t1 = Clock::now();
    backend_->Forward(l);
    if (dropout != nullptr && !out) backend_->Dropout(l, *dropout, /*backward=*/false);
    auto t2 = Clock::now();
    phases_.query += std::chrono::duration<double>(t1 - t0).count();
    phases_.forward += std::chrono::duration<double>(t2 - t1).count();
    if (!out) {
      exchange_.PassForward(backend_.get(), spec_.layers[l], l, &segs_[l]);
      phases_.comm += Seconds(t2);
    }
  }
}

void Trainer::Softmax(const BatchLabels& labels) {
  const int last = static_cast<int>(spec_.layers.size()) - 1;
  const int64_t B = static_cast<int64_t>(labels.off.size()) - 1;
  if (model_comm_->size() == 1) {
    // The whole normaliser is local: one call, which a backend may fuse.
    backend_->Softmax(last);
    return;
  }
  // Each rank's max and sums relative to its own max, combined in one all-reduce of four
  // floats per sample (CombineSoftmax) instead of a max and then the sums.
  SoftmaxStats& st = stats_;
  backend_->SoftmaxPartials(last, &st);
  // c: the sample's labels this rank owns, each an active neuron here (a shard's labels are
  // always in its active set), so the label term's slots.
  const LayerSpec& out = spec_.layers[last];
  parts_.resize(B);
  for (int64_t i = 0; i < B; ++i) {
    const int32_t* lb = labels.Of(i);
    int64_t c = 0;
    for (int64_t t = 0; t < labels.Count(i); ++t)
      if ((t == 0 || lb[t] != lb[t - 1]) && lb[t] >= out.begin && lb[t] < out.end) ++c;
    parts_[i] = {st.mx[i], st.red[i], st.red[B + i], static_cast<float>(c)};
  }
  auto t0 = Clock::now();
  model_comm_->AllreduceSoftmax(parts_.data(), B, Traffic::kSoftmax);
  phases_.comm += Seconds(t0);
  // The delta phase divides this rank's exp(z - m) by the normaliser in the same terms:
  // S exp(M - m) (no active logit here: nothing to divide).
  for (int64_t i = 0; i < B; ++i) {
    const double m = st.mx[i];
    st.red[i] = m == -std::numeric_limits<double>::infinity()
                    ? 1.0f
                    : static_cast<float>(parts_[i].s * std::exp(parts_[i].m - m));
  }
  backend_->SoftmaxDelta(last, st);
  // The statistics over every rank, for the loss (MeanLoss).
  for (int64_t i = 0; i < B; ++i) {
    st.mx[i] = parts_[i].m;
    st.red[i] = parts_[i].s;
    st.red[B + i] = parts_[i].t;
  }
}

double Trainer::MeanLoss(const BatchLabels& labels) {
  if (model_comm_->size() > 1) return SoftmaxMeanLoss(stats_, labels, Loss());
  DSLIDE_ASSERT(
      std::none_of(pending_.begin(), pending_.end(), [](const Pending& p) { return p.queued; }),
      "a loss read while steps are queued");
  backend_->QueueStatus(static_cast<int>(spec_.layers.size()) - 1);
  const std::vector<StepStatus> q = backend_->TakeQueued();
  DSLIDE_ASSERT(q.size() == 1);
  CheckStep({iter_ + 1, q[0].loss, q[0].bad_layers});
  return q[0].loss;
}

void Trainer::CheckStep(const StepLoss& s) {
  const int64_t iter = s.iter;
  int bad_weights = -1;  // the first layer whose update went non-finite in this step
  for (int l = 0; l < static_cast<int>(spec_.layers.size()) && bad_weights < 0; ++l)
    if (s.bad_layers >> l & 1) bad_weights = l;
  if (!std::isfinite(s.loss)) {
    // Name the first layer whose activations went bad (on this rank's shard), when they are
    // still those of that step; else the first whose weights did.
    int bad = -1;
    for (int l = 0; l < static_cast<int>(spec_.layers.size()) && bad < 0 && iter >= iter_; ++l) {
      const BatchRows& o = *backend_->HostRows(l, Rows::kOutput, Access::kRead);
      for (int64_t i = 0; i < o.samples() && bad < 0; ++i)
        for (int64_t j = 0; j < o.n[i]; ++j)
          if (!std::isfinite(o.vals[o.off[i] + j])) {
            bad = l;
            break;
          }
    }
    const std::string where =
        // Layers numbered from 1, as the start lines number them.
        bad >= 0 ? " (layer " + std::to_string(bad + 1) + " has NaN or infinite activations)"
        : bad_weights >= 0
            ? " (layer " + std::to_string(bad_weights + 1) + "'s weights became NaN or infinite)"
            : std::string();
    DSLIDE_CHECK(false, "training diverged: non-finite loss at iteration ", iter, where, ". ",
                 divergence_hint_);
  }
  DSLIDE_CHECK(bad_weights < 0, "training diverged: layer ", bad_weights + 1,
               " has NaN or infinite weights after iteration ", iter, ". ", divergence_hint_);
}

std::string DivergenceHint(const Dataset& train, double lr) {
  if (train.max_abs_value > kLargeFeatureValue)
    return detail::Concat(
        "The training data holds a feature value of ", train.max_abs_value, " (",
        train.max_abs_at.empty() ? "in memory" : train.max_abs_at,
        "), far beyond what the network's float arithmetic tolerates: scale or clip the features",
        lr > kLargeLearningRate ? ", and try a smaller --lr (now " : " (a smaller --lr, now ", lr,
        lr > kLargeLearningRate ? ")" : ", will not help on its own)");
  return detail::Concat("Try a smaller --lr (now ", lr, ")");
}

double Trainer::Loss(const Dataset& data, const std::vector<int64_t>& points) {
  const BatchLabels labels = Labels(data, points, spec_.labels);
  const DropoutStep drop = DropoutOf(points);
  ForwardHidden(data, points, &labels, iter_, /*through_output=*/true,
                drop.rate > 0 ? &drop : nullptr);
  Softmax(labels);
  return MeanLoss(labels);
}

DropoutStep Trainer::DropoutOf(const std::vector<int64_t>& points) const {
  DropoutStep d;
  if (cfg_.dropout > 0 && !points.empty()) {
    d.rate = static_cast<float>(cfg_.dropout);
    d.key = DropoutKey(cfg_.seed, iter_, points[0]);
  }
  return d;
}

double Trainer::ForwardBackward(const Dataset& data, const std::vector<int64_t>& points) {
  return *Backpropagate(data, points, nullptr);
}

std::optional<double> Trainer::Backpropagate(const Dataset& data,
                                             const std::vector<int64_t>& points,
                                             const AdamStep* step, bool queue) {
  const BatchLabels labels = Labels(data, points, spec_.labels);
  const DropoutStep drop = DropoutOf(points);
  const DropoutStep* dropout = drop.rate > 0 ? &drop : nullptr;
  ForwardHidden(data, points, &labels, iter_, /*through_output=*/true, dropout);
  Softmax(labels);
  BackwardPass(step, dropout);
  // The loss after the backward pass. With one rank and `queue` it waits in the backend
  // with the step's non-finite flags, read at the logging cadence (TakeSteps): the host does
  // not wait for the device per step. A non-finite loss or weights stop the run when read,
  // before the weights they produced are checkpointed.
  if (queue && model_comm_->size() == 1) {
    backend_->QueueStatus(static_cast<int>(spec_.layers.size()) - 1);
    return std::nullopt;
  }
  const double loss = MeanLoss(labels);
  CheckStep({iter_ + 1, loss, 0});
  return loss;
}

void Trainer::BackwardPass(const AdamStep* step, const DropoutStep* dropout) {
  index_.reset();  // the weights change: an output index of them would be stale
  for (int l = static_cast<int>(spec_.layers.size()) - 1; l >= 0; --l) {
    auto t0 = Clock::now();
    // With `step`, a layer's weights are not needed again this step once its input gradient
    // exists, so its update may run inside the same pass.
    if (step != nullptr) {
      backend_->BackwardStep(l, *step);
      phases_.backward_update += Seconds(t0);
    } else {
      backend_->Backward(l);
      phases_.backward += Seconds(t0);
    }
    if (l > 0) {  // the layer's input gradient, to the layer below
      t0 = Clock::now();
      exchange_.PassBackward(backend_.get(), l, segs_[l - 1]);
      if (dropout != nullptr) backend_->Dropout(l - 1, *dropout, /*backward=*/true);
      phases_.comm += Seconds(t0);
    }
  }
}

void Trainer::QueueStep(const Dataset& data, const std::vector<int64_t>& points) {
  // The weights change (also on a data-parallel replica whose slice of the batch is empty,
  // which takes the others' gradient without a backward pass of its own).
  index_.reset();
  const auto t_start = Clock::now();
  if (pending_.empty()) window_start_ = t_start;
  const DeviceTraffic traffic0 = backend_->Info().traffic;
  AdamStep step;
  step.lr = static_cast<float>(cfg_.lr * lr_scale_);
  step.beta1 = static_cast<float>(cfg_.beta1);
  step.beta2 = static_cast<float>(cfg_.beta2);
  step.eps = static_cast<float>(cfg_.eps);
  step.t = iter_ + 1;
  step.catch_up_first = cfg_.adam_catch_up != CatchUpScope::kNone;
  step.catch_up_rest = cfg_.adam_catch_up == CatchUpScope::kAll;
  step.first_lr_scale = static_cast<float>(cfg_.first_lr_scale);
  const std::optional<double> loss = strategy_->Step(StepContextOf(), data, points, step);
  ++iter_;
  Pending p{{iter_, loss.value_or(0.0), 0}, !loss.has_value()};
  if (loss.has_value()) {  // known now, with the updates' flags (checked when read)
    backend_->QueueStatus(/*loss_layer=*/-1);
    const std::vector<StepStatus> q = backend_->TakeQueued();
    DSLIDE_ASSERT(q.size() == 1, "a step's flags read with steps queued");
    p.step.bad_layers = q[0].bad_layers;
  }
  pending_.push_back(p);
  if (schedule_.Due(iter_)) {
    const auto t0 = Clock::now();
    if (cfg_.lsh.rehash_every > 0 && iter_ % cfg_.lsh.rehash_every == 0)
      tables_.Redraw(backend_.get());
    else
      tables_.Rebuild(backend_.get());
    phases_.rebuild += Seconds(t0);
  }
  step_ms_.push_back(Seconds(t_start) * 1e3);
  step_traffic_ = step_traffic_ + (backend_->Info().traffic - traffic0);
}

double Trainer::Step(const Dataset& data, const std::vector<int64_t>& points) {
  QueueStep(data, points);
  const std::vector<StepLoss> steps = TakeSteps();
  for (const StepLoss& s : steps) CheckStep(s);
  return steps.back().loss;
}

std::vector<Trainer::StepLoss> Trainer::TakeSteps() {
  std::vector<StepStatus> q;
  if (std::any_of(pending_.begin(), pending_.end(), [](const Pending& p) { return p.queued; })) {
    const DeviceTraffic traffic0 = backend_->Info().traffic;
    q = backend_->TakeQueued();
    step_traffic_ = step_traffic_ + (backend_->Info().traffic - traffic0);  // the steps' read-back
  }
  if (backend_->Capabilities().asynchronous && !pending_.empty()) {
    // The steps since the last read ran behind the host: each gets the window's mean time.
    const size_t n = pending_.size();
    const double ms = Seconds(window_start_) * 1e3 / static_cast<double>(n);
    std::fill(step_ms_.end() - static_cast<std::ptrdiff_t>(std::min(n, step_ms_.size())),
              step_ms_.end(), ms);
  }
  std::vector<StepLoss> out;
  size_t k = 0;
  for (const Pending& p : pending_) {
    StepLoss s = p.step;
    if (p.queued) {
      DSLIDE_ASSERT(k < q.size(), "the backend lost a queued loss");
      s.loss = q[k].loss;
      s.bad_layers = q[k].bad_layers;
      ++k;
    }
    out.push_back(s);
  }
  DSLIDE_ASSERT(k == q.size(), "the backend queued a loss of no step");
  pending_.clear();
  return out;
}

StepContext Trainer::StepContextOf() {
  StepContext c;
  c.backpropagate = [this](const Dataset& data, const std::vector<int64_t>& points,
                           const AdamStep* step,
                           bool queue) { return Backpropagate(data, points, step, queue); };
  c.backend = backend_.get();
  c.comm = comm_;
  c.layers = static_cast<int>(spec_.layers.size());
  c.phases = &phases_;
  return c;
}

}  // namespace dslide
