// Checkpoints: the meta file and the shards (HDF5, through hdf5_file.h), their checks on
// reading, and the export of a model; the folders they live in are checkpoint_folder.cpp's.
#include "io/checkpoint.h"

#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
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
using h5::WriteArray;
using h5::WriteAttr;
using h5::WriteSidecar;
using h5::WriteString;
using h5::WriteVector;

namespace {

/// LSH tables, stored by their non-empty buckets: for each table its ids in bucket order
/// (table_ids, table_sizes per table) and, per non-empty bucket, its index and size
/// (table_buckets, table_counts; table_nonempty per table). A table of 2^18 buckets with
/// a few thousand ids then costs the ids, not a million offsets.
void WriteTables(hid_t g, const std::string& file, const LayerState& st) {
  const size_t tables = st.table_sizes.size();
  const size_t nb = st.table_offsets.size() / tables;  // buckets + 1 per table
  std::vector<uint32_t> buckets, counts;
  std::vector<int64_t> nonempty(tables, 0);
  for (size_t t = 0; t < tables; ++t) {
    const uint32_t* off = st.table_offsets.data() + t * nb;
    for (size_t b = 0; b + 1 < nb; ++b)
      if (off[b + 1] > off[b]) {
        buckets.push_back(static_cast<uint32_t>(b));
        counts.push_back(off[b + 1] - off[b]);
        ++nonempty[t];
      }
  }
  WriteAttr(g, file, "table_buckets_per_table", static_cast<int64_t>(nb - 1));
  WriteVector(g, file, "table_ids", st.table_ids);
  WriteVector(g, file, "table_sizes", st.table_sizes);
  WriteVector(g, file, "table_nonempty", nonempty);
  WriteVector(g, file, "table_buckets", buckets);
  WriteVector(g, file, "table_counts", counts);
}

/// The tables of a shard's layer into st (offsets rebuilt); none when the checkpoint was
/// written without them. Reads the earlier layout (table_offsets) too.
void ReadTables(hid_t g, const std::string& file, LayerState* st) {
  st->table_offsets.clear();
  st->table_ids.clear();
  st->table_sizes.clear();
  if (H5Lexists(g, "table_offsets", H5P_DEFAULT) > 0) {
    ReadRows(g, file, "table_offsets", 0, -1, &st->table_offsets);
    ReadRows(g, file, "table_ids", 0, -1, &st->table_ids);
    ReadRows(g, file, "table_sizes", 0, -1, &st->table_sizes);
    return;
  }
  if (H5Lexists(g, "table_counts", H5P_DEFAULT) <= 0) return;  // written without tables
  const int64_t nb = ReadAttr<int64_t>(g, file, "table_buckets_per_table");
  std::vector<int64_t> nonempty;
  std::vector<uint32_t> buckets, counts;
  ReadRows(g, file, "table_ids", 0, -1, &st->table_ids);
  ReadRows(g, file, "table_sizes", 0, -1, &st->table_sizes);
  ReadRows(g, file, "table_nonempty", 0, -1, &nonempty);
  ReadRows(g, file, "table_buckets", 0, -1, &buckets);
  ReadRows(g, file, "table_counts", 0, -1, &counts);
  const size_t tables = st->table_sizes.size();
  DAMAGED_CHECK(nb >= 1 && nb <= (int64_t{1} << 32) && nonempty.size() == tables &&
                    buckets.size() == counts.size(),
                file, ": inconsistent LSH tables");
  st->table_offsets.assign(tables * (nb + 1), 0);
  size_t at = 0;
  for (size_t t = 0; t < tables; ++t) {
    uint32_t* off = st->table_offsets.data() + t * (nb + 1);
    DAMAGED_CHECK(nonempty[t] >= 0 && at + nonempty[t] <= buckets.size(), file,
                  ": inconsistent LSH tables");
    for (int64_t j = 0; j < nonempty[t]; ++j, ++at) {
      DAMAGED_CHECK(buckets[at] < nb, file, ": inconsistent LSH tables");
      off[buckets[at] + 1] = counts[at];
    }
    for (int64_t b = 0; b < nb; ++b) off[b + 1] += off[b];
  }
}

std::string ShardFile(const std::string& folder, int rank) {
  char name[32];
  std::snprintf(name, sizeof name, "rank-%05d.h5", rank);
  return folder + "/" + name;
}

}  // namespace

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
    DSLIDE_CHECK(m.sparsity[l] == spec.layers[l].sparsity, file, ": layer ", l + 1, " sparsity ",
                 m.sparsity[l], " in the checkpoint, ", spec.layers[l].sparsity,
                 " here (--sparsity)");
  }
  DSLIDE_CHECK(m.seed == cfg.seed, file, ": --seed ", cfg.seed, " differs from the checkpoint's ",
               m.seed);
  DSLIDE_CHECK(m.batch == cfg.batch, file, ": --batch ", cfg.batch,
               " differs from the checkpoint's ", m.batch);
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

void WriteMeta(const std::string& folder, const CheckpointMeta& m) {
  const std::string file = folder + "/meta.h5";
  {  // the file is closed before its checksum is taken
    Handle f = CreateFile(file);
    const hid_t g = f.get();
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
    if (m.data_digest != 0) {
      WriteAttr(g, file, "data_digest", m.data_digest);
      WriteAttr(g, file, "data_points", m.data_points);
    }
    // Absent where unknown (""), as in the checkpoints of earlier versions.
    if (!m.label_order.empty()) WriteString(g, file, "label_order", m.label_order);
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
  const hid_t g = f.get();
  CheckpointMeta m;
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
  if (H5Aexists(g, "data_digest") > 0) {
    m.data_digest = ReadAttr<uint64_t>(g, file, "data_digest");
    m.data_points = ReadAttr<int64_t>(g, file, "data_points");
  }
  if (H5Aexists(g, "label_order") > 0) {
    m.label_order = ReadString(g, file, "label_order");
    DAMAGED_CHECK(m.label_order == "spread" || m.label_order == "identity", file,
                  ": unknown label order '", m.label_order, "'");
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

void WriteShard(const std::string& folder, int rank, const ModelSpec& spec,
                const std::vector<LayerState>& layers, uint64_t run_id, int64_t iter) {
  WriteShard(
      folder, rank, spec,
      [&](int layer, unsigned) -> const LayerState& { return layers[static_cast<size_t>(layer)]; },
      run_id, iter);
}

int64_t CheckpointStagingBytes(const ModelSpec& spec) {
  int64_t most = 0;
  for (const LayerSpec& s : spec.layers)
    most = std::max(most, 3 * s.local() * (s.in_dim + 1) * static_cast<int64_t>(sizeof(float)));
  return most;
}

void WriteShard(const std::string& folder, int rank, const ModelSpec& spec,
                const LayerStateSource& state, uint64_t run_id, int64_t iter) {
  const std::string file = ShardFile(folder, rank);
  {  // the file is closed before its checksum is taken
    Handle f = CreateFile(file);
    WriteAttr(f.get(), file, "run_id", run_id);
    WriteAttr(f.get(), file, "iter", iter);
    for (size_t l = 0; l < spec.layers.size(); ++l) {
      const LayerSpec& s = spec.layers[l];
      const int layer = static_cast<int>(l);
      const std::string name = "layer" + std::to_string(l);
      Handle g(H5Gcreate2(f.get(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      DSLIDE_CHECK(g.ok(), file, ": cannot create group ", name);
      WriteAttr(g.get(), file, "begin", s.begin);
      WriteAttr(g.get(), file, "end", s.end);
      const hsize_t n = static_cast<hsize_t>(s.local()), d = static_cast<hsize_t>(s.in_dim);
      const LayerState& weights = state(layer, kWeights);
      WriteArray(g.get(), file, "w", weights.w.data(), n, d);
      WriteVector(g.get(), file, "b", weights.b);
      const LayerState& moments = state(layer, kMoments);
      WriteArray(g.get(), file, "m", moments.m.data(), n, d);
      WriteArray(g.get(), file, "v", moments.v.data(), n, d);
      WriteVector(g.get(), file, "mb", moments.mb);
      WriteVector(g.get(), file, "vb", moments.vb);
      const LayerState& tables = state(layer, kTables);
      WriteAttr(g.get(), file, "hash_version", tables.tables_plan.hash_version);
      WriteAttr(g.get(), file, "rebuilds", tables.tables_plan.rebuild);
      if (!tables.table_sizes.empty()) WriteTables(g.get(), file, tables);
    }
    errno = 0;
    DSLIDE_CHECK(H5Fflush(f.get(), H5F_SCOPE_LOCAL) >= 0 && f.Close(), file, ": cannot write",
                 OsReason(errno));
  }
  WriteSidecar(file);
}

std::vector<LayerState> ReadLayers(const std::string& folder, const CheckpointMeta& meta,
                                   const std::vector<LayerSpec>& specs, bool weights_only) {
  DSLIDE_CHECK(specs.size() <= meta.out_dims.size(), folder, ": the checkpoint has ",
               meta.out_dims.size(), " layers, ", specs.size(), " were asked for");
  std::vector<LayerState> states(specs.size());
  for (size_t l = 0; l < specs.size(); ++l) {
    const int64_t n = specs[l].local(), d = specs[l].in_dim;
    LayerState& st = states[l];
    st.w.resize(n * d);
    st.b.resize(n);
    if (!weights_only) {
      st.m.resize(n * d);
      st.v.resize(n * d);
      st.mb.resize(n);
      st.vb.resize(n);
    }
  }
  std::vector<float> buf;
  // Each old shard file is opened (and its checksum verified) once for all layers.
  for (int r = 0; r < meta.ranks; ++r) {
    const std::string file = ShardFile(folder, r);
    std::unique_ptr<Handle> f;
    for (size_t l = 0; l < specs.size(); ++l) {
      const LayerSpec& spec = specs[l];
      LayerState& st = states[l];
      const int64_t b0 = ModelSpec::BlockBegin(spec.out_dim, r, meta.ranks);
      const int64_t b1 = ModelSpec::BlockBegin(spec.out_dim, r + 1, meta.ranks);
      const int64_t lo = std::max(b0, spec.begin), hi = std::min(b1, spec.end);
      if (lo >= hi) continue;
      if (!f) {
        f = std::make_unique<Handle>(OpenFile(file));
        const bool marked = H5Aexists(f->get(), "run_id") > 0 && H5Aexists(f->get(), "iter") > 0;
        const uint64_t run = marked ? ReadAttr<uint64_t>(f->get(), file, "run_id") : 0;
        const int64_t at = marked ? ReadAttr<int64_t>(f->get(), file, "iter") : -1;
        // Checkpoints of earlier versions carry no identity, in meta.h5 or in a shard; a
        // shard with one beside a meta.h5 without is a damaged (or foreign) meta.h5.
        DAMAGED_CHECK(meta.run_id != 0 || run == 0, file, " is a shard of the checkpoint of ",
                      CheckpointIdentity(run, at), ", but its folder's meta.h5 names no run: ",
                      "meta.h5 is damaged or from another checkpoint");
        if (meta.run_id != 0) {
          DAMAGED_CHECK(run == meta.run_id && at == meta.iter, file, " is a shard of ",
                        marked ? "the checkpoint of " + CheckpointIdentity(run, at)
                               : std::string("a checkpoint of unknown identity"),
                        ", not of this folder's checkpoint (",
                        CheckpointIdentity(meta.run_id, meta.iter),
                        ", as its meta.h5 says): a checkpoint's files must not be mixed");
        }
      }
      const std::string name = "layer" + std::to_string(l);
      Handle g(H5Gopen2(f->get(), name.c_str(), H5P_DEFAULT), H5Gclose);
      DAMAGED_CHECK(g.ok(), file, ": group ", name, " (layer ", l + 1, ") is missing");
      DAMAGED_CHECK(ReadAttr<int64_t>(g.get(), file, "begin") == b0 &&
                        ReadAttr<int64_t>(g.get(), file, "end") == b1,
                    file, ": ", name, " (layer ", l + 1, ") does not hold neurons [", b0, ", ", b1,
                    ") as its metadata says");
      const int64_t at = lo - spec.begin, rows = hi - lo, first = lo - b0, d = spec.in_dim;
      int64_t cols = 0;
      using Field = std::pair<const char*, std::vector<float>*>;
      const std::vector<Field> matrices =
          weights_only ? std::vector<Field>{{"w", &st.w}}
                       : std::vector<Field>{{"w", &st.w}, {"m", &st.m}, {"v", &st.v}};
      const std::vector<Field> vectors =
          weights_only ? std::vector<Field>{{"b", &st.b}}
                       : std::vector<Field>{{"b", &st.b}, {"mb", &st.mb}, {"vb", &st.vb}};
      // What a checksum cannot catch (a file written damaged): values no training writes,
      // NaN or infinite weights and moments, negative second moments, and magnitudes no run
      // reaches (a flipped exponent bit): Adam moves a weight by about lr a step, so weights,
      // biases and first moments stay far below kMaxWeight, second moments (squared
      // gradients) below its square; a run whose values grow so far diverges first.
      constexpr float kMaxWeight = 1e15f;
      auto check_values = [&](const char* ds, int64_t width) {
        const bool second_moment = ds[0] == 'v';
        const float limit = second_moment ? kMaxWeight * kMaxWeight : kMaxWeight;
        for (size_t i = 0; i < buf.size(); ++i)
          DAMAGED_CHECK(std::isfinite(buf[i]) && std::abs(buf[i]) <= limit &&
                            !(second_moment && buf[i] < 0.0f),
                        file, ": ", name, "/", ds, " (layer ", l + 1, ") holds ", buf[i],
                        " at row ", first + static_cast<int64_t>(i) / std::max<int64_t>(width, 1),
                        ": no training writes such a value; the checkpoint is damaged");
      };
      for (const auto& [ds, dst] : matrices) {
        ReadRows(g.get(), file, ds, first, rows, &buf, &cols);
        DAMAGED_CHECK(cols == d, file, ": ", name, "/", ds, " has ", cols, " columns, expected ",
                      d);
        check_values(ds, d);
        std::copy(buf.begin(), buf.end(), dst->begin() + at * d);
      }
      for (const auto& [ds, dst] : vectors) {
        ReadRows(g.get(), file, ds, first, rows, &buf);
        check_values(ds, 1);
        std::copy(buf.begin(), buf.end(), dst->begin() + at);
      }
      st.tables_plan.hash_version =
          std::max(st.tables_plan.hash_version, ReadAttr<int64_t>(g.get(), file, "hash_version"));
      st.tables_plan.rebuild =
          std::max(st.tables_plan.rebuild, ReadAttr<int64_t>(g.get(), file, "rebuilds"));
      if (!weights_only && b0 == spec.begin && b1 == spec.end) {  // the same shard: keep its tables
        ReadTables(g.get(), file, &st);
      }
    }
  }
  return states;
}

}  // namespace dslide
