// Datasets in memory (points as CSR rows, the holdout split) and the stream that reads them
// from a file in parts: XC text (plain or gzip) with strict validation (docs/user-guide.md,
// "Data": nothing is skipped silently) or the binary format. The text lines are parsed in
// dataset_text.cpp, the binary format written and read whole in dataset_binary.cpp.
#include "data/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "common/checksum.h"
#include "common/error.h"
#include "common/rng.h"
#include "common/stop_signal.h"
#include "data/xc_line.h"

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
  d.max_abs_value = max_abs_value;
  d.max_abs_at = max_abs_at;
  d.feat_off.assign(feat_off.begin(), feat_off.begin() + n + 1);
  d.feat_ids.assign(feat_ids.begin(), feat_ids.begin() + feat_off[n]);
  d.feat_vals.assign(feat_vals.begin(), feat_vals.begin() + feat_off[n]);
  d.label_off.assign(label_off.begin(), label_off.begin() + n + 1);
  d.labels.assign(labels.begin(), labels.begin() + label_off[n]);
  return d;
}

uint64_t Dataset::Digest() const {
  Checksum c;
  auto add = [&c](const auto& v) { c.Add(v.data(), v.size() * sizeof(v[0])); };
  const int64_t sizes[2] = {num_features, num_labels};
  c.Add(sizes, sizeof sizes);
  add(feat_off);
  add(feat_ids);
  add(feat_vals);
  add(label_off);
  add(labels);
  return c.Final();
}

Dataset Dataset::Subset(const std::vector<int64_t>& idx) const {
  Dataset d;
  d.num_features = num_features;
  d.num_labels = num_labels;
  d.max_abs_value = max_abs_value;  // where in the file, whichever part holds it
  d.max_abs_at = max_abs_at;
  d.feat_off.reserve(idx.size() + 1);
  d.label_off.reserve(idx.size() + 1);
  for (int64_t i : idx) {
    const SparseView x = Features(i);
    d.feat_ids.insert(d.feat_ids.end(), x.ids, x.ids + x.n);
    d.feat_vals.insert(d.feat_vals.end(), x.vals, x.vals + x.n);
    d.feat_off.push_back(static_cast<int64_t>(d.feat_ids.size()));
    d.labels.insert(d.labels.end(), Labels(i), Labels(i) + NumLabels(i));
    d.label_off.push_back(static_cast<int64_t>(d.labels.size()));
  }
  return d;
}

int64_t HoldoutPoints(int64_t n, double fraction) {
  int64_t m = static_cast<int64_t>(std::llround(fraction * static_cast<double>(n)));
  if (fraction > 0 && m == 0 && n > 1) m = 1;
  return m;
}

void HoldoutIndices(int64_t n, double fraction, uint64_t seed, std::vector<int64_t>* held,
                    std::vector<int64_t>* kept) {
  const int64_t m = HoldoutPoints(n, fraction);
  std::vector<int64_t> perm(n);
  for (int64_t i = 0; i < n; ++i) perm[i] = i;
  Rng rng(StreamSeed(seed, 0x76616c6964 /* "valid" */));
  for (int64_t i = 0; i < m; ++i) std::swap(perm[i], perm[i + rng.Below(n - i)]);
  held->assign(perm.begin(), perm.begin() + m);
  kept->assign(perm.begin() + m, perm.end());
  std::sort(held->begin(), held->end());
  std::sort(kept->begin(), kept->end());
}

void SplitHoldout(const Dataset& all, double fraction, uint64_t seed, Dataset* kept,
                  Dataset* held) {
  std::vector<int64_t> h, k;
  HoldoutIndices(all.size(), fraction, seed, &h, &k);
  *held = all.Subset(h);
  *kept = all.Subset(k);
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
    bool any = false, complete = false;
    while (gzgets(file_, buf, sizeof(buf)) != nullptr) {
      any = true;
      size_t n = std::strlen(buf);
      complete = n > 0 && buf[n - 1] == '\n';
      if (complete) --n;
      line->append(buf, n);
      if (complete) break;
    }
    // A line without its newline is the last one: where the read stopped on an error (a
    // gzip stream cut short or damaged), that is the error, not the line's content.
    if (!complete) CheckRead();
    if (!any) return false;
    if (!line->empty() && line->back() == '\r') line->pop_back();
    ++line_no_;
    return true;
  }
  int64_t line_no() const { return line_no_; }

 private:
  void CheckRead() {
    int err = 0;
    std::string msg = gzerror(file_, &err);
    if (msg.rfind(path_ + ": ", 0) == 0) msg.erase(0, path_.size() + 2);  // zlib names it
    DSLIDE_CHECK(err != Z_BUF_ERROR, path_, ":", line_no_ + 1,
                 ": the file ends inside its gzip stream (", msg,
                 "): it was cut short; copy or compress it again");
    DSLIDE_CHECK(err == Z_OK || err == Z_STREAM_END, path_, ":", line_no_ + 1,
                 ": read error: ", msg, err == Z_DATA_ERROR ? " (a damaged gzip stream)" : "");
  }

  std::string path_;
  gzFile file_ = nullptr;
  int64_t line_no_ = 0;
};

}  // namespace

namespace {
/// Header limits of the text format: ids are int32; a point takes at least two bytes (a
/// space and a newline), so a count above 2^40 points (a 2 TB file) is a damaged header.
constexpr int64_t kMaxIds = INT32_MAX;
constexpr int64_t kMaxTextPoints = int64_t{1} << 40;

/// `text` for a message: at most 60 characters, "..." marking a cut.
std::string Excerpt(const std::string& text) {
  return text.size() <= 60 ? text : text.substr(0, 57) + "...";
}

}  // namespace

namespace {

/// Points as rows of CSR over a window of a binary dataset: the header, and where each
/// array starts.
struct BinaryLayout {
  int64_t points = 0, features = 0, labels = 0, nnz = 0, nl = 0;
  int64_t feat_off_at = 0, feat_ids_at = 0, feat_vals_at = 0, label_off_at = 0, labels_at = 0;
  int64_t size = 0;
};

}  // namespace

namespace {

/// Bytes held by a dataset's arrays (for out-of-memory messages).
int64_t DatasetBytes(const Dataset& d) {
  return static_cast<int64_t>((d.feat_off.capacity() + d.label_off.capacity()) * sizeof(int64_t) +
                              (d.feat_ids.capacity() + d.labels.capacity()) * sizeof(int32_t) +
                              d.feat_vals.capacity() * sizeof(float));
}

}  // namespace

struct DatasetStream::Impl {
  std::string path;
  bool binary = false;
  // Text
  std::unique_ptr<LineReader> lines;
  std::string line;
  std::vector<int32_t> fids, lbls, sorted;
  std::vector<float> fvals;
  // Binary
  std::unique_ptr<FILE, int (*)(FILE*)> file{nullptr, &std::fclose};
  BinaryLayout bin;
  int64_t next = 0;  // points read so far
};

DatasetStream::DatasetStream(const std::string& path) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->binary = IsBinaryDataset(path);
  if (impl_->binary)
    OpenBinary();
  else
    OpenText();
}

void DatasetStream::OpenBinary() {
  Impl& m = *impl_;
  const std::string& path = m.path;
  m.file.reset(std::fopen(path.c_str(), "rb"));
  DSLIDE_CHECK(m.file != nullptr, path, ": cannot open: ", std::strerror(errno));
  FILE* f = m.file.get();
  std::fseek(f, 0, SEEK_END);
  const int64_t size = std::ftell(f);
  std::fseek(f, 0, SEEK_SET);
  // The checksum covers the whole file: one streaming pass before anything is used.
  Checksum sum;
  std::vector<char> buf(1 << 20);
  int64_t left = size - 8;
  DSLIDE_CHECK(left >= 48, path, ": truncated binary dataset (", size, " bytes)");
  char head_bytes[48];
  DSLIDE_CHECK(std::fread(head_bytes, 1, 48, f) == 48, path, ": read failed");
  sum.Add(head_bytes, 48);
  left -= 48;
  while (left > 0) {
    const size_t want =
        static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(buf.size())));
    DSLIDE_CHECK(std::fread(buf.data(), 1, want, f) == want, path, ": read failed");
    sum.Add(buf.data(), want);
    left -= static_cast<int64_t>(want);
  }
  uint64_t stored = 0;
  DSLIDE_CHECK(std::fread(&stored, 1, 8, f) == 8 && stored == sum.Final(), path,
               ": checksum mismatch (corrupted binary dataset)");
  int64_t head[5];
  std::memcpy(head, head_bytes + 8, sizeof head);
  BinaryLayout& b = m.bin;
  b.points = head[0];
  b.features = head[1];
  b.labels = head[2];
  b.nnz = head[3];
  b.nl = head[4];
  b.size = size;
  DSLIDE_CHECK(b.points >= 0 && b.features > 0 && b.labels > 0 && b.features <= INT32_MAX &&
                   b.labels <= INT32_MAX && b.nnz >= 0 && b.nl >= 0 && b.points < size &&
                   b.nnz < size && b.nl < size,
               path, ": corrupted header (points ", b.points, ", features ", b.features,
               ", labels ", b.labels, ")");
  b.feat_off_at = 48;
  b.feat_ids_at = b.feat_off_at + (b.points + 1) * 8;
  b.feat_vals_at = b.feat_ids_at + b.nnz * 4;
  b.label_off_at = b.feat_vals_at + b.nnz * 4;
  b.labels_at = b.label_off_at + (b.points + 1) * 8;
  DSLIDE_CHECK(b.labels_at + b.nl * 4 + 8 == size, path, ": binary dataset of ", size,
               " bytes does not match its header");
  num_points_ = b.points;
  num_features_ = b.features;
  num_labels_ = b.labels;
}

void DatasetStream::OpenText() {
  Impl& m = *impl_;
  const std::string& path = m.path;
  m.lines = std::make_unique<LineReader>(path);
  DSLIDE_CHECK(m.lines->Next(&m.line), path,
               ":1: empty file (expected header 'points features labels')");
  const char* p = m.line.c_str();
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  if (u[0] == 0xEF && u[1] == 0xBB && u[2] == 0xBF)
    throw Error(detail::Concat(path,
                               ":1: starts with a UTF-8 byte-order mark; save the file "
                               "without it"));
  if ((u[0] == 0xFF && u[1] == 0xFE) || (u[0] == 0xFE && u[1] == 0xFF))
    throw Error(detail::Concat(path,
                               ":1: starts with a UTF-16 byte-order mark; save the file as "
                               "ASCII (or UTF-8 without a byte-order mark)"));
  // The three counts, as digits (any number of them: an absurd count is reported with its
  // limit, not as unreadable).
  int64_t v[3];
  std::string text[3];
  for (int i = 0; i < 3; ++i) {
    while (*p == ' ' || *p == '\t') ++p;
    const char* start = p;
    int64_t x = 0;
    while (*p >= '0' && *p <= '9') {
      x = x > (INT64_MAX - 9) / 10 ? INT64_MAX : x * 10 + (*p - '0');
      ++p;
    }
    DSLIDE_CHECK(p != start, path, ":1: bad header '", Excerpt(m.line),
                 "' (expected 'points features labels')");
    v[i] = x;
    text[i].assign(start, p);
  }
  while (*p == ' ' || *p == '\t') ++p;
  DSLIDE_CHECK(*p == '\0', path, ":1: bad header '", Excerpt(m.line),
               "' (expected 'points features labels')");
  DSLIDE_CHECK(v[0] <= kMaxTextPoints, path, ":1: bad header '", Excerpt(m.line),
               "': ", Excerpt(text[0]), " points is beyond the limit of 2^40 = ", kMaxTextPoints,
               " points");
  const char* names[3] = {"points", "features", "labels"};
  for (int i = 1; i < 3; ++i)
    DSLIDE_CHECK(v[i] >= 1 && v[i] <= kMaxIds, path, ":1: bad header '", Excerpt(m.line),
                 "': ", names[i], " must be in [1, 2^31 - 1 = ", kMaxIds, "], got ",
                 Excerpt(text[i]));
  num_points_ = v[0];
  num_features_ = v[1];
  num_labels_ = v[2];
}

DatasetStream::~DatasetStream() = default;

bool DatasetStream::Next(int64_t max_points, Dataset* chunk) {
  *chunk = Dataset();
  chunk->num_features = num_features_;
  chunk->num_labels = num_labels_;
  return impl_->binary ? NextBinary(max_points, chunk) : NextText(max_points, chunk);
}

bool DatasetStream::NextBinary(int64_t max_points, Dataset* chunk) {
  Impl& m = *impl_;
  const BinaryLayout& b = m.bin;
  const int64_t p0 = m.next, n = std::min(max_points, b.points - p0);
  if (n <= 0) return false;
  FILE* f = m.file.get();
  auto read_at = [&](int64_t at, void* dst, int64_t bytes, const char* what) {
    DSLIDE_CHECK(at >= 0 && bytes >= 0 && at + bytes <= b.size - 8 &&
                     std::fseek(f, at, SEEK_SET) == 0 &&
                     std::fread(dst, 1, bytes, f) == static_cast<size_t>(bytes),
                 m.path, ": cannot read ", what, " of points ", p0, "..", p0 + n - 1);
  };
  std::vector<int64_t> foff, loff;
  try {
    foff.resize(n + 1);
    loff.resize(n + 1);
  } catch (const std::bad_alloc&) {
    throw Error(detail::Concat(m.path, ": out of memory reading points ", p0, "..", p0 + n - 1,
                               " (", n, " points asked for; their offsets alone need ",
                               (n + 1) * 16, " bytes)"));
  }
  read_at(b.feat_off_at + p0 * 8, foff.data(), (n + 1) * 8, "feature offsets");
  read_at(b.label_off_at + p0 * 8, loff.data(), (n + 1) * 8, "label offsets");
  DSLIDE_CHECK((p0 > 0 || (foff[0] == 0 && loff[0] == 0)) && foff[n] <= b.nnz && loff[n] <= b.nl &&
                   (p0 + n < b.points || (foff[n] == b.nnz && loff[n] == b.nl)),
               m.path, ": inconsistent offsets");
  for (int64_t i = 0; i < n; ++i)
    DSLIDE_CHECK(foff[i + 1] >= foff[i] && loff[i + 1] >= loff[i] && foff[i] >= 0 && loff[i] >= 0,
                 m.path, ": point ", p0 + i, ": decreasing offsets");
  try {
    chunk->feat_ids.resize(foff[n] - foff[0]);
    chunk->feat_vals.resize(chunk->feat_ids.size());
    chunk->labels.resize(loff[n] - loff[0]);
    chunk->feat_off.resize(n + 1);
    chunk->label_off.resize(n + 1);
  } catch (const std::bad_alloc&) {
    *chunk = Dataset();
    throw Error(detail::Concat(m.path, ": out of memory reading points ", p0, "..", p0 + n - 1,
                               " (", n, " points asked for, ",
                               (foff[n] - foff[0]) * 8 + (loff[n] - loff[0]) * 4 + (n + 1) * 16,
                               " bytes)"));
  }
  read_at(b.feat_ids_at + foff[0] * 4, chunk->feat_ids.data(), (foff[n] - foff[0]) * 4,
          "feature ids");
  read_at(b.feat_vals_at + foff[0] * 4, chunk->feat_vals.data(), (foff[n] - foff[0]) * 4,
          "feature values");
  read_at(b.labels_at + loff[0] * 4, chunk->labels.data(), (loff[n] - loff[0]) * 4, "labels");
  for (int64_t i = 0; i <= n; ++i) {
    chunk->feat_off[i] = foff[i] - foff[0];
    chunk->label_off[i] = loff[i] - loff[0];
  }
  auto sorted_in_range = [](const int32_t* ids, int64_t k, int64_t limit) {
    bool ok = k == 0 || (ids[0] >= 0 && ids[k - 1] < limit);
    for (int64_t j = 1; j < k; ++j) ok &= ids[j] > ids[j - 1];
    return ok;
  };
  for (int64_t i = 0; i < n; ++i) {
    DSLIDE_CHECK(sorted_in_range(chunk->feat_ids.data() + chunk->feat_off[i],
                                 chunk->feat_off[i + 1] - chunk->feat_off[i], b.features),
                 m.path, ": point ", p0 + i, ": feature ids out of range or not increasing");
    DSLIDE_CHECK(sorted_in_range(chunk->labels.data() + chunk->label_off[i],
                                 chunk->label_off[i + 1] - chunk->label_off[i], b.labels),
                 m.path, ": point ", p0 + i, ": label ids out of range or not increasing");
  }
  for (float v : chunk->feat_vals)
    DSLIDE_CHECK(std::isfinite(v), m.path, ": a feature value is NaN or infinite");
  m.next += n;
  return true;
}

namespace {
/// Lines between the text reader's looks at a stop signal (StopDuringLoad).
constexpr int64_t kStopCheckLines = 4096;
}  // namespace

bool DatasetStream::NextText(int64_t max_points, Dataset* chunk) {
  Impl& m = *impl_;
  // The header is not trusted for memory: a count of billions in a short file must end in
  // "fewer points than the header says", not in an allocation of gigabytes.
  int64_t got = 0;
  int64_t reading = m.lines->line_no() + 1;  // the line being read, for an out-of-memory message
  try {
    const int64_t reserve =
        std::min<int64_t>(std::min(max_points, num_points_), int64_t{1} << 20) + 1;
    chunk->feat_off.reserve(reserve);
    chunk->label_off.reserve(reserve);
    while (got < max_points && m.lines->Next(&m.line)) {
      const int64_t ln = m.lines->line_no();
      if (ln % kStopCheckLines == 0 && StopDuringLoad() && StopSignal() != 0)
        throw Stop(kExitStopped,
                   detail::Concat("stopped by ", SignalName(StopSignal()), " while reading ",
                                  m.path, " (line ", ln, " of ", num_points_ + 1,
                                  "): nothing was trained, nothing was saved"));
      // A line of zero characters (a carriage return before the newline aside) is not a
      // point: a point without labels and features is a line holding one space.
      DSLIDE_CHECK(!m.line.empty(), m.path, ":", ln,
                   ": empty line (every point needs a line; a point without labels or features is "
                   "written as a single space)");
      DSLIDE_CHECK(m.next < num_points_, m.path, ":", ln, ": more points than the header's ",
                   num_points_);
      ParseXcLine(m.line, m.path, ln, chunk, &m.fids, &m.fvals, &m.lbls, &m.sorted);
      ++m.next;
      ++got;
      reading = ln + 1;
    }
  } catch (const std::bad_alloc&) {
    const int64_t held = DatasetBytes(*chunk);
    const int64_t line_bytes = static_cast<int64_t>(m.line.size());
    const int64_t asked = std::min(max_points, num_points_ - (m.next - got));
    *chunk = Dataset();  // give the memory back before the message is built
    m.line = std::string();
    throw Error(detail::Concat(m.path, ":", reading, ": out of memory after reading ", got,
                               " of the ", asked, " points asked for (the points read hold ", held,
                               " bytes, the line ", line_bytes, " bytes; the header says ",
                               num_points_, " points)"));
  }
  if (got < max_points || m.next == num_points_) {
    // At the end of the file (or of the header's points): the count must agree.
    if (got < max_points)
      DSLIDE_CHECK(m.next == num_points_, m.path, ":", m.lines->line_no() + 1,
                   ": end of file after ", m.next, " points, the header says ", num_points_);
  }
  return got > 0;
}

}  // namespace dslide
