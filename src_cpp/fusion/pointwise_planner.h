// The pointwise engine's planner (CUDA engine I): which nodes of a
// partition become one generated elementwise kernel ("decide"), and the
// PointwiseSpec each such group compiles to ("parametrise").
//
// Note [Pointwise groups]
// A node is a candidate when it is an ATen node of op class Pointwise whose
// overload the lowering table knows (pointwise_lowering.h), its single output
// and every tensor it reads are on one CUDA device with static rank <= 8 and
// dtypes codegen handles, and its own SSA builds and validates. Candidates
// join a group of one of their producers in the same partition when the
// output shapes are equal (inputs may broadcast) and the group stays convex:
// no path leaves the group and re-enters it (checked with, per node, the set
// of groups it depends on). A group's outputs are the values its nodes
// compute that something outside it reads (several outputs are fine).
//
// Note [Broadcast producers inlined]
// A group whose shape only broadcasts to its reader's (a squeeze-excitation
// block's sigmoid over [N, C, 1, 1], read by the multiply over [N, C, H,
// W]) joins the reader's group when nothing else reads its values: the
// kernel computes it per element of the larger space from its broadcast
// inputs, as it reads any broadcast input, instead of a launch of its own
// and a store and load of its result (EfficientNet-B0 at batch 1 ran 16 of
// these sigmoids as ATen kernels: Inductor fuses them into the multiply).
// Static shapes only, and at most kMaxInlinedNodes ops: each runs once per
// element of the larger space, so a long chain of transcendental functions
// could make a memory-bound kernel compute-bound. The merged group takes
// the reader's shape, and its iteration space is that of its first stored
// output (build_group).
//
// Note [Widening casts ride with their readers]
// Joining a producer's group is the right default, except for a cast to a
// wider (or equally wide) dtype whose readers all sit in one later group of
// the same shape: in the producer's group the cast becomes an output of its
// own, stored wide and read back wide. Mixed-precision batch-norm backward
// has this shape: the ReLU gradient (bf16) feeds the per-channel sums, and
// the input-gradient kernel after the sums reads it through a cast to f32,
// which joined the ReLU gradient's group and was stored as a second, f32
// copy of every activation gradient (4 bytes written and read again per
// element, where the bf16 value was stored anyway). After the groups are
// decided such a cast moves into its readers' group, which then reads the
// narrow input. Convexity holds: the readers' group already waited for the
// cast's group, and the cast reads nothing else.
//
// Note [Sibling groups in one launch]
// Groups that read the same tensor and do not depend on each other are
// still one launch each: the per-head copies of a fused query-key-value
// projection (Swin's, and any attention written with torch.matmul: three
// copies out of one [B, N, 3, H, D] product, the query's scaled on the
// way) ran as three kernels a block, each a few microseconds at batch 1
// for a few hundred KB. After the groups are decided, two groups merge
// when their stored outputs have one shape, device and layout (the
// iteration space and order of Note [Iteration order] stay those of
// each), something outside both feeds both (the same node, reached
// back through views), neither waits for the other through any path
// (the rule of Note [Pointwise groups]: the merged group stays convex),
// and the two hold at most kMaxSiblingNodes ops. The merged kernel reads
// and writes what the two did, in one walk. Left apart: claimed groups,
// groups of dtype casts only (Note [Grouped casts] merges those into a
// cast group) and tiled transposing copies (Note [Tiled transposing
// copies] in transposed_copies.h), whose tiles a shared walk would lose.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "fusion/claimed_groups.h"
#include "fusion/fusion_plan.h"
#include "fusion/graph_index.h"

namespace mybackend {

// Why `node` cannot be in a generated pointwise group; empty when it can.
std::string pointwise_candidate_problem(const Graph& graph, const Node& node);

// Note [Concatenations in pointwise kernels] (spec/kernel_spec.h)
// An aten::cat joins a generated pointwise group as a selection on the
// walk's coordinate along its dim, each piece read through guards (or
// computed: a group of producers that only the concatenation reads joins
// it, up to kMaxPieceNodes ops, and is lowered in each piece's space). The
// pieces' sizes along the dim are static (they become the kernel's bounds);
// the other dims may be symbolic. Rotary embeddings (rotate_half's
// cat(-x2, x1) and the cat of the rotated and passed-through halves) and
// their gradients become one kernel with the multiplies around them; a
// channel concatenation joins the elementwise ops that read it. A
// concatenation nothing fuses with stays ATen's (Note [Lone casts] does not
// apply: ATen's batched copy is as good a kernel).
bool is_concatenation(const Node& node);
// Why the concatenation `node` cannot be in a generated pointwise group.
std::string concatenation_candidate_problem(const Graph& graph, const Node& node);

// The kernel groups of one partition, in execution order: the `claimed`
// groups (matmul, reduction and norm groups; Note [Claimed groups]) as
// given, generated pointwise groups where possible (option
// generated_kernels), the other nodes as aten_sequence runs. A claimed group
// is one fixed unit: the decide loop visits the partition in a topological
// order with each claimed group contracted to one node, no elementwise node
// joins it, and pointwise groups never form a cycle through it. With
// generated kernels off the planner only places the claimed groups.
class PointwisePlanner {
 public:
  static constexpr std::size_t kMaxInlinedNodes = 4;   // Note [Broadcast producers inlined]
  static constexpr std::size_t kMaxSiblingNodes = 16;  // Note [Sibling groups in one launch]
  static constexpr std::size_t kMaxPieceNodes = 16;    // Note [Concatenations in pointwise kernels]
  PointwisePlanner(const GraphIndex& index, const FusionOptions& options);
  std::vector<KernelGroup> plan(const std::vector<NodeId>& partition_nodes,
                                const ClaimedGroups& claimed = {});

 private:
  std::shared_ptr<const PointwiseGroup> build_group(const std::vector<NodeId>& nodes,
                                                    std::string* why) const;
  // Note [Broadcast producers inlined]: whether `group` may join the group
  // of its reader `reader`, whose shape is larger.
  bool inlines_into(const std::vector<NodeId>& group, NodeId reader) const;
  // Note [Concatenations in pointwise kernels]: whether `group` only feeds
  // the concatenation `cat` (and may join it), and the nodes of a group
  // that only concatenations read.
  bool inlines_into_cat(const std::vector<NodeId>& group, NodeId cat) const;
  std::set<NodeId> nodes_only_pieces_read(const std::vector<NodeId>& nodes) const;
  // Note [Sibling groups in one launch]: of the `live` groups, those that
  // may merge with a sibling, the tensors each reads (as bases of views) and
  // its stored output's shape, device and layout as one key.
  struct SiblingCandidates {
    std::vector<int> groups;
    std::map<int, std::set<ValueId>> bases;
    std::map<int, std::string> layout;
  };
  SiblingCandidates sibling_candidates(const std::vector<std::vector<NodeId>>& groups,
                                       const std::vector<int>& live,
                                       const std::vector<std::string>& group_key) const;
  // Note [Widening casts ride with their readers]
  void move_widening_casts_to_readers(std::vector<std::vector<NodeId>>& groups,
                                      std::map<NodeId, int>& group_of,
                                      const std::vector<std::string>& group_key,
                                      const std::map<int, int>& claimed_of_group) const;

  const GraphIndex& index_;
  const Graph& graph_;
  FusionOptions options_;
};

// Note [Lone reordering copies]
// A lone elementwise op is left to ATen (it gains nothing from fusion),
// except one that reorders memory: its output is dense and an input of the
// same shape is not dense in the output's order, while the dim the walk
// moves fastest is contiguous in that input. A window partition or merge
// (Swin's `view, permute, clone`: C innermost on both sides) and the
// per-head copies before a batched product are such copies. ATen runs them
// through TensorIterator's non-vectorized offset loop, one scalar per
// element: Swin-T at batch 32 spent 0.95 ms of its 4.36 ms step in 85 of
// them (H200). The generated kernel moves 16-byte vectors on both sides
// (Note [Vectors beside strided inputs]). A copy whose walk's innermost dim
// is strided in the input (a weight into channels-last) transposes instead:
// it is a tiled copy of its own when its layouts allow (Note [Tiled
// transposing copies] in transposed_copies.h), else ATen's.
bool reorders_memory(const Graph& graph, const std::vector<NodeId>& nodes);

// Note [Lone broadcasting ops]
// The same holds for a lone elementwise op that broadcasts an input (a
// squeeze-excitation gate [N, C, 1, 1] times its [N, C, H, W] activations,
// a per-channel bias, a layer scale): TensorIterator vectorizes only when
// every operand is laid out like the output, so ATen runs these through
// its offset loop too (`elementwise_kernel<128, 4>`, 2.4 us a call for
// MobileNet-V3's eight gates at batch 1 on an H200, 2.5 us for ConvNeXt-T's
// convolution biases). A generated kernel reads such an input as a
// periodic operand (Note [Periodic operands]) or at its strides, and moves
// the dense ones in 16-byte vectors. True for one node whose output is
// dense with a static layout and more than one element, and which reads a
// tensor of a static layout with fewer elements than that output.
bool broadcasts_an_input(const Graph& graph, const std::vector<NodeId>& nodes);

// True when `t`'s sizes and strides are all static.
bool static_layout(const TensorType& t);
// Fast-variant index mode guess from the IR (Note [Two pointwise variants]).
bool likely_contiguous(const TensorType& type);
std::string shape_key(const TensorType& type);

// Note [Iteration order]
// A generated pointwise kernel walks its output shape as one flat index,
// last logical dim fastest. For a channels-last output that order jumps C
// elements between neighbouring threads, so every store is uncoalesced and
// no tensor is flat. The planner therefore walks the logical dims in the
// memory order of the group's first stored output (strides descending) when
// that output is dense in some order other than the logical one and its
// sizes are static: sizes and strides are permuted at launch, tensors dense
// in that order become Aligned (flat, vectorizable), broadcast operands
// keep their (permuted) strides. The kernel source does not change.
//
// The dims of `type` outermost first by stride when it is dense in that
// order and it is not the logical order; empty otherwise.
std::vector<int> memory_order(const TensorType& type);
// True when `type` has static sizes and strides and is dense, without gaps,
// when its dims are taken in `order` (size-1 dims ignored).
bool dense_in_order(const TensorType& type, const std::vector<int>& order);

// Note [Periodic operands]
// A batch norm's per-channel operands beside channels-last activations, a
// bias over the last dim, a squeeze-excitation gate [N, C] over a
// channels-last [N, H, W, C]: in the kernel's walk such an input is dense
// over the innermost dims and repeats over the next ones, so element i is at
// i mod P + (i div B) * P (PeriodicLayout in spec/kernel_spec.h). As a
// Strided input it costs, per vector, a coordinate peeled off per kept dim,
// and a run-time choice among three loads (one vector, one broadcast
// element, element by element) that keeps the compiler from scheduling
// across it: a batch-1 batch norm + ReLU kernel took 2.5 us on an H200
// where the same kernel without the per-channel operands took 1.4 (1.8 as
// Periodic). When the input's static layout has that form in the walk's
// order, with P > 1 a multiple of the vector width, the fast variant reads
// it as IndexMode::Periodic: two 32-bit divisions (multipliers, Note
// [Divisors as multipliers]) and one 16-byte load. The launch checks each
// call's tensor (the same form, P a multiple of the width, 16-byte aligned)
// and runs the general variant when it does not.
//
// The layout of `input` walked over `walk`'s shape in `order` (empty:
// logical), numpy-broadcast, when its static layout is periodic; else
// period 0.
PeriodicLayout static_periodic_layout(const TensorType& input, const TensorType& walk,
                                      const std::vector<int>& order);
// How a kernel reads a tensor of that `layout` (period > 0) over `walk`:
// Periodic when one block spans the whole walk, else PeriodicRows.
IndexMode periodic_mode(const PeriodicLayout& layout, const TensorType& walk);

}  // namespace mybackend
