// Checkpoint shards: each rank's layers (weights, moments, LSH tables) written a layer's part
// at a time and read back for any number of ranks, with the checks of what is read (a file
// written damaged: shapes, values no run writes, the run and iteration it belongs to).
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/error.h"
#include "common/memory_limit.h"
#include "io/checkpoint.h"
#include "io/hdf5_file.h"

namespace dslide {

using h5::CreateFile;
using h5::Handle;
using h5::OpenFile;
using h5::ReadAttr;
using h5::ReadRows;
using h5::WriteArray;
using h5::WriteAttr;
using h5::WriteSidecar;
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

/// The rows' last Adam steps (LayerState::row_step): -1 (none owed) up to the checkpoint's
/// iteration.
void CheckSteps(const std::string& file, const std::string& name, size_t layer, const char* ds,
                int64_t iter, const std::vector<int64_t>& steps) {
  for (size_t i = 0; i < steps.size(); ++i)
    DAMAGED_CHECK(steps[i] >= -1 && steps[i] <= iter, file, ": ", name, "/", ds, " (layer ",
                  layer + 1, ") holds step ", steps[i], " at row ", i, ", outside [-1, ", iter,
                  "] (the checkpoint's iteration): the checkpoint is damaged");
}
}  // namespace

void CheckStoredValues(const std::string& file, const std::string& name, size_t layer,
                       const char* ds, int64_t first, int64_t width,
                       const std::vector<float>& buf) {
  // Weights and biases: Adam moves one by at most about 3.2 lr a step (|m| / sqrt(v) <=
  // (1 - beta1) / sqrt(1 - beta2)), so 1e8 takes some 3e7 steps at lr 1, and a loss diverges
  // long before (the divergence check stops such a run). Moments: far beyond any gradient.
  constexpr float kMaxWeight = 1e8f, kMaxMoment = 1e15f;
  const bool second_moment = ds[0] == 'v', weight = ds[0] == 'w' || ds[0] == 'b';
  const float limit = second_moment ? kMaxMoment * kMaxMoment : weight ? kMaxWeight : kMaxMoment;
  for (size_t i = 0; i < buf.size(); ++i)
    DAMAGED_CHECK(
        std::isfinite(buf[i]) && std::abs(buf[i]) <= limit && !(second_moment && buf[i] < 0.0f),
        file, ": ", name, "/", ds, " (layer ", layer + 1, ") holds ", buf[i], " at row ",
        first + static_cast<int64_t>(i) / std::max<int64_t>(width, 1),
        ": no training writes such a value; the checkpoint is damaged");
  // A block of weights that is all zeros: the initialisation draws every weight at random
  // and no step returns them all to 0 (a layout message damaged behind a matching checksum
  // reads a layer so).
  if (ds[0] == 'w' && !buf.empty())
    DAMAGED_CHECK(std::any_of(buf.begin(), buf.end(), [](float v) { return v != 0.0f; }), file,
                  ": ", name, "/w (layer ", layer + 1, ") holds only zeros in rows ", first, " to ",
                  first + static_cast<int64_t>(buf.size()) / std::max<int64_t>(width, 1) - 1,
                  ": no initialisation or training writes that; the checkpoint is damaged");
}

void WriteShard(const std::string& folder, int rank, const ModelSpec& spec,
                const std::vector<LayerState>& layers, uint64_t run_id, int64_t iter) {
  WriteShard(
      folder, rank, spec,
      [&](int layer, unsigned) -> const LayerState& { return layers[static_cast<size_t>(layer)]; },
      run_id, iter);
}

LayerState CheckpointStaging(const ModelSpec& spec, const std::string& what) {
  size_t most = 0, neurons = 0, rows = 0;  // the most weights, neurons and rows of a layer
  for (const LayerSpec& l : spec.layers) {
    most = std::max(most, static_cast<size_t>(l.local() * l.in_dim));
    neurons = std::max(neurons, static_cast<size_t>(l.local()));
    rows = std::max(rows, static_cast<size_t>(l.input_major ? l.in_dim : l.local()));
  }
  // w, m, v; b, mb, vb; the rows' and biases' last steps.
  const int64_t bytes = static_cast<int64_t>(3 * (most + neurons) * sizeof(float) +
                                             (rows + neurons) * sizeof(int64_t));
  const std::string need = what + " (writing a copy of one layer's weights and Adam moments)";
  CheckMemoryFits(bytes, need);
  LayerState st;
  try {
    for (std::vector<float>* a : {&st.w, &st.m, &st.v}) a->reserve(most);
    for (std::vector<float>* a : {&st.b, &st.mb, &st.vb}) a->reserve(neurons);
    st.row_step.reserve(rows);
    st.bias_step.reserve(neurons);
  } catch (const std::bad_alloc&) {
    throw OutOfMemory(
        detail::Concat(need, " (", BytesText(bytes), ") cannot be allocated beside the model"));
  }
  return st;
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
      WriteVector(g.get(), file, "row_step", moments.row_step);
      WriteVector(g.get(), file, "bias_step", moments.bias_step);
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
                                   const std::vector<LayerSpec>& specs, unsigned parts) {
  const bool moments = (parts & kMoments) != 0;
  DSLIDE_CHECK(specs.size() <= meta.out_dims.size(), folder, ": the checkpoint has ",
               meta.out_dims.size(), " layers, ", specs.size(), " were asked for");
  std::vector<LayerState> states(specs.size());
  for (size_t l = 0; l < specs.size(); ++l) {
    const int64_t n = specs[l].local(), d = specs[l].in_dim;
    LayerState& st = states[l];
    st.w.resize(n * d);
    st.b.resize(n);
    if (moments) {
      st.m.resize(n * d);
      st.v.resize(n * d);
      st.mb.resize(n);
      st.vb.resize(n);
    }
  }
  std::vector<float> buf;
  std::vector<int64_t> steps;
  bool have_steps = moments;  // every shard holds its rows' last steps
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
          !moments ? std::vector<Field>{{"w", &st.w}}
                   : std::vector<Field>{{"w", &st.w}, {"m", &st.m}, {"v", &st.v}};
      const std::vector<Field> vectors =
          !moments ? std::vector<Field>{{"b", &st.b}}
                   : std::vector<Field>{{"b", &st.b}, {"mb", &st.mb}, {"vb", &st.vb}};
      for (const auto& [ds, dst] : matrices) {
        ReadRows(g.get(), file, ds, first, rows, &buf, &cols);
        DAMAGED_CHECK(cols == d, file, ": ", name, "/", ds, " has ", cols, " columns, expected ",
                      d);
        CheckStoredValues(file, name, l, ds, first, d, buf);
        std::copy(buf.begin(), buf.end(), dst->begin() + at * d);
      }
      for (const auto& [ds, dst] : vectors) {
        ReadRows(g.get(), file, ds, first, rows, &buf);
        CheckStoredValues(file, name, l, ds, first, 1, buf);
        std::copy(buf.begin(), buf.end(), dst->begin() + at);
      }
      if (have_steps && H5Lexists(g.get(), "row_step", H5P_DEFAULT) > 0 &&
          H5Lexists(g.get(), "bias_step", H5P_DEFAULT) > 0) {
        // A row per neuron: the rows' steps follow their neurons, as the biases' do; an
        // input-major layer's (a row per input, the same on every rank) are read whole.
        const bool per_input = spec.input_major;
        ReadRows(g.get(), file, "row_step", per_input ? 0 : first, per_input ? -1 : rows, &steps);
        CheckSteps(file, name, l, "row_step", meta.iter, steps);
        DAMAGED_CHECK(!per_input || static_cast<int64_t>(steps.size()) == d, file, ": ", name,
                      "/row_step holds ", steps.size(), " steps, expected ", d);
        st.row_step.resize(per_input ? d : spec.local());
        std::copy(steps.begin(), steps.end(), st.row_step.begin() + (per_input ? 0 : at));
        ReadRows(g.get(), file, "bias_step", first, rows, &steps);
        CheckSteps(file, name, l, "bias_step", meta.iter, steps);
        st.bias_step.resize(spec.local());
        std::copy(steps.begin(), steps.end(), st.bias_step.begin() + at);
      } else {
        have_steps = false;  // an earlier version's checkpoint: the rows owe no steps
      }
      st.tables_plan.hash_version =
          std::max(st.tables_plan.hash_version, ReadAttr<int64_t>(g.get(), file, "hash_version"));
      st.tables_plan.rebuild =
          std::max(st.tables_plan.rebuild, ReadAttr<int64_t>(g.get(), file, "rebuilds"));
      if ((parts & kTables) && b0 == spec.begin && b1 == spec.end) {  // the same shard: its tables
        ReadTables(g.get(), file, &st);
      }
    }
  }
  if (!have_steps) {
    for (LayerState& st : states) {
      st.row_step.clear();
      st.bias_step.clear();
    }
  }
  return states;
}

}  // namespace dslide
