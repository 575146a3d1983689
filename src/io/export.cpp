// The export of a checkpoint as one HDF5 file of the whole model (dslide export): every
// layer whole, the output rows in label order.
#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "common/atomic_file.h"
#include "common/error.h"
#include "io/checkpoint.h"
#include "io/hdf5_file.h"
#include "model/adam.h"
#include "model/label_map.h"

namespace dslide {

using h5::CreateFile;
using h5::Handle;
using h5::WriteArray;
using h5::WriteAttr;
using h5::WriteString;
using h5::WriteVector;

namespace {

/// v rounded to bfloat16 (to the nearest, ties to even), as its bits.
std::vector<uint16_t> Halves(const std::vector<float>& v) {
  std::vector<uint16_t> out;
  ToBf16(v, &out);
  return out;
}

}  // namespace

int64_t ExportModel(const std::string& folder, const std::string& final_file, bool bf16) {
  const CheckpointMeta meta = ReadMeta(folder);
  const int n = static_cast<int>(meta.out_dims.size());
  std::vector<LayerSpec> specs(n);  // each layer whole, as one block
  for (int l = 0; l < n; ++l) {
    specs[l].in_dim = l == 0 ? meta.input_dim : meta.out_dims[l - 1];
    specs[l].out_dim = meta.out_dims[l];
    specs[l].begin = 0;
    specs[l].end = specs[l].out_dim;
  }
  std::vector<LayerState> states = ReadLayers(folder, meta, specs, kWeights);
  {
    // Rows in label order (row i: label i), whatever order the neurons were trained in.
    const LabelMap map(meta.Order() == LabelOrder::kSpread, meta.out_dims.back());
    if (!map.identity()) {
      LayerState& out = states.back();
      const int64_t rows = specs.back().out_dim, d = specs.back().in_dim;
      std::vector<float> w(out.w.size()), b(out.b.size());
      for (int64_t label = 0; label < rows; ++label) {
        const int64_t neuron = map.Neuron(static_cast<int32_t>(label));
        std::copy(out.w.begin() + neuron * d, out.w.begin() + (neuron + 1) * d,
                  w.begin() + label * d);
        b[label] = out.b[neuron];
      }
      out.w.swap(w);
      out.b.swap(b);
    }
  }
  // What dslide reads the file back with (a serving model): the checkpoint's metadata as
  // one rank's, its rows in label order.
  CheckpointMeta served = meta;
  served.ranks = 1;
  served.label_order = ToString(LabelOrder::kIdentity);
  int64_t params = 0;
  // A failed export never replaces an existing file with a partial one.
  WriteAtomically(final_file, [&](const std::string& out_file) {
    Handle f = CreateFile(out_file);
    const hid_t g = f.get();
    WriteAttr(g, out_file, "input_dim", meta.input_dim);
    WriteAttr(g, out_file, "layers", static_cast<int64_t>(n));
    WriteAttr(g, out_file, "iteration", meta.iter);
    {
      Handle mg(H5Gcreate2(g, "meta", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      DSLIDE_CHECK(mg.ok(), out_file, ": cannot create group meta");
      WriteMetaTo(mg.get(), out_file, served);
    }
    std::string act;
    for (int l = 0; l < n; ++l)
      act += l + 1 < n ? "relu, " : meta.Loss() == OutputLoss::kOneVsRest ? "sigmoid" : "softmax";
    WriteString(g, out_file, "activation", act);
    WriteString(g, out_file, "lsh", meta.LshText());
    WriteString(g, out_file, "dtype", bf16 ? "bfloat16" : "float32");
    WriteVector(g, out_file, "layer_sizes", meta.out_dims);
    WriteVector(g, out_file, "sparsity", meta.sparsity);
    for (int l = 0; l < n; ++l) {
      const LayerSpec& s = specs[l];
      // Numbered from 1, as training prints the layers (a checkpoint's shards keep their
      // own layer0, ... groups).
      const std::string name = "layer" + std::to_string(l + 1);
      Handle grp(H5Gcreate2(g, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      DSLIDE_CHECK(grp.ok(), out_file, ": cannot create group ", name);
      if (bf16) {
        const Handle t = h5::Bf16Type();
        WriteArray(grp.get(), out_file, "weights", Halves(states[l].w).data(), s.out_dim, s.in_dim,
                   t.get());
        WriteArray(grp.get(), out_file, "biases", Halves(states[l].b).data(), s.out_dim, 0,
                   t.get());
      } else {
        WriteArray(grp.get(), out_file, "weights", states[l].w.data(), s.out_dim, s.in_dim);
        WriteVector(grp.get(), out_file, "biases", states[l].b);
      }
      params += s.out_dim * (s.in_dim + 1);
    }
    errno = 0;
    DSLIDE_CHECK(H5Fflush(g, H5F_SCOPE_LOCAL) >= 0 && f.Close(), out_file, ": cannot write",
                 OsReason(errno));
  });
  return params;
}

bool IsServingModel(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  // Quietly: a file that is not HDF5 is not one (H5Fis_hdf5 returns <= 0).
  H5E_auto2_t func = nullptr;
  void* data = nullptr;
  H5Eget_auto2(H5E_DEFAULT, &func, &data);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  bool yes = false;
  if (H5Fis_hdf5(path.c_str()) > 0) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f >= 0) {
      yes = H5Lexists(f, "meta", H5P_DEFAULT) > 0 && H5Lexists(f, "layer1", H5P_DEFAULT) > 0;
      H5Fclose(f);
    }
  }
  H5Eset_auto2(H5E_DEFAULT, func, data);
  return yes;
}

CheckpointMeta ReadServingMeta(const std::string& path) {
  Handle f = h5::OpenUnsummedFile(path);
  Handle g(H5Gopen2(f.get(), "meta", H5P_DEFAULT), H5Gclose);
  DAMAGED_CHECK(g.ok(), path, ": group meta is missing: not a model dslide export wrote");
  CheckpointMeta m = ReadMetaFrom(g.get(), path + " (meta)");
  DAMAGED_CHECK(m.ranks == 1 && m.Order() == LabelOrder::kIdentity, path,
                ": a serving model holds one block of label-ordered rows per layer");
  return m;
}

std::string ResolveModel(const std::string& path, const char* option) {
  return IsServingModel(path) ? path : ResolveCheckpoint(path, option);
}

CheckpointMeta ReadModelMeta(const std::string& path) {
  return IsServingModel(path) ? ReadServingMeta(path) : ReadMeta(path);
}

LayerState ReadServingLayer(const std::string& path, const CheckpointMeta& meta,
                            const std::vector<LayerSpec>& specs, size_t l) {
  DSLIDE_CHECK(specs.size() == meta.out_dims.size(), path, ": ", meta.out_dims.size(), " layers, ",
               specs.size(), " were asked for");
  DSLIDE_ASSERT(l < specs.size(), "layer ", l, " of ", specs.size());
  Handle f = h5::OpenUnsummedFile(path);
  const LayerSpec& s = specs[l];
  const std::string name = "layer" + std::to_string(l + 1);
  Handle g(H5Gopen2(f.get(), name.c_str(), H5P_DEFAULT), H5Gclose);
  DAMAGED_CHECK(g.ok(), path, ": group ", name, " is missing");
  int64_t cols = 0;
  LayerState st;
  // bfloat16 (export --dtype bf16) read as stored and widened here: HDF5's own conversion
  // of a 2-byte float takes seconds for 10^8 values.
  const auto read = [&](const char* ds, std::vector<float>* v, int64_t* c) {
    if (!h5::HoldsBf16(g.get(), ds))
      return h5::ReadRows(g.get(), path, ds, s.begin, s.local(), v, c);
    std::vector<uint16_t> bits;
    const Handle t = h5::Bf16Type();
    h5::ReadRows(g.get(), path, ds, s.begin, s.local(), &bits, c, t.get());
    FromBf16(bits, v);
  };
  read("weights", &st.w, &cols);
  DAMAGED_CHECK(cols == s.in_dim && static_cast<int64_t>(st.w.size()) == s.local() * s.in_dim, path,
                ": ", name, "/weights has ", cols, " columns, expected ", s.in_dim);
  read("biases", &st.b, nullptr);
  DAMAGED_CHECK(static_cast<int64_t>(st.b.size()) == s.local(), path, ": ", name, "/biases holds ",
                st.b.size(), " values, expected ", s.local());
  CheckStoredValues(path, name, l, "weights", s.begin, s.in_dim, st.w);
  CheckStoredValues(path, name, l, "biases", s.begin, 1, st.b);
  return st;
}

}  // namespace dslide
