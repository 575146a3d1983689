// What a training run (Trainer::Run) reports: rank 0's lines (the start, progress,
// evaluations, checkpoints) and records, to the caller's RunEvents and --metrics, and the
// figures of the progress window between two progress lines, which every rank keeps alike.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "data/dataset.h"
#include "dist/communicator.h"
#include "model/model.h"
#include "train/auto_settings.h"
#include "train/evaluator.h"
#include "train/metrics.h"
#include "train/run_events.h"

namespace dslide {

/// The process's training time when an evaluation began: wall and CPU seconds since the
/// process started, the evaluations before it left out (negative: not known).
struct TrainTime {
  double wall_s = -1, cpu_s = -1;
};

class RunReport {
 public:
  /// `cfg` (resolved), `asked` (as given), `spec`, `comm` and `events` must outlive the
  /// report; only rank 0 reports lines and records (to `events`, and to --metrics' file).
  /// `per_epoch`: the iterations of one epoch.
  RunReport(const TrainConfig& cfg, const TrainConfig& asked, const ModelSpec& spec,
            Communicator* comm, int64_t per_epoch, RunEvents* events);

  /// The run's first lines (points, model, ranks, iterations; the layers; the warning of an
  /// output budget raised by --min-negatives; validation) and the "start" record.
  void Start(const LayerSlots& slots, int64_t points, int64_t total, const Dataset* valid,
             int64_t eval_every, bool keep_best, int64_t patience, bool up_to);
  /// The "resume" record of a run resumed at `iter` from the checkpoint `from`.
  void Resumed(int64_t iter, const std::string& from);
  /// An evaluation's line: `name` (5 wide), the iteration `at`, P@1/3/5, loss, the
  /// most-popular-label baseline, points and seconds, then `note`.
  void EvalLine(const char* name, int64_t at, const EvalResult& e, double baseline,
                const char* note);
  /// An evaluation's record at iteration `iter` of `set`; `model_iter` >= 0: the iteration of
  /// the model scored, when not the current; `at` (when known) the training time it came at.
  void EvalRecord(const char* set, int64_t iter, const EvalResult& e, double baseline,
                  int64_t model_iter, TrainTime at = {});
  /// The line and record of the checkpoint of iteration `iter` in --checkpoint-dir, written
  /// in `seconds`: its size read from its folder.
  void Checkpoint(int64_t iter, double seconds);
  /// The record of a run that ends early: `event` ("stopped", "diverged") at iteration `at`,
  /// the message, and the checkpoint to continue from ("" for none).
  void StopRecord(const char* event, int64_t at, const std::string& text,
                  const std::string& checkpoint);
  /// The record of an early stop at iteration `at` (--patience): the best validated model's
  /// iteration and P@1.
  void EarlyStop(int64_t at, int64_t best_iter, double best_p1);
  /// The record of --lr-decay's step at iteration `at`: the rate `lr` from now on, the
  /// validation P@1 `p1` that took it and the best so far.
  void LrDecay(int64_t at, double lr, double p1, double best_p1);

  /// Opens the first progress window now: its clocks (and the run's, for the ETA), the
  /// traffic so far, and the step times from the `steps_timed`-th on.
  void OpenWindow(size_t steps_timed);
  /// The iteration training starts from (after a resume): the ETA and the first window
  /// count iterations from it.
  void StartAt(int64_t iter);
  /// A step's loss, into the window's mean.
  void AddLoss(double loss);
  /// Takes the traffic since `before` (an evaluation's) out of the window's figures.
  void ExcludeTraffic(const TrafficStats& before);
  /// The progress line and record at iteration `iter` of `total` (`step_ms`: every step's
  /// time so far; `rss`: the peak resident MB over the ranks; `last_eval`: the latest
  /// evaluation), then a new window from now.
  void Progress(int64_t iter, int64_t total, const std::vector<double>& step_ms, double rss,
                const EvalResult& last_eval);

 private:
  using Clock = std::chrono::steady_clock;
  /// The fields every record ends with: ranks, threads, device, strategy.
  void Base(JsonObject& o) const;
  /// A record to --metrics and the events.
  void Emit(const JsonObject& o);

  const TrainConfig& cfg_;
  const TrainConfig& asked_;
  const ModelSpec& spec_;
  Communicator* comm_;
  int64_t per_epoch_;
  bool root_;
  RunEvents* events_;
  MetricsFile metrics_;
  // The progress window: since the run's start, and since the last progress line.
  Clock::time_point t_run_, t_last_;
  int64_t iter_start_ = 0, iter_last_ = 0;
  size_t ms_from_ = 0;
  TrafficStats comm_last_;
  double loss_sum_ = 0;
  int64_t loss_n_ = 0;
};

}  // namespace dslide
