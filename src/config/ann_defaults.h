// The output index's defaults (train/output_index.h): `dslide eval` and `dslide predict`'s
// --ann-* options, Python's Model.build_index and OutputIndexOptions all take them from here.
#pragma once

namespace dslide {

constexpr int kAnnM = 12;         ///< links per row of the graph
constexpr int kAnnBuildEf = 100;  ///< candidate list while building
/// Candidate list per query, the rows scored per point: the smallest of 36, 40, 44 and 48
/// whose recall@5 passes 0.99 on gcide8-skipgram and the Amazon-670K shape
/// (docs/benchmarks.md).
constexpr int kAnnEf = 44;
constexpr int kAnnTail = 256;  ///< rows drawn per point for the softmax normaliser beyond them

}  // namespace dslide
