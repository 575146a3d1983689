// The hidden layers' activation, ReLU: its forward is applied by the backends' kernels;
// its derivative, applied to a gradient in the layout of the layer's output, lives here.
#pragma once

#include <cstdint>

#include "data/batch_rows.h"

namespace dslide {

/// delta *= ReLU'(act), entry by entry (delta laid out like act: the layer's output).
inline void ReluBackward(const BatchRows& act, BatchRows* delta) {
  for (int64_t i = 0; i < act.samples(); ++i) {
    float* d = delta->Vals(i);
    const float* a = act.vals.data() + act.off[i];
    for (int64_t j = 0; j < act.n[i]; ++j)
      if (!(a[j] > 0.0f)) d[j] = 0.0f;
  }
}

}  // namespace dslide
