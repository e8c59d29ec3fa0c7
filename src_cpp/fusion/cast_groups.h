// Cast groups: the lone dtype casts of a partition that do not depend on
// each other, converted by one multi-tensor kernel.
//
// Note [Grouped casts]
// Autocast training casts each fp32 parameter to bf16 in the forward graph,
// one convert_element_type (or _to_copy) of a graph input each, and Note
// [Lone casts] makes each its own generated kernel. GPT-2 had 61 such
// launches per step: 0.67 ms of GPU time on an H100 against 0.25 ms of bytes
// over bandwidth (most of these tensors are too small to fill the GPU, and
// every launch pays its ramp and tail), plus 61 host launches. So, once the
// pointwise planner has made its groups, the one-op groups of a partition
// that are a plain cast between float dtypes codegen handles (f32, bf16,
// f16, f64), of a tensor the IR says is contiguous into a contiguous output
// of its shape, are merged when they are independent: one CastGroup, one
// launch whose argument is a table of {src, dst, numel, pair} per tensor
// (device/mb_cast_table.cuh); each block converts one chunk of one tensor,
// in 16-byte vectors where both bases are aligned. A group needs at least
// two casts: a single one stays the pointwise group it was.
//
// Independence. Merging units must keep the partition's unit graph acyclic
// (the rule of Note [Pointwise groups] and Note [Claimed groups]). Each
// candidate cast gets a level: the largest number of candidate casts on any
// path to it through that graph (claimed groups, pointwise groups and ATen
// runs included). Casts of one level and device form a group. A path from
// one candidate to another raises the level, so no member reads another's
// output, directly or through other units; and since every path from one
// group to another raises the level too, the graph with all groups
// contracted has no cycle (checking members pairwise would not ensure that
// once two groups are contracted). One pass over the graph. A forward's
// parameter casts all read graph inputs: level 0, one group.
//
// Note [Copies beside a cast]
// The channels-last plan copies each convolution weight into its layout
// (`clone(memory_format=channels_last)`) next to autocast's cast, and the
// backward copies each weight gradient back: the pointwise planner makes
// each pair one two-op kernel. For a 1x1 convolution's [K, C, 1, 1] weight
// both layouts list the elements in the same order (size-1 dims do not
// count), so input and output are contiguous and the pair converts element
// i to element i like a plain cast: it joins the cast group (ResNet-50: 36
// such launches in the forward, 36 in the backward). A unit of one dtype
// cast plus copies that keep the dtype qualifies under the same contiguity
// rule as a lone cast; a copy that really moves elements (a 3x3 weight into
// channels-last) leaves its output non-contiguous and the unit out (it is a
// tiled copy of its own: Note [Tiled transposing copies] in
// transposed_copies.h).
//
// Why a kind of its own (KernelKind::CastGroup) and not a variant of the
// pointwise group: a PointwiseGroup is one iteration space (one shape, one
// SSA body, per-tensor index modes), which its runtime, Note [Iteration
// order] and Note [Two pointwise variants] rely on; a cast group is many
// shapes with one conversion each. Its spec holds only the conversions, so
// one kernel serves any number of tensors of any sizes (Note [Specs hold
// no sizes]), and reports show the group as what it is.
//
// At run time (runtime/generated/cast_group_kernel.cpp) a member whose actual input is
// not contiguous, or not of the planned shape, runs its own one-cast
// pointwise kernel (CastGroup::singles) for that call, as a pointwise group
// takes its general variant; a wrong dtype or device sends the whole group
// to its ATen calls (Note [Never an error to the user]). Outputs come from
// the memory plan like every engine output, and the table travels by value,
// so CUDA-graph capture records it. Offsets inside a chunk are 32-bit and a
// chunk's start 64-bit: no size needs a second variant.
//
// Cost: the group runs before the first reader of any of its outputs, so
// every output lives from there on. For a forward's weights that is up to
// 2 bytes per parameter more at the forward's peak when the backward
// recasts the weights instead of saving them.
//
// Note [Grouped layout copies]
// The channels-last plan copies every convolution weight into its layout on
// every call (Note [Tiled transposing copies] in transposed_copies.h):
// ResNet-18 at batch 1 ran 18 transposing copies and 3 order-keeping ones
// (its 1x1 weights), each one launch for at most a few MB: 62 us of its
// 327 us of GPU time on an H200 with ATen's copies, where the bytes take
// about 15 us. Like autocast's casts, they read graph inputs only, so they
// join the same groups, with the same levels:
// - a lone copy that keeps the dtype, from a contiguous tensor into a
//   contiguous one (a 1x1 weight; ATen's copy otherwise) is a member whose
//   pair keeps the dtype;
// - a tiled transposing copy whose body converts at most once is a layout
//   member: its table entry carries a and b of its [batch, a, b] view, and
//   the kernel writes dense [batch, b, a] in 16-byte vectors of VEC outputs,
//   each read at stride b (mb::layout_copy_chunk); the block's other rows
//   read the same lines, so the reads cost cache traffic, not DRAM.
// A run whose input is not dense in the planned order runs that member's
// tiled copy alone, which falls back to ATen in turn. A cast group is timed
// against its ATen form on its first call, as the tiled copies were (Note
// [A group is timed against its ATen form] in runtime/group_floor.h): one
// launch replaces N, but a large activation's copy read at a stride could
// still lose to ATen's.
// Since every output lives from the group's launch on, a group holds at
// most kCastGroupBytes of outputs: a set is split in node order, so the
// extra live memory is bounded (the weights of a conv net at batch 1 are
// most of its memory).
#pragma once

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fusion/fusion_plan.h"
#include "ir/graph.h"

namespace mybackend {

// Outputs one cast group holds at most (Note [Grouped layout copies]).
constexpr std::int64_t kCastGroupBytes = std::int64_t{32} << 20;

// Whether `nodes`, planned as the pointwise group `single`, may join a cast
// group: at most one dtype cast between floating dtypes codegen handles and
// any number of copies that keep the dtype (Note [Copies beside a cast],
// Note [Grouped layout copies]), from a contiguous tensor into a contiguous
// one of the same shape (symbolic sizes: the guess of likely_contiguous; the
// runtime checks the tensors).
bool groupable_cast(const Graph& graph, const std::vector<NodeId>& nodes,
                    const PointwiseGroup& single);

// Whether the tiled copy `copy` may join a cast group as a layout member: its
// body converts at most once (Note [Grouped layout copies]).
bool groupable_layout_copy(const TransposeGroup& copy);

// A member of a cast group: a pointwise group (groupable_cast) or a layout
// copy (groupable_layout_copy).
struct CastMember {
  std::shared_ptr<const PointwiseGroup> single;
  std::shared_ptr<const TransposeGroup> layout_copy;

  ValueId input() const;
  ValueId output() const;
};

// A clone, or a _to_copy to the same dtype: a copy that may join a cast group
// (Note [Copies beside a cast], Note [Grouped layout copies]).
bool same_dtype_copy(const Graph& graph, const Node& node);

// Bytes of the member's output, 0 when a size is symbolic.
std::int64_t output_bytes(const Graph& graph, const CastMember& member);

// Which `candidates` (units of a partition's unit graph; `successors[u]`:
// the units that read something unit u computes) share a kernel: sets of
// equal level and key (Note [Grouped casts]), each in the order of
// `candidates`, sets ordered by (level, key). Sets of one are included.
std::vector<std::vector<int>> independent_cast_sets(const std::vector<std::set<int>>& successors,
                                                    const std::vector<int>& candidates,
                                                    const std::vector<std::string>& keys);

// The cast group of `members`, in their order.
std::shared_ptr<const CastGroup> build_cast_group(const Graph& graph,
                                                  const std::vector<CastMember>& members);

}  // namespace mybackend
