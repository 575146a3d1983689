// What a training run (Trainer::Run) reports: rank 0's lines (the start, progress,
// evaluations, checkpoints) and records (to --metrics and the caller's RunEvents), and the
// figures of the progress window between two progress lines, which every rank keeps alike.
#include "train/run_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "common/parallel.h"
#include "io/checkpoint.h"

namespace dslide {

namespace {

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

}  // namespace

RunReport::RunReport(const TrainConfig& cfg, const TrainConfig& asked, const ModelSpec& spec,
                     Communicator* comm, int64_t per_epoch, RunEvents* events)
    : cfg_(cfg),
      asked_(asked),
      spec_(spec),
      comm_(comm),
      per_epoch_(per_epoch),
      root_(comm->rank() == 0),
      events_(events),
      metrics_(root_ ? cfg.metrics_file : "", events) {}

void RunReport::Emit(const JsonObject& o) {
  const std::string json = o.str();
  metrics_.Record(json);
  events_->Record(json);
}

void RunReport::Base(JsonObject& o) const {
  o.Add("ranks", comm_->size())
      .Add("threads", NumThreads())
      .Add("device", ToString(cfg_.device))
      .Add("strategy", ToString(cfg_.strategy));
}

void RunReport::Start(const LayerSlots& slots, int64_t points, int64_t total, const Dataset* valid,
                      int64_t eval_every, bool keep_best, int64_t patience, bool up_to) {
  if (!root_) return;
  const int64_t B = cfg_.batch;
  // One block, written at once.
  std::string text = Format(
      "dslide: %lld training points, %lld features, %lld labels | %lld parameters | "
      "%d rank(s) x %d thread(s) | %s%lld iterations (%.2f epochs%s) of batch %lld, lr %g%s%s\n",
      (long long)points, (long long)spec_.layers[0].in_dim, (long long)spec_.layers.back().out_dim,
      (long long)spec_.NumParameters(), comm_->size(), NumThreads(), up_to ? "up to " : "",
      (long long)total, static_cast<double>(total) / per_epoch_,
      up_to ? ", --epochs auto: until early stopping" : "", (long long)B, cfg_.lr,
      asked_.lr == 0 && cfg_.reranked ? " (--lr auto: a reranker follows)" : "",
      cfg_.first_lr_scale == 1.0
          ? ""
          : Format(" (first layer x%.3g%s)", cfg_.first_lr_scale,
                   asked_.first_lr_scale == 0 ? ", --first-lr-scale auto" : "")
                .c_str());
  text += DescribeLayers(spec_, cfg_, asked_, slots);
  if (!asked_.sparsity_auto() && !asked_.settings_from_checkpoint && slots.raised > 0 &&
      !spec_.layers.back().dense())
    text += Format(
        "warning: --sparsity %g gives the output layer a budget of %lld per sample, which "
        "leaves fewer than %lld negatives beyond the labels of %lld of the %lld training "
        "points; their active sets are raised to their labels + %lld (--min-negatives)\n",
        spec_.layers.back().sparsity, (long long)slots.budget, (long long)cfg_.min_negatives,
        (long long)slots.raised, (long long)points, (long long)cfg_.min_negatives);
  if (valid != nullptr)
    text +=
        Format("validation: %lld points, evaluated every %lld iterations%s%s%s\n",
               (long long)valid->size(), (long long)eval_every,
               keep_best ? "; the best P@1 is kept (--keep-best)" : "",
               patience > 0
                   ? Format("; training stops after %lld evaluations without a better P@1 "
                            "(--patience%s)",
                            (long long)patience,
                            asked_.patience < 0 && cfg_.reranked ? " auto: a reranker follows" : "")
                         .c_str()
                   : "",
               cfg_.lr_decay < 1
                   ? Format("; the learning rate is multiplied by %g at an evaluation more than %g "
                            "below the best P@1 and %lld or more after it (--lr-decay%s)",
                            cfg_.lr_decay, cfg_.lr_decay_margin, (long long)cfg_.lr_decay_patience,
                            asked_.lr_decay == 0 ? " auto" : "")
                         .c_str()
                   : "");
  events_->Line(text);
  JsonObject o;
  o.Add("event", "start")
      .Add("points", points)
      .Add("features", spec_.layers[0].in_dim)
      .Add("labels", spec_.layers.back().out_dim)
      .Add("parameters", spec_.NumParameters())
      .Add("iterations", total)
      .Add("patience", patience)
      .Add("batch", B)
      .Add("lr", cfg_.lr)
      .Add("first_lr_scale", cfg_.first_lr_scale)
      .Add("lr_decay", cfg_.lr_decay)
      .Add("dropout", cfg_.dropout)
      .Add("output_loss", ToString(cfg_.loss))
      // What the memory check counts of rank 0's shard (ShardStateNeed, a lower bound: the
      // weights and moments, a batch's rows), beside the progress records' peak RSS.
      .Add("memory_need_mb",
           static_cast<double>(
               ShardStateNeed(spec_, BackendOptionsOf(cfg_), cfg_.device == Device::kGpu).bytes) /
               (1 << 20));
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
  Base(o);
  Emit(o);
}

void RunReport::Resumed(int64_t iter, const std::string& from) {
  if (!root_) return;
  JsonObject o;
  o.Add("event", "resume").Add("iter", iter).Add("from", from);
  Base(o);
  Emit(o);
}

void RunReport::EvalLine(const char* name, int64_t at, const EvalResult& e, double baseline,
                         const char* note) {
  if (!root_) return;
  events_->Line(
      Format("%s iter %lld | P@1 %.4f P@3 %.4f P@5 %.4f | loss %s | most-popular-label P@1 %.4f | "
             "%lld points in %.1fs%s%s\n",
             name, (long long)at, e.At(1), e.At(3), e.At(5),
             std::isnan(e.loss) ? "-" : std::to_string(e.loss).substr(0, 6).c_str(), baseline,
             (long long)e.points, e.seconds, cfg_.eval_sampled ? " (LSH-sampled)" : "", note));
}

void RunReport::EvalRecord(const char* set, int64_t iter, const EvalResult& e, double baseline,
                           int64_t model_iter, TrainTime at) {
  if (!root_) return;
  JsonObject o;
  o.Add("iter", iter)
      .Add("epoch", static_cast<double>(iter) / per_epoch_)
      .Add("set", set)
      .Add("p_at_1", e.At(1))
      .Add("p_at_3", e.At(3))
      .Add("p_at_5", e.At(5))
      .Add("most_popular_label_p_at_1", baseline)
      .Add("eval_points", e.points)
      .Add("eval_s", e.seconds);
  if (!std::isnan(e.loss)) o.Add("eval_loss", e.loss);
  if (model_iter >= 0) o.Add("model_iter", model_iter);
  if (at.wall_s >= 0) o.Add("train_wall_s", at.wall_s).Add("train_cpu_s", at.cpu_s);
  Base(o);
  Emit(o);
}

void RunReport::Checkpoint(int64_t iter, double seconds) {
  if (!root_) return;
  const std::string folder = CheckpointFolder(cfg_.checkpoint_dir, iter);
  std::error_code ec;
  double bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(folder, ec))
    bytes += static_cast<double>(std::filesystem::file_size(e.path(), ec));
  events_->Line(
      Format("checkpoint %s: %.1f MB in %.2fs\n", folder.c_str(), bytes / (1 << 20), seconds));
  JsonObject o;
  o.Add("event", "checkpoint")
      .Add("iter", iter)
      .Add("path", folder)
      .Add("bytes", bytes)
      .Add("seconds", seconds);
  Base(o);
  Emit(o);
}

void RunReport::StopRecord(const char* event, int64_t at, const std::string& text,
                           const std::string& checkpoint) {
  if (!root_) return;
  JsonObject o;
  o.Add("event", event).Add("iter", at).Add("message", text);
  if (!checkpoint.empty()) o.Add("checkpoint", checkpoint);
  Base(o);
  Emit(o);
}

void RunReport::EarlyStop(int64_t at, int64_t best_iter, double best_p1) {
  if (!root_) return;
  JsonObject o;
  o.Add("event", "early_stop")
      .Add("iter", at)
      .Add("best_iter", best_iter)
      .Add("best_p_at_1", best_p1);
  Base(o);
  Emit(o);
}

void RunReport::LrDecay(int64_t at, double lr, double p1, double best_p1) {
  if (!root_) return;
  JsonObject o;
  o.Add("event", "lr_decay")
      .Add("iter", at)
      .Add("lr", lr)
      .Add("p_at_1", p1)
      .Add("best_p_at_1", best_p1);
  Base(o);
  Emit(o);
}

void RunReport::OpenWindow(size_t steps_timed) {
  t_run_ = Clock::now();
  t_last_ = Clock::now();
  ms_from_ = steps_timed;
  comm_last_ = comm_->Total();
}

void RunReport::StartAt(int64_t iter) {
  iter_start_ = iter;
  iter_last_ = iter;
}

void RunReport::AddLoss(double loss) {
  loss_sum_ += loss;
  ++loss_n_;
}

void RunReport::ExcludeTraffic(const TrafficStats& before) {
  comm_last_.bytes += comm_->Total().bytes - before.bytes;
  comm_last_.seconds += comm_->Total().seconds - before.seconds;
}

void RunReport::Progress(int64_t iter, int64_t total, const std::vector<double>& step_ms,
                         double rss, const EvalResult& last_eval) {
  const TrafficStats now = comm_->Total();
  const int64_t its = iter - iter_last_;
  const double wall = Seconds(t_last_);
  const std::vector<double> ms(step_ms.begin() + ms_from_, step_ms.end());
  const double bytes = static_cast<double>(now.bytes - comm_last_.bytes) / its;
  const double comm_ms = (now.seconds - comm_last_.seconds) * 1e3 / its;
  // Collective: of that, the network's time (the rest waited for the slowest rank).
  const double net_ms = comm_->SettleCalls().network * 1e3 / its;
  const double sps = its * static_cast<double>(cfg_.batch) / wall;
  const double loss = loss_sum_ / loss_n_;
  if (root_) {
    const double eta = Seconds(t_run_) / (iter - iter_start_) * (total - iter);
    // With P ranks: the time in the exchanges per iteration, and the network's part of it.
    char comm[64] = "";
    if (comm_->size() > 1)
      std::snprintf(comm, sizeof comm, " | comm %.1f ms (network %.1f)", comm_ms, net_ms);
    events_->Line(
        Format("iter %lld/%lld | epoch %.2f | %.0f samples/s | sampled loss %.4f | last P@1 %s | "
               "%.1f ms/iter | %.0f KB sent/iter%s | RSS %.0f MB | ETA %s\n",
               (long long)iter, (long long)total, static_cast<double>(iter) / per_epoch_, sps, loss,
               last_eval.points ? std::to_string(last_eval.At(1)).substr(0, 6).c_str() : "-",
               Median(ms), bytes / 1024, comm, rss, FormatDuration(eta).c_str()));
    JsonObject o;
    o.Add("iter", iter)
        .Add("epoch", static_cast<double>(iter) / per_epoch_)
        .Add("loss", loss)
        .Add("ms_per_iter", Median(ms))
        .Add("samples_per_s", sps)
        .Add("bytes_sent_per_iter", bytes)
        .Add("comm_ms_per_iter", comm_ms)
        .Add("comm_network_ms_per_iter", net_ms)
        .Add("comm_wait_ms_per_iter", std::max(0.0, comm_ms - net_ms))  // rounding: never < 0
        .Add("peak_rss_mb", rss);
    Base(o);
    Emit(o);
  }
  t_last_ = Clock::now();
  iter_last_ = iter;
  ms_from_ = step_ms.size();
  comm_last_ = comm_->Total();
  loss_sum_ = 0;
  loss_n_ = 0;
}

}  // namespace dslide
