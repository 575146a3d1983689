// The export of a checkpoint as one HDF5 file of the whole model (dslide export): every
// layer whole, the output rows in label order.
#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "common/atomic_file.h"
#include "common/error.h"
#include "io/checkpoint.h"
#include "io/hdf5_file.h"
#include "model/label_map.h"

namespace dslide {

using h5::CreateFile;
using h5::Handle;
using h5::WriteArray;
using h5::WriteAttr;
using h5::WriteString;
using h5::WriteVector;

int64_t ExportModel(const std::string& folder, const std::string& final_file) {
  const CheckpointMeta meta = ReadMeta(folder);
  const int n = static_cast<int>(meta.out_dims.size());
  std::vector<LayerSpec> specs(n);  // each layer whole, as one block
  for (int l = 0; l < n; ++l) {
    specs[l].in_dim = l == 0 ? meta.input_dim : meta.out_dims[l - 1];
    specs[l].out_dim = meta.out_dims[l];
    specs[l].begin = 0;
    specs[l].end = specs[l].out_dim;
  }
  std::vector<LayerState> states = ReadLayers(folder, meta, specs, /*weights_only=*/true);
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
  int64_t params = 0;
  // A failed export never replaces an existing file with a partial one.
  WriteAtomically(final_file, [&](const std::string& out_file) {
    Handle f = CreateFile(out_file);
    const hid_t g = f.get();
    WriteAttr(g, out_file, "input_dim", meta.input_dim);
    WriteAttr(g, out_file, "layers", static_cast<int64_t>(n));
    WriteAttr(g, out_file, "iteration", meta.iter);
    std::string act;
    for (int l = 0; l < n; ++l) act += l + 1 < n ? "relu, " : "softmax";
    WriteString(g, out_file, "activation", act);
    WriteString(g, out_file, "lsh", meta.LshText());
    WriteVector(g, out_file, "layer_sizes", meta.out_dims);
    WriteVector(g, out_file, "sparsity", meta.sparsity);
    for (int l = 0; l < n; ++l) {
      const LayerSpec& s = specs[l];
      // Numbered from 1, as training prints the layers (a checkpoint's shards keep their
      // own layer0, ... groups).
      const std::string name = "layer" + std::to_string(l + 1);
      Handle grp(H5Gcreate2(g, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT), H5Gclose);
      DSLIDE_CHECK(grp.ok(), out_file, ": cannot create group ", name);
      WriteArray(grp.get(), out_file, "weights", states[l].w.data(), s.out_dim, s.in_dim);
      WriteVector(grp.get(), out_file, "biases", states[l].b);
      params += s.out_dim * (s.in_dim + 1);
    }
    errno = 0;
    DSLIDE_CHECK(H5Fflush(g, H5F_SCOPE_LOCAL) >= 0 && f.Close(), out_file, ": cannot write",
                 OsReason(errno));
  });
  return params;
}

}  // namespace dslide
