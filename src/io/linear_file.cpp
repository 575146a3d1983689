#include "io/linear_file.h"

#include <hdf5.h>

#include <cerrno>
#include <filesystem>
#include <utility>
#include <vector>

#include "common/atomic_file.h"
#include "common/error.h"
#include "io/hdf5_file.h"

namespace dslide {

namespace {
constexpr int64_t kLinearFormat = 1;
}

std::string LinearModelFile(const std::string& folder) { return folder + "/linear/linear.h5"; }

void WriteLinearModel(const std::string& folder, const LinearOvr& model,
                      const LinearOvrOptions& options, double share) {
  namespace fs = std::filesystem;
  const std::string file = LinearModelFile(folder);
  std::error_code ec;
  fs::create_directories(fs::path(file).parent_path(), ec);
  DSLIDE_CHECK(!ec, fs::path(file).parent_path().string(), ": cannot create the folder (",
               ec.message(), ")");
  fs::remove(file + ".sum", ec);  // the sidecar of a file no longer there
  WriteAtomically(file, [&](const std::string& out) {
    h5::Handle f = h5::CreateFile(out);
    const hid_t g = f.get();
    h5::WriteAttr(g, out, "format", kLinearFormat);
    h5::WriteAttr(g, out, "features", model.features());
    h5::WriteAttr(g, out, "labels", model.labels());
    h5::WriteAttr(g, out, "share", share);
    h5::WriteAttr(g, out, "c", options.c);
    h5::WriteAttr(g, out, "eps", options.eps);
    h5::WriteString(g, out, "model",
                    "one-vs-rest L2-regularised squared hinge on L2-normalised rows, a bias "
                    "feature of 1; probability clip((1 + margin) / 2, 0, 1)");
    h5::WriteArray(g, out, "weights", model.weights().data(),
                   static_cast<hsize_t>(model.features()) + 1,
                   static_cast<hsize_t>(model.labels()));
    errno = 0;
    DSLIDE_CHECK(H5Fflush(g, H5F_SCOPE_LOCAL) >= 0 && f.Close(), out, ": cannot write",
                 OsReason(errno));
  });
  h5::WriteSidecar(file);
}

LinearOvr ReadLinearModel(const std::string& folder, double* share) {
  const std::string file = LinearModelFile(folder);
  h5::Handle f = h5::OpenFile(file);
  const hid_t g = f.get();
  const auto format = h5::ReadAttr<int64_t>(g, file, "format");
  DSLIDE_CHECK(format == kLinearFormat, file, ": linear model format ", format,
               ", this dslide reads ", kLinearFormat);
  const auto features = h5::ReadAttr<int64_t>(g, file, "features");
  const auto labels = h5::ReadAttr<int64_t>(g, file, "labels");
  DAMAGED_CHECK(features >= 0 && labels > 0, file, ": ", features, " features and ", labels,
                " labels");
  *share = h5::ReadAttr<double>(g, file, "share");
  DAMAGED_CHECK(*share >= 0 && *share <= 1, file, ": a share of ", *share, ", not in [0, 1]");
  std::vector<float> w;
  int64_t cols = 0;
  h5::ReadRows(g, file, "weights", 0, -1, &w, &cols);
  DAMAGED_CHECK(cols == labels && w.size() == static_cast<size_t>((features + 1) * labels), file,
                ": weights of ", w.size(), " values, ", features + 1, " x ", labels, " expected");
  return LinearOvr(features, labels, std::move(w));
}

}  // namespace dslide
