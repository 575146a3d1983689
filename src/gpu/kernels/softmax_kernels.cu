// The softmax kernels (softmax.h) on the device, their block reductions by CUB.
#include <cub/block/block_reduce.cuh>

#include "gpu/kernels/grid.cuh"
#include "gpu/kernels/softmax_kernels.h"

namespace dslide::gpu {

namespace {
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
}  // namespace

__global__ void SoftmaxKernel(const Softmax k) {
  using ReduceF = cub::BlockReduce<float, Softmax::kThreads>;
  using ReduceD = cub::BlockReduce<double, Softmax::kThreads>;
  __shared__ typename ReduceF::TempStorage tf;
  __shared__ typename ReduceD::TempStorage td;
  __shared__ float row[2];  // the sample's max and sum
  const int tid = threadIdx.x, nt = blockDim.x;
  for (int64_t i = blockIdx.x; i < k.z.B; i += gridDim.x) {
    if (k.do_max) {
      const float m = ReduceF(tf).Reduce(k.PartMax(i, tid, nt), MaxOp());
      if (tid == 0) k.mx[i] = m;
    }
    if (tid == 0) row[0] = k.mx[i];
    __syncthreads();
    if (k.do_sums) {
      double s, l;
      k.PartSums(i, tid, nt, row[0], &s, &l);
      const double ss = ReduceD(td).Sum(s);
      __syncthreads();  // td is reused
      const double ll = ReduceD(td).Sum(l);
      if (tid == 0) {
        k.red[i] = static_cast<float>(ss);
        k.red[k.z.B + i] = static_cast<float>(ll);
      }
    }
    if (tid == 0) row[1] = k.red[i];
    __syncthreads();
    if (k.do_delta) k.Delta(i, tid, nt, row[0], row[1]);
    __syncthreads();  // row and the temporary storage serve the next sample
  }
}

void LaunchSoftmax(StreamHandle s, const Softmax& k) {
  SoftmaxKernel<<<GridFor(k.z.B, 1), Softmax::kThreads, 0, s>>>(k);
}

__global__ void StepLossKernel(const StepLoss k) {
  using ReduceD = cub::BlockReduce<double, StepLoss::kThreads>;
  __shared__ typename ReduceD::TempStorage td;
  double loss, labelled;
  k.Part(threadIdx.x, blockDim.x, &loss, &labelled);
  const double s = ReduceD(td).Sum(loss);
  __syncthreads();
  const double c = ReduceD(td).Sum(labelled);
  if (threadIdx.x == 0) k.Finish(s, c);
}

void LaunchStepLoss(StreamHandle s, const StepLoss& k) {
  StepLossKernel<<<1, StepLoss::kThreads, 0, s>>>(k);
}

}  // namespace dslide::gpu
