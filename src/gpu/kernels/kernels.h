// The GPU backend's named kernels (each a struct of its arguments with its per-thread code,
// a `__global__` kernel and a LaunchXxx wrapper in the matching .cu file, and a host
// emulation for the tests):
//   query.h            QueryHash (a block per sample)
//   selection.h        Select (a block per sample)
//   batch_fill.h       BatchFill (one block)
//   forward.h          ForwardRows (a warp per active neuron), ForwardInputMajor
//   softmax_kernels.h  Softmax (a block per sample, CUB reductions), StepLoss
//   backward.h         InputGradient, FirstLayerGradient, FirstLayerUpdate, RowUpdate
//   rebuild.h          HashRows, FillBuckets
//   topk_kernels.h     TopKSegments, LabelLogits
#pragma once

#include "gpu/kernels/backward.h"
#include "gpu/kernels/batch_fill.h"
#include "gpu/kernels/forward.h"
#include "gpu/kernels/query.h"
#include "gpu/kernels/rebuild.h"
#include "gpu/kernels/selection.h"
#include "gpu/kernels/softmax_kernels.h"
#include "gpu/kernels/topk_kernels.h"
