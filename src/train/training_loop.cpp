// The training loop of `dslide train`: epochs and batches, progress lines and metrics,
// validation and test evaluations, checkpoints and resume, stop signals and divergence;
// and RunTraining, which reads the data and builds the trainer. The step itself is in
// trainer.cpp and step_strategy.cpp.
#include "trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "auto_settings.h"
#include "error.h"
#include "metrics.h"
#include "parallel.h"
#include "rng.h"
#include "stop_signal.h"
#include "synthetic.h"

namespace dslide {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

/// Warnings about data that loads but may not be what was meant: points without features
/// (the network sees only its biases for them) and feature values far beyond float's
/// comfortable range.
void WarnOfData(const Dataset& d, const std::string& file) {
  int64_t empty = 0, first = -1;
  for (int64_t i = 0; i < d.size(); ++i)
    if (d.feat_off[i + 1] == d.feat_off[i] && empty++ == 0) first = i;
  const bool binary = IsBinaryDataset(file);
  if (empty > 0)
    std::printf(
        "warning: %s: %lld of %lld points have no features (the first at %s %lld); the network "
        "sees only its biases for them\n",
        file.c_str(), (long long)empty, (long long)d.size(), binary ? "point" : "line",
        (long long)(binary ? first + 1 : first + 2));
  if (d.max_abs_value > kLargeFeatureValue)
    std::printf(
        "warning: %s: a feature value of %g, far beyond %g: scale or clip the features, or "
        "training may overflow and diverge\n",
        d.max_abs_at.c_str(), d.max_abs_value, kLargeFeatureValue);
  std::fflush(stdout);
}

/// What a stop signal makes the run write: "writing a checkpoint to DIR", ...
std::string StopPlanOf(const TrainConfig& cfg) {
  const std::string& ck = cfg.checkpoint_dir;
  const std::string& save = cfg.save_dir;
  if (!ck.empty() && !save.empty())
    return "writing a checkpoint to " + ck + " and the model to " + save;
  if (!ck.empty()) return "writing a checkpoint to " + ck;
  if (!save.empty()) return "saving the model to " + save + " (no --checkpoint-dir: not resumable)";
  return "saving nothing (no --checkpoint-dir or --save)";
}

constexpr uint64_t kEpochStream = 0x65706f6368;  // "epoch": the shuffled order of each epoch

}  // namespace

EvalResult Trainer::Run(const Dataset& train, const Dataset* valid, const Dataset* test) {
  const int64_t N = train.size();
  DSLIDE_CHECK(N > 0, "the training file has no points");
  const int64_t B = cfg_.batch;
  const int64_t per_epoch = (N + B - 1) / B;
  const int64_t total =
      cfg_.iterations > 0
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
    o.Add("ranks", comm_->size())
        .Add("threads", NumThreads())
        .Add("device", ToString(cfg_.device))
        .Add("strategy", ToString(cfg_.strategy));
  };
  const LayerSlots slots = OutputSlots(spec_, cfg_.min_negatives, train);
  divergence_hint_ = DivergenceHint(train, cfg_.lr);
  if (root) {
    std::printf(
        "dslide: %lld training points, %lld features, %lld labels | %lld parameters | "
        "%d rank(s) x %d thread(s) | %lld iterations (%.2f epochs) of batch %lld, lr %g\n",
        (long long)N, (long long)spec_.layers[0].in_dim, (long long)spec_.layers.back().out_dim,
        (long long)spec_.NumParameters(), comm_->size(), NumThreads(), (long long)total,
        static_cast<double>(total) / per_epoch, (long long)B, cfg_.lr);
    std::printf("%s", DescribeLayers(spec_, cfg_, asked_, slots).c_str());
    if (!asked_.sparsity_auto() && !asked_.settings_from_checkpoint && slots.raised > 0 &&
        !spec_.layers.back().dense())
      std::printf(
          "warning: --sparsity %g gives the output layer a budget of %lld per sample, which "
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
    o.Add("event", "start")
        .Add("points", N)
        .Add("features", spec_.layers[0].in_dim)
        .Add("labels", spec_.layers.back().out_dim)
        .Add("parameters", spec_.NumParameters())
        .Add("iterations", total)
        .Add("batch", B)
        .Add("lr", cfg_.lr);
    std::string layers = "[";
    for (size_t l = 0; l < spec_.layers.size(); ++l) {
      const LayerSpec& s = spec_.layers[l];
      JsonObject lo;
      lo.Add("neurons", s.out_dim)
          .Add("sparsity", s.sparsity)
          .Add("budget", ModelSpec::Budget(s.sparsity, s.out_dim))
          .Add("budget_per_rank", s.budget)
          .Add("auto", asked_.sparsity_auto() ? 1 : 0);
      if (!s.dense()) {
        lo.Add("min_negatives", cfg_.min_negatives)
            .Add("hash", ToString(cfg_.lsh.family))
            .Add("K", cfg_.lsh.k)
            .Add("L", cfg_.lsh.l)
            .Add("query", ToString(cfg_.lsh.query));
        if (s.is_output)
          lo.Add("mean_active", slots.mean_active)
              .Add("mean_negatives", slots.mean_negatives)
              .Add("fewest_negatives", slots.min_negatives_seen);
      }
      layers += (l ? "," : "") + lo.str();
    }
    o.AddRaw("layers", layers + "]");
    if (valid != nullptr) o.Add("valid_points", valid->size()).Add("eval_every", eval_every);
    o.AddRaw("settings", SettingsJson(asked_));  // every option as given (auto where left to it)
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
    std::printf(
        "%s iter %lld | P@1 %.4f P@3 %.4f P@5 %.4f | loss %s | most-popular-label P@1 %.4f | "
        "%lld points in %.1fs%s%s\n",
        name, (long long)at, e.At(1), e.At(3), e.At(5),
        std::isnan(e.loss) ? "-" : std::to_string(e.loss).substr(0, 6).c_str(), baseline,
        (long long)e.points, e.seconds, cfg_.eval_sampled ? " (LSH-sampled)" : "", note);
    std::fflush(stdout);
  };
  auto metrics_eval = [&](const char* set, const EvalResult& e, double baseline,
                          int64_t model_iter) {
    if (!root) return;
    JsonObject o;
    o.Add("iter", iter_)
        .Add("epoch", static_cast<double>(iter_) / per_epoch)
        .Add("set", set)
        .Add("p_at_1", e.At(1))
        .Add("p_at_3", e.At(3))
        .Add("p_at_5", e.At(5))
        .Add("most_popular_label_p_at_1", baseline)
        .Add("eval_points", e.points)
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
    evals_.emplace_back(iter_, last_eval);
    // Evaluation traffic is reported on its own line, not in training's per-iteration figures.
    comm_last.bytes += comm_->Total().bytes - before.bytes;
    comm_last.seconds += comm_->Total().seconds - before.seconds;
    // A tie of P@1 (one point in a small validation set) goes to the lower validation loss.
    const bool better =
        keep_best && last_eval.points > 0 &&
        (last_eval.At(1) > best_p1_ ||
         (last_eval.At(1) == best_p1_ && best_iter_ >= 0 && last_eval.loss < best_loss_));
    report(monitor_name, iter_, last_eval, monitor_base,
           better && best_iter_ >= 0 ? " (best so far)" : "");
    metrics_eval(valid != nullptr ? "valid" : "test", last_eval, monitor_base, -1);
    if (better) {
      best_p1_ = last_eval.At(1);
      best_loss_ = last_eval.loss;
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
    const CheckpointMeta m = ResumeNewestIntact(&resumed_from);
    double load_s = Seconds(t_load);
    comm_->Allreduce(&load_s, 1, ReduceOp::kMax, Traffic::kControl);
    DSLIDE_CHECK(m.pos <= N, resumed_from, ": data position ", m.pos, " is beyond the ", N,
                 " training points (a different --train file?)");
    epoch = m.epoch;
    pos = m.pos;
    if (epoch >= 0) shuffle(epoch);
    saved_iter = iter_;
    if (root) {
      std::printf("resumed from %s at iteration %lld (epoch %lld, point %lld), read in %.2fs\n",
                  resumed_from.c_str(), (long long)iter_, (long long)epoch, (long long)pos, load_s);
      std::fflush(stdout);
    }
    // The best model before the interruption competes on: its weights from
    // CHECKPOINT_DIR/best when that holds it (also when it was saved after the checkpoint
    // resumed from), else selection starts afresh.
    const std::string best = cfg_.checkpoint_dir.empty() ? "" : cfg_.checkpoint_dir + "/best";
    bool found = false;
    int64_t has_best =
        keep_best && !best.empty() && std::filesystem::exists(best + "/meta.h5") ? 1 : 0;
    comm_->Allreduce(&has_best, 1, ReduceOp::kMin,
                     Traffic::kControl);  // every rank sees it, or none uses it
    if (has_best) {
      std::string damage;
      try {
        const CheckpointMeta bm = ReadMeta(best);
        const bool same = best_iter_ >= 0 && bm.iter == best_iter_;
        const bool later = bm.iter > iter_ && bm.best_iter == bm.iter && bm.best_p_at_1 > best_p1_;
        if (same || later) {
          const std::vector<LayerState> st =
              ReadLayers(best, bm, spec_.layers, /*weights_only=*/true);
          best_w_.resize(st.size());
          best_b_.resize(st.size());
          for (size_t l = 0; l < st.size(); ++l) {  // rows per neuron, as GetLayer gives them
            best_w_[l] = st[l].w;
            best_b_[l] = st[l].b;
          }
          best_iter_ = bm.iter;
          best_p1_ = bm.best_p_at_1;
          best_loss_ = bm.best_loss;
          found = true;
        }
      } catch (const DamagedCheckpoint& e) {
        damage = e.what();
      }
      int64_t all_found = found ? 1 : 0;  // every rank restores the best model, or none does
      comm_->Allreduce(&all_found, 1, ReduceOp::kMin, Traffic::kControl);
      if (!damage.empty()) {
        std::fprintf(stderr, "[rank %d] warning: the best model in %s is damaged: %s\n",
                     comm_->rank(), best.c_str(), damage.c_str());
        std::fflush(stderr);
      }
      found = all_found == 1;
    }
    if (root && keep_best && (found || best_iter_ >= 0)) {
      std::printf(
          found ? "the best model so far is that of iteration %lld (valid P@1 %.4f), in %s\n"
                : "the best model so far (iteration %lld, valid P@1 %.4f) is not in %s: "
                  "selection starts afresh\n",
          (long long)best_iter_, best_p1_, best.empty() ? "(no --checkpoint-dir)" : best.c_str());
      std::fflush(stdout);
    }
    if (!found) {
      best_iter_ = -1;
      best_p1_ = -1;
      best_loss_ = std::numeric_limits<double>::quiet_NaN();
    }
  }
  if (!resumed_from.empty()) {
    DSLIDE_CHECK(iter_ <= total, resumed_from, " is at iteration ", iter_, ", beyond the ", total,
                 " iterations asked for (",
                 cfg_.iterations > 0 ? "--iterations" : "--epochs times the iterations per epoch",
                 "): nothing would be trained; ask for more, or use it with eval or predict");
    if (root && iter_ == total) {
      std::printf("note: %s is at iteration %lld, all %lld asked for: nothing left to train\n",
                  resumed_from.c_str(), (long long)iter_, (long long)total);
      std::fflush(stdout);
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
      CheckWritableDir(cfg_.checkpoint_dir, all, "--checkpoint-dir");
    }
    if (!cfg_.save_dir.empty()) {
      // --save replaces its folder: never one that is not a checkpoint, nor the checkpoints.
      namespace fs = std::filesystem;
      while (cfg_.save_dir.size() > 1 && cfg_.save_dir.back() == '/') cfg_.save_dir.pop_back();
      std::error_code ec;
      const fs::path save = fs::weakly_canonical(cfg_.save_dir, ec);
      DSLIDE_CHECK(!fs::exists(save) || fs::exists(save / "meta.h5") ||
                       (fs::is_directory(save) && fs::is_empty(save)),
                   "option --save: ", cfg_.save_dir,
                   " exists and is not a checkpoint folder (it would be replaced)");
      if (!cfg_.checkpoint_dir.empty()) {
        const fs::path ck = fs::weakly_canonical(cfg_.checkpoint_dir, ec);
        const auto rel = ck.lexically_relative(save);
        DSLIDE_CHECK(save != ck && (rel.empty() || *rel.begin() == ".."),
                     "option --save: ", cfg_.save_dir, " is or holds --checkpoint-dir ",
                     cfg_.checkpoint_dir, " (it would be replaced)");
      }
      const std::filesystem::path parent = std::filesystem::path(cfg_.save_dir).parent_path();
      int64_t all = bytes;  // every shard (the folder is shared), the same figure on every rank
      model_comm_->Allreduce(&all, 1, ReduceOp::kSum, Traffic::kControl);
      CheckWritableDir(parent.empty() ? "." : parent.string(), all, "--save");
    }
    if (root && cfg_.checkpoint_every > total - iter_ && total > iter_)
      std::printf(
          "note: --checkpoint-every %lld is more than the %lld iterations left: only the final "
          "checkpoint will be written\n",
          (long long)cfg_.checkpoint_every, (long long)(total - iter_));
  }
  // Divergence: a step's loss far above its running level (a finite blow-up: a NaN or
  // infinite loss is an error of its own, in Backpropagate). The level starts at the loss of
  // a model that knows nothing (log of the active slots per sample), so early steps cannot
  // trip it.
  const double uninformed = std::log(
      std::max(2.0, spec_.layers.back().dense() ? static_cast<double>(spec_.layers.back().out_dim)
                                                : slots.mean_active));
  double level = -1;
  // The steps' losses, read at the logging cadence and before anything is written or
  // evaluated (with P ranks, every step): their running mean for the progress line, and the
  // divergence check, step by step in order. Returns whether a step diverged; *step holds
  // that step's (or else the last step's) iteration, loss and reference level.
  struct Diverged {
    int64_t iter = 0;
    double loss = 0, ref = 0;
  };
  auto read_steps = [&](Diverged* step) {
    for (const StepLoss& s : TakeSteps()) {
      CheckStep(s);  // a non-finite loss or weights: an error of its own
      loss_sum += s.loss;
      ++loss_n;
      *step = {s.iter, s.loss, std::max(level, uninformed)};
      if (cfg_.divergence_factor > 0 && s.loss > cfg_.divergence_factor * step->ref) return true;
      level = level < 0 ? s.loss : 0.95 * level + 0.05 * s.loss;
    }
    return false;
  };
  const int64_t iter_start = iter_;
  iter_last = iter_;
  auto stop_line = [&](const char* event, int64_t at, const std::string& text,
                       const std::string& checkpoint) {
    if (!root) return;
    JsonObject o;
    o.Add("event", event).Add("iter", at).Add("message", text);
    if (!checkpoint.empty()) o.Add("checkpoint", checkpoint);
    base(o);
    metrics.Write(o);
  };
  // A checkpoint of this iteration (remembered in saved_iter), its size and time on the
  // progress output and in --metrics.
  auto stop_diverged = [&](const Diverged& d) {
    const std::string newest =
        cfg_.checkpoint_dir.empty() ? "" : LatestCheckpoint(cfg_.checkpoint_dir);
    const std::string text =
        detail::Concat("training diverged at iteration ", d.iter, ": the sampled loss ", d.loss,
                       " is more than ", cfg_.divergence_factor, " times its running level ", d.ref,
                       " (--divergence-factor); no checkpoint was written of it",
                       newest.empty() ? std::string("") : "; the last good one is " + newest, ". ",
                       divergence_hint_);
    stop_line("diverged", d.iter, text, newest);
    throw Stop(kExitDiverged, text);
  };
  auto save = [&]() {
    // Never a checkpoint of steps not yet checked (one rank: a stop signal between reads).
    Diverged d;
    if (read_steps(&d)) stop_diverged(d);
    const auto t0 = Clock::now();
    SaveCheckpoint(cfg_.checkpoint_dir, epoch, pos, cfg_.keep_checkpoints);
    saved_iter = iter_;
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
    o.Add("event", "checkpoint")
        .Add("iter", iter_)
        .Add("path", folder)
        .Add("bytes", bytes)
        .Add("seconds", seconds);
    base(o);
    metrics.Write(o);
  };
  // --save: the model of iteration model_iter (the weights held now) to its folder.
  auto save_model = [&](int64_t model_iter) {
    const int64_t now = iter_;
    iter_ = model_iter;  // the weights written are those of the selected iteration
    WriteCheckpoint(cfg_.save_dir, epoch, pos);
    iter_ = now;
    if (root) {
      std::printf("saved the model of iteration %lld to %s\n", (long long)model_iter,
                  cfg_.save_dir.c_str());
      std::fflush(stdout);
    }
  };
  // What a stop signal does, said by the handler of a one-process run; with P ranks rank 0
  // says it once every rank has agreed to stop (a rank's own signal may also come from a
  // launcher ending the job because another rank failed: then nothing is written).
  SetStopNotice(comm_->size() > 1 ? std::string()
                                  : "dslide: stop requested: ending after this step, " +
                                        StopPlanOf(cfg_) + " (a second signal exits at once)\n");
  while (iter_ < total) {
    fault_.MaybeFire(comm_->rank(), iter_ + 1);
    if (pos >= N) {
      shuffle(++epoch);
      pos = 0;
    }
    const int64_t b = std::min(B, N - pos);
    points.assign(order.begin() + pos, order.begin() + pos + b);
    pos += b;
    QueueStep(train, points);
    const bool log = iter_ % cfg_.log_every == 0 || iter_ == total;
    const bool eval_now = eval_every > 0 && iter_ % eval_every == 0 && iter_ < total;
    // The last iteration's checkpoint is written after the final evaluation (below), so that
    // it records that evaluation's selection too.
    const bool save_now =
        cfg_.checkpoint_every > 0 && iter_ % cfg_.checkpoint_every == 0 && iter_ < total;
    int64_t flags[2] = {StopSignal(), 0};
    Diverged diverged;
    if (comm_->size() > 1 || log || eval_now || save_now || flags[0] != 0)
      flags[1] = read_steps(&diverged) ? 1 : 0;
    // One agreement per step, with more than one rank: a stop signal, or a loss far above
    // its running level, on any rank stops every rank.
    if (comm_->size() > 1) comm_->Allreduce(flags, 2, ReduceOp::kMax, Traffic::kControl);
    if (flags[1] != 0) stop_diverged(diverged);
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
        std::printf(
            "iter %lld/%lld | epoch %.2f | %.0f samples/s | sampled loss %.4f | last P@1 %s | "
            "%.1f ms/iter | %.0f KB sent/iter | RSS %.0f MB | ETA %s\n",
            (long long)iter_, (long long)total, static_cast<double>(iter_) / per_epoch, sps, loss,
            last_eval.points ? std::to_string(last_eval.At(1)).substr(0, 6).c_str() : "-",
            Median(ms), bytes / 1024, rss, FormatDuration(eta).c_str());
        std::fflush(stdout);
        JsonObject o;
        o.Add("iter", iter_)
            .Add("epoch", static_cast<double>(iter_) / per_epoch)
            .Add("loss", loss)
            .Add("ms_per_iter", Median(ms))
            .Add("samples_per_s", sps)
            .Add("bytes_sent_per_iter", bytes)
            .Add("comm_ms_per_iter", comm_ms)
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
    if (eval_now) evaluate();
    if (save_now) save();
    // A stop signal on any rank (agreed above) stops every rank after this step; one rank
    // alone also sees a signal that came during the evaluation or checkpoint.
    const int64_t sig = comm_->size() > 1 ? flags[0] : StopSignal();
    if (sig != 0 && iter_ < total) {
      const char* name = SignalName(static_cast<int>(sig));
      if (root && comm_->size() > 1) {  // the ranks agreed: now it is known what happens
        std::printf("stop requested (%s): ending after iteration %lld, %s\n", name,
                    (long long)iter_, StopPlanOf(cfg_).c_str());
        std::fflush(stdout);
      }
      std::string where;
      if (!cfg_.checkpoint_dir.empty()) {
        if (saved_iter != iter_) save();
        where = CheckpointFolder(cfg_.checkpoint_dir, iter_);
      }
      std::string saved;
      if (!cfg_.save_dir.empty()) {
        int64_t model_iter = iter_;
        if (keep_best && best_iter_ >= 0 && best_iter_ != iter_) {  // the checkpoint is written
          RestoreWeights();
          model_iter = best_iter_;
        }
        save_model(model_iter);
        saved =
            detail::Concat("; the model of iteration ", model_iter, " saved to ", cfg_.save_dir);
      }
      const std::string text = detail::Concat(
          "stopped by ", name, " at iteration ", iter_, " of ", total,
          where.empty() ? std::string()
                        : "; checkpoint written to " + where + ": continue with --resume " +
                              cfg_.checkpoint_dir,
          saved,
          where.empty() && saved.empty() ? "; nothing was saved (no --checkpoint-dir or --save)"
                                         : "");
      stop_line("stopped", iter_, text, where);
      throw Stop(kExitStopped, text);
    }
  }
  evaluate();
  // The last state, for resuming or scoring later (also when no periodic checkpoint fell on
  // the last iteration).
  if (!cfg_.checkpoint_dir.empty() && saved_iter != iter_) save();
  int64_t model_iter = iter_;
  if (keep_best && best_iter_ >= 0 && best_iter_ != iter_) {
    RestoreWeights();
    model_iter = best_iter_;
  }
  if (keep_best && root && best_iter_ >= 0) {
    std::printf("kept the model of iteration %lld (best valid P@1 %.4f)%s%s\n",
                (long long)best_iter_, best_p1_, cfg_.checkpoint_dir.empty() ? "" : ", saved in ",
                cfg_.checkpoint_dir.empty() ? "" : (cfg_.checkpoint_dir + "/best").c_str());
    std::fflush(stdout);
  }
  if (!cfg_.save_dir.empty()) save_model(model_iter);
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
  DSLIDE_CHECK(train.size() > 0, cfg.train_file, ":1: no points to train on (the header says 0)");
  if (comm->rank() == 0) WarnOfData(train, cfg.train_file);
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
    DSLIDE_CHECK(valid.size() > 0 && train.size() > 0, "option --valid-fraction ",
                 cfg.valid_fraction, " leaves ", train.size(), " training and ", valid.size(),
                 " validation points of ", all.size());
  }
  if (cfg.validating()) {
    int64_t labelled = 0;
    for (int64_t i = 0; i < valid.size(); ++i) labelled += valid.NumLabels(i) > 0 ? 1 : 0;
    const std::string what =
        cfg.valid_file.empty() ? "the held-back validation points" : cfg.valid_file;
    DSLIDE_CHECK(labelled > 0, what,
                 ": no validation point has a label; nothing could be selected on it");
    if (labelled < 200 && comm->rank() == 0)
      std::printf(
          "warning: %s: only %lld labelled validation points; one point moves P@1 by %.4f\n",
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
      std::printf(
          "note: %s predates the floor of negatives; --min-negatives %lld applies from here\n",
          cfg.resume_dir.c_str(), (long long)cfg.min_negatives);
  }
  std::unique_ptr<Trainer> trainer;
  try {
    trainer = std::make_unique<Trainer>(cfg, comm,
                                        MakeBackend(cfg.device, comm->rank(), cfg.gpus_per_node),
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
                               params * 12 / comm->size() / (1 << 20),
                               " MB of weights and Adam moments per rank over ", comm->size(),
                               " rank(s)) for --hidden ", hidden, " and ", cfg.train_file, "'s ",
                               train.num_features, " features and ", train.num_labels, " labels"));
  }
  return trainer->Run(train, cfg.validating() ? &valid : nullptr,
                      cfg.test_file.empty() ? nullptr : &test);
}

}  // namespace dslide
