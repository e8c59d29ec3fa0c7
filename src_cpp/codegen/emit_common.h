// Pieces of CUDA C++ that several emitters write: type names, exact
// literals, the SSA body of a pointwise computation, strided offsets.
// Internal to codegen/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/emit.h"
#include "spec/hexfloat.h"
#include "spec/kernel_spec.h"

namespace mybackend::emit {

// The C++ type a tensor element is stored as (mb::f16, float, mb::i64, ...).
std::string_view storage_type(DType dtype);
// The register type a value of `dtype` is computed in (fp16/bf16 -> float).
std::string_view compute_type(DType dtype);
std::string_view index_type(bool index64);

// An exact C++ literal: hex floats for finite floating values, so that the
// value in the kernel is bit-for-bit the one in the spec.
using mybackend::hexfloat;  // spec/hexfloat.h: the spec printer writes the same text
std::string literal(DType dtype, double f, std::int64_t i);
// `expr`, a value of dtype `from` in its compute type, as a value of `to`.
std::string cast_expr(DType from, DType to, const std::string& expr);

std::string hex16(std::uint64_t value);

// MB_APPROX_MATH for a kernel whose stored tensors have `stored` dtypes
// (Note [Approximate math for 16-bit results] in device/mb_math.cuh): 2 when
// all are bf16, 1 when all are fp16 or bf16, else 0.
int approx_math_level(const std::vector<DType>& stored);
// "#define MB_APPROX_MATH <level>\n", or nothing for level 0.
std::string approx_math_define(int level);

// The spec text as a C++ comment block, so that a dumped kernel says what
// it computes.
std::string comment_block(const std::string& text);

// `__device__ void <name>(const C x0, ..., const C s0, ..., const long long
// c0, ..., C& y0, ...)`: the SSA instructions of `spec` over already-loaded
// inputs (x<i>, in compute types), argument scalars (s<j>), coordinates
// (c<a>) and outputs (y<k>).
std::string body_function(const PointwiseSpec& spec, std::string_view name);
// The argument list that calls body_function: x, scalar and y names with a
// prefix/suffix each, e.g. ("x", "[k]") -> "x0[k], x1[k], s0, y0[k]";
// coordinates are c<a><coord_suffix>.
std::string body_call_args(const PointwiseSpec& spec, const std::string& in_prefix,
                           const std::string& in_suffix, const std::string& scalar_prefix,
                           const std::string& out_prefix, const std::string& out_suffix,
                           const std::string& coord_suffix = "");
// Inputs read by some Load instruction (unused inputs are never loaded).
std::vector<bool> used_inputs(const PointwiseSpec& spec);

// The member `template <int N> void <name>(const I i, Value (&y0)[N]) const`
// (name "vec" by default) of a Load functor over dense inputs
// `<ptr_prefix><k>` (16-byte aligned at i when N > 1): loads N elements of
// each used input and calls `body` (a body_function of `spec`) on each,
// output 0 into y0.
std::string dense_vec_member(const PointwiseSpec& spec, const std::string& ptr_prefix,
                             std::string_view body, std::string_view name = "vec");

// The same loads in two steps, for kernels that keep several rows in flight
// at storage width (Note [Loads in flight at storage width] in
// device/mb_batch_norm.cuh): `template <int N> struct Held` (N stored
// elements of each used input), `hold(i, held)` loads them, and
// `values(held, y0)` converts them and calls `body` on each.
std::string dense_held_members(const PointwiseSpec& spec, const std::string& ptr_prefix,
                               std::string_view body);

// Declarations of the kernel-argument scalars converted to compute types:
// "const float s0 = static_cast<float>(scalar0_arg);".
std::string scalar_locals(const PointwiseSpec& spec, const std::string& arg_prefix,
                          const std::string& indent);

struct OffsetTensor {
  std::string offset_var;  // the I variable receiving the element offset
  std::string strides;     // the mb::Dims<rank> holding its strides
  int rank = 0;
};
// Per instruction of `spec`: true when only continuous ops read its value on
// the way to the stores (Note [Smooth divisions] in emit_common.cpp).
std::vector<bool> smooth_values(const PointwiseSpec& spec);
// Statements that set every tensor's offset from the linear index `linear`
// of an iteration space of rank `rank` whose sizes are in `shape`. With
// `divisors` (a Dims parameter of packed multipliers and shifts, 32-bit
// index only) the coordinates come from mb::fast_div (Note [Divisors as
// multipliers] in runtime/fast_divisors.h), else from / and %. With
// `coords` > 0 it also declares c<a> = the coordinate along the walk's dim
// coord_dim<a> (a kernel parameter; 0 when no dim has that position: Note
// [Concatenations in pointwise kernels]).
std::string strided_offsets(const std::vector<OffsetTensor>& tensors, int rank,
                            const std::string& shape, const std::string& linear,
                            const std::string& indent, const std::string& divisors = "",
                            int coords = 0);

// Declares off_<n>, where periodic input `n` holds element `linear`:
// linear mod period, + (linear div block) * period with rows (Note
// [Periodic operands]). The kernel has period_<n> (and block_<n>) and, with
// `divisors`, their multipliers period_div_<n> (block_div_<n>).
std::string periodic_offset(const TensorArg& t, const std::string& n, const std::string& linear,
                            const std::string& indent, bool divisors);

// The kernel parameters periodic_offset reads, in ABI order (none when `t`
// is not periodic).
std::vector<std::string> periodic_params(const TensorArg& t, const std::string& n, bool divisors);

// The kernel parameter for a Dims<rank> argument, as source text and as ABI.
std::string dims_param(int rank, const std::string& name);

}  // namespace mybackend::emit
