// Note [Aliases without the dispatcher]
// The runtime's engines reshape their operands and results: a matrix
// product reads a planned transpose of its operand (Note [Matmul operands
// are logical]), views a residual as its output's [M, N], and hands out a
// result shaped as the IR says; an attention group views its output. Made
// through the dispatcher, each is a boxed trip through the autograd and
// ADInplaceOrView kernels and as_strided's meta logic, a few microseconds
// of a host-bound step for what is a new TensorImpl over the same storage.
// alias_of() makes that TensorImpl directly, as view replay does (Note
// [Views replayed without the dispatcher]): the base's storage, dispatch
// keys, dtype and version counter, with the given sizes, strides and
// storage offset. Only for a plain base (a strided TensorImpl, no subclass
// or Python dispatch) that records no autograd history (grad mode off or no
// grad required); any other base takes the dispatcher's as_strided.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace mybackend {

// Whether alias_of() can make `t`'s aliases itself.
bool plain_alias_base(const at::Tensor& t);

// The same for a base that plain_alias_base() accepted (view replay checks
// first, then takes the boxed call instead of as_strided).
at::Tensor plain_alias(const at::Tensor& base, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                       std::int64_t storage_offset);

// A view of `base` with these sizes, strides and storage offset.
at::Tensor alias_of(const at::Tensor& base, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                    std::int64_t storage_offset);

// `base` with its last two dims swapped.
at::Tensor transposed_alias(const at::Tensor& base);

// `base` viewed as `sizes`, which must be its own sizes when it is not
// contiguous; a contiguous base gets contiguous strides.
at::Tensor viewed_alias(const at::Tensor& base, c10::IntArrayRef sizes);

// `base` broadcast to `sizes` (at::expand's result), which it must expand to.
at::Tensor expanded_alias(const at::Tensor& base, c10::IntArrayRef sizes);

}  // namespace mybackend
