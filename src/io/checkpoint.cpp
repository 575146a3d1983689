// Checkpoints: the meta file (HDF5, through hdf5_file.h) and its checks on reading; the
// shards are checkpoint_shard.cpp's, the folders they live in checkpoint_folder.cpp's.
#include "io/checkpoint.h"

#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "common/fault.h"
#include "config/option_table.h"
#include "io/hdf5_file.h"

namespace dslide {

namespace fs = std::filesystem;

using h5::CreateFile;
using h5::Handle;
using h5::OpenFile;
using h5::ReadAttr;
using h5::ReadRows;
using h5::ReadString;
using h5::WriteAttr;
using h5::WriteSidecar;
using h5::WriteString;
using h5::WriteVector;

CheckpointMeta MetaOf(const ModelSpec& spec, const TrainConfig& cfg, int ranks, int64_t iter,
                      int64_t epoch, int64_t pos, int64_t best_iter, double best_p_at_1) {
  CheckpointMeta m;
  m.iter = iter;
  m.epoch = epoch;
  m.pos = pos;
  m.ranks = ranks;
  m.input_dim = spec.layers[0].in_dim;
  for (const auto& l : spec.layers) {
    m.out_dims.push_back(l.out_dim);
    m.sparsity.push_back(l.sparsity);
  }
  m.seed = cfg.seed;
  m.batch = cfg.batch;
  m.hash_family = ToString(cfg.lsh.family);
  m.hash_k = cfg.lsh.k;
  m.hash_l = cfg.lsh.l;
  m.hash_bin = cfg.lsh.bin_size;
  m.hash_bucket = cfg.lsh.bucket_capacity;
  m.strategy = ToString(cfg.strategy);
  m.best_iter = best_iter;
  m.best_p_at_1 = best_p_at_1;
  m.query = ToString(cfg.lsh.query);
  m.lsh_share = cfg.lsh.lsh_share;
  m.min_negatives = cfg.min_negatives;
  m.label_order = ToString(cfg.label_order);
  m.loss = ToString(cfg.loss);
  return m;
}

TrainConfig ConfigOf(const CheckpointMeta& m) {
  TrainConfig tc;
  tc.hidden.assign(m.out_dims.begin(), m.out_dims.end() - 1);
  tc.seed = m.seed;
  tc.batch = static_cast<int>(m.batch);
  tc.lsh.bin_size = static_cast<int>(m.hash_bin);
  tc.lsh.bucket_capacity = static_cast<int>(m.hash_bucket);
  AdoptCheckpointSettings(m, &tc);  // sparsity, family, K, L, query, share
  return tc;
}

void CheckMetaFits(const CheckpointMeta& m, const std::string& file, const ModelSpec& spec,
                   const TrainConfig& cfg) {
  DSLIDE_CHECK(m.input_dim == spec.layers[0].in_dim && m.out_dims.size() == spec.layers.size(),
               file, ": the checkpoint's network (", m.input_dim, " inputs, ", m.out_dims.size(),
               " layers) does not match this one (", spec.layers[0].in_dim, " inputs, ",
               spec.layers.size(), " layers)");
  for (size_t l = 0; l < spec.layers.size(); ++l) {
    DSLIDE_CHECK(m.out_dims[l] == spec.layers[l].out_dim, file, ": layer ", l + 1, " has ",
                 m.out_dims[l], " neurons in the checkpoint, ", spec.layers[l].out_dim,
                 " here (--hidden, data)");
    // A dense strategy computes every layer densely: a sampled checkpoint resumed under one
    // differs by the strategy, not by --sparsity.
    const std::string strategy = ToString(cfg.strategy);
    DSLIDE_CHECK(m.sparsity[l] == spec.layers[l].sparsity || m.strategy.empty() ||
                     m.strategy == strategy || cfg.strategy == Strategy::kSparse,
                 file, ": the checkpoint was trained with --strategy ", m.strategy, " (layer ",
                 l + 1, " sparsity ", m.sparsity[l], "); --strategy ", strategy,
                 " computes every layer densely: resume with --strategy ", m.strategy);
    DSLIDE_CHECK(m.sparsity[l] == spec.layers[l].sparsity, file, ": layer ", l + 1, " sparsity ",
                 m.sparsity[l], " in the checkpoint, ", spec.layers[l].sparsity,
                 " here (--sparsity)");
  }
  DSLIDE_CHECK(m.seed == cfg.seed, file, ": --seed ", cfg.seed, " differs from the checkpoint's ",
               m.seed);
  DSLIDE_CHECK(m.batch == cfg.batch, file, ": --batch ", cfg.batch,
               " differs from the checkpoint's ", m.batch);
  DSLIDE_CHECK(cfg.loss == m.Loss(), file, ": --loss ", ToString(cfg.loss),
               " differs from the checkpoint's ", ToString(m.Loss()),
               " (the loss is part of the model: leave --loss to auto to keep it)");
  DSLIDE_CHECK(cfg.label_order == m.Order(), file, ": --label-order ", ToString(cfg.label_order),
               " differs from the checkpoint's ", ToString(m.Order()));
  const LshConfig& c = cfg.lsh;
  const std::string lsh =
      CheckpointMeta::DescribeLsh(ToString(c.family), c.k, c.l, c.bin_size, c.bucket_capacity);
  DSLIDE_CHECK(m.LshText() == lsh, file, ": LSH settings '", lsh,
               "' differ from the checkpoint's '", m.LshText(), "'");
}

bool AdoptCheckpointSettings(const CheckpointMeta& m, TrainConfig* cfg) {
  const bool adopted = cfg->sparsity_auto() || !cfg->lsh.resolved();
  if (cfg->sparsity_auto()) cfg->sparsity = m.sparsity;
  if (cfg->lsh.family == HashFamily::kAuto) cfg->lsh.family = ParseHashFamily(m.hash_family);
  if (cfg->lsh.k == 0) cfg->lsh.k = static_cast<int>(m.hash_k);
  if (cfg->lsh.l == 0) cfg->lsh.l = static_cast<int>(m.hash_l);
  // Checkpoints of earlier versions recorded no query or share: vanilla queries with every
  // slot open to LSH candidates, as they ran.
  if (cfg->lsh.query == QueryStrategy::kAuto)
    cfg->lsh.query = m.query.empty() ? QueryStrategy::kVanilla : ParseQueryStrategy(m.query);
  if (cfg->lsh.lsh_share == 0) cfg->lsh.lsh_share = m.lsh_share > 0 ? m.lsh_share : 1.0;
  // The neurons' order is part of the model: a checkpoint without one numbered them by label.
  if (cfg->label_order == LabelOrder::kAuto) cfg->label_order = m.Order();
  // So is its loss: a checkpoint without one trained the softmax.
  if (cfg->loss == OutputLoss::kAuto) cfg->loss = m.Loss();
  // The rate it stepped at (a network a reranker followed: 2e-3); earlier versions': auto's.
  if (cfg->lr == 0 && m.lr > 0) cfg->lr = m.lr;
  return adopted;
}

CheckpointMeta ReadResumeMeta(const std::string& path) {
  const std::vector<std::string> candidates = ResumeCandidates(path, "--resume");
  for (const std::string& folder : candidates) {
    try {
      return ReadMeta(folder);
    } catch (const DamagedCheckpoint&) {
      // Training's resume skips it too, with a warning.
    }
  }
  throw Error(detail::Concat("option --resume: none of the ", candidates.size(),
                             " checkpoint(s) in ", path, " has an intact meta.h5"));
}

namespace {
/// The optional attributes of meta.h5 (absent from earlier versions' checkpoints) that every
/// checkpoint of this version writes.
constexpr const char* kAlwaysWritten =
    "best_iter,best_p_at_1,best_loss,run_id,query,lsh_share,min_negatives,settings,lr_scale,lr";
}  // namespace

void WriteMetaTo(hid_t g, const std::string& file, const CheckpointMeta& m) {
  WriteAttr(g, file, "format_version", int64_t{1});
  WriteAttr(g, file, "iter", m.iter);
  WriteAttr(g, file, "epoch", m.epoch);
  WriteAttr(g, file, "pos", m.pos);
  WriteAttr(g, file, "ranks", static_cast<int64_t>(m.ranks));
  WriteAttr(g, file, "input_dim", m.input_dim);
  WriteAttr(g, file, "seed", m.seed);
  WriteAttr(g, file, "batch", m.batch);
  WriteString(g, file, "strategy", m.strategy);
  WriteString(g, file, "hash_family", m.hash_family);
  WriteAttr(g, file, "hash_k", m.hash_k);
  WriteAttr(g, file, "hash_l", m.hash_l);
  WriteAttr(g, file, "hash_bin", m.hash_bin);
  WriteAttr(g, file, "hash_bucket", m.hash_bucket);
  WriteVector(g, file, "out_dims", m.out_dims);
  WriteVector(g, file, "sparsity", m.sparsity);
  WriteAttr(g, file, "best_iter", m.best_iter);
  WriteAttr(g, file, "best_p_at_1", m.best_p_at_1);
  WriteAttr(g, file, "best_loss", m.best_loss);
  WriteAttr(g, file, "run_id", m.run_id);
  WriteString(g, file, "query", m.query);
  WriteAttr(g, file, "lsh_share", m.lsh_share);
  WriteAttr(g, file, "min_negatives", m.min_negatives);
  WriteString(g, file, "settings", m.settings);
  WriteAttr(g, file, "lr_scale", m.lr_scale);
  WriteAttr(g, file, "lr", m.lr);
  std::string written = kAlwaysWritten;
  if (m.data_digest != 0) {
    WriteAttr(g, file, "data_digest", m.data_digest);
    WriteAttr(g, file, "data_points", m.data_points);
    written += ",data_digest,data_points";
  }
  // Absent where unknown (""), as in the checkpoints of earlier versions.
  if (!m.label_order.empty()) {
    WriteString(g, file, "label_order", m.label_order);
    written += ",label_order";
  }
  if (!m.loss.empty()) {
    WriteString(g, file, "loss", m.loss);
    written += ",loss";
  }
  // The attributes that earlier versions did not write, named: where they are named,
  // one that cannot be found is damage, not an earlier version's checkpoint.
  WriteString(g, file, "attributes", written);
}

void WriteMeta(const std::string& folder, const CheckpointMeta& m) {
  const std::string file = folder + "/meta.h5";
  {  // the file is closed before its checksum is taken
    Handle f = CreateFile(file);
    WriteMetaTo(f.get(), file, m);
    errno = 0;
    DSLIDE_CHECK(f.Close(), file, ": cannot write", OsReason(errno));
  }
  WriteSidecar(file);
}

namespace {

/// What a checksum cannot catch in meta.h5 (a file written damaged, its checksum matching):
/// values no run writes. Each is refused as damage naming the file, the attribute and its
/// range.
void CheckMetaValues(const CheckpointMeta& m, const std::string& file) {
  using namespace options;  // the options' ranges (option_table.h)
  auto check = [&](bool ok, const auto&... what) {
    DAMAGED_CHECK(ok, file, ": ", what..., ": a value no run writes, so the checkpoint is damaged");
  };
  const size_t layers = m.out_dims.size();
  check(m.input_dim <= kMaxDim, "input_dim is ", m.input_dim, " (not in [1, 2^31 - 1])");
  for (size_t l = 0; l < layers; ++l) {
    const bool hidden = l + 1 < layers;
    check(m.out_dims[l] >= 1 && m.out_dims[l] <= (hidden ? kMaxLayerSize : kMaxDim), "layer ",
          l + 1, " has ", m.out_dims[l], " neurons (out_dims; not in [1, ",
          hidden ? "2^24 - 1" : "2^31 - 1", "])");
    check(m.sparsity[l] > 0 && m.sparsity[l] <= 1, "layer ", l + 1, "'s sparsity is ",
          m.sparsity[l], " (not in (0, 1])");
  }
  check(m.ranks <= (1 << 20), "ranks is ", m.ranks, " (more than 2^20)");
  check(m.iter <= kMaxIterations, "iter is ", m.iter, " (beyond 2^40)");
  check(m.epoch >= -1 && m.epoch <= kMaxIterations, "epoch is ", m.epoch, " (not in [-1, 2^40])");
  check(m.data_points >= 0, "data_points is ", m.data_points, " (negative)");
  check(m.data_points == 0 || m.pos <= m.data_points, "pos is ", m.pos, ", beyond data_points ",
        m.data_points);
  check(m.best_iter >= -1 && m.best_iter <= m.iter, "best_iter is ", m.best_iter,
        " (not in [-1, iter ", m.iter, "])");
  check(m.best_p_at_1 == -1 || (m.best_p_at_1 >= 0 && m.best_p_at_1 <= 1), "best_p_at_1 is ",
        m.best_p_at_1, " (neither -1 nor in [0, 1])");
  check(!(m.best_loss < 0), "best_loss is ", m.best_loss, " (negative)");
  check(m.lr_scale > 0 && m.lr_scale <= 1, "lr_scale is ", m.lr_scale, " (not in (0, 1])");
  check(m.lr == 0 || (m.lr >= std::numeric_limits<float>::min() &&
                      m.lr <= std::numeric_limits<float>::max()),
        "lr is ", m.lr, " (not a rate > 0 that a float holds)");
  check(m.batch >= 1 && m.batch <= kMaxBatch, "batch is ", m.batch, " (not in [1, 2^20])");
  bool family = true;
  try {
    ParseHashFamily(m.hash_family, /*allow_auto=*/true);
  } catch (const Error&) {
    family = false;
  }
  check(family, "hash_family is '", m.hash_family, "' (not srp, wta, dwta or auto)");
  check(m.hash_k >= 0 && m.hash_k <= 32, "hash_k is ", m.hash_k, " (not in [0, 32])");
  check(m.hash_l >= 0 && m.hash_l <= 1024, "hash_l is ", m.hash_l, " (not in [0, 1024])");
  check(m.hash_bin >= 0 && m.hash_bin <= 256, "hash_bin is ", m.hash_bin, " (not in [0, 256])");
  check(m.hash_bucket >= 1 && m.hash_bucket <= kMaxBucketSize, "hash_bucket is ", m.hash_bucket,
        " (not in [1, 2^20])");
  bool strategy = false;
  for (Strategy v : {Strategy::kSparse, Strategy::kDenseModelParallel, Strategy::kDataParallel})
    strategy = strategy || m.strategy == ToString(v);
  check(strategy, "strategy is '", m.strategy, "' (not one of dslide's)");
  bool query = true;
  try {
    if (!m.query.empty()) ParseQueryStrategy(m.query);  // "": a checkpoint of an earlier version
  } catch (const Error&) {
    query = false;
  }
  check(query, "query is '", m.query, "' (not one of dslide's)");
  check(m.lsh_share >= 0 && m.lsh_share <= 1, "lsh_share is ", m.lsh_share, " (not in [0, 1])");
  check(m.min_negatives >= 0 && m.min_negatives <= kMaxDim, "min_negatives is ", m.min_negatives,
        " (not in [0, 2^31 - 1])");
}

}  // namespace

CheckpointMeta ReadMeta(const std::string& folder) {
  const std::string file = folder + "/meta.h5";
  Handle f = OpenFile(file);
  return ReadMetaFrom(f.get(), file);
}

CheckpointMeta ReadMetaFrom(hid_t g, const std::string& file) {
  CheckpointMeta m;
  if (H5Aexists(g, "attributes") > 0) {
    const std::string written = ReadString(g, file, "attributes");
    std::string name;
    for (size_t i = 0; i <= written.size(); ++i) {
      if (i < written.size() && written[i] != ',') {
        name += written[i];
        continue;
      }
      DAMAGED_CHECK(!name.empty() && H5Aexists(g, name.c_str()) > 0, file, ": attribute '", name,
                    "' is missing or unreadable, though the file lists it among those written: "
                    "the metadata is damaged");
      name.clear();
    }
  }
  DSLIDE_CHECK(ReadAttr<int64_t>(g, file, "format_version") == 1, file, ": unknown format version");
  m.iter = ReadAttr<int64_t>(g, file, "iter");
  m.epoch = ReadAttr<int64_t>(g, file, "epoch");
  m.pos = ReadAttr<int64_t>(g, file, "pos");
  m.ranks = static_cast<int>(ReadAttr<int64_t>(g, file, "ranks"));
  m.input_dim = ReadAttr<int64_t>(g, file, "input_dim");
  m.seed = ReadAttr<uint64_t>(g, file, "seed");
  m.batch = ReadAttr<int64_t>(g, file, "batch");
  m.strategy = ReadString(g, file, "strategy");
  m.hash_family = ReadString(g, file, "hash_family");
  m.hash_k = ReadAttr<int64_t>(g, file, "hash_k");
  m.hash_l = ReadAttr<int64_t>(g, file, "hash_l");
  m.hash_bin = ReadAttr<int64_t>(g, file, "hash_bin");
  m.hash_bucket = ReadAttr<int64_t>(g, file, "hash_bucket");
  ReadRows(g, file, "out_dims", 0, -1, &m.out_dims);
  ReadRows(g, file, "sparsity", 0, -1, &m.sparsity);
  if (H5Aexists(g, "best_iter") > 0) {
    m.best_iter = ReadAttr<int64_t>(g, file, "best_iter");
    m.best_p_at_1 = ReadAttr<double>(g, file, "best_p_at_1");
  }
  if (H5Aexists(g, "best_loss") > 0) m.best_loss = ReadAttr<double>(g, file, "best_loss");
  if (H5Aexists(g, "run_id") > 0) m.run_id = ReadAttr<uint64_t>(g, file, "run_id");
  if (H5Aexists(g, "lsh_share") > 0) {
    m.query = ReadString(g, file, "query");
    m.lsh_share = ReadAttr<double>(g, file, "lsh_share");
    m.min_negatives = ReadAttr<int64_t>(g, file, "min_negatives");
  }
  if (H5Aexists(g, "settings") > 0) m.settings = ReadString(g, file, "settings");
  if (H5Aexists(g, "lr_scale") > 0) m.lr_scale = ReadAttr<double>(g, file, "lr_scale");
  if (H5Aexists(g, "lr") > 0) m.lr = ReadAttr<double>(g, file, "lr");
  if (H5Aexists(g, "data_digest") > 0) {
    m.data_digest = ReadAttr<uint64_t>(g, file, "data_digest");
    m.data_points = ReadAttr<int64_t>(g, file, "data_points");
  }
  if (H5Aexists(g, "label_order") > 0) {
    m.label_order = ReadString(g, file, "label_order");
    DAMAGED_CHECK(m.label_order == "spread" || m.label_order == "identity", file,
                  ": unknown label order '", m.label_order, "'");
  }
  if (H5Aexists(g, "loss") > 0) {
    m.loss = ReadString(g, file, "loss");
    DAMAGED_CHECK(m.loss == "softmax" || m.loss == "one-vs-rest", file, ": unknown loss '", m.loss,
                  "'");
  }
  DAMAGED_CHECK(m.ranks >= 1 && m.iter >= 0 && m.pos >= 0 && m.input_dim > 0 &&
                    !m.out_dims.empty() && m.sparsity.size() == m.out_dims.size(),
                file, ": inconsistent metadata");
  CheckMetaValues(m, file);
  return m;
}

std::string CheckpointIdentity(uint64_t run_id, int64_t iter) {
  char id[24];
  std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(run_id));
  return detail::Concat("run ", id, " at iteration ", iter);
}

}  // namespace dslide
