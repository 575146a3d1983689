// The collective operations the trainer needs, behind one interface that counts bytes and
// time per kind of traffic. The MPI implementation lives in src/dist; LocalCommunicator is
// the single-process case. No MPI type appears here.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
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

/// Where a rank's time in a run of collectives went. A collective cannot finish on any rank
/// before the last rank has entered it; from then on what remains is the transfer itself.
/// So the least time any rank spent in a call (the last one to arrive) is that call's
/// network time, and the rest of this rank's time in it was waiting for the others.
struct CommSplit {
  int64_t calls = 0;
  double seconds = 0;  ///< this rank's time in the calls
  double network = 0;  ///< of which the network's: the sum, per call, of the least over ranks
  double wait() const { return seconds - network; }
  CommSplit& operator+=(const CommSplit& o) {
    calls += o.calls;
    seconds += o.seconds;
    network += o.network;
    return *this;
  }
};

enum class DType { kInt32, kInt64, kFloat32, kFloat64 };
enum class ReduceOp { kSum, kMax, kMin };

/// One shard's softmax partials of one sample: its largest active logit m, s = sum of
/// exp(z - m) over its active logits, t = sum of (z - m) over its labelled ones, and c how
/// many are labelled.
struct SoftmaxPart {
  float m, s, t, c;
};

/// The partials of two shards as one: the larger m, the sums rescaled to it. Exactly
/// commutative (each side's terms are formed alike, then added), so every rank of an
/// all-reduce gets the same bits; a NaN anywhere reaches s.
inline SoftmaxPart CombineSoftmax(const SoftmaxPart& a, const SoftmaxPart& b) {
  const float m = std::max(a.m, b.m);
  if (m == -std::numeric_limits<float>::infinity()) return {m, a.s + b.s, a.t + b.t, a.c + b.c};
  auto s_of = [m](const SoftmaxPart& p) { return p.s * std::exp(p.m - m); };
  auto t_of = [m](const SoftmaxPart& p) { return p.c == 0.0f ? p.t : p.t + p.c * (p.m - m); };
  return {m, s_of(a) + s_of(b), t_of(a) + t_of(b), a.c + b.c};
}

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
  /// Collective: every rank's n softmax partials combined (CombineSoftmax), in place.
  void AllreduceSoftmax(SoftmaxPart* inout, int64_t n, Traffic tr);
  /// Collective: every rank learns every rank's value (one int64 each).
  std::vector<int64_t> AllgatherOne(int64_t mine, Traffic tr);
  /// Collective: copies root's buffer to every rank.
  void Broadcast(void* buf, int64_t bytes, int root, Traffic tr);

  const TrafficStats& Stats(Traffic t) const { return stats_[static_cast<int>(t)]; }
  TrafficStats Total() const;
  void ResetStats() {
    stats_ = {};
    settled_ = {};
    call_s_.clear();
    call_kind_.clear();
  }

  /// Whether each call's time is kept (until SettleCalls) to split it into waiting and
  /// network time. Every rank must switch alike, so that all keep the same calls.
  void RecordCalls(bool on) { record_ = on; }
  bool recording() const { return record_; }
  /// Collective: the split of the calls kept since the last SettleCalls (two all-reduces, of their
  /// number and times, counted as control traffic, not kept); added to Settled(). Throws when the
  /// ranks kept different numbers of calls.
  CommSplit SettleCalls();
  /// The sum of every SettleCalls since ResetStats, over all kinds of traffic or of one.
  CommSplit Settled() const;
  const CommSplit& Settled(Traffic t) const { return settled_[static_cast<int>(t)]; }

 protected:
  virtual void DoAllgatherv(const void* mine, const std::vector<int64_t>& counts, void* all,
                            DType type) = 0;
  virtual void DoReduceScatterSum(const float* in, const std::vector<int64_t>& counts,
                                  float* mine) = 0;
  virtual void DoAllreduce(void* inout, int64_t n, DType type, ReduceOp op) = 0;
  virtual void DoAllreduceSoftmax(SoftmaxPart* inout, int64_t n) = 0;
  virtual void DoBroadcast(void* buf, int64_t bytes, int root) = 0;

 private:
  template <class T>
  static constexpr DType TypeOf();
  void Count(Traffic t, int64_t bytes, std::chrono::steady_clock::time_point start);
  std::array<TrafficStats, static_cast<int>(Traffic::kCount)> stats_{};
  bool record_ = false;
  std::vector<double> call_s_;  // the kept calls' times, in call order
  std::vector<Traffic> call_kind_;
  std::array<CommSplit, static_cast<int>(Traffic::kCount)> settled_{};  // per kind
};

/// Sets whether a communicator keeps call times (RecordCalls) for a scope, then restores
/// the setting: training keeps them, evaluations (which its figures leave out) do not.
class CallRecordScope {
 public:
  CallRecordScope(Communicator* c, bool on) : c_(c), was_(c->recording()) { c->RecordCalls(on); }
  ~CallRecordScope() { c_->RecordCalls(was_); }
  CallRecordScope(const CallRecordScope&) = delete;
  CallRecordScope& operator=(const CallRecordScope&) = delete;

 private:
  Communicator* c_;
  bool was_;
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
  void DoAllreduceSoftmax(SoftmaxPart*, int64_t) override {}
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
