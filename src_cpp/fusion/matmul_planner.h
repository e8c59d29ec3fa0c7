// The matmul engine's planner (CUDA engine II): which nodes of a CUDA
// partition run as one cuBLASLt call, and the MatmulSpec of each such group.
// Torch-free: it reads the IR only.
//
// Note [Matmul groups]
// Every aten mm / addmm / bmm / baddbmm of a CUDA partition whose operands
// are f16, bf16 or f32 tensors of one dtype becomes a group. Around it:
// * Operands produced by transposes of the last two dims (t, transpose.int,
//   permute) are read from the transpose's input with the transpose flag set
//   (Note [Matmul operands are logical]); chains of them cancel. A transpose
//   node joins the group when the group is its only reader.
// * Epilogues, while the product's value has exactly one reader and that
//   reader is in the partition (the graph's outputs count as readers):
//   a 1-D bias of length N (addmm's self with beta = 1, or add.Tensor of one
//   with alpha = 1 and the product's dtype), then relu or gelu with
//   approximate='tanh'. gelu with approximate='none' (erf) is not fused:
//   cuBLASLt's GELU epilogue is the tanh approximation only.
// * Note [Views after the product]: shape views (view, _unsafe_view,
//   reshape) between the product and an epilogue op are seen through when
//   they keep the last dim (N), as aot's linear on 3-D input leaves them;
//   the runtime views its M x N result to the group output's IR shape.
// * Bias gradient: for a plain mm whose mat1 is Gᵀ (or whose mat2 is G), a
//   sum.dim_IntList(G, [0]) in the partition joins the group as cuBLASLt's
//   BGRADB (BGRADA), as a Linear's backward has it: weight gradient and bias
//   gradient from one pass over G. Under autocast the sum is f32 and cast
//   back to the product's dtype: sum, views and cast join as one BGRAD
//   output (Note [Bias gradients summed in f32], matmul_planner.cpp).
// * addmm / baddbmm's self that is not a fused bias is cuBLASLt's C (beta).
// * Note [Residual sums in the product] (matmul_planner.cpp): an add of a
//   tensor of the sum's shape after the bias is cuBLASLt's C (beta = 1);
//   a contiguous clone of the product on the way is seen through.
// * Note [Products written in f32]: a 16-bit product with no epilogue
//   whose one reader (through shape views) is an upcast to f32 joins the
//   upcast: cuBLASLt writes D in f32 from its f32 accumulator. Mixed
//   precision training has one per weight gradient (mm in bf16, then
//   `_to_copy` to the f32 parameter's dtype); fused, the gradient skips a
//   16-bit round trip through memory and a launch, and is rounded once
//   instead of twice (closer to the f32 reference than eager is). Not when
//   generated kernels run and the upcast's readers are all elementwise: the
//   cast then rides into their kernel (Note [Widening casts ride with their
//   readers] in pointwise_planner.h), the product stores 16 bits and the
//   kernel reads 16, where an f32 product is stored and read at 32. ViT's
//   GELU backward reads the MLP's output-projection gradient so: 38.7 M
//   elements a layer at batch 64, 155 MB of traffic more per layer in f32
//   (the kernel ran at 106 us a layer on an H100, Inductor's at 85).
// A group must stay convex (GraphIndex::convex): no path may leave it and
// re-enter; otherwise the bias-gradient sum stays outside.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "fusion/claimed_groups.h"
#include "fusion/graph_index.h"

namespace mybackend {

// Why `node` cannot be the product of a matmul group; empty when it can.
std::string matmul_candidate_problem(const Graph& graph, const Node& node);

class MatmulPlanner {
 public:
  // `autotune`: the specs ask for timed algorithm choice (MatmulSpec::autotune).
  // `generated_kernels`: elementwise ops run in generated kernels, so an
  // upcast read only by them rides into their kernel (Note [Products written
  // in f32]).
  explicit MatmulPlanner(const GraphIndex& index, bool autotune = false,
                         bool generated_kernels = false);
  // Claims the matmul groups of one partition (Note [Claimed groups]), each
  // with its nodes (ascending), spec and why; products that cannot be
  // planned are refused with the reason (for the aten_sequence group's why).
  void claim(const std::vector<NodeId>& partition_nodes, ClaimedGroups& claimed) const;

 private:
  struct Context;
  MatmulOperand resolve_operand(ValueId value, NodeId reader, Context& ctx) const;
  const Node* sole_reader(ValueId value, const Context& ctx) const;
  void match_epilogue(MatmulSpec& spec, Context& ctx) const;
  void match_bias_grad(MatmulSpec& spec, Context& ctx) const;
  void match_output_cast(MatmulSpec& spec, Context& ctx) const;
  bool read_only_by_elementwise(ValueId value, const Context& ctx) const;
  bool match_residual(MatmulSpec& spec, ValueId residual, const TensorType& sum) const;

  const GraphIndex& index_;
  const Graph& graph_;
  bool autotune_ = false;
  bool generated_kernels_ = false;
};

}  // namespace mybackend
