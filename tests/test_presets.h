// Settings shared by the learning tests.
#pragma once

#include "config.h"

namespace dslide::testing {

/// The LSH settings the README recommends for label spaces up to ~10^4 with hidden width
/// 128: SimHash, K = 6, L = 100, top-k queries.
inline void UseSimHashTopK(LshConfig* lsh) {
  lsh->family = HashFamily::kSrp;
  lsh->k = 6;
  lsh->l = 100;
  lsh->query = QueryStrategy::kTopK;
}

}  // namespace dslide::testing
