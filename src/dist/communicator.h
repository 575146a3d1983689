// The collective operations the trainer needs, behind one interface that counts bytes and
// time per kind of traffic. The MPI implementation lives in src/dist; LocalCommunicator is
// the single-process case. No MPI type appears here.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace dslide {

enum class Traffic { kActivations, kInputGrads, kSoftmax, kGradients, kEval, kControl, kCount };
const char* ToString(Traffic t);

struct TrafficStats {
  int64_t bytes = 0;  ///< bytes this rank sent (see Communicator for how each op counts)
  int64_t calls = 0;
  double seconds = 0;
};

enum class DType { kInt32, kInt64, kFloat32, kFloat64 };
enum class ReduceOp { kSum, kMax, kMin };

/// Byte accounting, the protocol's prediction of what one rank puts on the wire:
///  - Allgatherv: its own contribution once to each of the P-1 other ranks;
///  - ReduceScatterv: every slice but its own (total - own);
///  - Allreduce: 2 (P-1)/P of the buffer (a ring's reduce-scatter plus allgather).
/// With P = 1 nothing is sent.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  /// Collective: rank r contributes counts[r] elements from `mine`; `all` receives every
  /// rank's contribution in rank order (sum(counts) elements).
  template <class T>
  void Allgatherv(const T* mine, const std::vector<int64_t>& counts, T* all, Traffic tr);
  /// Collective: element-wise sum of every rank's `in` (sum(counts) elements, rank-ordered
  /// blocks); rank r receives block r in `mine` (counts[r] elements).
  void ReduceScatterSum(const float* in, const std::vector<int64_t>& counts, float* mine,
                        Traffic tr);
  /// Collective: in-place reduction over all ranks.
  template <class T>
  void Allreduce(T* inout, int64_t n, ReduceOp op, Traffic tr);
  /// Collective: every rank learns every rank's value (one int64 each).
  std::vector<int64_t> AllgatherOne(int64_t mine, Traffic tr);
  /// Collective: copies root's buffer to every rank.
  void Broadcast(void* buf, int64_t bytes, int root, Traffic tr);

  const TrafficStats& Stats(Traffic t) const { return stats_[static_cast<int>(t)]; }
  TrafficStats Total() const;
  void ResetStats() { stats_ = {}; }

 protected:
  virtual void DoAllgatherv(const void* mine, const std::vector<int64_t>& counts, void* all,
                            DType type) = 0;
  virtual void DoReduceScatterSum(const float* in, const std::vector<int64_t>& counts,
                                  float* mine) = 0;
  virtual void DoAllreduce(void* inout, int64_t n, DType type, ReduceOp op) = 0;
  virtual void DoBroadcast(void* buf, int64_t bytes, int root) = 0;

 private:
  template <class T>
  static constexpr DType TypeOf();
  void Count(Traffic t, int64_t bytes, std::chrono::steady_clock::time_point start);
  std::array<TrafficStats, static_cast<int>(Traffic::kCount)> stats_{};
};

/// P = 1: every collective is a copy.
class LocalCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }

 protected:
  void DoAllgatherv(const void* mine, const std::vector<int64_t>& counts, void* all,
                    DType type) override;
  void DoReduceScatterSum(const float* in, const std::vector<int64_t>& counts,
                          float* mine) override;
  void DoAllreduce(void*, int64_t, DType, ReduceOp) override {}
  void DoBroadcast(void*, int64_t, int) override {}
};

size_t SizeOf(DType t);

template <class T>
constexpr DType Communicator::TypeOf() {
  if constexpr (std::is_same_v<T, int32_t>)
    return DType::kInt32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::kInt64;
  else if constexpr (std::is_same_v<T, float>)
    return DType::kFloat32;
  else {
    static_assert(std::is_same_v<T, double>, "unsupported element type");
    return DType::kFloat64;
  }
}

template <class T>
void Communicator::Allgatherv(const T* mine, const std::vector<int64_t>& counts, T* all,
                              Traffic tr) {
  const auto start = std::chrono::steady_clock::now();
  DoAllgatherv(mine, counts, all, TypeOf<T>());
  Count(tr, counts[rank()] * static_cast<int64_t>(sizeof(T)) * (size() - 1), start);
}

template <class T>
void Communicator::Allreduce(T* inout, int64_t n, ReduceOp op, Traffic tr) {
  const auto start = std::chrono::steady_clock::now();
  DoAllreduce(inout, n, TypeOf<T>(), op);
  Count(tr, 2 * n * static_cast<int64_t>(sizeof(T)) * (size() - 1) / size(), start);
}

}  // namespace dslide
