// The trainer's checkpoints: writing one (every rank its shard, agreed before and after, via a
// .tmp folder) and pruning the older, loading one, resuming from the newest intact one of
// --resume with the best model before the interruption, checking before training that the
// folders can take them, and the host copies of the best validated model (--keep-best).
#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <thread>
#include <utility>

#include "common/error.h"
#include "common/memory_limit.h"
#include "io/output_path.h"

namespace dslide {

namespace {

using Clock = std::chrono::steady_clock;
double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

/// Collective: the smallest and largest of `v` over the ranks, in one all-reduce.
std::pair<int64_t, int64_t> RangeOverRanks(Communicator* comm, int64_t v) {
  int64_t m[2] = {v, -v};
  comm->Allreduce(m, 2, ReduceOp::kMin, Traffic::kControl);
  return {m[0], -m[1]};
}

}  // namespace

void Trainer::SaveCheckpoint(const std::string& dir, int64_t epoch, int64_t pos, int keep) {
  WriteCheckpoint(CheckpointFolder(dir, iter_), epoch, pos);
  if (comm_->rank() == 0) PruneCheckpoints(dir, keep);
}

void Trainer::WriteCheckpoint(const std::string& folder, int64_t epoch, int64_t pos,
                              const Earlier* earlier) {
  const int64_t iter = earlier != nullptr ? earlier->iter : iter_;
  const bool snapshot = earlier != nullptr && earlier->snapshot;
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
    } catch (const std::bad_alloc&) {
      failed = "out of memory while writing it";
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
      // A layer's part at a time, in the arrays CheckStorage set aside.
      auto state = [&](int layer, unsigned parts) -> const LayerState& {
        if (snapshot && parts == kWeights) {
          staging_.w = best_w_[layer];
          staging_.b = best_b_[layer];
          return staging_;
        }
        backend_->SaveLayer(layer, parts, &staging_);
        if ((parts & kMoments) && earlier != nullptr) {
          for (int64_t& step : staging_.row_step) step = std::min(step, iter);
          for (int64_t& step : staging_.bias_step) step = std::min(step, iter);
        }
        // Rebuilt from the weights on loading (a snapshot's: the layers' tables are of others).
        if (!cfg_.checkpoint_tables || snapshot) {
          staging_.table_offsets.clear();
          staging_.table_ids.clear();
          staging_.table_sizes.clear();
        }
        return staging_;
      };
      WriteShard(tmp, model_comm_->rank(), spec_, state, run_id_, iter);
      fault_.MaybeFailWrite(comm_->rank(), iter, tmp + "/rank shard");
    });
  }
  if (ok && comm_->rank() == 0)
    attempt([&] {
      WriteMeta(tmp, MetaAt(iter, epoch, pos, earlier != nullptr ? earlier->lr_scale : lr_scale_));
    });
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
    events_->Warning(Format("[rank %d] dslide error: %s\n", comm_->rank(), failed.c_str()));
  }
  if (comm_->rank() == 0) {
    std::error_code ec;
    std::filesystem::remove_all(tmp, ec);
  }
  const std::string parent = std::filesystem::path(folder).parent_path().string();
  const std::string newest = LatestCheckpoint(parent);
  const std::string reason = failed.empty() ? "see the rank's error above" : failed;
  throw CheckpointNotWritten(
      detail::Concat(
          "the checkpoint of iteration ", iter, " could not be written (", reason,
          "); its partial folder was removed and the checkpoints written before are kept",
          newest.empty() ? std::string(" (none)") : " (newest: " + newest + ")"),
      newest);
}

CheckpointMeta Trainer::MetaAt(int64_t iter, int64_t epoch, int64_t pos, double lr_scale) const {
  CheckpointMeta m =
      MetaOf(spec_, cfg_, model_comm_->size(), iter, epoch, pos, best_iter_, best_p1_);
  m.settings = SettingsJson(asked_);  // every option as given, from the option table
  m.best_loss = best_loss_;
  m.lr_scale = lr_scale;
  m.lr = cfg_.lr;
  m.run_id = run_id_;
  m.data_digest = data_digest_;
  m.data_points = data_points_;
  return m;
}

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
      events_->Warning(Format("[rank %d] warning: skipping the damaged checkpoint %s: %s\n",
                              comm_->rank(), folder.c_str(), damage.c_str()));
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
  index_.reset();  // other weights: an output index of the old ones would be stale
  CheckpointMeta m = ReadMeta(folder);
  CheckMetaFits(m, folder + "/meta.h5", spec_, cfg_);
  // Scoring alone reads the weights and tables, not Adam's moments.
  const unsigned parts = cfg_.scoring_only ? kWeights | kTables : kCheckpoint;
  std::vector<LayerState> states = ReadLayers(folder, m, spec_.layers, parts);
  for (size_t l = 0; l < states.size(); ++l) {
    const int layer = static_cast<int>(l);
    LayerState& st = states[l];
    if (!spec_.layers[l].dense())
      st.tables_plan = tables_.Restore(layer, st.tables_plan.hash_version, st.tables_plan.rebuild);
    try {
      backend_->LoadLayer(layer, parts, st);
    } catch (const OutOfMemory&) {
      throw;
    } catch (const Error& e) {  // tables whose checks fail (LshTables::Import): damage
      throw DamagedCheckpoint(detail::Concat(folder, ": layer ", layer + 1, ": ", e.what()));
    }
    // Resharded: the tables of the checkpoint's build made again from the loaded weights.
    if (!spec_.layers[l].dense() && st.table_sizes.empty())
      tables_.RepeatLast(backend_.get(), layer);
  }
  iter_ = m.iter;
  best_iter_ = m.best_iter;
  best_p1_ = m.best_p_at_1;
  best_loss_ = m.best_loss;
  lr_scale_ = m.lr_scale;
  schedule_.Reset();
  for (int64_t i = 1; i <= iter_; ++i) schedule_.Due(i);
  return m;
}

CheckpointMeta Trainer::LoadServingModel(const std::string& path) {
  index_.reset();  // other weights: an output index of the old ones would be stale
  CheckpointMeta m = ReadServingMeta(path);
  CheckMetaFits(m, path, spec_, cfg_);
  // A layer read, loaded and let go before the next is read: the peak holds one layer's
  // read copy beside the loaded weights.
  for (size_t l = 0; l < spec_.layers.size(); ++l) {
    const int layer = static_cast<int>(l);
    backend_->LoadLayer(layer, kWeights, ReadServingLayer(path, m, spec_.layers, l));
    // No tables in the file: a sampled layer's are built from the loaded weights.
    if (!spec_.layers[l].dense()) tables_.RebuildLayer(backend_.get(), layer);
  }
  iter_ = m.iter;
  best_iter_ = m.best_iter;
  best_p1_ = m.best_p_at_1;
  best_loss_ = m.best_loss;
  return m;
}

CheckpointMeta Trainer::ResumeRun(int64_t points, bool keep_best, std::string* from) {
  const auto t_load = Clock::now();
  CheckpointMeta m = ResumeNewestIntact(from);
  double load_s = Seconds(t_load);
  comm_->Allreduce(&load_s, 1, ReduceOp::kMax, Traffic::kControl);
  DSLIDE_CHECK(m.pos <= points, *from, ": data position ", m.pos, " is beyond the ", points,
               " training points (a different --train file?)");
  if (comm_->rank() == 0) {
    std::string text =
        Format("resumed from %s at iteration %lld (epoch %lld, point %lld), read in %.2fs%s\n",
               from->c_str(), (long long)iter_, (long long)m.epoch, (long long)m.pos, load_s,
               lr_scale_ == 1.0 ? ""
                                : Format("; the learning rate is %g (--lr x %g, --lr-decay)",
                                         cfg_.lr * lr_scale_, lr_scale_)
                                      .c_str());
    if (m.data_digest != 0 && data_digest_ != 0 && m.data_digest != data_digest_)
      text += Format(
          "note: the training data differs from the data %s was trained on (%lld points then, "
          "%lld now%s): training continues from its position (epoch %lld, point %lld) over "
          "this data\n",
          from->c_str(), (long long)m.data_points, (long long)points,
          m.data_points == points ? ", the same count but other contents or order" : "",
          (long long)m.epoch, (long long)m.pos);
    events_->Line(text);
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
        const std::vector<LayerState> st = ReadLayers(best, bm, spec_.layers, kWeights);
        best_w_.resize(st.size());
        best_b_.resize(st.size());
        for (size_t l = 0; l < st.size(); ++l) {  // rows per neuron, as SaveLayer gives them
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
      events_->Warning(Format("[rank %d] warning: the best model in %s is damaged: %s\n",
                              comm_->rank(), best.c_str(), damage.c_str()));
    }
    found = all_found == 1;
  }
  if (comm_->rank() == 0 && keep_best && (found || best_iter_ >= 0)) {
    events_->Line(Format(
        found ? "the best model so far is that of iteration %lld (valid P@1 %.4f), in %s\n"
              : "the best model so far (iteration %lld, valid P@1 %.4f) is not in %s: "
                "selection starts afresh\n",
        (long long)best_iter_, best_p1_, best.empty() ? "(no --checkpoint-dir)" : best.c_str()));
  }
  if (!found) {
    best_iter_ = -1;
    best_p1_ = -1;
    best_loss_ = std::numeric_limits<double>::quiet_NaN();
  }
  return m;
}

void Trainer::CheckSharedDir(const std::string& dir, const char* option) {
  // With P ranks, every shard of a checkpoint and its metadata meet in one folder: a folder
  // of each node's own disk would fail at the first checkpoint. Rank 0 leaves a file there;
  // every rank must see it (a few tries: a network file system may be slow to show it).
  if (comm_->size() < 2) return;
  namespace fs = std::filesystem;
  const fs::path probe = fs::path(dir) / (".dslide-shared-" + CheckpointIdentity(run_id_, 0));
  std::error_code ec;
  if (comm_->rank() == 0) std::ofstream(probe) << "dslide\n";
  int64_t ok = 0;
  comm_->Allreduce(&ok, 1, ReduceOp::kMin, Traffic::kControl);  // written before any looks
  for (int attempt = 0; attempt < 20; ++attempt) {
    ok = fs::exists(probe, ec) ? 1 : 0;
    int64_t all_ok = ok;
    comm_->Allreduce(&all_ok, 1, ReduceOp::kMin, Traffic::kControl);
    if (all_ok == 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  int64_t missing = ok ? 0 : 1;  // the ranks that do not see it
  comm_->Allreduce(&missing, 1, ReduceOp::kSum, Traffic::kControl);
  if (comm_->rank() == 0) fs::remove(probe, ec);
  DSLIDE_CHECK(missing == 0, "option ", option, ": ", dir,
               " is not one folder that every rank shares (", missing, " of ", comm_->size(),
               " ranks do not see rank 0's files there): a checkpoint's shards and metadata "
               "must meet in one folder; give a path on a file system that every node mounts");
}

void Trainer::CheckStorage(int64_t total, const std::string& resumed_from) {
  if (cfg_.checkpoint_dir.empty() && cfg_.save_dir.empty()) return;
  // Writing a checkpoint copies a layer's weights and moments out of the model (WriteShard):
  // the arrays are set aside now, so that a run whose checkpoints cannot fit beside the
  // model is refused before it trains, not at its first checkpoint.
  staging_ = CheckpointStaging(spec_, cfg_.checkpoint_dir.empty() ? "--save" : "checkpoints");
  // Every shard of a checkpoint, as the folder is shared (one shard: data parallelism): the
  // same figure on every rank.
  int64_t all = CheckpointBytes();
  model_comm_->Allreduce(&all, 1, ReduceOp::kSum, Traffic::kControl);
  if (!cfg_.checkpoint_dir.empty()) {
    CheckWritableDir(cfg_.checkpoint_dir, all, "--checkpoint-dir");
    CheckSharedDir(cfg_.checkpoint_dir, "--checkpoint-dir");
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
    CheckOutsideRunFolder("--save", cfg_.save_dir);
    CheckWritableDir(parent.empty() ? "." : parent.string(), all, "--save");
    CheckSharedDir(parent.empty() ? "." : parent.string(), "--save");
  }
  if (!cfg_.checkpoint_dir.empty()) {
    // The run owns its folder: no second run at the same time, no other run's checkpoints.
    // Rank 0 claims it; every rank stops with its answer.
    std::string refusal;
    if (comm_->rank() == 0) {
      try {
        checkpoint_lock_ = CheckpointDirLock::Claim(cfg_.checkpoint_dir, resumed_from);
      } catch (const Error& e) {
        refusal = e.what();
      }
    }
    int64_t n = static_cast<int64_t>(refusal.size());
    comm_->Broadcast(&n, sizeof n, 0, Traffic::kControl);
    refusal.resize(static_cast<size_t>(n));
    if (n > 0) comm_->Broadcast(refusal.data(), n, 0, Traffic::kControl);
    DSLIDE_CHECK(refusal.empty(), refusal);
  }
  if (comm_->rank() == 0 && cfg_.checkpoint_every > total - iter_ && total > iter_)
    events_->Line(Format(
        "note: --checkpoint-every %lld is more than the %lld iterations left: only the final "
        "checkpoint will be written\n",
        (long long)cfg_.checkpoint_every, (long long)(total - iter_)));
}

void Trainer::SnapshotWeights() {
  const size_t n = spec_.layers.size();
  best_w_.resize(n);
  best_b_.resize(n);
  for (size_t l = 0; l < n; ++l) {
    // Into the arrays of the snapshot before (the same sizes): no pages to fault in again.
    LayerState st;
    st.w.swap(best_w_[l]);
    st.b.swap(best_b_[l]);
    backend_->SaveLayer(static_cast<int>(l), kWeights, &st);
    best_w_[l].swap(st.w);
    best_b_[l].swap(st.b);
  }
}

void Trainer::RestoreWeights() {
  index_.reset();  // other weights: an output index of the old ones would be stale
  for (size_t l = 0; l < best_w_.size(); ++l) {
    LayerState st;
    st.w = best_w_[l];
    st.b = best_b_[l];
    backend_->LoadLayer(static_cast<int>(l), kWeights, st);
    if (!spec_.layers[l].dense()) tables_.RebuildLayer(backend_.get(), static_cast<int>(l));
  }
}

}  // namespace dslide
