// The convolution engine's planner (CUDA engine II): which nodes of a CUDA
// partition run as one cuDNN graph, and the ConvSpec of each such group.
// Torch-free: it reads the IR only.
//
// Note [Conv groups]
// Anchors: aten::convolution (not transposed, 2-D or 3-D: NCHW / NCDHW
// ranks 4 and 5) and aten::convolution_backward (same conditions) of a CUDA
// partition, f16, bf16 or f32 input, weight and output of one dtype, stride,
// padding and dilation known at compile time. 1-D and transposed
// convolutions, and those with symbolic geometry, stay ATen calls (cuDNN
// through torch) with the reason in the group's why.
// A forward convolution takes its epilogue (Note [Conv epilogue order] in
// conv_spec.h), one node at a time, while the value before the node has
// exactly one reader, in the partition and unclaimed, and is no graph
// output:
// * add.Tensor (alpha 1, the conv's dtype) of a per-channel tensor
//   ([C, 1, ...] or [1, C, 1, ...]) when no bias, batch norm, residual or
//   relu was taken yet: the bias;
// * _native_batch_norm_legit_no_training (inference batch norm; its two
//   statistic outputs unread) before any residual or relu: scale + shift;
// * add.Tensor (alpha 1, the conv's dtype) of a tensor of the output's
//   shape before relu: the residual;
// * relu: last.
// An add of any other broadcast shape is not fused (the why says so). A
// grouped convolution (groups > 1) takes no epilogue: Note [Grouped
// convolution biases] in mybackend/passes/conv_biases.py. In
// training, aot saves the convolution's output for batch norm's backward,
// so a training convolution usually fuses nothing; its residual add and
// relu (the block's end) still do.
// A backward group is the convolution_backward node alone: dgrad and wgrad
// graphs per output_mask, the bias gradient a sum as in eager.
#pragma once

#include <string>
#include <vector>

#include "fusion/claimed_groups.h"
#include "fusion/graph_index.h"
#include "spec/conv_spec.h"

namespace mybackend {

// Why `node` cannot anchor a conv group; empty when it can.
std::string conv_candidate_problem(const Graph& graph, const Node& node);

class ConvPlanner {
 public:
  explicit ConvPlanner(const GraphIndex& index);
  // Claims the conv groups of one partition (Note [Claimed groups]), each
  // with its nodes (ascending), spec and why; anchors it cannot plan are
  // refused with the reason.
  void claim(const std::vector<NodeId>& partition_nodes, ClaimedGroups& claimed) const;

 private:
  struct Context;
  void match_epilogue(ConvSpec& spec, Context& ctx) const;

  const GraphIndex& index_;
  const Graph& graph_;
};

}  // namespace mybackend
