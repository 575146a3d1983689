// Traffic accounting shared by every communicator, and the single-process communicator.
#include "dist/communicator.h"

#include <cstring>
#include <numeric>
#include <utility>

#include "common/error.h"

namespace dslide {

const char* ToString(Traffic t) {
  switch (t) {
    case Traffic::kActivations:
      return "activations";
    case Traffic::kInputGrads:
      return "input_grads";
    case Traffic::kSoftmax:
      return "softmax";
    case Traffic::kGradients:
      return "gradients";
    case Traffic::kEval:
      return "eval";
    case Traffic::kControl:
      return "control";
    case Traffic::kCount:
      break;
  }
  return "?";
}

size_t SizeOf(DType t) {
  switch (t) {
    case DType::kInt32:
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
    case DType::kFloat64:
      return 8;
  }
  return 0;
}

void Communicator::Count(Traffic t, int64_t bytes, std::chrono::steady_clock::time_point start) {
  auto& s = stats_[static_cast<int>(t)];
  s.bytes += bytes;
  s.calls += 1;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.seconds += seconds;
  if (record_) {
    call_s_.push_back(seconds);
    call_kind_.push_back(t);
  }
}

CommSplit Communicator::SettleCalls() {
  // The kept calls are taken (and no longer kept, whatever happens); the all-reduces below
  // are not kept either.
  const std::vector<double> times = std::exchange(call_s_, {});
  const std::vector<Traffic> kinds = std::exchange(call_kind_, {});
  CallRecordScope off(this, false);
  const int64_t n = static_cast<int64_t>(times.size());
  std::vector<double> least = times;  // nobody to wait for with one rank
  if (size() > 1) {
    // The number of calls first (as n and -n under max, so that a difference shows on every
    // rank alike), then the times under min.
    int64_t count[2] = {n, -n};
    Allreduce(count, 2, ReduceOp::kMax, Traffic::kControl);
    DSLIDE_CHECK(count[0] == -count[1], "the ranks kept different numbers of collective calls (",
                 -count[1], " to ", count[0], "): their times were dropped unsplit");
    if (n > 0) Allreduce(least.data(), n, ReduceOp::kMin, Traffic::kControl);
  }
  CommSplit split;
  for (int64_t i = 0; i < n; ++i) {
    const CommSplit call{1, times[i], least[i]};
    split += call;
    settled_[static_cast<int>(kinds[i])] += call;
  }
  return split;
}

CommSplit Communicator::Settled() const {
  CommSplit all;
  for (const CommSplit& k : settled_) all += k;
  return all;
}

TrafficStats Communicator::Total() const {
  TrafficStats t;
  for (const auto& s : stats_) {
    t.bytes += s.bytes;
    t.calls += s.calls;
    t.seconds += s.seconds;
  }
  return t;
}

void Communicator::ReduceScatterSum(const float* in, const std::vector<int64_t>& counts,
                                    float* mine, Traffic tr) {
  const auto start = std::chrono::steady_clock::now();
  DSLIDE_ASSERT(static_cast<int>(counts.size()) == size());
  DoReduceScatterSum(in, counts, mine);
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  Count(tr, (total - counts[rank()]) * static_cast<int64_t>(sizeof(float)), start);
}

void Communicator::AllreduceSoftmax(SoftmaxPart* inout, int64_t n, Traffic tr) {
  const auto start = std::chrono::steady_clock::now();
  DoAllreduceSoftmax(inout, n);
  Count(tr, 2 * n * static_cast<int64_t>(sizeof(SoftmaxPart)) * (size() - 1) / size(), start);
}

std::vector<int64_t> Communicator::AllgatherOne(int64_t mine, Traffic tr) {
  std::vector<int64_t> all(size());
  Allgatherv(&mine, std::vector<int64_t>(size(), 1), all.data(), tr);
  return all;
}

void Communicator::Broadcast(void* buf, int64_t bytes, int root, Traffic tr) {
  const auto start = std::chrono::steady_clock::now();
  DoBroadcast(buf, bytes, root);
  Count(tr, rank() == root ? bytes * (size() - 1) : 0, start);
}

void LocalCommunicator::DoAllgatherv(const void* mine, const std::vector<int64_t>& counts,
                                     void* all, DType type) {
  if (all != mine) std::memcpy(all, mine, counts[0] * SizeOf(type));
}

void LocalCommunicator::DoReduceScatterSum(const float* in, const std::vector<int64_t>& counts,
                                           float* mine) {
  if (mine != in) std::memcpy(mine, in, counts[0] * sizeof(float));
}

}  // namespace dslide
