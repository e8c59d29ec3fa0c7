// The max-pool planner (CUDA engine I): which 2-d max pools of a partition
// become one generated kernel with their elementwise prologue. It claims
// its groups after the reduction planner and before the pointwise planner
// grows elementwise groups around them (Note [Claimed groups]).
//
// Note [Pool groups]
// Why: a ResNet's stem is convolution -> batch norm -> ReLU -> 3x3/2 max
// pool. Inference batch norm is decomposed to a per-channel x * scale +
// shift in fp32 (mybackend/decompositions.py), so BN + ReLU is one generated
// pointwise kernel that writes the activation (51 MB at batch 32 in bf16)
// which ATen's max_pool2d_with_indices then reads, at about a fifth of the
// bandwidth (117 us against a 21 us floor on an H100). Inductor fuses all
// three into one kernel. A pool group does the same: one kernel reads the
// convolution's output, applies the prologue to each element it loads,
// takes the window maximum and writes only the pooled values.
//
// What is claimed: aten::max_pool2d_with_indices.default (and its
// backward, below) of a CUDA partition with a 4-D input (a 3-D, unbatched input stays ATen), a
// floating dtype codegen handles, kernel size, stride, padding and dilation
// known at compile time and accepted by eager (padding at most half the
// dilated kernel: otherwise ATen raises eager's error), and an output dense
// in NCHW or NHWC (the indices in the same strides); the pooled values must
// be read by something. The prologue is taken as a reduction's is
// (elementwise_prologue in prologue.h): elementwise producers of the input's
// shape whose results only the group reads, recomputed at every load (a
// 3x3/2 window reads each element up to four times; the loads after the
// first hit L1/L2, and the extra math is a few FMAs, far below the bytes
// saved). A producer read elsewhere (training: ReLU's output feeds
// threshold_backward) stays outside and the pool reads its stored result.
// The indices are stored only when something reads them: inference graphs
// never do; training's max_pool2d_with_indices_backward does.
//
// The backward is a pool group too (PoolSpec::backward). ATen's NHWC
// backward took 459 us of a ResNet-50 training step at batch 64 on an H100
// (against a floor near 80 us: the 103 MB gradient written, the 103 MB of
// int64 indices and the 26 MB gradient read), and the add of layer 1's two
// branch gradients before it was a kernel of its own. The generated kernel
// gives each thread input elements (NHWC: `vector` channels of a pixel): it
// walks the windows that may cover them, loads their indices, and adds the
// gradient of each window whose index names the element, in row-major
// window order in the compute type, as eager's kernels add; so the result
// is eager's bit for bit, with no zero fill and no atomics. The gradient
// takes its elementwise producers as prologue over the output space, as the
// forward takes the input's (the sum of the two branches); the indices must
// be dense in the gradient's layout, read as vectors of i64.
//
// How each prologue input is read (PoolRead): Window when it is dense in the
// kernel's layout with the input's shape (the convolution's output), Channel
// when it is one value per channel (batch norm's scale and shift, read once
// per output before the window loop), Strided otherwise. The layout is the
// pool input's (NHWC when the IR says channels-last), as eager picks it.
//
// Semantics are eager's CUDA kernel's (PoolSpec in kernel_spec.h): a value
// replaces the best so far when it is greater or NaN (NaN propagates; the
// last NaN's index), ties keep the first window element in row-major scan
// order, the index is h * W + w within the input plane, padding is never
// read or selected, and the value compared is the prologue's result rounded
// to the pool's dtype, which is what eager's pool reads from the stored
// tensor. Eager's NHWC kernel reports index 0 for a window that is all
// -inf; ours, like eager's NCHW kernel, reports the window's first element.
//
// Variants (Note [Two pointwise variants]): the fast one reads `vector`
// channels per thread in NHWC (16 bytes of the pool's dtype, when the
// channel count allows it) with 32-bit offsets; the general one reads one
// channel per thread with 64-bit offsets. The runtime picks the fast one
// when C is a multiple of its vector, the Window and Channel inputs and the
// outputs are 16-byte aligned and offsets fit 32 bits, and runs the group's
// ATen calls for a call whose tensors are not laid out as compiled.
#pragma once

#include <string>
#include <vector>

#include "fusion/claimed_groups.h"
#include "fusion/graph_index.h"

namespace mybackend {

// Why `node` is no max pool a pool group can anchor; empty when it can.
std::string pool_candidate_problem(const Graph& graph, const Node& node);

// Claims pool groups among the partition's nodes that `claimed` does not
// hold yet; refuses (with the reason) max pools it cannot use.
void claim_pool_groups(const GraphIndex& index, const std::vector<NodeId>& partition_nodes,
                       ClaimedGroups& claimed);

}  // namespace mybackend
