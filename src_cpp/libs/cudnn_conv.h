// Convolutions through cuDNN frontend graphs, on torch tensors: what a conv
// group (runtime/libraries/conv_group.h) calls. CUDA builds with cuDNN only. The
// frontend's header is heavy: only cudnn_conv.cpp includes it.
//
// Note [Conv plan cache]
// One frontend graph per signature: direction (fprop, dgrad, wgrad), device,
// dtype, the dims and strides of every tensor, each pointer's alignment
// (≤ 16 bytes, handed to cuDNN as the tensor's alignment), stride, padding,
// dilation, groups, the fused epilogue (which of bias, scale+shift,
// residual, relu), whether TF32 and nondeterministic engines are allowed
// (torch.backends.cudnn.allow_tf32 / deterministic). A miss builds the graph
// once: validate → build_operation_graph → create_execution_plans(heuristic
// A, then fallback) → check_support → build_plans; a graph cuDNN cannot run
// is remembered as a failure with its reason, so the caller falls back to
// ATen without asking again. Process-wide, thread-safe (shared lock for
// lookups, one builder at a time), never evicted: after warm-up a call
// builds nothing. Executing one graph is serialised by its own mutex (the
// frontend's execute() mutates per-graph scratch).
//
// Precision: f16 and bf16 tensors compute in f32 (compute and intermediate
// data type FLOAT): the epilogue acts on the f32 accumulator and the result
// rounds once. f32 uses TF32 tensor cores only when torch allows TF32 for
// cuDNN, as eager's cuDNN convolution does.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mybackend::cudnn {

// One entry per spatial dim.
struct ConvGeometry {
  std::vector<std::int64_t> stride, padding, dilation;
  std::int64_t groups = 1;
};

// y = relu?(conv(x, w) + bias) * scale + shift + residual), each part optional.
struct ConvFpropArgs {
  at::Tensor x;         // N, C, spatial...: any strides cuDNN accepts
  at::Tensor w;         // K, C / groups, kernel...
  at::Tensor bias;      // undefined, or K elements of x's dtype: 1-D, or dense of any rank
  at::Tensor scale;     // undefined, or 1-D [K] f32 (a folded inference batch norm)
  at::Tensor shift;     // with scale: 1-D [K] f32
  at::Tensor residual;  // undefined, or y's sizes and dtype
  bool relu = false;
  ConvGeometry geometry;
  at::Tensor y;  // the output, allocated by the caller with the strides it wants
};

// Each returns why cuDNN did not run (no plan for this signature: the
// caller runs ATen); empty when the work was enqueued on the current stream.
// cuDNN failures while executing throw Error from MB_CUDNN_FE_CHECK.
std::string conv_fprop(const ConvFpropArgs& args);
// dx = conv_transpose(dy, w): the input gradient into `dx` (x's sizes).
std::string conv_dgrad(const at::Tensor& dy, const at::Tensor& w, const ConvGeometry& geometry,
                       const at::Tensor& dx);
// dw = the weight gradient from dy and x into `dw` (w's sizes).
std::string conv_wgrad(const at::Tensor& dy, const at::Tensor& x, const ConvGeometry& geometry,
                       const at::Tensor& dw);

struct PlanCacheStats {
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;    // graphs built (or found unbuildable)
  std::uint64_t entries = 0;   // signatures held, failures included
  std::uint64_t failures = 0;  // signatures cuDNN has no plan for
};

PlanCacheStats plan_cache_stats();

}  // namespace mybackend::cudnn
