// RMS-norm chains as a compiled graph holds them (Note [RMS-norm chain] in
// src_cpp/fusion/norm_lowering.h), shared by the planner tests
// (test_rms_norm_planner.cpp) and the NVRTC compile of what they plan
// (test_codegen_rms_norm.cpp): one builder, its options picking the order
// of the tail, the casts and the ways a chain is not an RMS norm.
#pragma once

#include <optional>
#include <vector>

#include "fusion_graphs.h"

namespace mybackend {
namespace {

// Where the weight multiply sits, as each source writes it.
enum class RmsOrder {
  // torch's _fused_rms_norm decomposition (F.rms_norm, nn.RMSNorm):
  // _to_copy(mul(mul(xs, r), w), x.dtype)
  Torch,
  // HF LlamaRMSNorm (Mistral, Qwen, ...): mul(w, _to_copy(mul(xs, r), x.dtype))
  Llama,
  // T5LayerNorm: mul(w, _to_copy(mul(x, r), w.dtype)), x not upcast for the mul
  T5,
};

struct RmsChain {
  RmsOrder order = RmsOrder::Llama;
  DType dtype = DType::BFloat16;  // x's; fp32: no casts (x.to(f32) is x)
  bool weight = true;
  std::optional<DType> weight_dtype;  // absent: x's dtype
  std::vector<std::int64_t> weight_sizes = {64};
  // Note [One widening cast per reader]: the square and the normalising mul
  // each read a cast of x of their own (as the widening_casts pass leaves
  // them); false: one cast read by both (a graph traced without the pass).
  bool split_casts = true;
  bool keep_rstd = false;  // rsqrt returned, as a training forward saves it
  // The ways it is not an RMS norm (or not all of one):
  bool scaled_returned = false;      // x * rsqrt read outside the chain too
  bool upcast_returned = false;      // the square's cast of x returned too
  std::int64_t mean_dim = -1;        // a non-trailing dim: 1
  bool keepdim = true;               // false: mean(...) then unsqueeze
  std::optional<DType> scale_cast;   // the mul's copy of x cast to this (absent: f32)
  bool mean_to_16_bits = false;      // mean's result cast to x's dtype before + eps
  std::optional<DType> result_cast;  // the cast back to this (absent: x's dtype)
};

constexpr std::int64_t kRmsRows0 = 4, kRmsRows1 = 6, kRmsCols = 64;

// Builds `c` over x of [4, 6, 64]; every node is part of the chain.
void rms_norm_form(GraphBuilder& b, const RmsChain& c) {
  const bool casts = c.dtype != DType::Float32;
  const DType f32 = DType::Float32;
  const DType wdt = c.weight_dtype.value_or(c.dtype);
  const DType back = c.result_cast.value_or(c.dtype);
  const std::vector<std::int64_t> full = {kRmsRows0, kRmsRows1, kRmsCols};
  std::vector<std::int64_t> stat = {kRmsRows0, kRmsRows1, 1};
  if (c.mean_dim == 1) stat = {kRmsRows0, 1, kRmsCols};
  const auto to_copy = [&](ValueId in, DType to, const std::vector<std::int64_t>& sizes,
                           const char* name) {
    return node1(b, "aten::_to_copy.default",
                 {v(in), Argument::of_dtype(to), Argument::none(), Argument::none(),
                  Argument::none(), Argument::of_bool(false), Argument::none()},
                 tensor(to, sizes), name);
  };
  ValueId x = b.add_input(out(tensor(c.dtype, full), "x"));
  ValueId w = c.weight ? b.add_input(out(tensor(wdt, c.weight_sizes), "w")) : -1;
  ValueId xs = casts ? to_copy(x, f32, full, "up") : x;
  ValueId p =
      node1(b, "aten::pow.Tensor_Scalar", {v(xs), Argument::of_int(2)}, tensor(f32, full), "pow");
  std::vector<std::int64_t> mean_sizes = stat;
  if (!c.keepdim) mean_sizes = {kRmsRows0, kRmsRows1};
  ValueId m = node1(b, "aten::mean.dim",
                    {v(p), ints({c.mean_dim}), Argument::of_bool(c.keepdim), Argument::none()},
                    tensor(f32, mean_sizes), "mean");
  if (c.mean_to_16_bits) m = to_copy(m, c.dtype, mean_sizes, "mean_down");
  const DType stat_dtype = c.mean_to_16_bits ? c.dtype : f32;
  ValueId a = node1(b, "aten::add.Tensor", {v(m), Argument::of_float(1e-6), Argument::of_int(1)},
                    tensor(stat_dtype, mean_sizes), "add");
  ValueId rs = node1(b, "aten::rsqrt.default", {v(a)}, tensor(stat_dtype, mean_sizes), "rsqrt");
  if (!c.keepdim)
    rs = node1(b, "aten::unsqueeze.default", {v(rs), Argument::of_int(-1)},
               tensor(stat_dtype, stat), "unsqueeze");
  // What the normalising mul multiplies: T5's x, or a (second) cast of x.
  ValueId scaled = xs;
  if (c.order == RmsOrder::T5 && casts) {
    scaled = x;
  } else if (casts && (c.split_casts || c.scale_cast)) {
    scaled = to_copy(x, c.scale_cast.value_or(f32), full, "up_1");
  }
  ValueId y = node1(b, "aten::mul.Tensor", {v(scaled), v(rs)}, tensor(f32, full), "mul");
  std::vector<Argument> results;
  if (c.scaled_returned) results.push_back(v(y));
  if (c.upcast_returned) results.push_back(v(xs));
  if (c.order == RmsOrder::Torch) {
    if (c.weight) y = node1(b, "aten::mul.Tensor", {v(y), v(w)}, tensor(f32, full), "mul_w");
    if (casts || back != c.dtype) y = to_copy(y, back, full, "down");
  } else {
    if (casts || back != c.dtype) y = to_copy(y, back, full, "down");
    // bf16 * bf16 is bf16; an fp32 weight makes the product fp32.
    const DType product = wdt == back ? back : f32;
    if (c.weight) y = node1(b, "aten::mul.Tensor", {v(w), v(y)}, tensor(product, full), "mul_w");
  }
  results.insert(results.begin(), v(y));
  if (c.keep_rstd) results.push_back(v(rs));
  b.set_outputs(results);
}

// `c` built and planned (plan(): partitioning and fusion planning).
Planned plan_chain(const RmsChain& c) {
  GraphBuilder b;
  rms_norm_form(b, c);
  return plan(b);
}

}  // namespace
}  // namespace mybackend
