// Which CUDA device a rank uses: one rank per GPU, by local rank on the node. Host-only
// logic (no CUDA), so it is built and tested everywhere.
#pragma once

#include <string>

namespace dslide::gpu {

/// This process's rank among the ranks of its node, from the launcher's environment
/// (Open MPI, MPICH/Intel MPI, Slurm); `fallback` when none is set.
int LocalRankFromEnv(int fallback);
/// The device of local rank `local_rank`: local_rank % gpus_per_node when gpus_per_node > 0,
/// else local_rank % visible. Throws dslide::Error when no device is visible, when
/// gpus_per_node exceeds the visible devices, or when more ranks than GPUs share a node
/// while gpus_per_node is 0 (each rank would not get its own GPU: set --gpus-per-node to
/// share on purpose).
int ChooseDevice(int local_rank, int local_ranks, int gpus_per_node, int visible,
                 const std::string& why_none);
/// The number of ranks on this node from the launcher's environment; 0 when unknown.
int LocalSizeFromEnv();
/// Whether the MPI library reduces buffers in CUDA device memory (CUDA-aware MPI): the
/// environment's DSLIDE_CUDA_AWARE_MPI (0 or 1) when set, else what the library reports
/// through MPIX_Query_cuda_support (Open MPI) where it has that function, else false.
/// Call after MPI is initialised.
bool MpiReadsDeviceMemory();

}  // namespace dslide::gpu
