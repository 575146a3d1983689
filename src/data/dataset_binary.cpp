// The binary dataset format (`.dsb`): written and read whole, its header, arrays and checksum
// checked before anything is trusted.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>
#include <string>

#include "common/atomic_file.h"
#include "common/checksum.h"
#include "common/error.h"
#include "data/dataset.h"

namespace dslide {

namespace {
constexpr char kMagic[8] = {'D', 'S', 'L', 'I', 'D', 'E', 'B', '1'};
}  // namespace

bool IsBinaryDataset(const std::string& path) {
  // A pipe, FIFO or device is read once, as text (plain or gzip): a look at its first bytes
  // would take them from the reader, and a binary set is read by seeking.
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) return false;
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  char head[8];
  return f && std::fread(head, 1, 8, f.get()) == 8 && std::memcmp(head, kMagic, 8) == 0;
}

void WriteBinary(const Dataset& data, const std::string& final_path) {
  WriteAtomically(final_path, [&](const std::string& path) {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
    DSLIDE_CHECK(f != nullptr, path, ": cannot write: ", std::strerror(errno));
    Checksum sum;
    auto put = [&](const void* p, size_t bytes) {
      sum.Add(p, bytes);
      DSLIDE_CHECK(std::fwrite(p, 1, bytes, f.get()) == bytes, path,
                   ": write failed: ", std::strerror(errno));
    };
    const int64_t head[5] = {data.size(), data.num_features, data.num_labels,
                             static_cast<int64_t>(data.feat_ids.size()),
                             static_cast<int64_t>(data.labels.size())};
    put(kMagic, 8);
    put(head, sizeof head);
    put(data.feat_off.data(), data.feat_off.size() * sizeof(int64_t));
    put(data.feat_ids.data(), data.feat_ids.size() * sizeof(int32_t));
    put(data.feat_vals.data(), data.feat_vals.size() * sizeof(float));
    put(data.label_off.data(), data.label_off.size() * sizeof(int64_t));
    put(data.labels.data(), data.labels.size() * sizeof(int32_t));
    const uint64_t check = sum.Final();
    DSLIDE_CHECK(std::fwrite(&check, 1, 8, f.get()) == 8, path,
                 ": write failed: ", std::strerror(errno));
    CloseWritten(&f, path);
  });
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
    DSLIDE_CHECK(std::fread(p, 1, bytes, f.get()) == static_cast<size_t>(bytes), path,
                 ": read failed");
    sum.Add(p, static_cast<size_t>(bytes));
    at += bytes;
  };
  char magic[8];
  get(magic, 8, "the magic");
  DSLIDE_CHECK(std::memcmp(magic, kMagic, 8) == 0, path, ": not a dslide binary dataset");
  int64_t head[5];
  get(head, sizeof head, "the header");
  const int64_t points = head[0], nnz = head[3], nl = head[4];
  DSLIDE_CHECK(points >= 0 && head[1] > 0 && head[2] > 0 && head[1] <= INT32_MAX &&
                   head[2] <= INT32_MAX && nnz >= 0 && nl >= 0 && points < size && nnz < size &&
                   nl < size,
               path, ": corrupted header (points ", points, ", features ", head[1], ", labels ",
               head[2], ")");
  // The header's arrays must fill the file exactly: checked before anything is allocated, so
  // that a damaged count cannot ask for many times the file's size.
  const int64_t need = 48 + (points + 1) * 16 + nnz * 8 + nl * 4 + 8;
  DSLIDE_CHECK(need <= size, path, ": truncated binary dataset (the header's ", points, " points, ",
               nnz, " non-zeros and ", nl, " labels need ", need, " bytes, the file has ", size,
               ")");
  DSLIDE_CHECK(need == size, path, ": binary dataset has ", size - need,
               " unexpected trailing bytes");
  Dataset d;
  d.num_features = head[1];
  d.num_labels = head[2];
  try {
    d.feat_off.resize(points + 1);
    d.feat_ids.resize(nnz);
    d.feat_vals.resize(nnz);
    d.label_off.resize(points + 1);
    d.labels.resize(nl);
  } catch (const std::bad_alloc&) {
    d = Dataset();
    throw Error(detail::Concat(path, ": out of memory: its ", points, " points need ", need - 56,
                               " bytes in memory"));
  }
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
  DSLIDE_CHECK(d.feat_off[0] == 0 && d.feat_off[points] == nnz && d.label_off[0] == 0 &&
                   d.label_off[points] == nl,
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
  int64_t largest = -1;
  for (int64_t j = 0; j < nnz; ++j)
    if (std::fabs(vals[j]) > d.max_abs_value) {
      d.max_abs_value = std::fabs(vals[j]);
      largest = j;
    }
  if (largest >= 0) {
    const int64_t point = std::upper_bound(d.feat_off.begin(), d.feat_off.end(), largest) -
                          d.feat_off.begin();  // 1-based: the first offset beyond it
    d.max_abs_at = detail::Concat(path, ", point ", point);
  }
  return d;
}

}  // namespace dslide
