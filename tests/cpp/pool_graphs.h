// IR graphs around a 2-d max pool, shared by the pool planner tests
// (test_pool_planner.cpp) and the NVRTC compile of what they plan
// (test_codegen_pool.cpp). Each builder fills `b` and sets the outputs.
#pragma once

#include "fusion_graphs.h"

namespace mybackend {
namespace {

// max_pool2d_with_indices of x into `values` (the indices alike, in i64):
// returns [values, indices].
std::vector<ValueId> max_pool_node(GraphBuilder& b, ValueId x, const TensorType& values,
                                   std::vector<std::int64_t> kernel,
                                   std::vector<std::int64_t> stride,
                                   std::vector<std::int64_t> padding,
                                   std::vector<std::int64_t> dilation = {1, 1}) {
  TensorType indices = values;
  indices.dtype = DType::Int64;
  return b.add_node(NodeKind::Aten, "aten::max_pool2d_with_indices.default",
                    {v(x), ints(std::move(kernel)), ints(std::move(stride)),
                     ints(std::move(padding)), ints(std::move(dilation)), Argument::of_bool(false)},
                    {out(values), out(indices)}, "pool");
}

struct StemOptions {
  DType dtype = DType::BFloat16;
  bool channels_last = true;
  std::vector<std::int64_t> sizes = {2, 64, 16, 16};  // of the pool's input
  bool batch_norm = true;     // x * scale + shift in f32, then relu (decomposed BN)
  bool indices_read = false;  // the indices are a graph output (training saves them)
  bool relu_read = false;     // relu's result is a graph output too
  std::vector<std::int64_t> kernel = {3, 3};
  std::vector<std::int64_t> stride = {2, 2};
  std::vector<std::int64_t> padding = {1, 1};
  std::vector<std::int64_t> dilation = {1, 1};
};

std::int64_t pooled_size(std::int64_t in, std::int64_t k, std::int64_t s, std::int64_t p,
                         std::int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

// ResNet's stem after its convolution: relu(x * scale + shift) (inference
// batch norm as mybackend/decompositions.py writes it), then max_pool2d.
// x stands for the convolution's output (a graph input here).
void stem_pool(GraphBuilder& b, const StemOptions& o) {
  const bool cl = o.channels_last && o.sizes.size() == 4;
  const TensorType t = nchw(o.dtype, o.sizes, cl);
  const TensorType f = nchw(DType::Float32, o.sizes, cl);
  const std::int64_t c = o.sizes[1];
  const TensorType per_channel = tensor(DType::Float32, {1, c, 1, 1});
  ValueId x = b.add_input(out(t, "x"));
  ValueId pooled = x;
  ValueId relu = -1;
  if (o.batch_norm) {
    ValueId scale = b.add_input(out(per_channel, "scale"));
    ValueId shift = b.add_input(out(per_channel, "shift"));
    ValueId up =
        node1(b, "aten::_to_copy.default", {v(x), Argument::of_dtype(DType::Float32)}, f, "up");
    ValueId m = node1(b, "aten::mul.Tensor", {v(up), v(scale)}, f, "mul");
    ValueId a = node1(b, "aten::add.Tensor", {v(m), v(shift), Argument::of_int(1)}, f, "add");
    ValueId down =
        node1(b, "aten::_to_copy.default", {v(a), Argument::of_dtype(o.dtype)}, t, "down");
    relu = node1(b, "aten::relu.default", {v(down)}, t, "relu");
    pooled = relu;
  }
  const std::int64_t stride_h = o.stride.empty() ? o.kernel[0] : o.stride[0];
  const std::int64_t stride_w = o.stride.empty() ? o.kernel.back() : o.stride.back();
  std::vector<std::int64_t> out_sizes = o.sizes;
  out_sizes[out_sizes.size() - 2] =
      pooled_size(o.sizes[o.sizes.size() - 2], o.kernel[0], stride_h, o.padding[0], o.dilation[0]);
  out_sizes.back() =
      pooled_size(o.sizes.back(), o.kernel.back(), stride_w, o.padding.back(), o.dilation.back());
  const TensorType values =
      o.sizes.size() == 4 ? nchw(o.dtype, out_sizes, cl) : tensor(o.dtype, out_sizes);
  auto pool = max_pool_node(b, pooled, values, o.kernel, o.stride, o.padding, o.dilation);
  std::vector<Argument> outputs = {v(pool[0])};
  if (o.indices_read) outputs.push_back(v(pool[1]));
  if (o.relu_read && relu >= 0) outputs.push_back(v(relu));
  b.set_outputs(outputs);
}

struct BackwardOptions {
  DType dtype = DType::BFloat16;
  bool channels_last = true;
  bool indices_channels_last = true;  // the indices' layout (the gradient's otherwise)
  std::vector<std::int64_t> sizes = {2, 64, 16, 16};  // of the pool's input
  bool sum_read = false;                              // the gradient sum is a graph output too
};

// The backward of ResNet's stem pool: the gradient at the pooled values is
// the sum of two branches' (layer 1's first block and its downsample), then
// max_pool2d_with_indices_backward (3x3, stride 2, padding 1) with the
// forward's input and indices as graph inputs. Outputs: the input's gradient
// (and the sum when sum_read).
void stem_pool_backward(GraphBuilder& b, const BackwardOptions& o) {
  std::vector<std::int64_t> out_sizes = o.sizes;
  out_sizes[2] = pooled_size(o.sizes[2], 3, 2, 1, 1);
  out_sizes[3] = pooled_size(o.sizes[3], 3, 2, 1, 1);
  const TensorType grad = nchw(o.dtype, out_sizes, o.channels_last);
  TensorType indices = nchw(DType::Int64, out_sizes, o.indices_channels_last);
  const TensorType self = nchw(o.dtype, o.sizes, o.channels_last);
  ValueId a = b.add_input(out(grad, "grad_a"));
  ValueId c = b.add_input(out(grad, "grad_b"));
  ValueId x = b.add_input(out(self, "x"));
  ValueId i = b.add_input(out(indices, "indices"));
  ValueId sum = node1(b, "aten::add.Tensor", {v(a), v(c), Argument::of_int(1)}, grad, "sum");
  ValueId dx = node1(b, "aten::max_pool2d_with_indices_backward.default",
                     {v(sum), v(x), ints({3, 3}), ints({2, 2}), ints({1, 1}), ints({1, 1}),
                      Argument::of_bool(false), v(i)},
                     self, "pool_backward");
  std::vector<Argument> outputs = {v(dx)};
  if (o.sum_read) outputs.push_back(v(sum));
  b.set_outputs(outputs);
}

}  // namespace
}  // namespace mybackend
