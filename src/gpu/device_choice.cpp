#include "gpu/device_choice.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

#include "common/error.h"

namespace dslide::gpu {

namespace {
int EnvInt(const char* const* names, int fallback) {
  for (const char* const* n = names; *n != nullptr; ++n) {
    const char* v = std::getenv(*n);
    if (v == nullptr || *v == '\0') continue;
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    if (*end == '\0' && x >= 0 && x < (1 << 20)) return static_cast<int>(x);
  }
  return fallback;
}
}  // namespace

int LocalRankFromEnv(int fallback) {
  static const char* const kNames[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                       "SLURM_LOCALID", nullptr};
  return EnvInt(kNames, fallback);
}

int LocalSizeFromEnv() {
  static const char* const kNames[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                                       "SLURM_NTASKS_PER_NODE", nullptr};
  return EnvInt(kNames, 0);
}

int ChooseDevice(int local_rank, int local_ranks, int gpus_per_node, int visible,
                 const std::string& why_none) {
  DSLIDE_CHECK(visible > 0, "--device gpu: no CUDA device is visible (", why_none, ")");
  DSLIDE_CHECK(gpus_per_node <= visible, "--gpus-per-node ", gpus_per_node, " but only ", visible,
               " CUDA device(s) are visible to local rank ", local_rank,
               " (check CUDA_VISIBLE_DEVICES)");
  if (gpus_per_node > 0) return local_rank % gpus_per_node;
  DSLIDE_CHECK(local_ranks <= visible, "--device gpu: ", local_ranks, " ranks on this node but ",
               visible, " CUDA device(s); one rank per GPU is the default. Start at most ", visible,
               " ranks per node, or pass --gpus-per-node ", visible,
               " to share the GPUs between ranks");
  return local_rank % visible;
}

bool MpiReadsDeviceMemory() {
  const char* v = std::getenv("DSLIDE_CUDA_AWARE_MPI");
  if (v != nullptr && *v != '\0') {
    DSLIDE_CHECK(std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0,
                 "DSLIDE_CUDA_AWARE_MPI must be 0 or 1, got '", v, "'");
    return v[0] == '1';
  }
  // Looked up at run time: the core library does not link MPI, and only some MPI
  // libraries have the query.
  using Query = int (*)();
  const auto query = reinterpret_cast<Query>(dlsym(RTLD_DEFAULT, "MPIX_Query_cuda_support"));
  return query != nullptr && query() == 1;
}

}  // namespace dslide::gpu
