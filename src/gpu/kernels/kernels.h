// The GPU backend's named kernels (each a struct of its arguments with its per-thread code,
// a `__global__` kernel and a LaunchXxx wrapper in the matching .cu file, and a host
// emulation for the tests):
//   query.h     QueryHash (a block per sample), Select, BatchFill
//   forward.h   ForwardRows (a warp per active neuron), ForwardInputMajor
//   softmax.h   Softmax (a block per sample, CUB reductions), StepLoss
//   backward.h  InputGradient, FirstLayerGradient, FirstLayerUpdate, RowUpdate
//   rebuild.h   HashRows, FillBuckets
//   topk.h      TopKSegments, LabelLogits
#pragma once

#include "gpu/kernels/backward.h"
#include "gpu/kernels/forward.h"
#include "gpu/kernels/query.h"
#include "gpu/kernels/rebuild.h"
#include "gpu/kernels/softmax_kernels.h"
#include "gpu/kernels/topk_kernels.h"
