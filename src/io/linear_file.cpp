#include "io/linear_file.h"

#include <hdf5.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <utility>
#include <vector>

#include "common/atomic_file.h"
#include "common/error.h"
#include "io/hdf5_file.h"

namespace dslide {

namespace {
// 1: a dense model; 2: a shortlist model (model/linear_ovr.h), which a reader of 1 refuses.
constexpr int64_t kLinearFormat = 1;
constexpr int64_t kShortlistFormat = 2;
}  // namespace

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
    h5::WriteAttr(g, out, "format", model.shortlist() ? kShortlistFormat : kLinearFormat);
    h5::WriteAttr(g, out, "features", model.features());
    h5::WriteAttr(g, out, "labels", model.labels());
    h5::WriteAttr(g, out, "share", share);
    h5::WriteAttr(g, out, "c", options.c);
    h5::WriteAttr(g, out, "eps", options.eps);
    if (model.shortlist()) {
      h5::WriteString(g, out, "model",
                      "one-vs-rest L2-regularised squared hinge on L2-normalised rows, a bias "
                      "feature of 1, each label solved on its points and the points whose "
                      "network's list holds it, sparse by label (offsets, feature_ids, values; "
                      "biases); it rescores the network's lists; probability clip((1 + "
                      "margin) / 2, 0, 1)");
      h5::WriteAttr(g, out, "list", static_cast<int64_t>(model.list()));
      h5::WriteVector(g, out, "offsets", model.offsets());
      h5::WriteVector(g, out, "feature_ids", model.feature_ids());
      h5::WriteVector(g, out, "values", model.values());
      h5::WriteVector(g, out, "biases", model.biases());
    } else {
      h5::WriteString(g, out, "model",
                      "one-vs-rest L2-regularised squared hinge on L2-normalised rows, a bias "
                      "feature of 1; probability clip((1 + margin) / 2, 0, 1)");
      h5::WriteArray(g, out, "weights", model.weights().data(),
                     static_cast<hsize_t>(model.features()) + 1,
                     static_cast<hsize_t>(model.labels()));
    }
    errno = 0;
    DSLIDE_CHECK(H5Fflush(g, H5F_SCOPE_LOCAL) >= 0 && f.Close(), out, ": cannot write",
                 OsReason(errno));
  });
  h5::WriteSidecar(file);
}

bool LinearModelIsReranker(const std::string& folder) {
  try {
    const std::string file = LinearModelFile(folder);
    h5::Handle f = h5::OpenFile(file);
    return h5::ReadAttr<int64_t>(f.get(), file, "format") == kShortlistFormat;
  } catch (const Error&) {
    return false;
  }
}

LinearOvr ReadLinearModel(const std::string& folder, double* share) {
  const std::string file = LinearModelFile(folder);
  h5::Handle f = h5::OpenFile(file);
  const hid_t g = f.get();
  const auto format = h5::ReadAttr<int64_t>(g, file, "format");
  DSLIDE_CHECK(format == kLinearFormat || format == kShortlistFormat, file,
               ": linear model format ", format, ", this dslide reads ", kLinearFormat, " and ",
               kShortlistFormat);
  const auto features = h5::ReadAttr<int64_t>(g, file, "features");
  const auto labels = h5::ReadAttr<int64_t>(g, file, "labels");
  DAMAGED_CHECK(features >= 0 && labels > 0, file, ": ", features, " features and ", labels,
                " labels");
  *share = h5::ReadAttr<double>(g, file, "share");
  DAMAGED_CHECK(*share >= 0 && *share <= 1, file, ": a share of ", *share, ", not in [0, 1]");
  if (format == kShortlistFormat) {
    const auto list = h5::ReadAttr<int64_t>(g, file, "list");
    DAMAGED_CHECK(list > 0 && list <= labels, file, ": lists of ", list, " labels, of ", labels);
    std::vector<int64_t> offsets;
    std::vector<int32_t> feature_ids;
    std::vector<float> values, biases;
    h5::ReadRows(g, file, "offsets", 0, -1, &offsets);
    h5::ReadRows(g, file, "feature_ids", 0, -1, &feature_ids);
    h5::ReadRows(g, file, "values", 0, -1, &values);
    h5::ReadRows(g, file, "biases", 0, -1, &biases);
    DAMAGED_CHECK(offsets.size() == static_cast<size_t>(labels + 1) &&
                      biases.size() == static_cast<size_t>(labels) && offsets.front() == 0 &&
                      offsets.back() == static_cast<int64_t>(feature_ids.size()) &&
                      values.size() == feature_ids.size() &&
                      std::is_sorted(offsets.begin(), offsets.end()),
                  file, ": sparse weights of ", offsets.size(), " offsets, ", feature_ids.size(),
                  " feature ids, ", values.size(), " values and ", biases.size(), " biases for ",
                  labels, " labels");
    for (const int32_t f : feature_ids)
      DAMAGED_CHECK(f >= 0 && f < features, file, ": feature id ", f, " of ", features);
    for (int64_t l = 0; l < labels; ++l)
      DAMAGED_CHECK(
          std::is_sorted(feature_ids.begin() + offsets[l], feature_ids.begin() + offsets[l + 1]),
          file, ": label ", l, "'s feature ids do not ascend");
    return LinearOvr(features, labels, static_cast<int>(list), std::move(offsets),
                     std::move(feature_ids), std::move(values), std::move(biases));
  }
  std::vector<float> w;
  int64_t cols = 0;
  h5::ReadRows(g, file, "weights", 0, -1, &w, &cols);
  DAMAGED_CHECK(cols == labels && w.size() == static_cast<size_t>((features + 1) * labels), file,
                ": weights of ", w.size(), " values, ", features + 1, " x ", labels, " expected");
  return LinearOvr(features, labels, std::move(w));
}

}  // namespace dslide
