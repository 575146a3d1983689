// XC format reader with strict validation (DESIGN.md section 7): nothing is skipped silently.
#include "dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <climits>
#include <cstdint>
#include <memory>

#include "checksum.h"
#include "error.h"

namespace dslide {

void Dataset::Add(const std::vector<int32_t>& fids, const std::vector<float>& fvals,
                  const std::vector<int32_t>& lbls) {
  feat_ids.insert(feat_ids.end(), fids.begin(), fids.end());
  feat_vals.insert(feat_vals.end(), fvals.begin(), fvals.end());
  feat_off.push_back(static_cast<int64_t>(feat_ids.size()));
  labels.insert(labels.end(), lbls.begin(), lbls.end());
  label_off.push_back(static_cast<int64_t>(labels.size()));
}

Dataset Dataset::Head(int64_t n) const {
  if (n <= 0 || n >= size()) return *this;
  Dataset d;
  d.num_features = num_features;
  d.num_labels = num_labels;
  d.feat_off.assign(feat_off.begin(), feat_off.begin() + n + 1);
  d.feat_ids.assign(feat_ids.begin(), feat_ids.begin() + feat_off[n]);
  d.feat_vals.assign(feat_vals.begin(), feat_vals.begin() + feat_off[n]);
  d.label_off.assign(label_off.begin(), label_off.begin() + n + 1);
  d.labels.assign(labels.begin(), labels.begin() + label_off[n]);
  return d;
}

namespace {

/// Line reader over zlib's gz* API, which reads plain files transparently.
class LineReader {
 public:
  explicit LineReader(const std::string& path) : path_(path) {
    file_ = gzopen(path.c_str(), "rb");
    DSLIDE_CHECK(file_ != nullptr, path, ": cannot open: ", std::strerror(errno));
    gzbuffer(file_, 1 << 20);
  }
  ~LineReader() {
    if (file_) gzclose(file_);
  }
  /// Reads the next line without its newline; false at end of file.
  bool Next(std::string* line) {
    line->clear();
    char buf[1 << 16];
    bool any = false;
    while (gzgets(file_, buf, sizeof(buf)) != nullptr) {
      any = true;
      size_t n = std::strlen(buf);
      const bool complete = n > 0 && buf[n - 1] == '\n';
      if (complete) --n;
      line->append(buf, n);
      if (complete) break;
    }
    if (!any) {
      int err = 0;
      const char* msg = gzerror(file_, &err);
      DSLIDE_CHECK(err == Z_OK || err == Z_STREAM_END, path_, ":", line_no_ + 1,
                   ": read error: ", msg);
      return false;
    }
    if (!line->empty() && line->back() == '\r') line->pop_back();
    ++line_no_;
    return true;
  }
  int64_t line_no() const { return line_no_; }

 private:
  std::string path_;
  gzFile file_ = nullptr;
  int64_t line_no_ = 0;
};

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

namespace {
constexpr char kMagic[8] = {'D', 'S', 'L', 'I', 'D', 'E', 'B', '1'};

}  // namespace

bool IsBinaryDataset(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  char head[8];
  return f && std::fread(head, 1, 8, f.get()) == 8 && std::memcmp(head, kMagic, 8) == 0;
}

void WriteBinary(const Dataset& data, const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  DSLIDE_CHECK(f != nullptr, path, ": cannot write: ", std::strerror(errno));
  Checksum sum;
  auto put = [&](const void* p, size_t bytes) {
    sum.Add(p, bytes);
    DSLIDE_CHECK(std::fwrite(p, 1, bytes, f.get()) == bytes, path, ": write failed: ", std::strerror(errno));
  };
  const int64_t head[5] = {data.size(), data.num_features, data.num_labels,
                           static_cast<int64_t>(data.feat_ids.size()), static_cast<int64_t>(data.labels.size())};
  put(kMagic, 8);
  put(head, sizeof head);
  put(data.feat_off.data(), data.feat_off.size() * sizeof(int64_t));
  put(data.feat_ids.data(), data.feat_ids.size() * sizeof(int32_t));
  put(data.feat_vals.data(), data.feat_vals.size() * sizeof(float));
  put(data.label_off.data(), data.label_off.size() * sizeof(int64_t));
  put(data.labels.data(), data.labels.size() * sizeof(int32_t));
  const uint64_t check = sum.Final();
  DSLIDE_CHECK(std::fwrite(&check, 1, 8, f.get()) == 8 && std::fflush(f.get()) == 0, path,
               ": write failed: ", std::strerror(errno));
}

Dataset ReadBinary(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  DSLIDE_CHECK(f != nullptr, path, ": cannot open: ", std::strerror(errno));
  std::fseek(f.get(), 0, SEEK_END);
  const int64_t size = std::ftell(f.get());
  std::fseek(f.get(), 0, SEEK_SET);
  Checksum sum;
  int64_t at = 0;
  auto get = [&](void* p, int64_t bytes, const char* what) {
    DSLIDE_CHECK(bytes >= 0 && at + bytes + 8 <= size, path, ": truncated binary dataset (", what,
                 " needs ", bytes, " bytes at offset ", at, " of ", size, ")");
    DSLIDE_CHECK(std::fread(p, 1, bytes, f.get()) == static_cast<size_t>(bytes), path, ": read failed");
    sum.Add(p, static_cast<size_t>(bytes));
    at += bytes;
  };
  char magic[8];
  get(magic, 8, "the magic");
  DSLIDE_CHECK(std::memcmp(magic, kMagic, 8) == 0, path, ": not a dslide binary dataset");
  int64_t head[5];
  get(head, sizeof head, "the header");
  const int64_t points = head[0], nnz = head[3], nl = head[4];
  DSLIDE_CHECK(points >= 0 && head[1] > 0 && head[2] > 0 && head[1] <= INT32_MAX && head[2] <= INT32_MAX &&
                   nnz >= 0 && nl >= 0 && points < size && nnz < size && nl < size,
               path, ": corrupted header (points ", points, ", features ", head[1], ", labels ", head[2], ")");
  Dataset d;
  d.num_features = head[1];
  d.num_labels = head[2];
  d.feat_off.resize(points + 1);
  d.feat_ids.resize(nnz);
  d.feat_vals.resize(nnz);
  d.label_off.resize(points + 1);
  d.labels.resize(nl);
  get(d.feat_off.data(), (points + 1) * 8, "feature offsets");
  get(d.feat_ids.data(), nnz * 4, "feature ids");
  get(d.feat_vals.data(), nnz * 4, "feature values");
  get(d.label_off.data(), (points + 1) * 8, "label offsets");
  get(d.labels.data(), nl * 4, "labels");
  uint64_t stored = 0;
  DSLIDE_CHECK(at + 8 == size && std::fread(&stored, 1, 8, f.get()) == 8, path,
               ": binary dataset has ", size - at - 8, " unexpected trailing bytes");
  DSLIDE_CHECK(stored == sum.Final(), path, ": checksum mismatch (corrupted binary dataset)");
  // Structure, so that a well-checksummed but inconsistent file cannot index out of bounds.
  DSLIDE_CHECK(d.feat_off[0] == 0 && d.feat_off[points] == nnz && d.label_off[0] == 0 && d.label_off[points] == nl,
               path, ": inconsistent offsets");
  // Per point: offsets non-decreasing, ids strictly increasing and in range, values finite.
  auto sorted_in_range = [](const int32_t* ids, int64_t n, int64_t limit) {
    bool ok = n == 0 || (ids[0] >= 0 && ids[n - 1] < limit);
    for (int64_t j = 1; j < n; ++j) ok &= ids[j] > ids[j - 1];
    return ok;
  };
  for (int64_t i = 0; i < points; ++i) {
    DSLIDE_CHECK(d.feat_off[i + 1] >= d.feat_off[i] && d.label_off[i + 1] >= d.label_off[i], path,
                 ": point ", i, ": decreasing offsets");
    const int64_t f0 = d.feat_off[i], nf = d.feat_off[i + 1] - f0;
    const int64_t l0 = d.label_off[i], nlab = d.label_off[i + 1] - l0;
    DSLIDE_CHECK(sorted_in_range(d.feat_ids.data() + f0, nf, d.num_features), path, ": point ", i,
                 ": feature ids out of range or not increasing");
    DSLIDE_CHECK(sorted_in_range(d.labels.data() + l0, nlab, d.num_labels), path, ": point ", i,
                 ": label ids out of range or not increasing");
  }
  float probe = 0.0f;  // NaN or inf when any value is
  const float* vals = d.feat_vals.data();
#pragma omp simd reduction(+ : probe)
  for (int64_t j = 0; j < nnz; ++j) probe += vals[j] * 0.0f;
  DSLIDE_CHECK(probe == 0.0f, path, ": a feature value is NaN or infinite");
  return d;
}

Dataset ReadXc(const std::string& path) {
  if (IsBinaryDataset(path)) return ReadBinary(path);
  LineReader in(path);
  std::string line;
  DSLIDE_CHECK(in.Next(&line), path, ":1: empty file (expected header 'points features labels')");
  Dataset d;
  int64_t points = 0;
  {
    const char* p = line.c_str();
    int64_t v[3];
    for (int i = 0; i < 3; ++i) {
      while (*p == ' ' || *p == '\t') ++p;
      DSLIDE_CHECK(ParseIndex(p, &v[i]), path, ":1: bad header '", line,
                   "' (expected 'points features labels')");
    }
    while (*p == ' ' || *p == '\t') ++p;
    DSLIDE_CHECK(*p == '\0', path, ":1: bad header '", line,
                 "' (expected 'points features labels')");
    DSLIDE_CHECK(v[1] >= 1 && v[1] < (int64_t{1} << 31) && v[2] >= 1 && v[2] < (int64_t{1} << 31),
                 path, ":1: bad header '", line, "' (features and labels must be in [1, 2^31))");
    points = v[0];
    d.num_features = v[1];
    d.num_labels = v[2];
  }
  // The header is not trusted for memory: a count of billions in a short file must end in
  // "fewer points than the header says", not in an allocation of gigabytes.
  const int64_t reserve = std::min<int64_t>(points, int64_t{1} << 20) + 1;
  d.feat_off.reserve(reserve);
  d.label_off.reserve(reserve);
  std::vector<int32_t> fids, lbls, sorted;
  std::vector<float> fvals;
  while (in.Next(&line)) {
    const int64_t ln = in.line_no();
    DSLIDE_CHECK(d.size() < points, path, ":", ln, ": more points than the header's ", points);
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
        DSLIDE_CHECK(l < d.num_labels, path, ":", ln, ": label ", l, " out of range [0, ",
                     d.num_labels, ")");
        lbls.push_back(static_cast<int32_t>(l));
        if (*p == ',') {
          ++p;
          continue;
        }
        DSLIDE_CHECK(*p == ' ' || *p == '\t' || *p == '\0', path, ":", ln,
                     ": bad label list near '", std::string(start).substr(0, 20), "'");
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
      DSLIDE_CHECK(f < d.num_features, path, ":", ln, ": feature id ", f, " out of range [0, ",
                   d.num_features, ")");
      ++p;
      char* end = nullptr;
      errno = 0;
      const float v = std::strtof(p, &end);
      DSLIDE_CHECK(end != p && (*end == ' ' || *end == '\t' || *end == '\0'), path, ":", ln,
                   ": bad value in '", std::string(start, std::strcspn(start, " \t")), "'");
      DSLIDE_CHECK(std::isfinite(v), path, ":", ln, ": non-finite value in '",
                   std::string(start, std::strcspn(start, " \t")), "'");
      fids.push_back(static_cast<int32_t>(f));
      fvals.push_back(v);
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
    d.Add(fids, fvals, lbls);
  }
  DSLIDE_CHECK(d.size() == points, path, ":", in.line_no() + 1, ": end of file after ", d.size(),
               " points, the header says ", points);
  return d;
}

void WriteXc(const Dataset& data, const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "w"), &std::fclose);
  DSLIDE_CHECK(f != nullptr, path, ": cannot write: ", std::strerror(errno));
  std::vector<char> buf(1 << 20);
  std::setvbuf(f.get(), buf.data(), _IOFBF, buf.size());
  std::fprintf(f.get(), "%lld %lld %lld\n", static_cast<long long>(data.size()),
               static_cast<long long>(data.num_features), static_cast<long long>(data.num_labels));
  for (int64_t i = 0; i < data.size(); ++i) {
    const int32_t* l = data.Labels(i);
    for (int64_t j = 0; j < data.NumLabels(i); ++j)
      std::fprintf(f.get(), j ? ",%d" : "%d", l[j]);
    const SparseView x = data.Features(i);
    for (int64_t j = 0; j < x.n; ++j) std::fprintf(f.get(), " %d:%.6g", x.ids[j], x.vals[j]);
    std::fputc('\n', f.get());
  }
  DSLIDE_CHECK(std::fflush(f.get()) == 0 && !std::ferror(f.get()), path, ": write failed: ",
               std::strerror(errno));
}

}  // namespace dslide
