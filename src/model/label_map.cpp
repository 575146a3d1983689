#include "model/label_map.h"

#include <cmath>
#include <numeric>

#include "common/error.h"

namespace dslide {

namespace {

/// a^-1 mod n for a coprime to n (extended Euclid).
uint64_t InverseMod(uint64_t a, uint64_t n) {
  int64_t t = 0, new_t = 1;
  int64_t r = static_cast<int64_t>(n), new_r = static_cast<int64_t>(a % n);
  while (new_r != 0) {
    const int64_t q = r / new_r;
    const int64_t t2 = t - q * new_t;
    t = new_t;
    new_t = t2;
    const int64_t r2 = r - q * new_r;
    r = new_r;
    new_r = r2;
  }
  DSLIDE_ASSERT(r == 1, "label map: multiplier not coprime to the label count");
  return static_cast<uint64_t>(t < 0 ? t + static_cast<int64_t>(n) : t);
}

}  // namespace

LabelMap::LabelMap(bool spread, int64_t n) {
  DSLIDE_ASSERT(n >= 1 && n <= (int64_t{1} << 31), "label map over ", n, " labels");
  n_ = static_cast<uint64_t>(n);
  if (!spread || n < 3) return;
  const double golden = (std::sqrt(5.0) - 1.0) / 2.0;
  uint64_t a = static_cast<uint64_t>(std::llround(golden * static_cast<double>(n)));
  // The nearest coprime multiplier at or above it (below n: a >= 2, and n - 1 is coprime).
  while (std::gcd(a, n_) != 1) ++a;
  mul_ = a;
  inv_ = InverseMod(a, n_);
}

void LabelMap::ToNeurons(int32_t* ids, int64_t count) const {
  if (identity()) return;
  for (int64_t i = 0; i < count; ++i)
    if (ids[i] >= 0) ids[i] = Neuron(ids[i]);
}

void LabelMap::ToLabels(int32_t* ids, int64_t count) const {
  if (identity()) return;
  for (int64_t i = 0; i < count; ++i)
    if (ids[i] >= 0) ids[i] = Label(ids[i]);
}

}  // namespace dslide
