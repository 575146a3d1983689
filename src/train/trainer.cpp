// The trainer's model mechanics: the layer-synchronous D-SLIDE forward and backward (per
// layer, select and compute the shard's active neurons and exchange the snapshot, see
// snapshot_exchange.h; the softmax normaliser by all-reduce; the input gradients
// reduce-scattered back), the step around the strategy's update (step_strategy.h), table
// rebuilds, checkpoints of the model, and exact scoring and evaluation. The training loop is
// in training_loop.cpp.
#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>
#include <random>

#include "auto_settings.h"
#include "error.h"
#include "parallel.h"
#include "topk.h"

namespace dslide {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

constexpr int64_t kEvalStreamBase = int64_t{1} << 40;

void DataRows(const Dataset& data, const std::vector<int64_t>& points, BatchRows* rows) {
  const int64_t B = static_cast<int64_t>(points.size());
  rows->off.resize(B);
  rows->n.resize(B);
  int64_t total = 0;
  for (int64_t i = 0; i < B; ++i) {
    rows->off[i] = total;
    rows->n[i] = data.Features(points[i]).n;
    total += rows->n[i];
  }
  rows->ids.resize(total);
  rows->vals.resize(total);
  for (int64_t i = 0; i < B; ++i) {
    const SparseView x = data.Features(points[i]);
    std::copy(x.ids, x.ids + x.n, rows->ids.begin() + rows->off[i]);
    std::copy(x.vals, x.vals + x.n, rows->vals.begin() + rows->off[i]);
  }
  rows->dense = false;
  rows->width = data.num_features;
}

/// The batch's labels as output neurons (`map`), sorted per sample.
BatchLabels Labels(const Dataset& data, const std::vector<int64_t>& points, const LabelMap& map) {
  BatchLabels l;
  for (int64_t p : points) {
    const size_t first = l.ids.size();
    l.ids.insert(l.ids.end(), data.Labels(p), data.Labels(p) + data.NumLabels(p));
    if (!map.identity()) {
      map.ToNeurons(l.ids.data() + first, data.NumLabels(p));
      std::sort(l.ids.begin() + static_cast<std::ptrdiff_t>(first), l.ids.end());
    }
    l.off.push_back(static_cast<int64_t>(l.ids.size()));
  }
  return l;
}

}  // namespace

Trainer::Trainer(const TrainConfig& cfg, Communicator* comm, std::unique_ptr<LayerBackend> backend,
                 int64_t input_dim, int64_t output_dim)
    : asked_(cfg),
      cfg_(cfg),
      comm_(comm),
      strategy_(MakeStepStrategy(cfg.strategy)),
      model_comm_(strategy_->Replicated() ? &replica_comm_ : comm),
      exchange_(model_comm_),
      backend_(std::move(backend)),
      schedule_(cfg.lsh.rebuild_n0, cfg.lsh.rebuild_lambda) {
  ResolveAuto(&cfg_, input_dim, output_dim);
  spec_ = ModelSpec::Make(input_dim, cfg_.hidden, output_dim,
                          cfg_.LayerSparsity(cfg_.hidden.size() + 1), model_comm_->rank(),
                          model_comm_->size(), cfg_.min_negatives);
  spec_.labels = LabelMap(cfg_.label_order == LabelOrder::kSpread, output_dim);
  backend_->Init(spec_, BackendOptions::Of(cfg_));
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
                            const BatchLabels* labels, int64_t stream, bool through_output) {
  // The data rows and labels are all of the batch that goes into the backend.
  DataRows(data, points, backend_->StageRows(0, Rows::kInput));
  backend_->CommitRows(0, Rows::kInput);
  backend_->SetLabels(labels);
  const int n = static_cast<int>(spec_.layers.size());
  const int last = through_output ? n : n - 1;
  for (int l = 0; l < last; ++l) {
    const bool out = spec_.layers[l].is_output;
    auto t0 = Clock::now();
    backend_->BatchSelect(l, out && labels != nullptr, stream);
    auto t1 = Clock::now();
    backend_->BatchForward(l);
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
    backend_->BatchSoftmax(last, kSoftmaxAll, nullptr);
    return;
  }
  SoftmaxStats& st = stats_;
  backend_->BatchSoftmax(last, kSoftmaxMax, &st);
  auto t0 = Clock::now();
  model_comm_->Allreduce(st.mx.data(), B, ReduceOp::kMax, Traffic::kSoftmax);
  phases_.comm += Seconds(t0);
  backend_->BatchSoftmax(last, kSoftmaxSums, &st);
  t0 = Clock::now();
  model_comm_->Allreduce(st.red.data(), 2 * B, ReduceOp::kSum, Traffic::kSoftmax);
  phases_.comm += Seconds(t0);
  backend_->BatchSoftmax(last, kSoftmaxDelta, &st);
}

double Trainer::MeanLoss(const BatchLabels& labels) {
  if (model_comm_->size() > 1) return SoftmaxMeanLoss(stats_, labels);
  DSLIDE_ASSERT(
      std::none_of(pending_.begin(), pending_.end(), [](const Pending& p) { return p.queued; }),
      "a loss read while steps are queued");
  backend_->QueueLoss(static_cast<int>(spec_.layers.size()) - 1);
  const std::vector<LayerBackend::StepStatus> q = backend_->TakeQueued();
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
      const BatchRows& o = backend_->HostRows(l, Rows::kOutput);
      for (int64_t i = 0; i < o.samples() && bad < 0; ++i)
        for (int64_t j = 0; j < o.n[i]; ++j)
          if (!std::isfinite(o.vals[o.off[i] + j])) {
            bad = l;
            break;
          }
    }
    const std::string where =
        bad >= 0 ? " (layer " + std::to_string(bad) + " has NaN or infinite activations)"
        : bad_weights >= 0
            ? " (layer " + std::to_string(bad_weights) + "'s weights became NaN or infinite)"
            : std::string();
    DSLIDE_CHECK(false, "training diverged: non-finite loss at iteration ", iter, where, ". ",
                 divergence_hint_);
  }
  DSLIDE_CHECK(bad_weights < 0, "training diverged: layer ", bad_weights,
               " has NaN or infinite weights after iteration ", iter, ". ", divergence_hint_);
}

std::string DivergenceHint(const Dataset& train, double lr) {
  if (train.max_abs_value > kLargeFeatureValue)
    return detail::Concat("The training data holds a feature value of ", train.max_abs_value, " (",
                          train.max_abs_at.empty() ? "in memory" : train.max_abs_at,
                          "), far beyond what the network's float arithmetic tolerates: scale "
                          "or clip the features (a smaller --lr, now ",
                          lr, ", will not help)");
  return detail::Concat("Try a smaller --lr (now ", lr, ")");
}

double Trainer::Loss(const Dataset& data, const std::vector<int64_t>& points) {
  const BatchLabels labels = Labels(data, points, spec_.labels);
  ForwardHidden(data, points, &labels, iter_, /*through_output=*/true);
  Softmax(labels);
  return MeanLoss(labels);
}

double Trainer::ForwardBackward(const Dataset& data, const std::vector<int64_t>& points) {
  return *Backpropagate(data, points, nullptr);
}

std::optional<double> Trainer::Backpropagate(const Dataset& data,
                                             const std::vector<int64_t>& points,
                                             const AdamStep* step, bool queue) {
  const BatchLabels labels = Labels(data, points, spec_.labels);
  ForwardHidden(data, points, &labels, iter_, /*through_output=*/true);
  Softmax(labels);
  BackwardPass(step);
  // The loss after the backward pass. With one rank and `queue` it waits in the backend
  // with the step's non-finite flags, read at the logging cadence (TakeSteps): the host does
  // not wait for the device per step. A non-finite loss or weights stop the run when read,
  // before the weights they produced are checkpointed.
  if (queue && model_comm_->size() == 1) {
    backend_->QueueLoss(static_cast<int>(spec_.layers.size()) - 1);
    return std::nullopt;
  }
  const double loss = MeanLoss(labels);
  CheckStep({iter_ + 1, loss, 0});
  return loss;
}

void Trainer::BackwardPass(const AdamStep* step) {
  for (int l = static_cast<int>(spec_.layers.size()) - 1; l >= 0; --l) {
    auto t0 = Clock::now();
    const bool need_grad = l > 0;
    // With `step`, a layer's weights are not needed again this step once its input gradient
    // exists, so its update may run inside the same pass.
    backend_->BatchBackward(l, need_grad, step, cfg_.dense_adam);
    (step != nullptr ? phases_.backward_update : phases_.backward) += Seconds(t0);
    if (need_grad) {
      t0 = Clock::now();
      exchange_.PassBackward(backend_.get(), l, segs_[l - 1]);
      phases_.comm += Seconds(t0);
    }
  }
}

void Trainer::QueueStep(const Dataset& data, const std::vector<int64_t>& points) {
  const auto t_start = Clock::now();
  if (pending_.empty()) window_start_ = t_start;
  const DeviceTraffic traffic0 = backend_->Counters();
  AdamStep step;
  step.lr = static_cast<float>(cfg_.lr);
  step.beta1 = static_cast<float>(cfg_.beta1);
  step.beta2 = static_cast<float>(cfg_.beta2);
  step.eps = static_cast<float>(cfg_.eps);
  step.t = iter_ + 1;
  const std::optional<double> loss = strategy_->Step(*this, data, points, step);
  ++iter_;
  Pending p{{iter_, loss.value_or(0.0), 0}, !loss.has_value()};
  if (loss.has_value())  // known now, with the updates' flags (checked when read)
    for (size_t l = 0; l < spec_.layers.size(); ++l)
      if (backend_->TakeNonFinite(static_cast<int>(l))) p.step.bad_layers |= uint64_t{1} << l;
  pending_.push_back(p);
  if (schedule_.Due(iter_)) {
    const auto t0 = Clock::now();
    const bool rehash = cfg_.lsh.rehash_every > 0 && iter_ % cfg_.lsh.rehash_every == 0;
    for (size_t l = 0; l < spec_.layers.size(); ++l)
      if (!spec_.layers[l].dense()) backend_->RebuildTables(static_cast<int>(l), rehash);
    phases_.rebuild += Seconds(t0);
  }
  step_ms_.push_back(Seconds(t_start) * 1e3);
  step_traffic_ = step_traffic_ + (backend_->Counters() - traffic0);
}

double Trainer::Step(const Dataset& data, const std::vector<int64_t>& points) {
  QueueStep(data, points);
  const std::vector<StepLoss> steps = TakeSteps();
  for (const StepLoss& s : steps) CheckStep(s);
  return steps.back().loss;
}

std::vector<Trainer::StepLoss> Trainer::TakeSteps() {
  std::vector<LayerBackend::StepStatus> q;
  if (std::any_of(pending_.begin(), pending_.end(), [](const Pending& p) { return p.queued; })) {
    const DeviceTraffic traffic0 = backend_->Counters();
    q = backend_->TakeQueued();
    step_traffic_ = step_traffic_ + (backend_->Counters() - traffic0);  // the steps' read-back
  }
  if (backend_->Asynchronous() && !pending_.empty()) {
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

void Trainer::SaveCheckpoint(const std::string& dir, int64_t epoch, int64_t pos, int keep) {
  WriteCheckpoint(CheckpointFolder(dir, iter_), epoch, pos);
  if (comm_->rank() == 0) PruneCheckpoints(dir, keep);
}

void Trainer::WriteCheckpoint(const std::string& folder, int64_t epoch, int64_t pos) {
  const std::string tmp = folder + ".tmp";
  // Every rank writes its part, then all agree; a part that failed (a full disk, an I/O
  // error) leaves no .tmp folder behind and the checkpoints written before untouched.
  std::string failed;
  auto attempt = [&](const std::function<void()>& write) {
    if (!failed.empty()) return;
    try {
      write();
    } catch (const Error& e) {
      failed = e.what();
    }
  };
  attempt([&] {
    if (comm_->rank() != 0) return;
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
    std::filesystem::create_directories(tmp, ec);
    DSLIDE_CHECK(!ec, "cannot create the checkpoint folder ", tmp, " (", ec.message(), ")");
  });
  // Collective: true when no rank has failed so far.
  auto agree = [&] {
    int64_t ok = failed.empty() ? 1 : 0;
    comm_->Allreduce(&ok, 1, ReduceOp::kMin, Traffic::kControl);
    return ok == 1;
  };
  bool ok = agree();
  // Data parallelism: the replicas are identical, rank 0 writes the one shard.
  if (ok && strategy_->WritesShard(comm_->rank())) {
    attempt([&] {
      std::vector<LayerState> layers(spec_.layers.size());
      for (size_t l = 0; l < layers.size(); ++l) {
        backend_->SaveLayer(static_cast<int>(l), &layers[l]);
        if (!cfg_.checkpoint_tables) {  // rebuilt from the weights on loading
          layers[l].table_offsets.clear();
          layers[l].table_ids.clear();
          layers[l].table_sizes.clear();
        }
      }
      WriteShard(tmp, model_comm_->rank(), spec_, layers, run_id_, iter_);
      fault_.MaybeFailWrite(comm_->rank(), iter_, tmp + "/rank shard");
    });
  }
  if (ok && comm_->rank() == 0) attempt([&] { WriteMeta(tmp, MetaNow(epoch, pos)); });
  ok = agree();  // every shard is written
  if (ok && comm_->rank() == 0) {
    attempt([&] {
      std::error_code ec;
      std::filesystem::remove_all(folder, ec);
      std::filesystem::rename(tmp, folder, ec);
      DSLIDE_CHECK(!ec, "cannot rename ", tmp, " to ", folder, " (", ec.message(), ")");
    });
  }
  if (agree()) return;
  if (!failed.empty() && comm_->size() > 1) {  // rank 0's message says it with one rank
    std::fprintf(stderr, "[rank %d] dslide error: %s\n", comm_->rank(), failed.c_str());
    std::fflush(stderr);
  }
  if (comm_->rank() == 0) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
  }
  const std::string parent = std::filesystem::path(folder).parent_path().string();
  const std::string newest = LatestCheckpoint(parent);
  const std::string reason = failed.empty() ? "see the rank's error above" : failed;
  throw Stop(1, detail::Concat(
                    "the checkpoint of iteration ", iter_, " could not be written (", reason,
                    "); its partial folder was removed and the checkpoints written before are kept",
                    newest.empty() ? std::string(" (none)") : " (newest: " + newest + ")"));
}

CheckpointMeta Trainer::MetaNow(int64_t epoch, int64_t pos) const {
  CheckpointMeta m =
      MetaOf(spec_, cfg_, model_comm_->size(), iter_, epoch, pos, best_iter_, best_p1_);
  m.settings = SettingsJson(asked_);  // every option as given, from the option table
  m.best_loss = best_loss_;
  m.run_id = run_id_;
  return m;
}

namespace {

/// Collective: the smallest and largest of `v` over the ranks, in one all-reduce.
std::pair<int64_t, int64_t> RangeOverRanks(Communicator* comm, int64_t v) {
  int64_t m[2] = {v, -v};
  comm->Allreduce(m, 2, ReduceOp::kMin, Traffic::kControl);
  return {m[0], -m[1]};
}

}  // namespace

CheckpointMeta Trainer::ResumeNewestIntact(std::string* loaded) {
  const std::vector<std::string> candidates = ResumeCandidates(cfg_.resume_dir, "--resume");
  // Every rank must see the same checkpoints (a folder shared by all ranks).
  const auto [lo, hi] = RangeOverRanks(comm_, static_cast<int64_t>(candidates.size()));
  DSLIDE_CHECK(lo == hi, "option --resume: the ranks see different checkpoints in ",
               cfg_.resume_dir, " (", lo, " to ", hi,
               "); it must be one folder shared by every rank");
  for (const std::string& folder : candidates) {
    std::string damage;
    CheckpointMeta m;
    try {
      m = LoadCheckpoint(folder);
    } catch (const DamagedCheckpoint& e) {
      damage = e.what();
    }
    int64_t ok = damage.empty() ? 1 : 0;
    comm_->Allreduce(&ok, 1, ReduceOp::kMin, Traffic::kControl);
    if (ok) {
      const auto [first, last] = RangeOverRanks(comm_, m.iter);
      DSLIDE_CHECK(first == last, "option --resume: the ranks loaded checkpoints of iterations ",
                   first, " and ", last, " from ", cfg_.resume_dir,
                   "; it must be one folder shared by every rank");
      *loaded = folder;
      return m;
    }
    if (!damage.empty()) {
      std::fprintf(stderr, "[rank %d] warning: skipping the damaged checkpoint %s: %s\n",
                   comm_->rank(), folder.c_str(), damage.c_str());
      std::fflush(stderr);
    }
  }
  throw Error(detail::Concat("option --resume: none of the ", candidates.size(),
                             " checkpoint(s) in ", cfg_.resume_dir,
                             " is intact (see the warnings above)"));
}

int64_t Trainer::CheckpointBytes() const {
  int64_t bytes = 1 << 20;  // metadata, HDF5 structure
  for (const auto& l : spec_.layers) {
    bytes +=
        l.local() * (l.in_dim + 1) * 3 * static_cast<int64_t>(sizeof(float));  // w, b, Adam m, v
    if (!l.dense() && cfg_.checkpoint_tables)  // ids, and a bucket index and size per id at most
      bytes += l.local() * cfg_.lsh.l * 3 * static_cast<int64_t>(sizeof(int32_t));
  }
  return bytes;
}

CheckpointMeta Trainer::LoadCheckpoint(const std::string& folder) {
  CheckpointMeta m = ReadMeta(folder);
  CheckMetaFits(m, folder + "/meta.h5", spec_, cfg_);
  const std::vector<LayerState> states = ReadLayers(folder, m, spec_.layers);
  for (size_t l = 0; l < states.size(); ++l) backend_->LoadLayer(static_cast<int>(l), states[l]);
  iter_ = m.iter;
  best_iter_ = m.best_iter;
  best_p1_ = m.best_p_at_1;
  best_loss_ = m.best_loss;
  schedule_.Reset();
  for (int64_t i = 1; i <= iter_; ++i) schedule_.Due(i);
  return m;
}

void Trainer::Score(const Dataset& data, int64_t b0, int64_t count, int k, Scores* out,
                    int64_t row0) {
  const int P = model_comm_->size();
  const int last = static_cast<int>(spec_.layers.size()) - 1;
  std::vector<int64_t> points(count);
  std::iota(points.begin(), points.end(), b0);
  ForwardHidden(data, points, nullptr, kEvalStreamBase + row0 + b0, /*through_output=*/false);
  const BatchLabels labels = Labels(data, points, spec_.labels);
  std::vector<int32_t> ids, all_ids;
  std::vector<float> sc, all_sc;
  SoftmaxStats st;
  backend_->BatchTopK(last, k, &ids, &sc, &labels, &st);
  // The normaliser over all ranks: the largest logit, then every rank's sum rescaled to it.
  std::vector<float> mx = st.mx;
  model_comm_->Allreduce(mx.data(), count, ReduceOp::kMax, Traffic::kEval);
  for (int64_t i = 0; i < count; ++i)
    st.red[i] = st.mx[i] == -std::numeric_limits<float>::infinity()
                    ? 0.0f
                    : st.red[i] * std::exp(st.mx[i] - mx[i]);
  model_comm_->Allreduce(st.red.data(), 2 * count, ReduceOp::kSum, Traffic::kEval);
  out->log_z.resize(count);
  out->label_logit.resize(count);
  for (int64_t i = 0; i < count; ++i) {
    out->log_z[i] = static_cast<double>(mx[i]) + std::log(static_cast<double>(st.red[i]));
    out->label_logit[i] = st.red[count + i];
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
}

EvalResult Trainer::Evaluate(const Dataset& test, int64_t max_points, bool sampled,
                             const std::vector<int>& ks) {
  const auto t_start = Clock::now();
  const PhaseTimes saved = phases_;
  const int64_t n = max_points > 0 ? std::min(max_points, test.size()) : test.size();
  PrecisionCounter counter(ks);
  const int kmax = counter.max_k();
  const int P = model_comm_->size();
  const int last = static_cast<int>(spec_.layers.size()) - 1;
  const int64_t eb = EvalBlock();
  std::vector<int32_t> ids, all_ids, ranked;
  std::vector<float> sc, all_sc;
  std::vector<int64_t> points;
  Scores scores;
  TopKSelector top;
  double loss = 0;
  int64_t labelled = 0;
  for (int64_t b0 = 0; b0 < n; b0 += eb) {
    const int64_t B = std::min(eb, n - b0);
    if (!sampled) {
      Score(test, b0, B, kmax, &scores);
      for (int64_t i = 0; i < B; ++i) {
        const int64_t nl = test.NumLabels(b0 + i);
        counter.Add(scores.ids.data() + i * kmax, kmax, test.Labels(b0 + i), nl);
        if (nl > 0) {  // the full-softmax cross-entropy, target spread over the labels
          loss += scores.log_z[i] - scores.label_logit[i] / static_cast<double>(nl);
          ++labelled;
        }
      }
      continue;
    }
    points.resize(B);
    std::iota(points.begin(), points.end(), b0);
    const int64_t stream = kEvalStreamBase + b0;
    ForwardHidden(test, points, nullptr, stream, /*through_output=*/false);
    backend_->BatchSelect(last, /*with_labels=*/false, stream);
    backend_->BatchForward(last);
    const BatchRows& z = backend_->HostRows(last, Rows::kOutput);
    ids.resize(B * kmax);
    sc.resize(B * kmax);
    for (int64_t i = 0; i < B; ++i) {
      top.Clear();
      top.PushAll(z.vals.data() + z.off[i], z.ids.data() + z.off[i], z.n[i]);
      top.Take(kmax, ids.data() + i * kmax, sc.data() + i * kmax);
    }
    all_ids.resize(static_cast<size_t>(P) * B * kmax);
    all_sc.resize(all_ids.size());
    const std::vector<int64_t> counts(P, B * kmax);
    model_comm_->Allgatherv(ids.data(), counts, all_ids.data(), Traffic::kEval);
    model_comm_->Allgatherv(sc.data(), counts, all_sc.data(), Traffic::kEval);
    ranked.resize(B * kmax);
    MergeTopKLists(all_ids.data(), all_sc.data(), P, B, kmax, ranked.data(), nullptr);
    spec_.labels.ToLabels(ranked.data(), B * kmax);
    for (int64_t i = 0; i < B; ++i)
      counter.Add(ranked.data() + i * kmax, kmax, test.Labels(b0 + i), test.NumLabels(b0 + i));
  }
  phases_ = saved;  // evaluation time is not training time
  EvalResult r = counter.Result();
  if (!sampled && labelled > 0) r.loss = loss / static_cast<double>(labelled);
  r.seconds = Seconds(t_start);
  return r;
}

void Trainer::SnapshotWeights() {
  const size_t n = spec_.layers.size();
  best_w_.resize(n);
  best_b_.resize(n);
  for (size_t l = 0; l < n; ++l) backend_->GetLayer(static_cast<int>(l), &best_w_[l], &best_b_[l]);
}

void Trainer::RestoreWeights() {
  for (size_t l = 0; l < best_w_.size(); ++l) {
    backend_->SetLayer(static_cast<int>(l), best_w_[l], best_b_[l]);
    if (!spec_.layers[l].dense())
      backend_->RebuildTables(static_cast<int>(l), /*new_hashes=*/false);
  }
}

}  // namespace dslide
