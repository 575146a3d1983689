// The layer-synchronous D-SLIDE step: per layer, select and compute the shard's active
// neurons, Allgatherv the snapshot; softmax normaliser by Allreduce; input gradients by a
// reduce-scatter on the snapshot layout (the exact dual of the gather).
#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <numeric>

#include "auto_settings.h"
#include "error.h"
#include "fault.h"
#include "activation.h"
#include "metrics.h"
#include "stop_signal.h"
#include "parallel.h"
#include "rng.h"
#include "synthetic.h"

namespace dslide {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

constexpr uint64_t kEpochStream = 0x65706f6368;
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

BatchLabels Labels(const Dataset& data, const std::vector<int64_t>& points) {
  BatchLabels l;
  for (int64_t p : points) {
    l.ids.insert(l.ids.end(), data.Labels(p), data.Labels(p) + data.NumLabels(p));
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
      model_comm_(cfg.strategy == Strategy::kDataParallel ? &replica_comm_ : comm),
      exchange_(model_comm_),
      backend_(std::move(backend)),
      schedule_(cfg.lsh.rebuild_n0, cfg.lsh.rebuild_lambda) {
  ResolveAuto(&cfg_, input_dim, output_dim);
  spec_ = ModelSpec::Make(input_dim, cfg_.hidden, output_dim,
                          cfg_.LayerSparsity(cfg_.hidden.size() + 1), model_comm_->rank(),
                          model_comm_->size(), cfg_.min_negatives);
  backend_->Init(spec_, BackendOptions::Of(cfg_));
  const size_t n = spec_.layers.size();
  inputs_.resize(n);
  outputs_.resize(n);
  deltas_.resize(n);
  segs_.resize(n);
}

void Trainer::ForwardHidden(const Dataset& data, const std::vector<int64_t>& points,
                            const BatchLabels* labels, int64_t stream, bool through_output) {
  DataRows(data, points, &inputs_[0]);
  const int n = static_cast<int>(spec_.layers.size());
  const int last = through_output ? n : n - 1;
  for (int l = 0; l < last; ++l) {
    const bool out = spec_.layers[l].is_output;
    auto t0 = Clock::now();
    backend_->SelectActive(l, inputs_[l], out ? labels : nullptr, stream, &outputs_[l]);
    auto t1 = Clock::now();
    backend_->Forward(l, inputs_[l], &outputs_[l]);
    auto t2 = Clock::now();
    phases_.query += std::chrono::duration<double>(t1 - t0).count();
    phases_.forward += std::chrono::duration<double>(t2 - t1).count();
    if (!out) {
      exchange_.Gather(spec_.layers[l], outputs_[l], &inputs_[l + 1], &segs_[l]);
      phases_.comm += Seconds(t2);
    }
  }
}

double Trainer::SoftmaxLoss(const BatchLabels& labels) {
  const int last = static_cast<int>(spec_.layers.size()) - 1;
  const BatchRows& z = outputs_[last];
  const int64_t B = z.samples();
  BatchRows& d = deltas_[last];
  SoftmaxStats st;
  if (model_comm_->size() == 1) {
    // The whole normaliser is local: one call, which a backend may fuse.
    backend_->Softmax(last, z, labels, kSoftmaxAll, &st, &d);
    return SoftmaxMeanLoss(st, labels);
  }
  backend_->Softmax(last, z, labels, kSoftmaxMax, &st, &d);
  auto t0 = Clock::now();
  model_comm_->Allreduce(st.mx.data(), B, ReduceOp::kMax, Traffic::kSoftmax);
  phases_.comm += Seconds(t0);
  backend_->Softmax(last, z, labels, kSoftmaxSums, &st, &d);
  t0 = Clock::now();
  model_comm_->Allreduce(st.red.data(), 2 * B, ReduceOp::kSum, Traffic::kSoftmax);
  phases_.comm += Seconds(t0);
  backend_->Softmax(last, z, labels, kSoftmaxDelta, &st, &d);
  return SoftmaxMeanLoss(st, labels);
}

double Trainer::Loss(const Dataset& data, const std::vector<int64_t>& points) {
  const BatchLabels labels = Labels(data, points);
  ForwardHidden(data, points, &labels, iter_, /*through_output=*/true);
  return SoftmaxLoss(labels);
}

double Trainer::ForwardBackward(const Dataset& data, const std::vector<int64_t>& points) {
  return Backpropagate(data, points, nullptr);
}

double Trainer::Backpropagate(const Dataset& data, const std::vector<int64_t>& points,
                              const AdamStep* step) {
  const BatchLabels labels = Labels(data, points);
  ForwardHidden(data, points, &labels, iter_, /*through_output=*/true);
  const double loss = SoftmaxLoss(labels);
  if (!std::isfinite(loss)) {
    // Name the first layer whose activations went bad (on this rank's shard).
    int bad = -1;
    for (size_t l = 0; l < outputs_.size() && bad < 0; ++l)
      for (int64_t i = 0; i < outputs_[l].samples() && bad < 0; ++i)
        for (int64_t j = 0; j < outputs_[l].n[i]; ++j)
          if (!std::isfinite(outputs_[l].vals[outputs_[l].off[i] + j])) {
            bad = static_cast<int>(l);
            break;
          }
    DSLIDE_CHECK(false, "training diverged: non-finite loss at iteration ", iter_ + 1,
                 bad >= 0 ? " (layer " + std::to_string(bad) + " has NaN or infinite activations)" : "",
                 " (try a smaller --lr)");
  }
  for (int l = static_cast<int>(spec_.layers.size()) - 1; l >= 0; --l) {
    auto t0 = Clock::now();
    const bool need_grad = l > 0;
    if (need_grad) grad_.LikeZero(inputs_[l]);
    if (step != nullptr) {
      // A layer's weights are not needed again this step once its input gradient exists,
      // so its update may run inside the same pass.
      backend_->BackwardUpdate(l, inputs_[l], deltas_[l], need_grad ? &grad_ : nullptr, *step,
                               cfg_.dense_adam);
      phases_.backward_update += Seconds(t0);
    } else {
      backend_->Backward(l, inputs_[l], deltas_[l], need_grad ? &grad_ : nullptr);
      phases_.backward += Seconds(t0);
    }
    if (need_grad) {
      t0 = Clock::now();
      exchange_.ScatterGrad(grad_, segs_[l - 1], outputs_[l - 1], &deltas_[l - 1]);
      ReluBackward(outputs_[l - 1], &deltas_[l - 1]);
      phases_.comm += Seconds(t0);
    }
  }
  return loss;
}

double Trainer::Step(const Dataset& data, const std::vector<int64_t>& points) {
  const auto t_start = Clock::now();
  AdamStep step;
  step.lr = static_cast<float>(cfg_.lr);
  step.beta1 = static_cast<float>(cfg_.beta1);
  step.beta2 = static_cast<float>(cfg_.beta2);
  step.eps = static_cast<float>(cfg_.eps);
  step.t = iter_ + 1;
  const double loss = cfg_.strategy == Strategy::kDataParallel
                          ? DataParallelStep(data, points, step)
                          : Backpropagate(data, points, &step);
  ++iter_;
  for (size_t l = 0; l < spec_.layers.size(); ++l)
    DSLIDE_CHECK(!backend_->TakeNonFinite(static_cast<int>(l)), "training diverged: layer ", l,
                 " has NaN or infinite weights after iteration ", iter_, " (try a smaller --lr)");
  if (schedule_.Due(iter_)) {
    const auto t0 = Clock::now();
    const bool rehash = cfg_.lsh.rehash_every > 0 && iter_ % cfg_.lsh.rehash_every == 0;
    for (size_t l = 0; l < spec_.layers.size(); ++l)
      if (!spec_.layers[l].dense()) backend_->RebuildTables(static_cast<int>(l), rehash);
    phases_.rebuild += Seconds(t0);
  }
  step_ms_.push_back(Seconds(t_start) * 1e3);
  return loss;
}

double Trainer::DataParallelStep(const Dataset& data, const std::vector<int64_t>& points,
                                  const AdamStep& step) {
  // Horovod's algorithm: each replica takes its slice of the global batch, then one
  // all-reduce over a fused buffer of every gradient, then the same update everywhere.
  const int P = comm_->size(), r = comm_->rank();
  const int64_t B = static_cast<int64_t>(points.size());
  const int64_t b0 = B * r / P, b1 = B * (r + 1) / P;
  const std::vector<int64_t> mine(points.begin() + b0, points.begin() + b1);
  double loss = mine.empty() ? 0.0 : Backpropagate(data, mine, nullptr);
  auto t0 = Clock::now();
  const int n = static_cast<int>(spec_.layers.size());
  std::vector<int64_t> at(n + 1, 0);
  for (int l = 0; l < n; ++l) at[l + 1] = at[l] + backend_->GradientSize(l);
  // The fused buffer: in the backend's device memory when MPI can reduce it there (no
  // copies through the host), else in host memory.
  float* fused = backend_->ExchangeBuffer(at[n], /*zero=*/mine.empty());
  const bool on_device = fused != nullptr;
  if (!on_device) {
    fused_.resize(at[n]);
    fused = fused_.data();
    if (mine.empty()) std::fill(fused_.begin(), fused_.end(), 0.0f);
  }
  if (!mine.empty())
    for (int l = 0; l < n; ++l) backend_->ExportGradient(l, fused + at[l]);
  // Each slice's gradient is a mean over its points: weight it by its share of the batch.
  const float share = static_cast<float>(b1 - b0) / static_cast<float>(B);
  if (on_device)
    backend_->ScaleExchange(fused, at[n], share);
  else
    ParallelFor(at[n], [&](int64_t j) { fused[j] *= share; }, 1 << 16);
  phases_.backward += Seconds(t0);
  t0 = Clock::now();
  comm_->Allreduce(fused, at[n], ReduceOp::kSum, Traffic::kGradients);
  phases_.comm += Seconds(t0);
  t0 = Clock::now();
  for (int l = 0; l < n; ++l) backend_->ApplyGradient(l, fused + at[l], step);
  phases_.update += Seconds(t0);
  double weighted = loss * static_cast<double>(b1 - b0);
  comm_->Allreduce(&weighted, 1, ReduceOp::kSum, Traffic::kControl);
  return weighted / static_cast<double>(B);
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
  int64_t ok = failed.empty() ? 1 : 0;
  comm_->Allreduce(&ok, 1, ReduceOp::kMin, Traffic::kControl);
  // Data parallelism: the replicas are identical, rank 0 writes the one shard.
  if (ok && (cfg_.strategy != Strategy::kDataParallel || comm_->rank() == 0)) {
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
      WriteShard(tmp, model_comm_->rank(), spec_, layers);
      fault_.MaybeFailWrite(comm_->rank(), iter_, tmp + "/rank shard");
    });
  }
  if (ok && comm_->rank() == 0) attempt([&] { WriteMeta(tmp, MetaNow(epoch, pos)); });
  ok = failed.empty() ? 1 : 0;
  comm_->Allreduce(&ok, 1, ReduceOp::kMin, Traffic::kControl);  // every shard is written
  if (ok && comm_->rank() == 0) {
    attempt([&] {
      std::error_code ec;
      std::filesystem::remove_all(folder, ec);
      std::filesystem::rename(tmp, folder, ec);
      DSLIDE_CHECK(!ec, "cannot rename ", tmp, " to ", folder, " (", ec.message(), ")");
    });
  }
  ok = failed.empty() ? 1 : 0;
  comm_->Allreduce(&ok, 1, ReduceOp::kMin, Traffic::kControl);
  if (ok) return;
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
  throw Stop(1, detail::Concat("the checkpoint of iteration ", iter_, " could not be written (", failed.empty()
                                                                                          ? "see the rank's error above"
                                                                                          : failed,
                       "); its partial folder was removed and the checkpoints written before are kept",
                       newest.empty() ? std::string(" (none)") : " (newest: " + newest + ")"));
}

CheckpointMeta Trainer::MetaNow(int64_t epoch, int64_t pos) const {
  return MetaOf(spec_, cfg_, model_comm_->size(), iter_, epoch, pos, best_iter_, best_p1_);
}

CheckpointMeta Trainer::ResumeNewestIntact() {
  const std::vector<std::string> candidates = ResumeCandidates(cfg_.resume_dir, "--resume");
  // Every rank must see the same checkpoints (a folder shared by all ranks).
  int64_t lo = static_cast<int64_t>(candidates.size()), hi = lo;
  comm_->Allreduce(&lo, 1, ReduceOp::kMin, Traffic::kControl);
  comm_->Allreduce(&hi, 1, ReduceOp::kMax, Traffic::kControl);
  DSLIDE_CHECK(lo == hi, "option --resume: the ranks see different checkpoints in ", cfg_.resume_dir, " (", lo,
               " to ", hi, "); it must be one folder shared by every rank");
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
      int64_t first = m.iter, last = m.iter;
      comm_->Allreduce(&first, 1, ReduceOp::kMin, Traffic::kControl);
      comm_->Allreduce(&last, 1, ReduceOp::kMax, Traffic::kControl);
      DSLIDE_CHECK(first == last, "option --resume: the ranks loaded checkpoints of iterations ", first, " and ",
                   last, " from ", cfg_.resume_dir, "; it must be one folder shared by every rank");
      return m;
    }
    if (!damage.empty()) {
      std::fprintf(stderr, "[rank %d] warning: skipping the damaged checkpoint %s: %s\n", comm_->rank(),
                   folder.c_str(), damage.c_str());
      std::fflush(stderr);
    }
  }
  throw Error(detail::Concat("option --resume: none of the ", candidates.size(), " checkpoint(s) in ",
                             cfg_.resume_dir, " is intact (see the warnings above)"));
}

int64_t Trainer::CheckpointBytes() const {
  int64_t bytes = 1 << 20;  // metadata, HDF5 structure
  for (const auto& l : spec_.layers) {
    bytes += l.local() * (l.in_dim + 1) * 3 * static_cast<int64_t>(sizeof(float));  // w, b, Adam m, v
    if (!l.dense() && cfg_.checkpoint_tables)  // ids, and a bucket index and size per id at most
      bytes += l.local() * cfg_.lsh.l * 3 * static_cast<int64_t>(sizeof(int32_t));
  }
  return bytes;
}

CheckpointMeta Trainer::LoadCheckpoint(const std::string& folder) {
  const CheckpointMeta m = ReadMeta(folder);
  CheckMetaFits(m, folder + "/meta.h5", spec_, cfg_);
  const std::vector<LayerState> states = ReadLayers(folder, m, spec_.layers);
  for (size_t l = 0; l < states.size(); ++l) backend_->LoadLayer(static_cast<int>(l), states[l]);
  iter_ = m.iter;
  best_iter_ = m.best_iter;
  best_p1_ = m.best_p_at_1;
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
  const BatchLabels labels = Labels(data, points);
  std::vector<int32_t> ids, all_ids;
  std::vector<float> sc, all_sc;
  SoftmaxStats st;
  backend_->TopK(last, inputs_[last], k, &ids, &sc, &labels, &st);
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
  MergeTopK(all_ids, all_sc, P, count, k, &out->ids, &out->logits);
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
    BatchRows& z = outputs_[last];
    backend_->SelectActive(last, inputs_[last], nullptr, stream, &z);
    backend_->Forward(last, inputs_[last], &z);
    ids.assign(B * kmax, -1);
    sc.assign(B * kmax, -std::numeric_limits<float>::infinity());
    for (int64_t i = 0; i < B; ++i) {
      std::vector<std::pair<float, int32_t>> c;
      for (int64_t j = 0; j < z.n[i]; ++j) c.push_back({z.vals[z.off[i] + j], z.ids[z.off[i] + j]});
      const size_t take = std::min<size_t>(kmax, c.size());
      std::partial_sort(c.begin(), c.begin() + take, c.end(), [](const auto& a, const auto& b) {
        return a.first != b.first ? a.first > b.first : a.second < b.second;
      });
      for (size_t j = 0; j < take; ++j) {
        sc[i * kmax + j] = c[j].first;
        ids[i * kmax + j] = c[j].second;
      }
    }
    all_ids.resize(static_cast<size_t>(P) * B * kmax);
    all_sc.resize(all_ids.size());
    const std::vector<int64_t> counts(P, B * kmax);
    model_comm_->Allgatherv(ids.data(), counts, all_ids.data(), Traffic::kEval);
    model_comm_->Allgatherv(sc.data(), counts, all_sc.data(), Traffic::kEval);
    MergeTopK(all_ids, all_sc, P, B, kmax, &ranked);
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
    if (!spec_.layers[l].dense()) backend_->RebuildTables(static_cast<int>(l), /*new_hashes=*/false);
  }
}

EvalResult Trainer::Run(const Dataset& train, const Dataset* valid, const Dataset* test) {
  const int64_t N = train.size();
  DSLIDE_CHECK(N > 0, "the training file has no points");
  const int64_t B = cfg_.batch;
  const int64_t per_epoch = (N + B - 1) / B;
  const int64_t total = cfg_.iterations > 0
                            ? cfg_.iterations
                            : std::max<int64_t>(1, static_cast<int64_t>(std::ceil(cfg_.epochs * per_epoch)));
  const bool root = comm_->rank() == 0;
  // Evaluations during training score the validation data; without it, the test data
  // (monitoring only: nothing is selected on it).
  const Dataset* monitor = valid != nullptr ? valid : test;
  const char* monitor_name = valid != nullptr ? "valid" : "test ";
  const bool keep_best = valid != nullptr && cfg_.keep_best != 0;
  int64_t eval_every = cfg_.eval_every;
  if (eval_every == 0 && valid != nullptr) eval_every = std::max(per_epoch, (total + 9) / 10);
  // The most-popular-label baseline of each evaluation set, printed beside its P@1.
  const double monitor_base = monitor ? MostPopularLabelP1(train, *monitor, cfg_.eval_points) : 0;
  const double test_base = test ? MostPopularLabelP1(train, *test, cfg_.eval_points) : 0;
  MetricsFile metrics(root ? cfg_.metrics_file : "");
  auto base = [&](JsonObject& o) {
    o.Add("ranks", comm_->size()).Add("threads", NumThreads()).Add("device", ToString(cfg_.device))
        .Add("strategy", ToString(cfg_.strategy));
  };
  const LayerSlots slots = OutputSlots(spec_, cfg_.min_negatives, train);
  if (root) {
    std::printf("dslide: %lld training points, %lld features, %lld labels | %lld parameters | "
                "%d rank(s) x %d thread(s) | %lld iterations (%.2f epochs) of batch %lld, lr %g\n",
                (long long)N, (long long)spec_.layers[0].in_dim, (long long)spec_.layers.back().out_dim,
                (long long)spec_.NumParameters(), comm_->size(), NumThreads(), (long long)total,
                static_cast<double>(total) / per_epoch, (long long)B, cfg_.lr);
    std::printf("%s", DescribeLayers(spec_, cfg_, asked_, slots).c_str());
    if (!asked_.sparsity_auto() && !asked_.settings_from_checkpoint && slots.raised > 0 &&
        !spec_.layers.back().dense())
      std::printf("warning: --sparsity %g gives the output layer a budget of %lld per sample, which "
                  "leaves fewer than %lld negatives beyond the labels of %lld of the %lld training "
                  "points; their active sets are raised to their labels + %lld (--min-negatives)\n",
                  spec_.layers.back().sparsity, (long long)slots.budget, (long long)cfg_.min_negatives,
                  (long long)slots.raised, (long long)N, (long long)cfg_.min_negatives);
    if (valid != nullptr)
      std::printf("validation: %lld points, evaluated every %lld iterations%s\n",
                  (long long)valid->size(), (long long)eval_every,
                  keep_best ? "; the best P@1 is kept (--keep-best)" : "");
    std::fflush(stdout);
    JsonObject o;
    o.Add("event", "start").Add("points", N).Add("features", spec_.layers[0].in_dim)
        .Add("labels", spec_.layers.back().out_dim).Add("parameters", spec_.NumParameters())
        .Add("iterations", total).Add("batch", B).Add("lr", cfg_.lr);
    std::string layers = "[";
    for (size_t l = 0; l < spec_.layers.size(); ++l) {
      const LayerSpec& s = spec_.layers[l];
      JsonObject lo;
      lo.Add("neurons", s.out_dim).Add("sparsity", s.sparsity)
          .Add("budget", ModelSpec::Budget(s.sparsity, s.out_dim)).Add("budget_per_rank", s.budget)
          .Add("auto", asked_.sparsity_auto() ? 1 : 0);
      if (!s.dense()) {
        lo.Add("min_negatives", cfg_.min_negatives).Add("hash", ToString(cfg_.lsh.family))
            .Add("K", cfg_.lsh.k).Add("L", cfg_.lsh.l).Add("query", ToString(cfg_.lsh.query));
        if (s.is_output)
          lo.Add("mean_active", slots.mean_active).Add("mean_negatives", slots.mean_negatives)
              .Add("fewest_negatives", slots.min_negatives_seen);
      }
      layers += (l ? "," : "") + lo.str();
    }
    o.AddRaw("layers", layers + "]");
    if (valid != nullptr) o.Add("valid_points", valid->size()).Add("eval_every", eval_every);
    base(o);
    metrics.Write(o);
  }
  std::vector<int64_t> order(N), points;
  int64_t epoch = -1, pos = N;
  const auto t_run = Clock::now();
  auto t_last = Clock::now();
  int64_t iter_last = 0;
  size_t ms_from = step_ms_.size();
  TrafficStats comm_last = comm_->Total();
  double loss_sum = 0;
  int64_t loss_n = 0;
  EvalResult last_eval;
  int64_t saved_iter = -1;
  auto report = [&](const char* name, int64_t at, const EvalResult& e, double baseline,
                    const char* note) {
    if (!root) return;
    std::printf("%s iter %lld | P@1 %.4f P@3 %.4f P@5 %.4f | loss %s | most-popular-label P@1 %.4f | "
                "%lld points in %.1fs%s%s\n",
                name, (long long)at, e.At(1), e.At(3), e.At(5),
                std::isnan(e.loss) ? "-" : std::to_string(e.loss).substr(0, 6).c_str(), baseline,
                (long long)e.points, e.seconds, cfg_.eval_sampled ? " (LSH-sampled)" : "", note);
    std::fflush(stdout);
  };
  auto metrics_eval = [&](const char* set, const EvalResult& e, double baseline, int64_t model_iter) {
    if (!root) return;
    JsonObject o;
    o.Add("iter", iter_).Add("epoch", static_cast<double>(iter_) / per_epoch).Add("set", set)
        .Add("p_at_1", e.At(1)).Add("p_at_3", e.At(3)).Add("p_at_5", e.At(5))
        .Add("most_popular_label_p_at_1", baseline).Add("eval_points", e.points)
        .Add("eval_s", e.seconds);
    if (!std::isnan(e.loss)) o.Add("eval_loss", e.loss);
    if (model_iter >= 0) o.Add("model_iter", model_iter);
    base(o);
    metrics.Write(o);
  };
  auto evaluate = [&]() {
    if (monitor == nullptr) return;
    const TrafficStats before = comm_->Total();
    last_eval = Evaluate(*monitor, cfg_.eval_points, cfg_.eval_sampled);
    evals_.push_back({iter_, last_eval});
    // Evaluation traffic is reported on its own line, not in training's per-iteration figures.
    comm_last.bytes += comm_->Total().bytes - before.bytes;
    comm_last.seconds += comm_->Total().seconds - before.seconds;
    const bool better = keep_best && last_eval.points > 0 && last_eval.At(1) > best_p1_;
    report(monitor_name, iter_, last_eval, monitor_base, better && best_iter_ >= 0 ? " (best so far)" : "");
    metrics_eval(valid != nullptr ? "valid" : "test", last_eval, monitor_base, -1);
    if (better) {
      best_p1_ = last_eval.At(1);
      best_iter_ = iter_;
      SnapshotWeights();
      if (!cfg_.checkpoint_dir.empty()) WriteCheckpoint(cfg_.checkpoint_dir + "/best", epoch, pos);
    }
  };
  auto shuffle = [&](int64_t e) {
    std::iota(order.begin(), order.end(), 0);
    Rng rng(StreamSeed(cfg_.seed, kEpochStream, e));
    for (int64_t i = N - 1; i > 0; --i) std::swap(order[i], order[rng.Below(i + 1)]);
  };
  std::string resumed_from;
  if (!cfg_.resume_dir.empty()) {
    const auto t_load = Clock::now();
    const CheckpointMeta m = ResumeNewestIntact();
    double load_s = Seconds(t_load);
    comm_->Allreduce(&load_s, 1, ReduceOp::kMax, Traffic::kControl);
    const std::string folder = CheckpointFolder(cfg_.resume_dir, m.iter);
    resumed_from = std::filesystem::exists(cfg_.resume_dir + "/meta.h5") ? cfg_.resume_dir : folder;
    DSLIDE_CHECK(m.pos <= N, folder, ": data position ", m.pos, " is beyond the ", N,
                 " training points (a different --train file?)");
    epoch = m.epoch;
    pos = m.pos;
    if (epoch >= 0) shuffle(epoch);
    saved_iter = iter_;
    if (root) {
      std::printf("resumed from %s at iteration %lld (epoch %lld, point %lld), read in %.2fs\n", resumed_from.c_str(),
                  (long long)iter_, (long long)epoch, (long long)pos, load_s);
      std::fflush(stdout);
    }
    // The best model before the interruption competes on: its weights from
    // CHECKPOINT_DIR/best when that holds it (also when it was saved after the checkpoint
    // resumed from), else selection starts afresh.
    const std::string best = cfg_.checkpoint_dir.empty() ? "" : cfg_.checkpoint_dir + "/best";
    bool found = false;
    int64_t has_best = keep_best && !best.empty() && std::filesystem::exists(best + "/meta.h5") ? 1 : 0;
    comm_->Allreduce(&has_best, 1, ReduceOp::kMin, Traffic::kControl);  // every rank sees it, or none uses it
    if (has_best) {
      std::string damage;
      try {
        const CheckpointMeta bm = ReadMeta(best);
        const bool same = best_iter_ >= 0 && bm.iter == best_iter_;
        const bool later = bm.iter > iter_ && bm.best_iter == bm.iter && bm.best_p_at_1 > best_p1_;
        if (same || later) {
          const std::vector<LayerState> st = ReadLayers(best, bm, spec_.layers, /*weights_only=*/true);
          best_w_.resize(st.size());
          best_b_.resize(st.size());
          for (size_t l = 0; l < st.size(); ++l) {  // rows per neuron, as GetLayer gives them
            best_w_[l] = st[l].w;
            best_b_[l] = st[l].b;
          }
          best_iter_ = bm.iter;
          best_p1_ = bm.best_p_at_1;
          found = true;
        }
      } catch (const DamagedCheckpoint& e) {
        damage = e.what();
      }
      int64_t all_found = found ? 1 : 0;  // every rank restores the best model, or none does
      comm_->Allreduce(&all_found, 1, ReduceOp::kMin, Traffic::kControl);
      if (!damage.empty()) {
        std::fprintf(stderr, "[rank %d] warning: the best model in %s is damaged: %s\n", comm_->rank(),
                     best.c_str(), damage.c_str());
        std::fflush(stderr);
      }
      found = all_found == 1;
    }
    if (root && keep_best && (found || best_iter_ >= 0)) {
      std::printf(found ? "the best model so far is that of iteration %lld (valid P@1 %.4f), in %s\n"
                        : "the best model so far (iteration %lld, valid P@1 %.4f) is not in %s: "
                          "selection starts afresh\n",
                  (long long)best_iter_, best_p1_, best.empty() ? "(no --checkpoint-dir)" : best.c_str());
      std::fflush(stdout);
    }
    if (!found) {
      best_iter_ = -1;
      best_p1_ = -1;
    }
  }
  if (root && !resumed_from.empty()) {
    JsonObject o;
    o.Add("event", "resume").Add("iter", iter_).Add("from", resumed_from);
    base(o);
    metrics.Write(o);
  }
  // Storage problems show now, not at the first checkpoint.
  if (!cfg_.checkpoint_dir.empty() || !cfg_.save_dir.empty()) {
    int64_t bytes = CheckpointBytes();
    if (!cfg_.checkpoint_dir.empty()) {
      // Every shard of a checkpoint, when the folder is shared (one shard: data parallelism).
      int64_t all = bytes;
      model_comm_->Allreduce(&all, 1, ReduceOp::kSum, Traffic::kControl);
      CheckWritableDir(cfg_.checkpoint_dir, root ? all : bytes, "--checkpoint-dir");
    }
    if (!cfg_.save_dir.empty()) {
      // --save replaces its folder: never one that is not a checkpoint, nor the checkpoints.
      namespace fs = std::filesystem;
      while (cfg_.save_dir.size() > 1 && cfg_.save_dir.back() == '/') cfg_.save_dir.pop_back();
      std::error_code ec;
      const fs::path save = fs::weakly_canonical(cfg_.save_dir, ec);
      DSLIDE_CHECK(!fs::exists(save) || fs::exists(save / "meta.h5") ||
                       (fs::is_directory(save) && fs::is_empty(save)),
                   "option --save: ", cfg_.save_dir, " exists and is not a checkpoint folder (it would be replaced)");
      if (!cfg_.checkpoint_dir.empty()) {
        const fs::path ck = fs::weakly_canonical(cfg_.checkpoint_dir, ec);
        const auto rel = ck.lexically_relative(save);
        DSLIDE_CHECK(save != ck && (rel.empty() || *rel.begin() == ".."), "option --save: ", cfg_.save_dir,
                     " is or holds --checkpoint-dir ", cfg_.checkpoint_dir, " (it would be replaced)");
      }
      const std::filesystem::path parent = std::filesystem::path(cfg_.save_dir).parent_path();
      CheckWritableDir(parent.empty() ? "." : parent.string(), bytes, "--save");
    }
    if (root && cfg_.checkpoint_every > total - iter_ && total > iter_)
      std::printf("note: --checkpoint-every %lld is more than the %lld iterations left: only the final "
                  "checkpoint will be written\n",
                  (long long)cfg_.checkpoint_every, (long long)(total - iter_));
  }
  // Divergence: a step's loss far above its running level (a finite blow-up: a NaN or
  // infinite loss is an error of its own, in Backpropagate). The level starts at the loss of
  // a model that knows nothing (log of the active slots per sample), so early steps cannot
  // trip it.
  const double uninformed = std::log(std::max(2.0, spec_.layers.back().dense()
                                                       ? static_cast<double>(spec_.layers.back().out_dim)
                                                       : slots.mean_active));
  double level = -1;
  const int64_t iter_start = iter_;
  iter_last = iter_;
  auto stop_line = [&](const char* event, const std::string& text, const std::string& checkpoint) {
    if (!root) return;
    JsonObject o;
    o.Add("event", event).Add("iter", iter_).Add("message", text);
    if (!checkpoint.empty()) o.Add("checkpoint", checkpoint);
    base(o);
    metrics.Write(o);
  };
  // A checkpoint of this iteration, its size and time on the progress output and in --metrics.
  auto save = [&]() {
    const auto t0 = Clock::now();
    SaveCheckpoint(cfg_.checkpoint_dir, epoch, pos, cfg_.keep_checkpoints);
    double seconds = Seconds(t0);
    comm_->Allreduce(&seconds, 1, ReduceOp::kMax, Traffic::kControl);
    if (!root) return;
    const std::string folder = CheckpointFolder(cfg_.checkpoint_dir, iter_);
    std::error_code ec;
    double bytes = 0;
    for (const auto& e : std::filesystem::directory_iterator(folder, ec))
      bytes += static_cast<double>(std::filesystem::file_size(e.path(), ec));
    std::printf("checkpoint %s: %.1f MB in %.2fs\n", folder.c_str(), bytes / (1 << 20), seconds);
    std::fflush(stdout);
    JsonObject o;
    o.Add("event", "checkpoint").Add("iter", iter_).Add("path", folder).Add("bytes", bytes)
        .Add("seconds", seconds);
    base(o);
    metrics.Write(o);
  };
  while (iter_ < total) {
    fault_.MaybeFire(comm_->rank(), iter_ + 1);
    if (pos >= N) {
      shuffle(++epoch);
      pos = 0;
    }
    const int64_t b = std::min(B, N - pos);
    points.assign(order.begin() + pos, order.begin() + pos + b);
    pos += b;
    const double step_loss = Step(train, points);
    loss_sum += step_loss;
    ++loss_n;
    // One agreement per step, with more than one rank: a stop signal, or a loss far above
    // its running level, on any rank stops every rank.
    const double ref = std::max(level, uninformed);
    int64_t flags[2] = {StopSignal(), cfg_.divergence_factor > 0 && step_loss > cfg_.divergence_factor * ref};
    if (comm_->size() > 1) comm_->Allreduce(flags, 2, ReduceOp::kMax, Traffic::kControl);
    if (flags[1] != 0) {
      const std::string newest = cfg_.checkpoint_dir.empty() ? "" : LatestCheckpoint(cfg_.checkpoint_dir);
      const std::string text = detail::Concat(
          "training diverged at iteration ", iter_, ": the sampled loss ", step_loss, " is more than ",
          cfg_.divergence_factor, " times its running level ", ref,
          " (--divergence-factor); no checkpoint was written of it",
          newest.empty() ? std::string("") : "; the last good one is " + newest, ". Try a smaller --lr (now ",
          cfg_.lr, ")");
      stop_line("diverged", text, newest);
      throw Stop(kExitDiverged, text);
    }
    level = level < 0 ? step_loss : 0.95 * level + 0.05 * step_loss;
    const bool log = iter_ % cfg_.log_every == 0 || iter_ == total;
    if (log) {
      double rss = PeakRssMb();
      comm_->Allreduce(&rss, 1, ReduceOp::kMax, Traffic::kControl);
      const TrafficStats now = comm_->Total();
      const int64_t its = iter_ - iter_last;
      const double wall = Seconds(t_last);
      const std::vector<double> ms(step_ms_.begin() + ms_from, step_ms_.end());
      const double bytes = static_cast<double>(now.bytes - comm_last.bytes) / its;
      const double comm_ms = (now.seconds - comm_last.seconds) * 1e3 / its;
      const double sps = its * static_cast<double>(B) / wall;
      const double loss = loss_sum / loss_n;
      if (root) {
        const double eta = Seconds(t_run) / (iter_ - iter_start) * (total - iter_);
        std::printf("iter %lld/%lld | epoch %.2f | %.0f samples/s | sampled loss %.4f | last P@1 %s | "
                    "%.1f ms/iter | %.0f KB sent/iter | RSS %.0f MB | ETA %s\n",
                    (long long)iter_, (long long)total, static_cast<double>(iter_) / per_epoch, sps,
                    loss, last_eval.points ? std::to_string(last_eval.At(1)).substr(0, 6).c_str() : "-",
                    Median(ms), bytes / 1024, rss, FormatDuration(eta).c_str());
        std::fflush(stdout);
        JsonObject o;
        o.Add("iter", iter_).Add("epoch", static_cast<double>(iter_) / per_epoch).Add("loss", loss)
            .Add("ms_per_iter", Median(ms)).Add("samples_per_s", sps)
            .Add("bytes_sent_per_iter", bytes).Add("comm_ms_per_iter", comm_ms)
            .Add("peak_rss_mb", rss);
        base(o);
        metrics.Write(o);
      }
      t_last = Clock::now();
      iter_last = iter_;
      ms_from = step_ms_.size();
      comm_last = comm_->Total();
      loss_sum = 0;
      loss_n = 0;
    }
    // Evaluation first, so that a checkpoint of this iteration records its selection.
    if (eval_every > 0 && iter_ % eval_every == 0 && iter_ < total) evaluate();
    if (cfg_.checkpoint_every > 0 && iter_ % cfg_.checkpoint_every == 0) {
      save();
      saved_iter = iter_;
    }
    // A stop signal on any rank (agreed above) stops every rank after this step; one rank
    // alone also sees a signal that came during the evaluation or checkpoint.
    const int64_t sig = comm_->size() > 1 ? flags[0] : StopSignal();
    if (sig != 0 && iter_ < total) {
      std::string where;
      if (!cfg_.checkpoint_dir.empty()) {
        if (saved_iter != iter_) save();
        saved_iter = iter_;
        where = CheckpointFolder(cfg_.checkpoint_dir, iter_);
      }
      const std::string text =
          where.empty()
              ? detail::Concat("stopped by ", SignalName(static_cast<int>(sig)), " at iteration ", iter_, " of ",
                               total, "; nothing was saved (no --checkpoint-dir)")
              : detail::Concat("stopped by ", SignalName(static_cast<int>(sig)), " at iteration ", iter_, " of ",
                               total, "; checkpoint written to ", where, ": continue with --resume ",
                               cfg_.checkpoint_dir);
      stop_line("stopped", text, where);
      throw Stop(kExitStopped, text);
    }
  }
  evaluate();
  // The last state, for resuming or scoring later (also when no periodic checkpoint fell on
  // the last iteration).
  if (!cfg_.checkpoint_dir.empty() && saved_iter != iter_)
    save();
  int64_t model_iter = iter_;
  if (keep_best && best_iter_ >= 0 && best_iter_ != iter_) {
    RestoreWeights();
    model_iter = best_iter_;
  }
  if (keep_best && root && best_iter_ >= 0) {
    std::printf("kept the model of iteration %lld (best valid P@1 %.4f)%s%s\n", (long long)best_iter_,
                best_p1_, cfg_.checkpoint_dir.empty() ? "" : ", saved in ",
                cfg_.checkpoint_dir.empty() ? "" : (cfg_.checkpoint_dir + "/best").c_str());
    std::fflush(stdout);
  }
  if (!cfg_.save_dir.empty()) {
    const int64_t now = iter_;
    iter_ = model_iter;  // the weights written are those of the selected iteration
    WriteCheckpoint(cfg_.save_dir, epoch, pos);
    iter_ = now;
    if (root) {
      std::printf("saved the model of iteration %lld to %s\n", (long long)model_iter, cfg_.save_dir.c_str());
      std::fflush(stdout);
    }
  }
  if (valid != nullptr && test != nullptr) {
    // The one score of the test data, on the selected model.
    last_eval = Evaluate(*test, cfg_.eval_points, cfg_.eval_sampled);
    char note[96];
    std::snprintf(note, sizeof note, " (after %lld iterations)", (long long)iter_);
    report("test ", model_iter, last_eval, test_base, model_iter != iter_ ? note : "");
    metrics_eval("test", last_eval, test_base, model_iter);
  }
  return last_eval;
}

EvalResult RunTraining(const TrainConfig& asked, Communicator* comm) {
  TrainConfig cfg = asked;
  SetNumThreads(cfg.threads);
  Dataset train = ReadXc(cfg.train_file);
  auto check_header = [&](const Dataset& d, const std::string& file) {
    DSLIDE_CHECK(d.num_features == train.num_features && d.num_labels == train.num_labels, file,
                 ":1: header says ", d.num_features, " features and ", d.num_labels,
                 " labels, the training file ", train.num_features, " and ", train.num_labels);
  };
  Dataset valid, test;
  if (!cfg.valid_file.empty()) {
    valid = ReadXc(cfg.valid_file);
    check_header(valid, cfg.valid_file);
  } else if (cfg.valid_fraction > 0) {
    Dataset all = std::move(train);
    SplitHoldout(all, cfg.valid_fraction, cfg.seed, &train, &valid);
    DSLIDE_CHECK(valid.size() > 0 && train.size() > 0, "option --valid-fraction ", cfg.valid_fraction,
                 " leaves ", train.size(), " training and ", valid.size(), " validation points of ",
                 all.size());
  }
  if (cfg.validating()) {
    int64_t labelled = 0;
    for (int64_t i = 0; i < valid.size(); ++i) labelled += valid.NumLabels(i) > 0 ? 1 : 0;
    const std::string what = cfg.valid_file.empty() ? "the held-back validation points" : cfg.valid_file;
    DSLIDE_CHECK(labelled > 0, what, ": no validation point has a label; nothing could be selected on it");
    if (labelled < 200 && comm->rank() == 0)
      std::printf("warning: %s: only %lld labelled validation points; one point moves P@1 by %.4f\n",
                  what.c_str(), (long long)labelled, 1.0 / static_cast<double>(labelled));
  }
  if (!cfg.test_file.empty()) {
    test = ReadXc(cfg.test_file);
    check_header(test, cfg.test_file);
    DSLIDE_CHECK(test.size() > 0, cfg.test_file, ": no points to score (the header says 0)");
  }
  if (!cfg.resume_dir.empty()) {
    // Settings left to auto continue with the checkpoint's (explicit ones are checked).
    const CheckpointMeta m = ReadResumeMeta(cfg.resume_dir);
    cfg.settings_from_checkpoint = AdoptCheckpointSettings(m, &cfg);
    if (m.min_negatives == 0 && comm->rank() == 0)
      std::printf("note: %s predates the floor of negatives; --min-negatives %lld applies from here\n",
                  cfg.resume_dir.c_str(), (long long)cfg.min_negatives);
  }
  std::unique_ptr<Trainer> trainer;
  try {
    trainer = std::make_unique<Trainer>(cfg, comm, MakeBackend(cfg.device, comm->rank(), cfg.gpus_per_node),
                                        train.num_features, train.num_labels);
  } catch (const std::bad_alloc&) {
    // Weights, biases and both Adam moments of this rank's shard.
    int64_t params = 0, in = train.num_features;
    std::string hidden;
    for (int64_t h : cfg.hidden) {
      params += (in + 1) * h;
      in = h;
      hidden += (hidden.empty() ? "" : ",") + std::to_string(h);
    }
    params += (in + 1) * train.num_labels;
    throw Error(detail::Concat("cannot allocate the model: ", params, " parameters (about ",
                               params * 12 / comm->size() / (1 << 20), " MB of weights and Adam moments per rank over ",
                               comm->size(), " rank(s)) for --hidden ", hidden, " and ", cfg.train_file, "'s ",
                               train.num_features, " features and ", train.num_labels, " labels"));
  }
  return trainer->Run(train, cfg.validating() ? &valid : nullptr, cfg.test_file.empty() ? nullptr : &test);
}

}  // namespace dslide
