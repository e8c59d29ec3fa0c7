// IR graphs with reductions, norms and fills, shared by the planner tests
// (test_reduction_planner.cpp) and the NVRTC compile of what they plan
// (test_codegen_planned.cpp). Each builder fills `b` and sets the outputs.
#pragma once

#include <limits>

#include "fusion_graphs.h"

namespace mybackend {
namespace {

// sqrt(sum(exp(x * 2), dims, keepdim) + 1) over x of `sizes`.
void sum_with_prologue_and_epilogue(GraphBuilder& b, DType dtype, std::vector<std::int64_t> sizes,
                                    std::vector<std::int64_t> dims, bool keepdim) {
  const TensorType t = tensor(dtype, sizes);
  std::vector<std::int64_t> out_sizes;
  for (std::size_t d = 0; d < sizes.size(); ++d) {
    const bool reduced =
        std::find(dims.begin(), dims.end(), static_cast<std::int64_t>(d)) != dims.end();
    if (!reduced) out_sizes.push_back(sizes[d]);
    if (reduced && keepdim) out_sizes.push_back(1);
  }
  const TensorType r = tensor(dtype, out_sizes);
  ValueId x = b.add_input(out(t, "x"));
  ValueId m = node1(b, "aten::mul.Tensor", {v(x), Argument::of_float(2.0)}, t, "mul");
  ValueId e = node1(b, "aten::exp.default", {v(m)}, t, "exp");
  ValueId s = node1(b, "aten::sum.dim_IntList",
                    {v(e), ints(dims), Argument::of_bool(keepdim), Argument::none()}, r, "sum");
  ValueId a =
      node1(b, "aten::add.Tensor", {v(s), Argument::of_int(1), Argument::of_int(1)}, r, "add");
  ValueId q = node1(b, "aten::sqrt.default", {v(a)}, r, "sqrt");
  b.set_outputs({v(q)});
}

// where(mask, x, full_like(x, -inf)) over [4, 8] (Note [Fills as literals]).
void masked_by_a_fill(GraphBuilder& b, DType dtype) {
  const TensorType t = tensor(dtype, {4, 8});
  ValueId x = b.add_input(out(t, "x"));
  ValueId mask = b.add_input(out(tensor(DType::Bool, {4, 8}), "mask"));
  ValueId fill =
      node1(b, "aten::full_like.default",
            {v(x), Argument::of_float(-std::numeric_limits<double>::infinity())}, t, "fill");
  ValueId y = node1(b, "aten::where.self", {v(mask), v(x), v(fill)}, t, "where");
  b.set_outputs({v(y)});
}

// Autograd's RMS-norm backward as a compiled graph holds it (llama-style,
// fp32 x and weight; Note [Row epilogues in the graph]) over [4, 6, cols]:
// g = dy (upcast), gw = g * w, s = sum(gw * x, -1, keepdim), the input
// gradient residual + g * w * rstd + expand(-0.5 * s * rstd^3) / cols *
// (pow(x, 1) * 2), cast back. Outputs: the fp32 gradient, its cast and g
// (read by the weight gradient's sum).
// `reduced_dim` 1 sums over the middle dim instead (not a row).
void rms_norm_backward_rows(GraphBuilder& b, DType dtype, std::int64_t cols = 64,
                            std::int64_t reduced_dim = 2) {
  const DType f32 = DType::Float32;
  const std::vector<std::int64_t> full = {4, 6, cols};
  std::vector<std::int64_t> row = {4, 6, cols};
  row[static_cast<std::size_t>(reduced_dim)] = 1;
  const TensorType t = tensor(f32, full);
  const TensorType r = tensor(f32, row);
  ValueId dy = b.add_input(out(tensor(dtype, full), "dy"));
  ValueId x = b.add_input(out(t, "x"));
  ValueId rstd = b.add_input(out(tensor(f32, {4, 6, 1}), "rstd"));
  ValueId w = b.add_input(out(tensor(f32, {cols}), "w"));
  ValueId residual = b.add_input(out(t, "residual"));
  ValueId g = dtype == f32
                  ? dy
                  : node1(b, "aten::_to_copy.default",
                          {v(dy), Argument::of_dtype(f32), Argument::none(), Argument::none(),
                           Argument::none(), Argument::of_bool(false), Argument::none()},
                          t, "up");
  ValueId gw = node1(b, "aten::mul.Tensor", {v(g), v(w)}, t, "gw");
  ValueId gx = node1(b, "aten::mul.Tensor", {v(gw), v(x)}, t, "gx");
  ValueId s =
      node1(b, "aten::sum.dim_IntList",
            {v(gx), ints({reduced_dim}), Argument::of_bool(true), Argument::none()}, r, "sum");
  ValueId direct = node1(b, "aten::mul.Tensor", {v(gw), v(rstd)}, t, "direct");
  ValueId cube = node1(b, "aten::pow.Tensor_Scalar", {v(rstd), Argument::of_int(3)},
                       tensor(f32, {4, 6, 1}), "cube");
  ValueId half = node1(b, "aten::mul.Scalar", {v(s), Argument::of_float(-0.5)}, r, "half");
  ValueId scaled =
      node1(b, "aten::mul.Tensor", {v(half), v(cube)}, reduced_dim == 2 ? r : t, "scaled");
  ValueId e =
      node1(b, "aten::expand.default",
            {v(scaled),
             Argument::of_list({Argument::of_int(4), Argument::of_int(6), Argument::of_int(cols)})},
            t, "expand");
  ValueId d = node1(b, "aten::div.Scalar", {v(e), Argument::of_int(cols)}, t, "div");
  ValueId p1 = node1(b, "aten::pow.Tensor_Scalar", {v(x), Argument::of_float(1.0)}, t, "pow1");
  ValueId twice = node1(b, "aten::mul.Scalar", {v(p1), Argument::of_float(2.0)}, t, "twice");
  ValueId m = node1(b, "aten::mul.Tensor", {v(d), v(twice)}, t, "m");
  ValueId through =
      node1(b, "aten::add.Tensor", {v(residual), v(direct), Argument::of_int(1)}, t, "through");
  ValueId sum = node1(b, "aten::add.Tensor", {v(through), v(m), Argument::of_int(1)}, t, "add");
  ValueId back = dtype == f32
                     ? sum
                     : node1(b, "aten::_to_copy.default",
                             {v(sum), Argument::of_dtype(dtype), Argument::none(), Argument::none(),
                              Argument::none(), Argument::of_bool(false), Argument::none()},
                             tensor(dtype, full), "down");
  b.set_outputs({v(back), v(sum), v(g)});
}

// An RMS norm's weight gradient, sum(g * (x * rstd), [0, 1]) over
// [4, 6, cols] with rstd [4, 6, 1]: a column sum reading one value a row
// (Note [One value a row]).
void column_sum_of_scaled_rows(GraphBuilder& b, DType dtype, std::int64_t cols = 64) {
  const TensorType t = tensor(dtype, {4, 6, cols});
  ValueId g = b.add_input(out(t, "g"));
  ValueId x = b.add_input(out(t, "x"));
  ValueId rstd = b.add_input(out(tensor(dtype, {4, 6, 1}), "rstd"));
  ValueId xr = node1(b, "aten::mul.Tensor", {v(x), v(rstd)}, t, "xr");
  ValueId gx = node1(b, "aten::mul.Tensor", {v(g), v(xr)}, t, "gx");
  ValueId s = node1(b, "aten::sum.dim_IntList",
                    {v(gx), ints({0, 1}), Argument::of_bool(true), Argument::none()},
                    tensor(dtype, {1, 1, cols}), "sum");
  b.set_outputs({v(s)});
}

// sum(x * 2, 1, keepdim) * f(rstd) over x [4, 8], f a chain of `chain`
// elementwise ops over the reduced space [4, 1] (an RMS norm's backward:
// pow(rstd, 3), then negations); with `read_elsewhere` f's last op is a
// graph output too (Note [Epilogue operands recomputed]).
void sum_times_reduced_operand(GraphBuilder& b, DType dtype, int chain, bool read_elsewhere) {
  const TensorType t = tensor(dtype, {4, 8});
  const TensorType r = tensor(dtype, {4, 1});
  ValueId x = b.add_input(out(t, "x"));
  ValueId rstd = b.add_input(out(r, "rstd"));
  ValueId m = node1(b, "aten::mul.Tensor", {v(x), Argument::of_float(2.0)}, t, "mul");
  ValueId s = node1(b, "aten::sum.dim_IntList",
                    {v(m), ints({1}), Argument::of_bool(true), Argument::none()}, r, "sum");
  ValueId f = rstd;
  for (int k = 0; k < chain; ++k) {
    f = k == 0 ? node1(b, "aten::pow.Tensor_Scalar", {v(f), Argument::of_int(3)}, r, "pow")
               : node1(b, "aten::neg.default", {v(f)}, r, "neg");
  }
  ValueId e = node1(b, "aten::mul.Tensor", {v(s), v(f)}, r, "epi");
  if (read_elsewhere) {
    b.set_outputs({v(e), v(f)});
  } else {
    b.set_outputs({v(e)});
  }
}

// The RMS-norm chain F.rms_norm leaves (Note [RMS-norm chain]); with
// `upcast`, x is converted to f32 first and the result back.
void rms_norm_chain(GraphBuilder& b, DType dtype, bool upcast, bool keep_rstd) {
  const TensorType t = tensor(dtype, {6, 64});
  const TensorType f = tensor(upcast ? DType::Float32 : dtype, {6, 64});
  const TensorType r = tensor(upcast ? DType::Float32 : dtype, {6, 1});
  ValueId x = b.add_input(out(t, "x"));
  ValueId w = b.add_input(out(tensor(dtype, {64}), "w"));
  ValueId xs = x;
  if (upcast)
    xs = node1(b, "aten::_to_copy.default", {v(x), Argument::of_dtype(DType::Float32)}, f, "up");
  ValueId p = node1(b, "aten::pow.Tensor_Scalar", {v(xs), Argument::of_int(2)}, f, "pow");
  ValueId m = node1(b, "aten::mean.dim",
                    {v(p), ints({-1}), Argument::of_bool(true), Argument::none()}, r, "mean");
  ValueId a =
      node1(b, "aten::add.Scalar", {v(m), Argument::of_float(1e-6), Argument::of_int(1)}, r, "add");
  ValueId rs = node1(b, "aten::rsqrt.default", {v(a)}, r, "rsqrt");
  ValueId y = node1(b, "aten::mul.Tensor", {v(xs), v(rs)}, f, "mul");
  ValueId yw = node1(b, "aten::mul.Tensor", {v(y), v(w)}, f, "mul_w");
  ValueId result = yw;
  if (upcast)
    result = node1(b, "aten::_to_copy.default", {v(yw), Argument::of_dtype(dtype)}, t, "down");
  if (keep_rstd) {
    b.set_outputs({v(result), v(rs)});
  } else {
    b.set_outputs({v(result)});
  }
}

void softmax(GraphBuilder& b, DType dtype, std::int64_t dim, bool log) {
  const TensorType t = tensor(dtype, {5, 33});
  ValueId x = b.add_input(out(t, "x"));
  ValueId g = b.add_input(out(t, "g"));
  ValueId y = node1(b, log ? "aten::_log_softmax.default" : "aten::_softmax.default",
                    {v(x), Argument::of_int(dim), Argument::of_bool(false)}, t, "softmax");
  ValueId gx = node1(
      b, log ? "aten::_log_softmax_backward_data.default" : "aten::_softmax_backward_data.default",
      {v(g), v(y), Argument::of_int(dim), Argument::of_dtype(dtype)}, t, "softmax_bw");
  b.set_outputs({v(y), v(gx)});
}

// native_layer_norm and its backward over the last dim of [4, 3, 32].
void layer_norm(GraphBuilder& b, DType dtype) {
  const TensorType t = tensor(dtype, {4, 3, 32});
  const TensorType p = tensor(dtype, {32});
  const TensorType s = tensor(dtype == DType::Float64 ? dtype : DType::Float32, {4, 3, 1});
  ValueId x = b.add_input(out(t, "x"));
  ValueId w = b.add_input(out(p, "w"));
  ValueId bias = b.add_input(out(p, "b"));
  ValueId g = b.add_input(out(t, "g"));
  auto fw = b.add_node(NodeKind::Aten, "aten::native_layer_norm.default",
                       {v(x), ints({32}), v(w), v(bias), Argument::of_float(1e-5)},
                       {out(t), out(s), out(s)}, "ln");
  auto bw = b.add_node(NodeKind::Aten, "aten::native_layer_norm_backward.default",
                       {v(g), v(x), ints({32}), v(fw[1]), v(fw[2]), v(w), v(bias),
                        Argument::of_list({Argument::of_bool(true), Argument::of_bool(true),
                                           Argument::of_bool(true)})},
                       {out(t), out(p), out(p)}, "ln_bw");
  b.set_outputs({v(fw[0]), v(bw[0]), v(bw[1]), v(bw[2])});
}

// A pre-norm block's backward tail (Note [Norm epilogues]): the f32 layer
// norm backward of [6, 64], its grad_in added to the residual gradient r
// and cast to bf16 for the next product. `dx_returned`: grad_in is a graph
// output too; `broadcast_residual`: r is a [64] row (a broadcast read).
void layer_norm_backward_then_residual(GraphBuilder& b, bool dx_returned, bool broadcast_residual) {
  const TensorType t = tensor(DType::Float32, {6, 64});
  const TensorType p = tensor(DType::Float32, {64});
  const TensorType s = tensor(DType::Float32, {6, 1});
  ValueId g = b.add_input(out(t, "g"));
  ValueId x = b.add_input(out(t, "x"));
  ValueId mean = b.add_input(out(s, "mean"));
  ValueId rstd = b.add_input(out(s, "rstd"));
  ValueId w = b.add_input(out(p, "w"));
  ValueId bias = b.add_input(out(p, "b"));
  ValueId r = b.add_input(out(broadcast_residual ? p : t, "r"));
  auto bw = b.add_node(NodeKind::Aten, "aten::native_layer_norm_backward.default",
                       {v(g), v(x), ints({64}), v(mean), v(rstd), v(w), v(bias),
                        Argument::of_list({Argument::of_bool(true), Argument::of_bool(true),
                                           Argument::of_bool(true)})},
                       {out(t), out(p), out(p)}, "ln_bw");
  ValueId sum = node1(b, "aten::add.Tensor", {v(bw[0]), v(r)}, t, "residual");
  ValueId cast = node1(b, "aten::_to_copy.default", {v(sum), Argument::of_dtype(DType::BFloat16)},
                       tensor(DType::BFloat16, {6, 64}), "to_bf16");
  std::vector<Argument> results{v(sum), v(cast), v(bw[1]), v(bw[2])};
  if (dx_returned) results.push_back(v(bw[0]));
  b.set_outputs(results);
}

// `producer`(x) -> native_layer_norm over [6, 64] with weight and bias, the
// MLP block's inference tail (Note [Norm prologues]). `also_output`: the
// producer's result is a graph output too; `broadcast`: the producer adds a
// [64] bias (a broadcast read); `scaled_sum`: the producer is x * 0.5 + r,
// two ops, r a second input of x's shape.
void elementwise_then_layer_norm(GraphBuilder& b, DType dtype, bool also_output, bool broadcast,
                                 bool scaled_sum = false) {
  const TensorType t = tensor(dtype, {6, 64});
  const TensorType p = tensor(dtype, {64});
  const TensorType s = tensor(DType::Float32, {6, 1});
  ValueId x = b.add_input(out(t, "x"));
  ValueId w = b.add_input(out(p, "w"));
  ValueId bias = b.add_input(out(p, "b"));
  ValueId pre = -1;
  if (scaled_sum) {
    ValueId r = b.add_input(out(t, "r"));
    ValueId mul = node1(b, "aten::mul.Tensor", {v(x), Argument::of_float(0.5)}, t, "mul");
    pre = node1(b, "aten::add.Tensor", {v(mul), v(r), Argument::of_int(1)}, t, "add");
  } else if (broadcast) {
    pre = node1(b, "aten::add.Tensor", {v(x), v(bias), Argument::of_int(1)}, t, "add");
  } else {
    pre = node1(b, "aten::gelu.default", {v(x)}, t, "gelu");
  }
  auto ln = b.add_node(NodeKind::Aten, "aten::native_layer_norm.default",
                       {v(pre), ints({64}), v(w), v(bias), Argument::of_float(1e-5)},
                       {out(t), out(s), out(s)}, "ln");
  if (also_output) {
    b.set_outputs({v(ln[0]), v(pre)});
  } else {
    b.set_outputs({v(ln[0])});
  }
}

// Swin's residual sum: s = x + r over [2, 3, 64], viewed as [6, 64] for a
// layer norm (Note [A norm prologue read elsewhere]); the sum is returned
// too, or with `view_returned` its view instead.
void residual_sum_viewed_then_layer_norm(GraphBuilder& b, bool view_returned = false) {
  const TensorType t3 = tensor(DType::BFloat16, {2, 3, 64});
  const TensorType t2 = tensor(DType::BFloat16, {6, 64});
  const TensorType p = tensor(DType::BFloat16, {64});
  ValueId x = b.add_input(out(t3, "x"));
  ValueId r = b.add_input(out(t3, "r"));
  ValueId w = b.add_input(out(p, "w"));
  ValueId sum = node1(b, "aten::add.Tensor", {v(x), v(r), Argument::of_int(1)}, t3, "add");
  ValueId rows = node1(b, "aten::view.default", {v(sum), ints({6, 64})}, t2, "view");
  auto ln = b.add_node(
      NodeKind::Aten, "aten::native_layer_norm.default",
      {v(rows), ints({64}), v(w), v(w), Argument::of_float(1e-5)},
      {out(t2), out(tensor(DType::Float32, {6, 1})), out(tensor(DType::Float32, {6, 1}))}, "ln");
  b.set_outputs({v(ln[0]), v(view_returned ? rows : sum)});
}

// Attention scores plus a bias over [heads, N, N], broadcast over the batch,
// then a softmax over the last dim (Note [Softmax prologues with broadcast
// inputs]): scores [4, 2, 8, 8] bf16.
void scores_plus_bias_then_softmax(GraphBuilder& b) {
  const TensorType t = tensor(DType::BFloat16, {4, 2, 8, 8});
  ValueId scores = b.add_input(out(t, "scores"));
  ValueId bias = b.add_input(out(tensor(DType::BFloat16, {2, 8, 8}), "bias"));
  ValueId sum = node1(b, "aten::add.Tensor", {v(scores), v(bias), Argument::of_int(1)}, t, "add");
  ValueId probs = node1(b, "aten::_softmax.default",
                        {v(sum), Argument::of_int(-1), Argument::of_bool(false)}, t, "softmax");
  b.set_outputs({v(probs)});
}

// A ResNet block's ReLU gradient read by its batch norm's backward sums
// (Note [A ReLU gradient recomputed by its batch-norm sums]):
// batch_norm_backward_reduce(where(relu_out <= 0, scalar_tensor(0), dy), x,
// mean, invstd) over [4, 16, 5, 5] bf16, channels-last; dy channels-last
// too unless `grad_nchw`.
void relu_gradient_then_batch_norm_sums(GraphBuilder& b, bool grad_nchw) {
  const std::vector<std::int64_t> sizes = {4, 16, 5, 5};
  const TensorType t = nchw(DType::BFloat16, sizes, true);
  TensorType mask = t;
  mask.dtype = DType::Bool;
  const TensorType channel = tensor(DType::Float32, {16});
  ValueId dy = b.add_input(out(nchw(DType::BFloat16, sizes, !grad_nchw), "dy"));
  ValueId relu_out = b.add_input(out(t, "relu_out"));
  ValueId x = b.add_input(out(t, "x"));
  ValueId mean = b.add_input(out(channel, "mean"));
  ValueId invstd = b.add_input(out(channel, "invstd"));
  ValueId zero = node1(b, "aten::scalar_tensor.default", {Argument::of_int(0)},
                       tensor(DType::BFloat16, {}), "zero");
  ValueId le = node1(b, "aten::le.Scalar", {v(relu_out), Argument::of_int(0)}, mask, "le");
  ValueId masked = node1(b, "aten::where.self", {v(le), v(zero), v(dy)}, t, "where");
  auto sums =
      b.add_node(NodeKind::Aten, "mybackend::batch_norm_backward_reduce.default",
                 {v(masked), v(x), v(mean), v(invstd)}, {out(channel), out(channel)}, "sums");
  b.set_outputs({v(sums[0]), v(sums[1])});
}

}  // namespace
}  // namespace mybackend
