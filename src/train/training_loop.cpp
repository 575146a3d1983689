// The training loop of `dslide train` (Trainer::Run): epochs and batches in a seeded order,
// evaluations during training and the selection of the best validated model, periodic and
// final checkpoints, stop signals and divergence, the final test score. Run is a loop over
// an explicit state (RunState) and named pieces (PlanRun, Resume, Iterate, EvaluateDuringRun,
// ReadSteps, SaveDuringRun, StopAfterStep, FinishRun, ...). What it reports is
// run_report.cpp's, to the caller's RunEvents; checkpoints and resume are in
// trainer_checkpoint.cpp, the step in trainer.cpp, RunTraining in run_training.cpp.
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

/// The state of a run in progress: its settings (PlanRun), its place in the data, its last
/// evaluation and checkpoint, and the divergence check's running level.
struct Trainer::RunState {
  RunState(const Dataset& train_, const Dataset* valid_, const Dataset* test_)
      : train(train_), valid(valid_), test(test_) {}
  const Dataset& train;
  const Dataset *valid, *test;
  int64_t N = 0, B = 0, per_epoch = 0, total = 0;
  bool root = false;
  // Evaluations during training score the validation data; without it, the test data
  // (monitoring only: nothing is selected on it).
  const Dataset* monitor = nullptr;
  const char* monitor_name = "";
  bool keep_best = false;
  int64_t eval_every = 0;
  // Early stopping: the evaluations in a row without a better validation P@1 that end the
  // run (0: never), how many have passed since the best, and the iteration last evaluated.
  int64_t patience = 0, since_best = 0, evaluated_at = -1;
  // Whether early stopping ends the run at this evaluation.
  bool PatienceSpent() const { return patience > 0 && since_best >= patience; }
  bool auto_length = false;  // --epochs auto with validation: early stopping ends the run
  // The most-popular-label baseline of each evaluation set, printed beside its P@1.
  double monitor_base = 0, test_base = 0;
  RunReport* report = nullptr;
  LayerSlots slots;
  std::vector<int64_t> order, points;
  int64_t epoch = -1, pos = 0;
  EvalResult last_eval;
  int64_t saved_iter = -1;
  std::string resumed_from;  // the checkpoint folder loaded ("" for a fresh run)
  // Divergence: a step's loss far above its running level (a finite blow-up: a NaN or
  // infinite loss is an error of its own, in Backpropagate). The level starts at the loss of
  // a model that knows nothing (logits of 0 over the active slots per sample), so early steps
  // cannot trip it.
  double uninformed = 0, level = -1;
};

/// A step's loss against the running level it was checked against.
struct Trainer::StepLossCheck {
  int64_t iter = 0;
  double loss = 0, ref = 0;
};

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
  RunState r(train, valid, test);
  best_written_at_ = Clock::now();
  PlanRun(r);
  RunReport report(cfg_, asked_, spec_, comm_, r.per_epoch, events_);
  r.report = &report;
  r.slots = OutputSlots(spec_, cfg_.min_negatives, train);
  divergence_hint_ = DivergenceHint(train, cfg_.lr);
  report.Start(r.slots, r.N, r.total, valid, r.eval_every, r.keep_best, r.patience, r.auto_length);
  if (r.root && comm_->size() > 1) {
    const BackendCapabilities can = backend_->Capabilities();
    if (can.asynchronous) events_->Line(CollectivesNote(can.collectives_on_device) + "\n");
  }
  r.order.resize(r.N);
  r.pos = r.N;
  report.OpenWindow(step_ms_.size());
  // The progress windows split their exchange time into the network's and waiting
  // (SettleCalls); evaluations are left out, as from the windows' traffic.
  CallRecordScope record(comm_, comm_->size() > 1);
  // The evaluations' own wall and CPU seconds, left out of the training time each reports.
  eval_wall_s_ = eval_cpu_s_ = 0;
  Resume(r);
  CheckStorage(r.total, r.resumed_from);
  training_ = true;
  {
    const double active =
        std::max(2.0, spec_.layers.back().dense() ? static_cast<double>(spec_.layers.back().out_dim)
                                                  : r.slots.mean_active);
    // Logits of 0: the softmax's log of the slots; one-vs-rest's log 2 per slot.
    r.uninformed = Loss() == OutputLoss::kOneVsRest ? std::log(2.0) * active : std::log(active);
  }
  report.StartAt(iter_);
  // What a stop signal does, said by the handler of a one-process run; with P ranks rank 0
  // says it once every rank has agreed to stop (a rank's own signal may also come from a
  // launcher ending the job because another rank failed: then nothing is written).
  SetStopNotice(comm_->size() > 1 ? std::string()
                                  : "dslide: stop requested: ending after this step, " +
                                        StopPlanOf(cfg_) + " (a second signal exits at once)\n");
  try {
    StopBeforeFirstStep(r);
    while (iter_ < r.total) Iterate(r);
    comm_->RecordCalls(false);
    return FinishRun(r);
  } catch (const CheckpointNotWritten& e) {
    report.StopRecord("error", iter_, e.what(), e.newest());  // the records end with why
    throw;
  }
}

void Trainer::PlanRun(RunState& r) {
  const int64_t N = r.train.size();
  r.N = N;
  DSLIDE_CHECK(N > 0, "the training file has no points");
  // Checkpoints record which data they were trained on: a resumed run says when it differs.
  if (!cfg_.checkpoint_dir.empty() || !cfg_.save_dir.empty() || !cfg_.resume_dir.empty()) {
    data_digest_ = r.train.Digest();
    data_points_ = N;
  }
  r.B = cfg_.batch;
  r.per_epoch = (N + r.B - 1) / r.B;
  // --epochs auto: one epoch; with validation data, until early stopping ends the run.
  r.auto_length = cfg_.iterations == 0 && cfg_.epochs_auto && r.valid != nullptr;
  const double epochs = cfg_.epochs_auto ? 1.0 : cfg_.epochs;
  r.total = cfg_.iterations > 0 ? cfg_.iterations
            : r.auto_length
                ? std::max(kAutoMaxEpochs * r.per_epoch, kAutoMinIterations)
                : std::max<int64_t>(1, static_cast<int64_t>(std::ceil(epochs * r.per_epoch)));
  r.root = comm_->rank() == 0;
  r.monitor = r.valid != nullptr ? r.valid : r.test;
  r.monitor_name = r.valid != nullptr ? "valid" : "test ";
  r.keep_best = r.valid != nullptr && cfg_.keep_best != 0;
  r.patience = r.valid == nullptr   ? 0
               : cfg_.patience >= 0 ? cfg_.patience
               : cfg_.reranked      ? kRerankPatience
                                    : kAutoPatience;
  // --lr-decay acts on the validation P@1; auto where the output layer is sampled and an
  // epoch is short (many epochs until early stopping).
  if (r.valid == nullptr)
    cfg_.lr_decay = 1;
  else if (cfg_.lr_decay == 0)
    cfg_.lr_decay = !spec_.layers.back().dense() && r.per_epoch <= kAutoLrDecayEpochIterations
                        ? kAutoLrDecay
                        : 1.0;
  r.eval_every = cfg_.eval_every;
  if (r.eval_every == 0 && r.valid != nullptr)
    r.eval_every = r.auto_length
                       ? std::clamp(r.per_epoch, kAutoEvalIterations, kAutoEvalIterationsMost)
                       : std::max(r.per_epoch, (r.total + 9) / 10);
  r.monitor_base = r.monitor ? MostPopularLabelP1(r.train, *r.monitor, cfg_.eval_points) : 0;
  r.test_base = r.test ? MostPopularLabelP1(r.train, *r.test, cfg_.eval_points) : 0;
}

void Trainer::Shuffle(RunState& r, int64_t e) {
  std::iota(r.order.begin(), r.order.end(), 0);
  Rng rng(StreamSeed(cfg_.seed, kEpochStream, e));
  for (int64_t i = r.N - 1; i > 0; --i) std::swap(r.order[i], r.order[rng.Below(i + 1)]);
}

void Trainer::Resume(RunState& r) {
  if (cfg_.resume_dir.empty()) return;
  const CheckpointMeta m = ResumeRun(r.N, r.keep_best, &r.resumed_from);
  r.epoch = m.epoch;
  r.pos = m.pos;
  if (r.epoch >= 0) Shuffle(r, r.epoch);
  r.saved_iter = iter_;
  DSLIDE_CHECK(iter_ <= r.total, r.resumed_from, " is at iteration ", iter_, ", beyond the ",
               r.total, " iterations asked for (",
               cfg_.iterations > 0 ? "--iterations" : "--epochs times the iterations per epoch",
               "): nothing would be trained; ask for more, or use it with eval or predict");
  if (r.root && iter_ == r.total)
    events_->Line(
        Format("note: %s is at iteration %lld, all %lld asked for: nothing left to train\n",
               r.resumed_from.c_str(), (long long)iter_, (long long)r.total));
  r.report->Resumed(iter_, r.resumed_from);
}

void Trainer::EvaluateDuringRun(RunState& r) {
  if (r.monitor == nullptr) return;
  CallRecordScope pause(comm_, false);
  const TrafficStats before = comm_->Total();
  const TrainTime at{ProcessWallSeconds() - eval_wall_s_, ProcessCpuSeconds() - eval_cpu_s_};
  r.last_eval = Evaluate(*r.monitor, cfg_.eval_points, cfg_.eval_sampled);
  eval_wall_s_ = ProcessWallSeconds() - at.wall_s;
  eval_cpu_s_ = ProcessCpuSeconds() - at.cpu_s;
  evals_.emplace_back(iter_, r.last_eval);
  // Evaluation traffic is reported on its own line, not in training's per-iteration figures.
  r.report->ExcludeTraffic(before);
  r.evaluated_at = iter_;
  // A tie of P@1 (one point in a small validation set) goes to the lower validation loss.
  // The best validated model is tracked for --keep-best and for early stopping.
  const EvalResult& e = r.last_eval;
  const bool better =
      (r.keep_best || r.patience > 0 || cfg_.lr_decay < 1) && e.points > 0 &&
      (e.At(1) > best_p1_ || (e.At(1) == best_p1_ && best_iter_ >= 0 && e.loss < best_loss_));
  r.report->EvalLine(r.monitor_name, iter_, e, r.monitor_base,
                     better && best_iter_ >= 0 ? " (best so far)" : "");
  r.report->EvalRecord(r.valid != nullptr ? "valid" : "test", iter_, e, r.monitor_base, -1, at);
  r.since_best = better ? 0 : r.since_best + 1;
  if (!better) {
    // Not at an evaluation that ends the run (its last iteration, or --patience): no step
    // would take the rate.
    const bool stops = iter_ >= r.total || r.PatienceSpent();
    if (cfg_.lr_decay < 1 && e.points > 0 && !stops) DecayLearningRate(r, e.At(1));
    return;
  }
  best_p1_ = e.At(1);
  best_loss_ = e.loss;
  best_iter_ = iter_;
  if (!r.keep_best) return;
  SnapshotWeights();
  best_epoch_ = r.epoch;
  best_pos_ = r.pos;
  best_lr_scale_ = lr_scale_;
  if (cfg_.checkpoint_dir.empty()) return;
  // Written now where the last best model written (or the run's start) is kBestWriteSeconds
  // or more ago; else with the next checkpoint, at the end or at a stop. A run of better
  // models in quick succession writes one, not each (91.6 MB each on sector, 72 of them).
  best_unwritten_ = true;
  int64_t now = Seconds(best_written_at_) >= kBestWriteSeconds ? 1 : 0;
  if (comm_->size() > 1) comm_->Broadcast(&now, sizeof now, 0, Traffic::kControl);
  if (now != 0) WriteBest();
}

void Trainer::WriteBest() {
  if (!best_unwritten_ || cfg_.checkpoint_dir.empty()) return;
  // As of its iteration: its data position and rate, and its weights from the snapshot
  // where steps followed it (the moments are those of now, their steps capped at it).
  const Earlier best{best_iter_, best_lr_scale_, /*snapshot=*/true};
  WriteCheckpoint(cfg_.checkpoint_dir + "/best", best_epoch_, best_pos_,
                  best_iter_ == iter_ ? nullptr : &best);
  best_unwritten_ = false;
  best_written_at_ = Clock::now();
}

void Trainer::DecayLearningRate(RunState& r, double p1) {
  // The ranks' evaluations agree; rank 0's word is broadcast all the same.
  int64_t decay = best_iter_ >= 0 && r.since_best >= cfg_.lr_decay_patience &&
                          best_p1_ - p1 > cfg_.lr_decay_margin
                      ? 1
                      : 0;
  if (comm_->size() > 1) comm_->Broadcast(&decay, sizeof decay, 0, Traffic::kControl);
  if (decay == 0) return;
  lr_scale_ *= cfg_.lr_decay;
  if (r.root)
    events_->Line(Format(
        "learning rate x%g at iteration %lld, now %g: the validation P@1 %.4f is "
        "more than %g below the best, %.4f (--lr-decay)\n",
        cfg_.lr_decay, (long long)iter_, cfg_.lr * lr_scale_, p1, cfg_.lr_decay_margin, best_p1_));
  r.report->LrDecay(iter_, cfg_.lr * lr_scale_, p1, best_p1_);
}

bool Trainer::StopEarly(RunState& r) {
  // The ranks' evaluations agree; rank 0's word is broadcast all the same.
  int64_t stop = r.PatienceSpent() ? 1 : 0;
  if (comm_->size() > 1) comm_->Broadcast(&stop, sizeof stop, 0, Traffic::kControl);
  if (stop == 0) return false;
  const std::string text = Format(
      "early stop at iteration %lld: the validation P@1 has not improved for %lld evaluations "
      "(--patience); the best, %.4f, was at iteration %lld\n",
      (long long)iter_, (long long)r.since_best, best_p1_, (long long)best_iter_);
  if (r.root) events_->Line(text);
  r.report->EarlyStop(iter_, best_iter_, best_p1_);
  r.total = iter_;
  return true;
}

bool Trainer::ReadSteps(RunState& r, StepLossCheck* step) {
  for (const StepLoss& s : TakeSteps()) {
    CheckStep(s);  // a non-finite loss or weights: an error of its own
    r.report->AddLoss(s.loss);
    *step = {s.iter, s.loss, std::max(r.level, r.uninformed)};
    if (cfg_.divergence_factor > 0 && s.loss > cfg_.divergence_factor * step->ref) return true;
    r.level = r.level < 0 ? s.loss : 0.95 * r.level + 0.05 * s.loss;
  }
  return false;
}

void Trainer::StopDiverged(RunState& r, const StepLossCheck& d) {
  const std::string newest =
      cfg_.checkpoint_dir.empty() ? "" : LatestCheckpoint(cfg_.checkpoint_dir);
  const std::string text =
      detail::Concat("training diverged at iteration ", d.iter, ": the sampled loss ", d.loss,
                     " is more than ", cfg_.divergence_factor, " times its running level ", d.ref,
                     " (--divergence-factor); no checkpoint was written of it",
                     newest.empty() ? std::string("") : "; the last good one is " + newest, ". ",
                     divergence_hint_);
  r.report->StopRecord("diverged", d.iter, text, newest);
  throw Stop(kExitDiverged, text);
}

void Trainer::SaveDuringRun(RunState& r) {
  // Never a checkpoint of steps not yet checked (one rank: a stop signal between reads).
  StepLossCheck d;
  if (ReadSteps(r, &d)) StopDiverged(r, d);
  WriteBest();  // the best model a checkpoint names is in CHECKPOINT_DIR/best before it
  const auto t0 = Clock::now();
  SaveCheckpoint(cfg_.checkpoint_dir, r.epoch, r.pos, cfg_.keep_checkpoints);
  r.saved_iter = iter_;
  double seconds = Seconds(t0);
  comm_->Allreduce(&seconds, 1, ReduceOp::kMax, Traffic::kControl);
  r.report->Checkpoint(iter_, seconds);
}

int64_t Trainer::KeepSelected(RunState& r) {
  if (!r.keep_best || best_iter_ < 0 || best_iter_ == iter_) return iter_;
  RestoreWeights();
  return best_iter_;
}

void Trainer::SaveModel(RunState& r, int64_t model_iter) {
  // The weights held are those of the selected iteration.
  const Earlier kept{model_iter, lr_scale_, /*snapshot=*/false};
  WriteCheckpoint(cfg_.save_dir, r.epoch, r.pos, model_iter == iter_ ? nullptr : &kept);
  if (r.root)
    events_->Line(Format("saved the model of iteration %lld to %s\n", (long long)model_iter,
                         cfg_.save_dir.c_str()));
}

void Trainer::StopBeforeFirstStep(RunState& r) {
  // A stop signal that came before the first step (while the data loaded, or the
  // checkpoint was read): nothing has been trained since the start or the checkpoint
  // resumed, so the run stops now, writing nothing (the ranks agree, as after a step).
  int64_t sig = StopSignal();
  if (comm_->size() > 1) {
    CallRecordScope pause(comm_, false);
    comm_->Allreduce(&sig, 1, ReduceOp::kMax, Traffic::kControl);
  }
  if (sig == 0 || iter_ >= r.total) return;
  const std::string text =
      detail::Concat("stopped by ", SignalName(static_cast<int>(sig)),
                     " before the first step (iteration ", iter_, " of ", r.total, "): ",
                     r.resumed_from.empty() ? std::string("nothing was trained, nothing was saved")
                                            : "nothing was trained since " + r.resumed_from +
                                                  ": continue with --resume " + cfg_.resume_dir);
  r.report->StopRecord("stopped", iter_, text, r.resumed_from);
  throw Stop(kExitStopped, text);
}

void Trainer::Iterate(RunState& r) {
  fault_.MaybeFire(comm_->rank(), iter_ + 1);
  if (r.pos >= r.N) {
    Shuffle(r, ++r.epoch);
    r.pos = 0;
  }
  const int64_t b = std::min(r.B, r.N - r.pos);
  r.points.assign(r.order.begin() + r.pos, r.order.begin() + r.pos + b);
  r.pos += b;
  QueueStep(r.train, r.points);
  const int64_t total = r.total;
  const bool log = iter_ % cfg_.log_every == 0 || iter_ == total;
  const bool eval_now = r.eval_every > 0 && iter_ % r.eval_every == 0 && iter_ < total;
  // The last iteration's checkpoint is written after the final evaluation (FinishRun), so
  // that it records that evaluation's selection too.
  const bool save_now =
      cfg_.checkpoint_every > 0 && iter_ % cfg_.checkpoint_every == 0 && iter_ < total;
  int64_t flags[2] = {StopSignal(), 0};
  StepLossCheck diverged;
  if (comm_->size() > 1 || log || eval_now || save_now || flags[0] != 0)
    flags[1] = ReadSteps(r, &diverged) ? 1 : 0;
  // One agreement per step, with more than one rank: a stop signal, or a loss far above
  // its running level, on any rank stops every rank.
  if (comm_->size() > 1) comm_->Allreduce(flags, 2, ReduceOp::kMax, Traffic::kControl);
  if (flags[1] != 0) StopDiverged(r, diverged);
  if (log) {
    double rss = PeakRssMb();
    comm_->Allreduce(&rss, 1, ReduceOp::kMax, Traffic::kControl);
    r.report->Progress(iter_, total, step_ms_, rss, r.last_eval);
  }
  // Evaluation first, so that a checkpoint of this iteration records its selection.
  if (eval_now) {
    EvaluateDuringRun(r);
    if (StopEarly(r)) return;  // FinishRun ends the run at this iteration
  }
  if (save_now) SaveDuringRun(r);
  // A stop signal on any rank (agreed above) stops every rank after this step; one rank
  // alone also sees a signal that came during the evaluation or checkpoint.
  const int64_t sig = comm_->size() > 1 ? flags[0] : StopSignal();
  if (sig != 0 && iter_ < total) StopAfterStep(r, sig);
}

void Trainer::StopAfterStep(RunState& r, int64_t sig) {
  const char* name = SignalName(static_cast<int>(sig));
  if (r.root && comm_->size() > 1)  // the ranks agreed: now it is known what happens
    events_->Line(Format("stop requested (%s): ending after iteration %lld, %s\n", name,
                         (long long)iter_, StopPlanOf(cfg_).c_str()));
  std::string where;
  if (!cfg_.checkpoint_dir.empty()) {
    if (r.saved_iter != iter_) SaveDuringRun(r);
    WriteBest();
    where = CheckpointFolder(cfg_.checkpoint_dir, iter_);
  }
  std::string saved;
  if (!cfg_.save_dir.empty()) {
    const int64_t model_iter = KeepSelected(r);  // the checkpoint is written
    SaveModel(r, model_iter);
    saved = detail::Concat("; the model of iteration ", model_iter, " saved to ", cfg_.save_dir);
  }
  const std::string text = detail::Concat(
      "stopped by ", name, " at iteration ", iter_, " of ", r.total,
      where.empty()
          ? std::string()
          : "; checkpoint written to " + where + ": continue with --resume " + cfg_.checkpoint_dir,
      saved,
      where.empty() && saved.empty() ? "; nothing was saved (no --checkpoint-dir or --save)" : "");
  r.report->StopRecord("stopped", iter_, text, where);
  if (!where.empty() || !saved.empty()) {
    MarkStopSaved(where.empty() ? cfg_.save_dir : where);
    fault_.AfterStopSaved(comm_->rank());
  }
  throw Stop(kExitStopped, text);
}

EvalResult Trainer::FinishRun(RunState& r) {
  if (r.evaluated_at != iter_) EvaluateDuringRun(r);  // an early stop has evaluated it
  // The last state, for resuming or scoring later (also when no periodic checkpoint fell on
  // the last iteration).
  if (!cfg_.checkpoint_dir.empty() && r.saved_iter != iter_) SaveDuringRun(r);
  WriteBest();
  const int64_t model_iter = KeepSelected(r);
  if (r.keep_best && r.root && best_iter_ >= 0)
    events_->Line(
        Format("kept the model of iteration %lld (best valid P@1 %.4f)%s%s\n",
               (long long)best_iter_, best_p1_, cfg_.checkpoint_dir.empty() ? "" : ", saved in ",
               cfg_.checkpoint_dir.empty() ? "" : (cfg_.checkpoint_dir + "/best").c_str()));
  if (!cfg_.save_dir.empty()) SaveModel(r, model_iter);
  if (r.valid != nullptr && r.test != nullptr) {
    // The one score of the test data, on the selected model.
    r.last_eval = Evaluate(*r.test, cfg_.eval_points, cfg_.eval_sampled);
    char note[96];
    std::snprintf(note, sizeof note, " (after %lld iterations)", (long long)iter_);
    r.report->EvalLine("test ", model_iter, r.last_eval, r.test_base,
                       model_iter != iter_ ? note : "");
    r.report->EvalRecord("test", iter_, r.last_eval, r.test_base, model_iter);
  }
  return r.last_eval;
}

}  // namespace dslide
