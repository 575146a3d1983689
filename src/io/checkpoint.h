// Checkpoints in HDF5: a folder per checkpoint, DIR/ckpt-<iteration>/, with meta.h5 (rank
// 0: configuration, layer sizes, ranks, data position) and rank-<r>.h5 per rank (its shard
// of every layer: weights, biases, Adam moments, hash version, rebuild count and LSH
// tables). Datasets carry Fletcher-32 checksums, so corrupted data is detected on reading.
// A checkpoint is written under ckpt-<iteration>.tmp and renamed when every rank is done:
// a crash mid-write leaves the previous checkpoints intact.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "backend/layer_backend.h"
#include "common/error.h"
#include "config/config.h"
#include "model/model.h"

namespace dslide {

/// A checkpoint file that is there but cannot be trusted: missing from its folder,
/// truncated, failing its checksum, or inconsistent (what --resume skips with a warning).
class DamagedCheckpoint : public Error {
 public:
  explicit DamagedCheckpoint(const std::string& what) : Error(what) {}
};

struct CheckpointMeta {
  int64_t iter = 0;   ///< finished iterations
  int64_t epoch = 0;  ///< the epoch whose shuffled order is being read
  int64_t pos = 0;    ///< the next point of that order
  int ranks = 1;      ///< shards written
  int64_t input_dim = 0;
  std::vector<int64_t> out_dims;  ///< per layer
  std::vector<double> sparsity;   ///< per layer
  uint64_t seed = 0;
  int64_t batch = 0;
  std::string hash_family;  ///< LSH family, K, L, bin size, bucket capacity
  int64_t hash_k = 0, hash_l = 0, hash_bin = 0, hash_bucket = 0;
  std::string strategy;
  /// --keep-best: the iteration and validation P@1 of the best model so far (-1: none);
  /// absent in checkpoints of earlier versions.
  int64_t best_iter = -1;
  double best_p_at_1 = -1;
  /// Its validation loss (NaN: unknown), which breaks ties of P@1.
  double best_loss = std::numeric_limits<double>::quiet_NaN();
  /// The learning rate's multiplier reached by --lr-decay, in (0, 1]; 1 in checkpoints of
  /// earlier versions. A resumed run steps at --lr times it.
  double lr_scale = 1;
  /// The learning rate the run stepped at (--lr, resolved; 0 in checkpoints of earlier
  /// versions): a resumed run left to --lr auto continues at it.
  double lr = 0;
  /// The run that wrote the checkpoint (a random id drawn when the run started; 0 in
  /// checkpoints of earlier versions). With `iter` it names the checkpoint: every shard
  /// carries both, so a shard copied in from another checkpoint is refused.
  uint64_t run_id = 0;
  /// Selection settings (not part of the model's shape); "" / 0 in checkpoints of earlier
  /// versions, which queried vanilla with every slot open to LSH candidates.
  std::string query;
  double lsh_share = 0;
  int64_t min_negatives = 0;
  /// The output neurons' order by label id (--label-order: "spread" or "identity"); "" in
  /// checkpoints of earlier versions, whose neurons were numbered by label (identity).
  std::string label_order;
  /// The resolved order ("" read as identity).
  LabelOrder Order() const {
    return label_order.empty() ? LabelOrder::kIdentity : ParseLabelOrder(label_order);
  }
  /// The output layer's loss ("softmax" or "one-vs-rest"; "" in checkpoints of earlier
  /// versions, which trained the softmax).
  std::string loss;
  /// The resolved loss ("" read as softmax).
  OutputLoss Loss() const { return loss.empty() ? OutputLoss::kSoftmax : ParseOutputLoss(loss); }
  /// Every option of the run as given ("auto" where left to it): the option table's JSON
  /// echo (SettingsJson), the same object as the metrics' start event; "" in checkpoints of
  /// earlier versions. The fields above are the resolved values a checkpoint is checked
  /// and scored with.
  std::string settings;
  /// The training data's Dataset::Digest and point count (0: unknown, as in checkpoints of
  /// earlier versions): a resumed run says when its data differs.
  uint64_t data_digest = 0;
  int64_t data_points = 0;

  /// The LSH settings as one line of text (DescribeLsh).
  std::string LshText() const {
    return DescribeLsh(hash_family, hash_k, hash_l, hash_bin, hash_bucket);
  }
  static std::string DescribeLsh(const std::string& family, int64_t k, int64_t l, int64_t bin,
                                 int64_t bucket) {
    return family + " K=" + std::to_string(k) + " L=" + std::to_string(l) +
           " bin=" + std::to_string(bin) + " bucket=" + std::to_string(bucket);
  }
};

/// DIR/ckpt-<iter> (zero-padded, so names sort by iteration).
std::string CheckpointFolder(const std::string& dir, int64_t iter);
/// The newest complete checkpoint folder in dir ("" when there is none).
std::string LatestCheckpoint(const std::string& dir);
/// `path` itself when it is a checkpoint folder, else the newest checkpoint in it; throws
/// dslide::Error naming `option` and the path when there is none.
std::string ResolveCheckpoint(const std::string& path, const char* option);
/// What --resume PATH tries, newest first: PATH itself when it is a checkpoint folder,
/// else every complete checkpoint in it; throws dslide::Error naming `option` when none.
std::vector<std::string> ResumeCandidates(const std::string& path, const char* option);
/// Creates `dir` when missing and checks that a file can be written in it and that it has
/// `bytes` free; throws dslide::Error naming `option`, the folder and the system's reason.
void CheckWritableDir(const std::string& dir, int64_t bytes, const char* option);
/// Removes all but the newest `keep` complete checkpoints and any leftover .tmp folders
/// older than the newest complete one.
void PruneCheckpoints(const std::string& dir, int keep);

/// A run's hold on its checkpoint folder: an advisory lock (flock) on DIR/.dslide-lock,
/// released when the object goes (or the process ends, however it ends).
class CheckpointDirLock {
 public:
  CheckpointDirLock() = default;
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;
  CheckpointDirLock(CheckpointDirLock&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  CheckpointDirLock& operator=(CheckpointDirLock&& o) noexcept;
  ~CheckpointDirLock();
  /// Takes the lock of `dir` for this run, or throws dslide::Error where another process
  /// holds it (naming that process and host) or where `dir` holds complete checkpoints
  /// that this run did not resume from (`resumed_from`: the checkpoint folder it loaded,
  /// "" for a fresh run): the new run's checkpoints would be pruned in favour of theirs.
  static CheckpointDirLock Claim(const std::string& dir, const std::string& resumed_from);

 private:
  int fd_ = -1;
};

/// The one mapping between a run and its checkpoint metadata. What a checkpoint records of
/// a run of `spec` and resolved `cfg` on `ranks` model ranks after `iter` iterations, at
/// data position (epoch, pos), with its best validated iteration and P@1 (-1: none).
CheckpointMeta MetaOf(const ModelSpec& spec, const TrainConfig& cfg, int ranks, int64_t iter,
                      int64_t epoch, int64_t pos, int64_t best_iter, double best_p_at_1);
/// The network and settings checkpoint `m` was written with (for scoring it: eval, predict).
TrainConfig ConfigOf(const CheckpointMeta& m);
/// Throws dslide::Error naming `file` and the option when checkpoint `m` does not fit the
/// network `spec` and the settings of `cfg` (shapes, sparsity, seed, batch, LSH).
void CheckMetaFits(const CheckpointMeta& m, const std::string& file, const ModelSpec& spec,
                   const TrainConfig& cfg);
/// --resume: the settings `cfg` leaves to auto (sparsity, LSH family, K, L, query, share)
/// take the checkpoint's; returns true when any did.
bool AdoptCheckpointSettings(const CheckpointMeta& m, TrainConfig* cfg);
/// --resume PATH: the metadata of the newest candidate (ResumeCandidates) whose meta.h5 is
/// intact.
CheckpointMeta ReadResumeMeta(const std::string& path);

void WriteMeta(const std::string& folder, const CheckpointMeta& meta);
/// Throws dslide::Error naming the file when it is missing, truncated or corrupted.
CheckpointMeta ReadMeta(const std::string& folder);
/// The same attributes in HDF5 group `g` of `file` (meta.h5's root; a serving model's /meta).
void WriteMetaTo(int64_t g, const std::string& file, const CheckpointMeta& meta);
CheckpointMeta ReadMetaFrom(int64_t g, const std::string& file);

/// This rank's shard of every layer to folder/rank-<rank>.h5, marked as a part of the
/// checkpoint of run `run_id` at iteration `iter`. `state(layer, parts)` gives the layer's
/// LayerPart bits `parts`; it is asked for one layer's weights, then its moments, then its
/// tables, and each is written before the next is asked for, so that one layer's state at a
/// time is held beside the model (CheckpointStaging).
using LayerStateSource = std::function<const LayerState&(int layer, unsigned parts)>;
void WriteShard(const std::string& folder, int rank, const ModelSpec& spec,
                const LayerStateSource& state, uint64_t run_id, int64_t iter);
/// The same from the states of every layer.
void WriteShard(const std::string& folder, int rank, const ModelSpec& spec,
                const std::vector<LayerState>& layers, uint64_t run_id, int64_t iter);
/// A LayerState whose arrays have room for the weights and moments of any layer of `spec`, for
/// a LayerStateSource to fill without allocating; throws OutOfMemory, naming `what` ("--save",
/// "checkpoints"), where that room cannot be had beside the model.
LayerState CheckpointStaging(const ModelSpec& spec, const std::string& what);
/// "run 0123456789abcdef at iteration 600": how messages name a checkpoint.
std::string CheckpointIdentity(uint64_t run_id, int64_t iter);
/// The state of each spec's block (layer l: its neurons [begin, end)) for the first
/// specs.size() layers, read from the shards of a checkpoint written by meta.ranks ranks:
/// any number of ranks can load any checkpoint. Each shard file is opened once. LSH tables
/// are restored only when a block is exactly one old shard. `parts` (LayerPart bits) says
/// what is read besides the weights: without kMoments, m, v, mb, vb and the rows' last steps
/// stay empty; without kTables, the tables. A shard that is not of the checkpoint `meta`
/// describes (its run id and iteration; absent in checkpoints of earlier versions) throws
/// DamagedCheckpoint naming both.
std::vector<LayerState> ReadLayers(const std::string& folder, const CheckpointMeta& meta,
                                   const std::vector<LayerSpec>& specs,
                                   unsigned parts = kCheckpoint);

/// What a checksum cannot catch (a file written damaged) in the arrays of layer `layer`
/// (counted from 0; `name` its group) read from `file`: values no training writes, NaN or
/// infinite weights and moments, negative second moments, and magnitudes no run reaches (a
/// flipped exponent bit): weights and biases (datasets named w..., b...) beyond 1e8, first
/// moments beyond 1e15, second moments (v...) beyond its square; and a block of weights
/// that is all zeros (a layout message damaged reads a layer so). `buf` holds rows from
/// `first` of `width` values. Throws DamagedCheckpoint naming the file, dataset, layer and row.
void CheckStoredValues(const std::string& file, const std::string& name, size_t layer,
                       const char* ds, int64_t first, int64_t width, const std::vector<float>& buf);

/// Writes the model of a checkpoint (any number of ranks) as plain HDF5 for other tools:
/// /layer<l>/weights (out x in, row per neuron; the output layer's row i is label i, whatever
/// --label-order trained it in), /layer<l>/biases (out), l = 1 ... layers numbered as
/// training prints them (the output layer last), and on the root
/// group the attributes input_dim, layers, iteration, activation ("relu, ..., softmax"; a
/// one-vs-rest model's ends in "sigmoid") and the LSH settings, and /meta, the checkpoint's
/// metadata as one rank's with its rows in label order (what makes the file a serving
/// model). Returns the number of parameters written. The file is written as OUT.tmp and
/// renamed when complete (a failure leaves an existing OUT as it was). With `bf16`, the
/// weights and biases are stored as bfloat16 (each float rounded to the nearest, ties to
/// even: FloatToBf16Nearest, model/adam.h), half the bytes; they read back as those floats.
int64_t ExportModel(const std::string& folder, const std::string& out_file, bool bf16 = false);

/// Whether `path` is a file ExportModel wrote (a serving model: its /meta group holds the
/// checkpoint's metadata as one rank's, the output rows in label order), which predict,
/// eval and Python's load read as they read a checkpoint folder.
bool IsServingModel(const std::string& path);
/// A serving model's metadata (ranks 1, label order identity); DamagedCheckpoint where
/// it is not one.
CheckpointMeta ReadServingMeta(const std::string& path);
/// What --model PATH names: PATH itself when it is a serving model, else the checkpoint
/// ResolveCheckpoint finds; and its metadata (ReadServingMeta or ReadMeta).
std::string ResolveModel(const std::string& path, const char* option);
CheckpointMeta ReadModelMeta(const std::string& path);
/// Layer l's block of rows (its spec's neurons [begin, end)) of a serving model's weights
/// and biases: one layer at a time, so that a model is loaded holding one layer's read copy
/// beside the weights already loaded, not all of them.
LayerState ReadServingLayer(const std::string& path, const CheckpointMeta& meta,
                            const std::vector<LayerSpec>& specs, size_t l);

}  // namespace dslide
