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
#pragma once

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fusion/fusion_plan.h"
#include "ir/graph.h"

namespace mybackend {

// Whether `nodes`, planned as the pointwise group `single`, may join a cast
// group: one dtype cast between floating dtypes codegen handles and any
// number of copies that keep the dtype (Note [Copies beside a cast]), from a
// contiguous tensor into a contiguous one of the same shape (symbolic sizes:
// the guess of likely_contiguous; the runtime checks the tensors).
bool groupable_cast(const Graph& graph, const std::vector<NodeId>& nodes,
                    const PointwiseGroup& single);

// Which `candidates` (units of a partition's unit graph; `successors[u]`:
// the units that read something unit u computes) share a kernel: sets of
// equal level and key (Note [Grouped casts]), each in the order of
// `candidates`, sets ordered by (level, key). Sets of one are included.
std::vector<std::vector<int>> independent_cast_sets(const std::vector<std::set<int>>& successors,
                                                    const std::vector<int>& candidates,
                                                    const std::vector<std::string>& keys);

// The cast group of `singles` (groupable_cast each), in their order.
std::shared_ptr<const CastGroup> build_cast_group(
    const Graph& graph, const std::vector<std::shared_ptr<const PointwiseGroup>>& singles);

}  // namespace mybackend
