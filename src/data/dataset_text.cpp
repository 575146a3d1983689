// The XC text format: the parse of a point line (for DatasetStream), and a whole file read
// (text or binary) or written.
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/atomic_file.h"
#include "common/error.h"
#include "data/dataset.h"
#include "data/xc_line.h"

namespace dslide {

namespace {

/// Parses a non-negative integer at p; advances p. False if none.
bool ParseIndex(const char*& p, int64_t* out) {
  if (*p < '0' || *p > '9') return false;
  int64_t v = 0;
  while (*p >= '0' && *p <= '9') {
    v = v * 10 + (*p - '0');
    if (v > (int64_t{1} << 40)) return false;
    ++p;
  }
  *out = v;
  return true;
}

}  // namespace

// Declared in xc_line.h.
void ParseXcLine(const std::string& line, const std::string& path, int64_t ln, Dataset* d,
                 std::vector<int32_t>* fids_buf, std::vector<float>* fvals_buf,
                 std::vector<int32_t>* lbls_buf, std::vector<int32_t>* sorted_buf) {
  std::vector<int32_t>& fids = *fids_buf;
  std::vector<float>& fvals = *fvals_buf;
  std::vector<int32_t>& lbls = *lbls_buf;
  std::vector<int32_t>& sorted = *sorted_buf;
  fids.clear();
  fvals.clear();
  lbls.clear();
  const char* p = line.c_str();
  // Labels: a comma-separated list up to the first space; empty when the line starts with one.
  if (*p != ' ' && *p != '\t' && *p != '\0') {
    while (true) {
      int64_t l;
      const char* start = p;
      DSLIDE_CHECK(ParseIndex(p, &l), path, ":", ln, ": bad label near '",
                   std::string(start).substr(0, 20), "'");
      DSLIDE_CHECK(l < d->num_labels, path, ":", ln, ": label ", l, " out of range [0, ",
                   d->num_labels, ")");
      lbls.push_back(static_cast<int32_t>(l));
      if (*p == ',') {
        ++p;
        continue;
      }
      DSLIDE_CHECK(*p == ' ' || *p == '\t' || *p == '\0', path, ":", ln, ": bad label list near '",
                   std::string(start).substr(0, 20), "'");
      break;
    }
  }
  // Features: id:value pairs separated by blanks.
  while (true) {
    while (*p == ' ' || *p == '\t') ++p;
    if (*p == '\0') break;
    const char* start = p;
    int64_t f;
    DSLIDE_CHECK(ParseIndex(p, &f) && *p == ':', path, ":", ln, ": bad feature '",
                 std::string(start, std::strcspn(start, " \t")), "' (expected id:value)");
    DSLIDE_CHECK(f < d->num_features, path, ":", ln, ": feature id ", f, " out of range [0, ",
                 d->num_features, ")");
    ++p;
    char* end = nullptr;
    errno = 0;
    const float v = std::strtof(p, &end);
    // Decimal only: strtof would also take leading blanks ("0: 1") and hex ("0x10").
    DSLIDE_CHECK(end != p && (*end == ' ' || *end == '\t' || *end == '\0'), path, ":", ln,
                 ": bad value in '", std::string(start, std::strcspn(start, " \t")), "'");
    DSLIDE_CHECK(std::isfinite(v), path, ":", ln, ": non-finite value in '",
                 std::string(start, std::strcspn(start, " \t")), "'");
    DSLIDE_CHECK(std::strspn(p, "0123456789+-.eE") == static_cast<size_t>(end - p), path, ":", ln,
                 ": bad value in '", std::string(start, std::strcspn(start, " \t")),
                 "' (expected a decimal number right after the colon)");
    fids.push_back(static_cast<int32_t>(f));
    fvals.push_back(v);
    if (std::fabs(v) > d->max_abs_value) {
      d->max_abs_value = std::fabs(v);
      d->max_abs_at = detail::Concat(path, ":", ln);
    }
    p = end;
  }
  // Duplicates are errors; unsorted ids are sorted (the format says ascending, the math
  // does not care).
  auto check_unique = [&](std::vector<int32_t>& ids, const char* what) {
    sorted = ids;
    std::sort(sorted.begin(), sorted.end());
    auto dup = std::adjacent_find(sorted.begin(), sorted.end());
    DSLIDE_CHECK(dup == sorted.end(), path, ":", ln, ": duplicate ", what, " id ", *dup);
  };
  check_unique(lbls, "label");
  std::sort(lbls.begin(), lbls.end());
  check_unique(fids, "feature");
  if (!std::is_sorted(fids.begin(), fids.end())) {
    std::vector<std::pair<int32_t, float>> pairs(fids.size());
    for (size_t i = 0; i < fids.size(); ++i) pairs[i] = {fids[i], fvals[i]};
    std::sort(pairs.begin(), pairs.end());
    for (size_t i = 0; i < fids.size(); ++i) std::tie(fids[i], fvals[i]) = pairs[i];
  }
  d->Add(fids, fvals, lbls);
}

Dataset ReadXc(const std::string& path) {
  try {
    if (IsBinaryDataset(path)) return ReadBinary(path);
    DatasetStream in(path);
    Dataset d;
    if (!in.Next(std::numeric_limits<int64_t>::max(), &d)) {
      d = Dataset();
      d.num_features = in.num_features();
      d.num_labels = in.num_labels();
    }
    return d;
  } catch (const std::bad_alloc&) {
    // The readers name the line, points and bytes where they can; this is the fallback.
    throw Error(detail::Concat(path, ": out of memory reading the dataset"));
  }
}

void WriteXc(const Dataset& data, const std::string& final_path) {
  WriteAtomically(final_path, [&](const std::string& path) {
    std::vector<char> buf(1 << 20);  // outlives the stream that uses it
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
    DSLIDE_CHECK(f != nullptr, path, ": cannot write: ", std::strerror(errno));
    std::setvbuf(f.get(), buf.data(), _IOFBF, buf.size());
    // Each line is checked once written: the first write that fails (a full disk) ends the
    // file there, not after the rest of it has been formatted in vain.
    auto check = [&](int64_t line) {
      if (!std::ferror(f.get())) return;
      const int err = errno;
      throw Error(detail::Concat(final_path, ": write failed at line ", line, " of ",
                                 data.size() + 1, " (", std::strerror(err), ")"));
    };
    std::fprintf(f.get(), "%lld %lld %lld\n", static_cast<long long>(data.size()),
                 static_cast<long long>(data.num_features),
                 static_cast<long long>(data.num_labels));
    check(1);
    for (int64_t i = 0; i < data.size(); ++i) {
      const int32_t* l = data.Labels(i);
      for (int64_t j = 0; j < data.NumLabels(i); ++j) std::fprintf(f.get(), j ? ",%d" : "%d", l[j]);
      const SparseView x = data.Features(i);
      for (int64_t j = 0; j < x.n; ++j) std::fprintf(f.get(), " %d:%.6g", x.ids[j], x.vals[j]);
      // A point without labels and features is a single space: an empty line is an error.
      if (data.NumLabels(i) == 0 && x.n == 0) std::fputc(' ', f.get());
      std::fputc('\n', f.get());
      check(i + 2);
    }
    CloseWritten(&f, final_path);
  });
}

}  // namespace dslide
