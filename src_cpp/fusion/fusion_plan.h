// Stage 7: turn each partition into kernel groups.
//
// A KernelGroup is the unit the runtime launches: a generated fused kernel,
// a library call, or (where no engine claims the nodes yet) the nodes run
// one by one as ATen calls inside the partition. Which kinds exist depends on
// the target: on CPU every group is an ATen sequence; on CUDA, matrix
// products with their transposed operands and epilogues become one cuBLASLt
// call each (matmul_planner.h, docs/design/0005-matmul-engine.md),
// convolutions with their epilogues become one cuDNN graph each
// (conv_planner.h, docs/design/0008-convolution.md),
// reductions with their elementwise prologue/epilogue and row-wise
// normalizations (softmax, layer norm, RMS norm) become one generated kernel
// each (reduction_planner.h, docs/design/0006-reduction-fusion.md),
// attention becomes one cuDNN SDPA graph (attention_planner.h,
// docs/design/0009-attention.md), and
// maximal convex groups of the remaining elementwise nodes become one
// generated pointwise kernel each (pointwise_planner.h,
// docs/design/0004-fusion-planner.md); lone dtype casts that do not depend
// on each other then share one multi-tensor kernel (Note [Grouped casts] in
// cast_groups.h); groups that only copy (and cast) a tensor into a layout
// that transposes it become one tiled kernel each (Note [Tiled transposing
// copies] in transposed_copies.h); 2-d max pools with their elementwise
// prologue become one generated kernel each (pool_planner.h). All but the
// pointwise, cast and transpose groups claim their nodes before the
// pointwise planner runs (Note [Claimed groups] in claimed_groups.h).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "capability/registry.h"
#include "common/error.h"
#include "partition/partitioner.h"
#include "spec/attention_spec.h"
#include "spec/conv_spec.h"
#include "spec/kernel_kind.h"
#include "spec/kernel_spec.h"
#include "spec/matmul_spec.h"
#include "spec/transpose_spec.h"

namespace mybackend {

// What the runtime needs to launch a generated pointwise group.
//
// Note [Two pointwise variants]
// `spec` is the fast variant: index modes predicted from the IR (Aligned for
// tensors of the iteration shape that the IR says are contiguous, Strided
// for broadcast or permuted ones), 32-bit indexing. `general` is the same
// computation with every tensor Strided and 64-bit indexing: correct for any
// layout and size. The runtime checks the fast variant's assumptions on the
// actual tensors of each call and launches `general` when one fails.
struct PointwiseGroup {
  PointwiseSpec spec;
  PointwiseSpec general;
  std::vector<ValueId> inputs;   // spec.inputs[k] reads inputs[k]
  std::vector<ValueId> outputs;  // spec.outputs[k] stores outputs[k]
  // The logical dims, outermost first, in the order the kernel walks them
  // (Note [Iteration order] in pointwise_planner.h); empty: as they are.
  std::vector<int> order;
  // The output's logical dim of each coordinate axis (Note [Concatenations
  // in pointwise kernels] in spec/kernel_spec.h).
  std::vector<int> coord_dims;
};

// What the runtime needs to launch a generated reduction group: an
// elementwise prologue over the input, one reduction over a contiguous range
// of dims, an elementwise epilogue over the result (Note [Reduction groups]
// in reduction_planner.h). `spec` and `general` follow Note [Two pointwise
// variants]: the general one has every tensor Strided and 64-bit indexing.
struct ReductionGroup {
  ReductionSpec spec;
  ReductionSpec general;
  ValueId reduced = -1;  // the reduction node's input: its sizes are the input space
  ValueId result = -1;   // the reduction node's output: its sizes are the output space
  // Note [Reductions walked in memory order] in reduction_planner.h: the
  // input space's dims in the kernel's walk order (empty: logical order),
  // and the output space's. The reduced dims are [reduce_begin, reduce_end)
  // of the walk order.
  std::vector<int> in_order;
  std::vector<int> out_order;
  int reduce_begin = 0;
  int reduce_end = 0;
  std::vector<ValueId> inputs;  // prologue inputs: spec.prologue->inputs[k] reads inputs[k]
  // Epilogue inputs; entry 0 stands for the reduced value (no tensor).
  std::vector<ValueId> epilogue_inputs;
  std::vector<ValueId> outputs;  // spec.epilogue->outputs[k] stores outputs[k]
  // Note [Row epilogues]: spec.row_epilogue->inputs[k] reads row_inputs[k]
  // (entries below spec.row_values.size() are row values: -1, no tensor),
  // spec.row_epilogue->outputs[k] stores row_outputs[k].
  std::vector<ValueId> row_inputs;
  std::vector<ValueId> row_outputs;
};

// What the runtime needs to launch a generated row-wise normalization
// (Note [Norm groups] in reduction_planner.h). Rows are contiguous in the
// kernel's view: the runtime makes `x`-like inputs contiguous first, as
// eager's kernels do. `spec` is the 16-byte-aligned (vectorised) variant,
// `general` the unaligned one with 64-bit indexing.
struct NormGroup {
  NormSpec spec;
  NormSpec general;
  int normalized_dims = 1;  // cols = product of the last normalized_dims sizes of `rows_of`
  ValueId rows_of = -1;     // the value whose shape is [rows..., cols...]
  double eps = 0.0;
  double momentum = 0.0;          // batch-norm statistics only
  std::int64_t ignore_index = 0;  // cross-entropy only
  // Kernel pointer parameter name ("x", "weight", "grad_out", ...) -> value.
  // Inputs are read, outputs are allocated by the runtime (IR sizes).
  std::vector<std::pair<std::string, ValueId>> inputs;
  std::vector<std::pair<std::string, ValueId>> outputs;
};

// What the runtime needs to launch a cast group (Note [Grouped casts] in
// cast_groups.h): member k converts inputs[k] into outputs[k] with
// spec.pairs[pairs[k]]. The runtime runs member k alone instead, for one
// call, when its tensors break the grouped kernel's assumptions (contiguous,
// as in Note [Two pointwise variants], or the planned layout copy).
struct TransposeGroup;

struct CastGroup {
  CastGroupSpec spec;
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  std::vector<int> pairs;
  // What runs member k alone (for a call whose tensors do not fit the
  // table): singles[k], its pointwise kernel, or for a layout copy (Note
  // [Grouped layout copies] in cast_groups.h) layout_copies[k], its tiled
  // transpose; the other is null.
  std::vector<std::shared_ptr<const PointwiseGroup>> singles;
  std::vector<std::shared_ptr<const TransposeGroup>> layout_copies;
};

// What the runtime needs to launch a generated max-pool group (Note [Pool
// groups] in pool_planner.h): an elementwise prologue over the pool's input
// and a 2-d max pool of it. `spec` is the fast variant (NHWC: channel
// vectors; 32-bit indexing), `general` pools one channel per thread with
// 64-bit indexing; both read every input as `spec.reads` says, and the
// runtime falls back to ATen for a call whose tensors do not (layout).
struct PoolGroup {
  PoolSpec spec;
  PoolSpec general;
  ValueId pooled = -1;  // the pool's input (backward: `self`): its sizes are the window space
  ValueId output = -1;  // the pooled values (backward: the input's gradient)
  // Forward: the indices, stored when spec.store_indices. Backward: the
  // forward's indices, read; their sizes are the output space.
  ValueId indices = -1;
  std::vector<ValueId> inputs;  // prologue inputs (or the input): reads[k] reads inputs[k]
  // Window geometry, [h, w] each, known at compile time.
  std::array<std::int64_t, 2> kernel{}, stride{}, padding{}, dilation{};
};

// What the runtime needs to launch a tiled transposing copy (Note [Tiled
// transposing copies] in transposed_copies.h): `output` is `input` copied
// (and cast, as spec.body says) into the output's layout. The logical dims
// of each part of the kernel's [batch, a, b] view, outermost first: each
// part's dims collapse into one in both tensors (size-1 dims are in none).
// a_dims are the output's innermost run, b_dims the input's; batch_dims may
// be empty.
struct TransposeGroup {
  TransposeSpec spec;
  ValueId input = -1;
  ValueId output = -1;
  std::vector<int> batch_dims, a_dims, b_dims;
};

// Note [One payload per group]
// A group's payload is what its engine runs: its group struct (generated
// kinds) or its library spec, or nothing for an ATen sequence. It is one
// variant whose alternatives follow KernelKind's order, so a group's kind is
// the index of the alternative it holds: the kind and the payload cannot
// disagree (the struct had a kind and one pointer per kind, any of which
// could be set). A new kind adds its alternative here and its term to the
// static_assert that checks the order, and one row in
// runtime/kernel_kinds.cpp (Note [One row per kernel kind]). set() refuses
// a null payload, so a group of an engine kind always has what its engine
// runs, and its kind alone says whether an engine runs it.
using KernelPayload = std::variant<std::monostate,                          // AtenSequence
                                   std::shared_ptr<const PointwiseGroup>,   // Pointwise
                                   std::shared_ptr<const ReductionGroup>,   // Reduction
                                   std::shared_ptr<const NormGroup>,        // Norm
                                   std::shared_ptr<const MatmulSpec>,       // Matmul
                                   std::shared_ptr<const AttentionSpec>,    // Attention
                                   std::shared_ptr<const ConvSpec>,         // Conv
                                   std::shared_ptr<const CastGroup>,        // CastGroup
                                   std::shared_ptr<const PoolGroup>,        // Pool
                                   std::shared_ptr<const TransposeGroup>>;  // Transpose

// True when `Spec` is the payload of `kind` (its alternative's index).
template <KernelKind kind, class Spec>
constexpr bool is_payload_of =
    std::is_same_v<std::variant_alternative_t<kind_index(kind), KernelPayload>,
                   std::shared_ptr<const Spec>>;

static_assert(std::variant_size_v<KernelPayload> == kKernelKindCount,
              "every kernel kind but AtenSequence needs a payload");
static_assert(is_payload_of<KernelKind::Pointwise, PointwiseGroup> &&
                  is_payload_of<KernelKind::Reduction, ReductionGroup> &&
                  is_payload_of<KernelKind::Norm, NormGroup> &&
                  is_payload_of<KernelKind::Matmul, MatmulSpec> &&
                  is_payload_of<KernelKind::Attention, AttentionSpec> &&
                  is_payload_of<KernelKind::Conv, ConvSpec> &&
                  is_payload_of<KernelKind::CastGroup, CastGroup> &&
                  is_payload_of<KernelKind::Pool, PoolGroup> &&
                  is_payload_of<KernelKind::Transpose, TransposeGroup>,
              "KernelPayload's alternatives follow KernelKind's order");

struct KernelGroup {
  std::vector<NodeId> nodes;  // ascending: the order they run in (aten_sequence)
  std::string why;            // why this kind was chosen, for explain()
  // The spec text (of the fast variant for generated groups, or the
  // Matmul/Attention/ConvSpec's to_string); empty for aten_sequence groups.
  std::string spec;

  // What the runtime needs to launch a tiled transposing copy (Note [Tiled
  // transposing copies] in transposed_copies.h): `output` is `input` copied
  // (and cast, as spec.body says) into the output's layout. The logical dims
  // of each part of the kernel's [batch, a, b] view, outermost first: each
  // part's dims collapse into one in both tensors (size-1 dims are in none).
  // a_dims are the output's innermost run, b_dims the input's; batch_dims may
  // be empty.
  struct TransposeGroup {
    TransposeSpec spec;
    ValueId input = -1;
    ValueId output = -1;
    std::vector<int> batch_dims, a_dims, b_dims;
  };

  // Note [One payload per group]: AtenSequence until set() gives a payload.
  KernelKind kind() const { return static_cast<KernelKind>(payload_.index()); }

  // The payload if the group is of Spec's kind, else null.
  template <class Spec>
  const Spec* get() const {
    const auto* held = std::get_if<std::shared_ptr<const Spec>>(&payload_);
    return held != nullptr ? held->get() : nullptr;
  }

  // The same, shared: for the runners and kernel builds that keep it.
  template <class Spec>
  std::shared_ptr<const Spec> shared() const {
    const auto* held = std::get_if<std::shared_ptr<const Spec>>(&payload_);
    return held != nullptr ? *held : nullptr;
  }

  // Makes the group of Spec's kind; `payload` is never null.
  template <class Spec>
  void set(std::shared_ptr<Spec> payload) {
    MB_ASSERT(payload != nullptr, "a kernel group's payload is null");
    payload_ = std::shared_ptr<const std::remove_const_t<Spec>>(std::move(payload));
  }

 private:
  KernelPayload payload_;
};

struct PartitionPlan {
  int partition = 0;
  std::vector<KernelGroup> groups;  // in a valid execution order
};

struct FusionPlan {
  std::vector<PartitionPlan> partitions;  // indexed like PartitionResult::partitions
  // Human-readable form: one block per partition, one line per group (kind
  // and nodes), then the spec of generated groups.
  std::string to_string() const;
};

struct FusionOptions {
  // Generated kernels (pointwise, reduction, norm) on CUDA partitions
  // (option generated_kernels).
  bool generated_kernels = false;
  // Groups smaller than this stay ATen calls (a lone op gains nothing).
  int min_pointwise_nodes = 2;
  // Matrix products of CUDA partitions as cuBLASLt calls with fused
  // epilogues (option cublaslt).
  bool matmul = true;
  // Library algorithms chosen by timing, not by heuristic (option autotune).
  bool autotune = false;
  // The aten cuDNN SDPA ops of CUDA partitions as mybackend's own cuDNN SDPA
  // graphs (their kernels are cuDNN's either way; ours can write a
  // backward's gradients stacked, Note [Gradients written stacked]).
  bool attention = true;
  // ... and the flash and memory-efficient SDPA ops and the decomposed
  // matmul-softmax-matmul pattern too (option cudnn_attention).
  bool attention_beyond_cudnn_ops = true;
  // Convolutions (forward with bias / inference batch norm / residual / relu
  // epilogues, and backward) of CUDA partitions as cuDNN graphs (option cudnn).
  bool conv = true;
  // Concatenations inside generated pointwise kernels (Note
  // [Concatenations in pointwise kernels]); MYBACKEND_FUSED_CATS=0 turns
  // them off.
  bool concatenations = true;
  // Row reductions with their rows' elementwise readers in one kernel (Note
  // [Row epilogues in the graph]); MYBACKEND_ROW_EPILOGUES=0 turns them off.
  bool row_epilogues = true;
  // Launch parameters of generated kernels, copied into their specs (Note
  // [Tuning in the specs] in tuned_specs.h).
  LaunchTuning tuning;
};

FusionPlan plan_fusion(const Graph& graph, const PartitionResult& partitions,
                       const FusionOptions& options = {});

}  // namespace mybackend
