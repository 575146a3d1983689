// The CPU kernels' tuning constants in one place (the counterpart of the GPU's GpuTuning).
// Compile-time values: the kernels' loops are unrolled and their blocks sized by them. None
// changes a result, only how the work is cut and how far ahead memory is asked for.
#pragma once

#include <cstdint>

namespace dslide::cpu {

struct CpuTuning {
  // The row walks prefetch the rows kPrefetchNear rows on into the first-level cache and (the
  // weights, and the moments where the walk steps) those kPrefetchFar rows on into the
  // second-level one: a row's lines are then on their way long before the near prefetch asks
  // for them.
  static constexpr int64_t kPrefetchNear = 4;
  static constexpr int64_t kPrefetchFar = 12;
  /// Rows whose entries are the same samples go this many at a time in the backward pass
  /// (each input and input-gradient load serves the rows).
  static constexpr int kRowsAtOnce = 4;
  /// Selection: samples of dense inputs hashed in one block.
  static constexpr int64_t kSelectBlock = 32;
  /// Forward over every neuron of a dense layer: rows per block that meets every sample.
  static constexpr int64_t kForwardDenseRows = 32;
  /// Forward's walk of the active rows: rows per task.
  static constexpr int64_t kForwardWalkChunk = 64;
  /// The active index: ids whose counters are prefetched ahead.
  static constexpr int64_t kIndexIdsAhead = 16;
  /// The non-zero deltas' gather: rows per task, and entries whose deltas are prefetched ahead.
  static constexpr int64_t kGatherChunk = 256;
  static constexpr int64_t kGatherAhead = 32;
  /// The backward pass over the touched rows: rows per task.
  static constexpr int64_t kTouchedChunk = 256;
  /// DenseRows: rows per block.
  static constexpr int64_t kDenseRows = 16;
  /// InputMajorStep: features per task.
  static constexpr int64_t kInputMajorChunk = 64;
  /// Table rebuilds: neurons hashed per block.
  static constexpr int64_t kRebuildRows = 64;
  /// Exact top-k: samples per block that stays in cache, and rows per group of logits.
  static constexpr int64_t kTopKBlock = 32;
  static constexpr int64_t kTopKGroup = 64;
  /// Exact top-k: the longest list kept sorted as candidates come (InsertTopK); longer
  /// ones are buffered and cut back by selection.
  static constexpr int kTopKShortList = 16;
  /// Exact top-k: the bytes of inputs (whole blocks, at least one) that each group of rows
  /// meets in turn, a share of the second-level cache.
  static constexpr int64_t kTopKSuperBytes = 256 << 10;
};

}  // namespace dslide::cpu
