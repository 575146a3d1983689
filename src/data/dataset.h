// Multi-label sparse datasets in CSR form and the Extreme Classification Repository reader.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dslide {

/// A read-only view of one sparse vector: n (id, value) pairs.
struct SparseView {
  const int32_t* ids = nullptr;
  const float* vals = nullptr;
  int64_t n = 0;
};

/// Points as CSR: features (id, value) and labels per point. Ids are sorted ascending.
struct Dataset {
  int64_t num_features = 0;
  int64_t num_labels = 0;
  std::vector<int64_t> feat_off{0};  ///< points+1
  std::vector<int32_t> feat_ids;
  std::vector<float> feat_vals;
  std::vector<int64_t> label_off{0};  ///< points+1
  std::vector<int32_t> labels;
  /// The largest |feature value| and where it was read ("FILE:LINE", or "FILE, point N" of a
  /// binary file; "" when built in memory): named when training diverges on data beyond
  /// float's range. Not part of ==.
  float max_abs_value = 0;
  std::string max_abs_at;

  int64_t size() const { return static_cast<int64_t>(feat_off.size()) - 1; }
  SparseView Features(int64_t i) const {
    return {feat_ids.data() + feat_off[i], feat_vals.data() + feat_off[i],
            feat_off[i + 1] - feat_off[i]};
  }
  const int32_t* Labels(int64_t i) const { return labels.data() + label_off[i]; }
  int64_t NumLabels(int64_t i) const { return label_off[i + 1] - label_off[i]; }
  /// Appends a point; ids must already be validated.
  void Add(const std::vector<int32_t>& fids, const std::vector<float>& fvals,
           const std::vector<int32_t>& lbls);
  /// The first n points (or all if n <= 0 or n >= size()).
  Dataset Head(int64_t n) const;
  /// A checksum of the sizes and every array (features and labels): two sets with the same
  /// digest hold the same points in the same order.
  uint64_t Digest() const;
  /// The points `idx` (in that order).
  Dataset Subset(const std::vector<int64_t>& idx) const;
  /// Same sizes and the same arrays.
  bool operator==(const Dataset& o) const {
    return num_features == o.num_features && num_labels == o.num_labels && feat_off == o.feat_off &&
           feat_ids == o.feat_ids && feat_vals == o.feat_vals && label_off == o.label_off &&
           labels == o.labels;
  }
};

/// Reads an XC text file, plain or gzip-compressed, or a binary dataset written by
/// WriteBinary (each detected from content). Every malformed input throws dslide::Error
/// naming the file and, for text, the 1-based line. Text: the header "points features
/// labels" (features and labels in [1, 2^31 - 1], points at most 2^40; no byte-order mark),
/// then one line per point "l1,l2 f:v f:v"; a line starting with a space or tab has no
/// labels, and a point without labels or features is a line holding a single space. A line of
/// zero characters (a CR before the newline is not counted) is an error wherever it is.
/// Running out of memory is a dslide::Error naming the file and the points or bytes asked
/// for, not std::bad_alloc.
Dataset ReadXc(const std::string& path);

/// Reads a dataset a chunk of points at a time (XC text, plain or gzip, or the binary form,
/// detected from content) without holding the whole file, with ReadXc's checks: for inputs
/// larger than memory. A binary file's checksum is verified (one pass) when it is opened.
class DatasetStream {
 public:
  explicit DatasetStream(const std::string& path);
  ~DatasetStream();
  int64_t num_points() const { return num_points_; }  ///< as the header says
  int64_t num_features() const { return num_features_; }
  int64_t num_labels() const { return num_labels_; }
  /// Replaces *chunk with the next up to max_points points; false when none are left.
  /// Throws dslide::Error naming the file and line (or point) on malformed input, and when
  /// the file ends before the header's count of points.
  bool Next(int64_t max_points, Dataset* chunk);

 private:
  /// The binary format's header and layout, after one checksum pass over the file.
  void OpenBinary();
  /// The text format's header line.
  void OpenText();
  /// Next's points from the binary layout, checked as ReadBinary checks them.
  bool NextBinary(int64_t max_points, Dataset* chunk);
  /// Next's points from the text lines (ParseXcLine).
  bool NextText(int64_t max_points, Dataset* chunk);

  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t num_points_ = 0, num_features_ = 0, num_labels_ = 0;
};

/// The binary form `dslide convert` writes: the CSR arrays as they are in memory behind a
/// header ("DSLIDEB1", points, features, labels, non-zeros, label entries), then a CRC-32
/// of all that precedes it.
void WriteBinary(const Dataset& data, const std::string& path);
/// Reads WriteBinary's format; truncation, a checksum mismatch or inconsistent arrays
/// throw dslide::Error naming the file.
Dataset ReadBinary(const std::string& path);
/// True when the file starts with the binary format's magic.
bool IsBinaryDataset(const std::string& path);

/// The points SplitHoldout holds back of `n` for `fraction`: round(fraction n), at least 1
/// where fraction > 0 and n > 1.
int64_t HoldoutPoints(int64_t n, double fraction);

/// The indices of the points SplitHoldout holds back of `n` (`held`, HoldoutPoints of them)
/// and keeps (`kept`), each ascending.
void HoldoutIndices(int64_t n, double fraction, uint64_t seed, std::vector<int64_t>* held,
                    std::vector<int64_t>* kept);

/// Holds back round(fraction * size) points of `all` (at least one when fraction > 0),
/// chosen uniformly by `seed`, as `held`; the rest is `kept`. Both keep the file's order.
void SplitHoldout(const Dataset& all, double fraction, uint64_t seed, Dataset* kept, Dataset* held);

/// Writes an XC text file (plain); a point without labels or features as a single space.
/// Written as PATH.tmp and renamed when complete; the first write that fails (a full disk)
/// ends it, throwing dslide::Error naming PATH and the line.
void WriteXc(const Dataset& data, const std::string& path);

}  // namespace dslide
