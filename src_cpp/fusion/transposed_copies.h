// Copies that transpose memory, planned as tiled kernels of their own
// (KernelKind::Transpose) instead of pointwise kernels or ATen's copy.
//
// Note [Tiled transposing copies]
// The channels-last plan copies every convolution weight on every call
// (Note [Channels-last planning]): clone(w, memory_format=channels_last) of
// a contiguous [Cout, Cin, kh, kw] has the strides of [Cout, kh, kw, Cin].
// Activations at the plan's borders are copied NCHW <-> NHWC the same way.
// The output's innermost dim (Cin, C) is strided in the input, so Note
// [Lone reordering copies] cannot move vectors, and the lone copy ran as
// ATen's copy, one element per thread through TensorIterator's offset loop,
// at about 0.6 TB/s on an H100 (3.3 TB/s peak): 62.6 of resnet18's 292 us
// of GPU time at batch 1, 208 of a UNet's 1437 us. Under autocast the copy
// reads the weight's bf16 cast, and the pointwise planner made the pair one
// kernel whose loads were just as scattered.
//
// Such a copy is a batch of 2-d transposes. Take each tensor's dims of size
// above 1 in its memory order, and collapse dims that follow each other in
// the same order in both tensors. When at most three parts are left -- b,
// the input's innermost run; a, the output's innermost run; and at most one
// more, the batch -- the input reads as [batch, a, b] with b contiguous and
// the output as [batch, b, a] with a contiguous: a weight is batch Cout, a
// Cin, b kh*kw; NCHW -> NHWC is batch N, a C, b H*W; NHWC -> NCHW is a H*W,
// b C. The kernel (device/mb_transpose.cuh, Note [Transpose tiles]) stages
// [a, b] tiles in shared memory: it reads a tile along b and writes it
// along a, so both sides move whole runs of memory.
//
// A pointwise group of the parametrise step becomes such a copy when it
// reads one tensor and stores one, its SSA is loads and casts only (a
// clone, a _to_copy, autocast's cast and then the layout copy: the body
// rounds each element as the pointwise kernel would, so values are ATen's),
// both tensors have static sizes and strides, equal shapes, floating dtypes
// and are dense (each in its own order), and the parts collapse as above
// with a and b apart. Everything else keeps its path: symbolic sizes, a
// copy whose innermost dim stays innermost (vectors, Note [Lone reordering
// copies]), a tensor with gaps, a permutation that leaves two batch parts.
//
// Sizes and strides are kernel arguments; the tile is sized from the static
// shape (transpose_tile) and compiled in. At run time the launcher
// collapses the call's own strides with the group's parts
// (transpose_extents) and runs the ATen copy for a call whose tensors do not
// collapse so (Note [Never an error to the user]).
//
// How the tiled copy compares with ATen's depends on the shape: a tile of a
// 3-channel weight is mostly masked, and a small tensor is one launch either
// way. The group has no side effect and writes a fresh output on each run,
// so it is timed against its ATen form like a convolution (Note [A group is
// timed against its ATen form] in runtime/group_floor.h), which keeps
// ATen's copy wherever that is the faster one.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "fusion/fusion_plan.h"
#include "fusion/graph_index.h"

namespace mybackend {

// The logical dims of each part of the [batch, a, b] view of a copy from
// `in` to `out` (TransposeGroup's fields); nullopt when the copy is not a
// batch of 2-d transposes (Note [Tiled transposing copies]).
struct TransposeParts {
  std::vector<int> batch_dims, a_dims, b_dims;
};
std::optional<TransposeParts> transpose_parts(const TensorType& in, const TensorType& out);

// One call's [batch, a, b] view: sizes, and each tensor's stride of each
// part (batch, a, b), in elements.
struct TransposeExtents {
  std::int64_t batch = 1, a = 1, b = 1;
  std::array<std::int64_t, 3> in_strides{}, out_strides{};
  std::int64_t numel() const { return batch * a * b; }
};
// The view of a call whose tensors have `sizes` and these strides, by the
// group's parts; nullopt when a part's dims do not collapse into one in
// either tensor, or name no dim of `sizes`.
std::optional<TransposeExtents> transpose_extents(const TransposeGroup& group,
                                                  const std::vector<std::int64_t>& sizes,
                                                  const std::vector<std::int64_t>& in_strides,
                                                  const std::vector<std::int64_t>& out_strides);

// The tile sides and block size for a copy of these sizes, whose widest
// stored element has `widest_bytes` (Note [Transpose tiles]).
struct TransposeTile {
  int a = 1, b = 1, threads = 32;
};
TransposeTile transpose_tile(std::int64_t a, std::int64_t b, int widest_bytes);

// The transposing copy that the pointwise group of `nodes` is, or null
// (Note [Tiled transposing copies]); `why` says what it was made of.
std::shared_ptr<const TransposeGroup> plan_transposed_copy(const GraphIndex& index,
                                                           const std::vector<NodeId>& nodes,
                                                           std::string* why);

}  // namespace mybackend
