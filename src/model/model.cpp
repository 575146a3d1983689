// Shapes, shard boundaries and per-rank budgets.
#include "model/model.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace dslide {

ModelSpec ModelSpec::Make(int64_t input_dim, const std::vector<int64_t>& hidden, int64_t output_dim,
                          const std::vector<double>& sparsity, int rank, int ranks,
                          int64_t min_negatives) {
  DSLIDE_ASSERT(sparsity.size() == hidden.size() + 1);
  ModelSpec m;
  m.rank = rank;
  m.ranks = ranks;
  int64_t in = input_dim;
  for (size_t l = 0; l <= hidden.size(); ++l) {
    LayerSpec s;
    s.in_dim = in;
    s.out_dim = l < hidden.size() ? hidden[l] : output_dim;
    s.sparsity = sparsity[l];
    s.is_output = l == hidden.size();
    s.input_major = l == 0;
    DSLIDE_CHECK(s.out_dim >= ranks, "layer ", l + 1, " has ", s.out_dim,
                 " neurons, fewer than the ", ranks, " ranks");
    s.begin = BlockBegin(s.out_dim, rank, ranks);
    s.end = BlockBegin(s.out_dim, rank + 1, ranks);
    if (s.dense()) {
      s.budget = s.local();
    } else {
      const int64_t beta = Budget(s.sparsity, s.out_dim);
      s.budget = std::min(s.local(), std::max<int64_t>(1, (beta + ranks - 1) / ranks));
      // Negatives are the output layer's notion (the softmax's labels are forced active).
      if (s.is_output) s.min_negatives = (min_negatives + ranks - 1) / ranks;
    }
    m.layers.push_back(s);
    in = s.out_dim;
  }
  return m;
}

int64_t ModelSpec::Budget(double sparsity, int64_t n) {
  return sparsity >= 1.0 ? n : static_cast<int64_t>(std::ceil(sparsity * static_cast<double>(n)));
}

int64_t ModelSpec::NumParameters() const {
  int64_t p = 0;
  for (const auto& l : layers) p += l.in_dim * l.out_dim + l.out_dim;
  return p;
}

}  // namespace dslide
