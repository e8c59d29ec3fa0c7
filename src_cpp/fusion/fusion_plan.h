// Stage 7: turn each partition into kernel groups.
//
// A KernelGroup is the unit the runtime launches: a generated fused kernel,
// a library call, or (where no engine claims the nodes yet) the nodes run
// one by one as ATen calls inside the partition. Which kinds exist depends on
// the target: on CPU every group is an ATen sequence; on CUDA, maximal convex
// groups of elementwise nodes become one generated pointwise kernel each
// (pointwise_planner.h, docs/design/0004-fusion-planner.md), and matrix
// products with their transposed operands and epilogues become one cuBLASLt
// call each (matmul_planner.h, docs/design/0005-matmul-engine.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "capability/registry.h"
#include "codegen/kernel_spec.h"
#include "fusion/matmul_spec.h"
#include "partition/partitioner.h"

namespace mybackend {

enum class KernelKind : std::int8_t { AtenSequence, Pointwise, Matmul };

std::string_view kernel_kind_name(KernelKind kind);

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
};

struct KernelGroup {
  KernelKind kind = KernelKind::AtenSequence;
  std::vector<NodeId> nodes;  // ascending: the order they run in (aten_sequence)
  std::string why;            // why this kind was chosen, for explain()
  std::shared_ptr<const PointwiseGroup> pointwise;  // kind == Pointwise
  std::shared_ptr<const MatmulSpec> matmul;         // kind == Matmul
  // The spec text (PointwiseSpec::to_string of the fast variant, or
  // MatmulSpec::to_string); empty for aten_sequence groups.
  std::string spec;
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
  // Generated pointwise kernels on CUDA partitions (option generated_kernels).
  bool pointwise = false;
  // Groups smaller than this stay ATen calls (a lone op gains nothing).
  int min_pointwise_nodes = 2;
  // Matrix products of CUDA partitions as cuBLASLt calls with fused
  // epilogues (option cublaslt).
  bool matmul = true;
};

FusionPlan plan_fusion(const Graph& graph, const PartitionResult& partitions,
                       const FusionOptions& options = {});

}  // namespace mybackend
