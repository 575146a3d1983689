// The training loop of `dslide train` (Trainer::Run): epochs and batches in a seeded order,
// evaluations during training and the selection of the best validated model, periodic and
// final checkpoints, stop signals and divergence, the final test score. What it prints and
// records is run_report.cpp's; checkpoints and resume are in trainer_checkpoint.cpp, the step
// in trainer.cpp, RunTraining in run_training.cpp.
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "common/error.h"
#include "common/process_clock.h"
#include "common/rng.h"
#include "common/stop_signal.h"
#include "data/synthetic.h"
#include "train/auto_settings.h"
#include "train/metrics.h"
#include "train/run_report.h"

namespace dslide {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
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

/// Where a device backend's collectives with P ranks read and write.
std::string CollectivesNote(bool on_device) {
  return on_device ? "device: the ranks' exchanges send from and receive into device memory "
                     "(CUDA-aware MPI)"
                   : "device: the ranks' exchanges are staged through host memory (the MPI "
                     "library reports no CUDA support, or DSLIDE_CUDA_AWARE_MPI=0; "
                     "DSLIDE_CUDA_AWARE_MPI=1 overrides)";
}

constexpr uint64_t kEpochStream = 0x65706f6368;  // "epoch": the shuffled order of each epoch

}  // namespace

EvalResult Trainer::Run(const Dataset& train, const Dataset* valid, const Dataset* test,
                        RunEvents* events) {
  // The hold on --checkpoint-dir (CheckStorage) lasts as long as the run, however it ends:
  // a later run in the same process (resuming this one, say) may claim the folder. The
  // events are the caller's for as long.
  events_ = events != nullptr ? events : NoEvents();
  struct ReleaseFolder {
    CheckpointDirLock* lock;
    RunEvents** events;
    ~ReleaseFolder() {
      *lock = CheckpointDirLock();
      *events = NoEvents();
    }
  } release{&checkpoint_lock_, &events_};
  const int64_t N = train.size();
  DSLIDE_CHECK(N > 0, "the training file has no points");
  // Checkpoints record which data they were trained on: a resumed run says when it differs.
  if (!cfg_.checkpoint_dir.empty() || !cfg_.save_dir.empty() || !cfg_.resume_dir.empty()) {
    data_digest_ = train.Digest();
    data_points_ = N;
  }
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
  RunReport report(cfg_, asked_, spec_, comm_, per_epoch, events_);
  const LayerSlots slots = OutputSlots(spec_, cfg_.min_negatives, train);
  divergence_hint_ = DivergenceHint(train, cfg_.lr);
  report.Start(slots, N, total, valid, eval_every, keep_best);
  if (root && comm_->size() > 1) {
    const BackendInfo info = backend_->Info();
    if (info.asynchronous) events_->Line(CollectivesNote(info.collectives_on_device) + "\n");
  }
  std::vector<int64_t> order(N), points;
  int64_t epoch = -1, pos = N;
  report.OpenWindow(step_ms_.size());
  // The progress windows split their exchange time into the network's and waiting
  // (SettleCalls); evaluations are left out, as from the windows' traffic.
  CallRecordScope record(comm_, comm_->size() > 1);
  EvalResult last_eval;
  int64_t saved_iter = -1;
  // The evaluations' own wall and CPU seconds, left out of the training time each reports.
  double& eval_wall = eval_wall_s_;
  double& eval_cpu = eval_cpu_s_;
  eval_wall = eval_cpu = 0;
  auto evaluate = [&]() {
    if (monitor == nullptr) return;
    CallRecordScope pause(comm_, false);
    const TrafficStats before = comm_->Total();
    const TrainTime at{ProcessWallSeconds() - eval_wall, ProcessCpuSeconds() - eval_cpu};
    last_eval = Evaluate(*monitor, cfg_.eval_points, cfg_.eval_sampled);
    eval_wall = ProcessWallSeconds() - at.wall_s;
    eval_cpu = ProcessCpuSeconds() - at.cpu_s;
    evals_.emplace_back(iter_, last_eval);
    // Evaluation traffic is reported on its own line, not in training's per-iteration figures.
    report.ExcludeTraffic(before);
    // A tie of P@1 (one point in a small validation set) goes to the lower validation loss.
    const bool better =
        keep_best && last_eval.points > 0 &&
        (last_eval.At(1) > best_p1_ ||
         (last_eval.At(1) == best_p1_ && best_iter_ >= 0 && last_eval.loss < best_loss_));
    report.EvalLine(monitor_name, iter_, last_eval, monitor_base,
                    better && best_iter_ >= 0 ? " (best so far)" : "");
    report.EvalRecord(valid != nullptr ? "valid" : "test", iter_, last_eval, monitor_base, -1, at);
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
  std::string resumed_from;  // the checkpoint folder loaded ("" for a fresh run)
  if (!cfg_.resume_dir.empty()) {
    const CheckpointMeta m = ResumeRun(N, keep_best, &resumed_from);
    epoch = m.epoch;
    pos = m.pos;
    if (epoch >= 0) shuffle(epoch);
    saved_iter = iter_;
    DSLIDE_CHECK(iter_ <= total, resumed_from, " is at iteration ", iter_, ", beyond the ", total,
                 " iterations asked for (",
                 cfg_.iterations > 0 ? "--iterations" : "--epochs times the iterations per epoch",
                 "): nothing would be trained; ask for more, or use it with eval or predict");
    if (root && iter_ == total) {
      events_->Line(
          Format("note: %s is at iteration %lld, all %lld asked for: nothing left to train\n",
                 resumed_from.c_str(), (long long)iter_, (long long)total));
    }
    report.Resumed(iter_, resumed_from);
  }
  CheckStorage(total, resumed_from);
  training_ = true;
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
      report.AddLoss(s.loss);
      *step = {s.iter, s.loss, std::max(level, uninformed)};
      if (cfg_.divergence_factor > 0 && s.loss > cfg_.divergence_factor * step->ref) return true;
      level = level < 0 ? s.loss : 0.95 * level + 0.05 * s.loss;
    }
    return false;
  };
  report.StartAt(iter_);
  // A divergence ends the run: its message names the last good checkpoint.
  auto stop_diverged = [&](const Diverged& d) {
    const std::string newest =
        cfg_.checkpoint_dir.empty() ? "" : LatestCheckpoint(cfg_.checkpoint_dir);
    const std::string text =
        detail::Concat("training diverged at iteration ", d.iter, ": the sampled loss ", d.loss,
                       " is more than ", cfg_.divergence_factor, " times its running level ", d.ref,
                       " (--divergence-factor); no checkpoint was written of it",
                       newest.empty() ? std::string("") : "; the last good one is " + newest, ". ",
                       divergence_hint_);
    report.StopRecord("diverged", d.iter, text, newest);
    throw Stop(kExitDiverged, text);
  };
  // A checkpoint of this iteration (remembered in saved_iter), its size and time on the
  // progress output and in --metrics.
  auto save = [&]() {
    // Never a checkpoint of steps not yet checked (one rank: a stop signal between reads).
    Diverged d;
    if (read_steps(&d)) stop_diverged(d);
    const auto t0 = Clock::now();
    SaveCheckpoint(cfg_.checkpoint_dir, epoch, pos, cfg_.keep_checkpoints);
    saved_iter = iter_;
    double seconds = Seconds(t0);
    comm_->Allreduce(&seconds, 1, ReduceOp::kMax, Traffic::kControl);
    report.Checkpoint(iter_, seconds);
  };
  // --keep-best: the best validated weights replace the last ones (once the last state is
  // checkpointed); returns the iteration of the weights held.
  auto keep_selected = [&]() {
    if (!keep_best || best_iter_ < 0 || best_iter_ == iter_) return iter_;
    RestoreWeights();
    return best_iter_;
  };
  // --save: the model of iteration model_iter (the weights held now) to its folder.
  auto save_model = [&](int64_t model_iter) {
    const int64_t now = iter_;
    iter_ = model_iter;  // the weights written are those of the selected iteration
    WriteCheckpoint(cfg_.save_dir, epoch, pos);
    iter_ = now;
    if (root) {
      events_->Line(Format("saved the model of iteration %lld to %s\n", (long long)model_iter,
                           cfg_.save_dir.c_str()));
    }
  };
  // What a stop signal does, said by the handler of a one-process run; with P ranks rank 0
  // says it once every rank has agreed to stop (a rank's own signal may also come from a
  // launcher ending the job because another rank failed: then nothing is written).
  SetStopNotice(comm_->size() > 1 ? std::string()
                                  : "dslide: stop requested: ending after this step, " +
                                        StopPlanOf(cfg_) + " (a second signal exits at once)\n");
  {
    // A stop signal that came before the first step (while the data loaded, or the
    // checkpoint was read): nothing has been trained since the start or the checkpoint
    // resumed, so the run stops now, writing nothing (the ranks agree, as after a step).
    int64_t sig = StopSignal();
    if (comm_->size() > 1) {
      CallRecordScope pause(comm_, false);
      comm_->Allreduce(&sig, 1, ReduceOp::kMax, Traffic::kControl);
    }
    if (sig != 0 && iter_ < total) {
      const std::string text = detail::Concat(
          "stopped by ", SignalName(static_cast<int>(sig)), " before the first step (iteration ",
          iter_, " of ", total, "): ",
          resumed_from.empty() ? std::string("nothing was trained, nothing was saved")
                               : "nothing was trained since " + resumed_from +
                                     ": continue with --resume " + cfg_.resume_dir);
      report.StopRecord("stopped", iter_, text, resumed_from);
      throw Stop(kExitStopped, text);
    }
  }
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
      report.Progress(iter_, total, step_ms_, rss, last_eval);
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
        events_->Line(Format("stop requested (%s): ending after iteration %lld, %s\n", name,
                             (long long)iter_, StopPlanOf(cfg_).c_str()));
      }
      std::string where;
      if (!cfg_.checkpoint_dir.empty()) {
        if (saved_iter != iter_) save();
        where = CheckpointFolder(cfg_.checkpoint_dir, iter_);
      }
      std::string saved;
      if (!cfg_.save_dir.empty()) {
        const int64_t model_iter = keep_selected();  // the checkpoint is written
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
      report.StopRecord("stopped", iter_, text, where);
      throw Stop(kExitStopped, text);
    }
  }
  comm_->RecordCalls(false);
  evaluate();
  // The last state, for resuming or scoring later (also when no periodic checkpoint fell on
  // the last iteration).
  if (!cfg_.checkpoint_dir.empty() && saved_iter != iter_) save();
  const int64_t model_iter = keep_selected();
  if (keep_best && root && best_iter_ >= 0) {
    events_->Line(
        Format("kept the model of iteration %lld (best valid P@1 %.4f)%s%s\n",
               (long long)best_iter_, best_p1_, cfg_.checkpoint_dir.empty() ? "" : ", saved in ",
               cfg_.checkpoint_dir.empty() ? "" : (cfg_.checkpoint_dir + "/best").c_str()));
  }
  if (!cfg_.save_dir.empty()) save_model(model_iter);
  if (valid != nullptr && test != nullptr) {
    // The one score of the test data, on the selected model.
    last_eval = Evaluate(*test, cfg_.eval_points, cfg_.eval_sampled);
    char note[96];
    std::snprintf(note, sizeof note, " (after %lld iterations)", (long long)iter_);
    report.EvalLine("test ", model_iter, last_eval, test_base, model_iter != iter_ ? note : "");
    report.EvalRecord("test", iter_, last_eval, test_base, model_iter);
  }
  return last_eval;
}

}  // namespace dslide
