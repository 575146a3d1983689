// The backward kernels of row-per-neuron layers over dense inputs: a row's (or four rows')
// weight gradient and share of the input gradient in one pass over its entries, the rows in
// registers.
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu/cpu_tuning.h"
#include "cpu/kernels/simd.h"
#include "data/batch_rows.h"

namespace dslide::cpu {

/// For kR rows w[k] whose entries are the same samples in the same order (their samples in
/// x, their deltas delta[k]), columns [c, c + kLanesN kV): the weight gradients g[k] +=
/// delta_ke x_e and the input gradient buf_e += delta_ke w[k], in entry order, with the rows'
/// weights and gradients in registers (kWeightsInRegisters false: the weights read from the
/// first-level cache at each use, the registers left to the gradients); each input and
/// input-gradient load serves the kR rows. Per element the operations of Axpy in the same
/// order (GradientRow and InputGradRow), the rows one after another.
template <int kR, int kV, bool kWeightsInRegisters = true>
inline void RowsBlock(const float* const* w, int64_t c, const int32_t* sample,
                      const float* const* delta, int64_t count, const BatchRows& x, float* buf,
                      float* const* g) {
  constexpr int kL = kLanesN;
  VecN wv[kWeightsInRegisters ? kR : 1][kWeightsInRegisters ? kV : 1], gv[kR][kV] = {};
  if constexpr (kWeightsInRegisters)
    for (int k = 0; k < kR; ++k)
      for (int v = 0; v < kV; ++v) std::memcpy(&wv[k][v], w[k] + c + kL * v, sizeof(VecN));
  // The inputs' base pointers once: the stores through buf would otherwise make the
  // compiler reload them for every entry.
  const int64_t* off = x.off.data();
  const float* vals = x.vals.data();
  for (int64_t e = 0; e < count; ++e) {
    float dk[kR];
    for (int k = 0; k < kR; ++k) dk[k] = delta[k][e];
    const int64_t o = off[sample[e]] + c;
    const float* xi = vals + o;
    float* gi = buf + o;
    for (int v = 0; v < kV; ++v) {
      VecN xv, iv;
      std::memcpy(&xv, xi + kL * v, sizeof xv);
      for (int k = 0; k < kR; ++k) gv[k][v] += dk[k] * xv;
      std::memcpy(&iv, gi + kL * v, sizeof iv);
      for (int k = 0; k < kR; ++k) {
        if constexpr (kWeightsInRegisters) {
          iv += dk[k] * wv[k][v];
        } else {
          VecN wkv;
          std::memcpy(&wkv, w[k] + c + kL * v, sizeof wkv);
          iv += dk[k] * wkv;
        }
      }
      std::memcpy(gi + kL * v, &iv, sizeof iv);
    }
  }
  for (int k = 0; k < kR; ++k)
    for (int v = 0; v < kV; ++v) std::memcpy(g[k] + c + kL * v, &gv[k][v], sizeof(VecN));
}

/// One row's weight gradient g (cols floats, a multiple of kLanesN) and bias gradient *gb
/// from its `count` entries (samples of x, deltas), and its share of the input gradient
/// added to buf: the operations of GradientRow and InputGradRow, the row in registers.
inline void RowEntriesGradients(const float* wr, const int32_t* sample, const float* delta,
                                int64_t count, int64_t cols, const BatchRows& x, float* buf,
                                float* g, float* gb) {
  float sb = 0.0f;
  for (int64_t e = 0; e < count; ++e) sb += delta[e];
  *gb = sb;
  // The row's weights and gradient in 2 kV registers of the 32 (AVX-512) or 16 (AVX2). With
  // AVX2, 64 columns at a time first: the gradient in 8 registers and the weights read from
  // the first-level cache, half the passes over the entries of 32 columns in registers
  // (their inputs and input gradients are read once per pass).
  constexpr int kL = kLanesN, kV = kL == 16 ? 8 : 4;
  int64_t c = 0;
  if (kL == 8)
    for (; c + kL * 8 <= cols; c += kL * 8)
      RowsBlock<1, 8, false>(&wr, c, sample, &delta, count, x, buf, &g);
  for (; c + kL * kV <= cols; c += kL * kV)
    RowsBlock<1, kV>(&wr, c, sample, &delta, count, x, buf, &g);
  if (kV > 4)
    for (; c + kL * 4 <= cols; c += kL * 4)
      RowsBlock<1, 4>(&wr, c, sample, &delta, count, x, buf, &g);
  for (; c < cols; c += kL) RowsBlock<1, 1>(&wr, c, sample, &delta, count, x, buf, &g);
}

/// RowEntriesGradients for CpuTuning::kRowsAtOnce rows whose entries are the same samples in
/// the same order (their deltas delta[k]): each input and input-gradient load serves the rows.
inline void RowsEntriesGradients(const float* const* wr, const int32_t* sample,
                                 const float* const* delta, int64_t count, int64_t cols,
                                 const BatchRows& x, float* buf, float* const* g, float* gb) {
  constexpr int kR = CpuTuning::kRowsAtOnce;
  for (int k = 0; k < kR; ++k) {
    float sb = 0.0f;
    for (int64_t e = 0; e < count; ++e) sb += delta[k][e];
    gb[k] = sb;
  }
  int64_t c = 0;
  if (kLanesN == 16)
    for (; c + 32 <= cols; c += 32) RowsBlock<kR, 2>(wr, c, sample, delta, count, x, buf, g);
  for (; c < cols; c += kLanesN) RowsBlock<kR, 1>(wr, c, sample, delta, count, x, buf, g);
}

}  // namespace dslide::cpu
