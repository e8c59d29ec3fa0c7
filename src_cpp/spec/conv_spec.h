// What the runtime needs to run one convolution group through cuDNN (CUDA
// engine II): torch-free, decided by the conv planner (conv_planner.h) from
// the IR alone.
//
// Note [Conv epilogue order]
// A forward group computes, in eager's order and each part optional,
//   y = relu(batch_norm(conv(x, w) + bias) + residual)
// where batch_norm is an inference batch norm
// (_native_batch_norm_legit_no_training) folded into a per-channel
// scale·y + shift. The scale and shift are not constants of the plan: the
// runtime computes them on the device from the graph's mean, var, weight
// and bias tensors on every call (C-length work), so parameters that change
// between calls (a graph input, a buffer updated in place) stay correct.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace mybackend {

enum class ConvDirection : std::int8_t {
  Forward,   // aten::convolution with its epilogue: cuDNN conv_fprop + pointwise ops
  Backward,  // aten::convolution_backward: cuDNN dgrad and wgrad, bias gradient a sum
};

std::string_view conv_direction_name(ConvDirection direction);

// An inference batch norm folded into the convolution (Note [Conv epilogue order]).
struct ConvBatchNorm {
  ValueId weight = -1;  // gamma, or -1 (affine=False)
  ValueId bias = -1;    // beta, or -1
  ValueId mean = -1;    // running mean
  ValueId var = -1;     // running variance
  double eps = 0.0;
};

struct ConvSpec {
  ConvDirection direction = ConvDirection::Forward;
  NodeId conv = -1;  // the convolution / convolution_backward node
  DType dtype = DType::Float32;
  int spatial_dims = 2;  // 2 (NCHW) or 3 (NCDHW)
  std::vector<std::int64_t> stride, padding, dilation;
  std::int64_t groups = 1;

  // Forward.
  ValueId input = -1;
  ValueId weight = -1;
  // Per-channel bias: convolution's own, or a later add of a [C, 1, ...] /
  // [1, C, 1, ...] tensor (the runtime views it as 1-D).
  ValueId bias = -1;
  bool batch_norm = false;
  ConvBatchNorm bn;
  ValueId residual = -1;  // a tensor of the output's shape added after the batch norm
  bool relu = false;
  ValueId output = -1;  // the last epilogue node's output, or the convolution's

  // Backward (input, weight as above; -1 where output_mask leaves a gradient out).
  ValueId grad_output = -1;
  ValueId grad_input = -1;
  ValueId grad_weight = -1;
  ValueId grad_bias = -1;

  // "bias+batch_norm+residual+relu", or "none".
  std::string epilogue_name() const;
  // Every value the group reads, in a fixed order.
  std::vector<ValueId> inputs() const;
  // One line per fact, stable: shown by explain() and asserted by tests.
  std::string to_string() const;
};

}  // namespace mybackend
