// Stage 5: which ATen overloads the core runs in its own kernel path, and
// for any node why it is not run there.
//
// Note [Support is a value]
// "Not supported" is never an exception: check() returns a SupportDecision
// whose reason feeds explain() and the fallback report. Predicates read only
// the IR (types, ranks, devices), never tensor data.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"

namespace mybackend {

enum class OpClass : std::int8_t {
  Pointwise,
  Reduction,
  Normalization,
  Matmul,
  Convolution,
  Attention,
  View,  // view/shape/metadata: computes nothing
  Other,
};

std::string_view op_class_name(OpClass op_class);

// Note [Layout contracts]
// The layout plan (mybackend/passes/layout.py) and the padding of matrix
// products hand ops tensors in strides they were not traced with
// (channels-last activations, padded rows). FakeTensor propagation cannot
// tell whether a kernel accepts them: meta functions accept any strides,
// while CUDA's native_group_norm refuses a channels-last input at run time.
// So each op states which strides every engine that may run it (ours and
// ATen's) accepts, and the plans give an op whose contract is TracedStrides
// the strides it was traced with. An op the registry does not know gets
// TracedStrides: a copy costs a pass over the tensor, a refused layout the
// whole graph. An op that addresses its input's storage rather than its
// elements (as_strided) needs more: the storage laid out as traced, which a
// copy gives only where the traced tensor filled its storage in a memory
// format; elsewhere the plan is given up.
enum class LayoutContract : std::int8_t {
  AnyStrides,     // every kernel that may run it takes any strides
  TracedStrides,  // hand it the strides it was traced with (or contiguous ones)
  TracedStorage,  // hand it its traced storage layout, or plan nothing
};

std::string_view layout_contract_name(LayoutContract contract);

// Returns the reason the node is rejected, or nullopt when accepted.
using SupportPredicate = std::function<std::optional<std::string>(const Graph&, const Node&)>;

struct OpEntry {
  std::string op;  // "aten::add.Tensor"
  OpClass op_class = OpClass::Other;
  SupportPredicate predicate;  // may be empty: accepted whenever the class rules pass
  LayoutContract layout = LayoutContract::AnyStrides;
};

struct CapabilityOptions {
  std::vector<std::string> disabled_ops;      // forced unsupported (tests, bisecting a bad kernel)
  std::vector<std::string> disabled_classes;  // e.g. "matmul"
};

struct SupportDecision {
  bool supported = false;
  OpClass op_class = OpClass::Other;
  std::string reason;  // empty when supported
};

class CapabilityRegistry {
 public:
  // The table of every op the core claims, built once on first use.
  static const CapabilityRegistry& builtin();

  void add(std::string op, OpClass op_class, SupportPredicate predicate = {},
           LayoutContract layout = LayoutContract::AnyStrides);
  // An op the core does not claim but whose ATen kernel takes any strides.
  void add_layout_contract(std::string op, LayoutContract layout);
  const OpEntry* find(std::string_view op) const;
  // Note [Layout contracts]: TracedStrides for ops the registry does not know.
  LayoutContract layout_contract(std::string_view op) const;
  // Every op with a stated contract, claimed or not, sorted by name.
  std::vector<std::pair<std::string, LayoutContract>> layout_contracts() const;
  SupportDecision check(const Graph& graph, const Node& node,
                        const CapabilityOptions& options) const;
  // Entries sorted by name: the order of supported_ops() and docs/ops.md.
  std::vector<const OpEntry*> entries() const;

 private:
  std::unordered_map<std::string, OpEntry> entries_;
  std::unordered_map<std::string, LayoutContract> unclaimed_layouts_;
};

// One registration function per op class, each in its own file.
void register_pointwise_ops(CapabilityRegistry& registry);
void register_reduction_ops(CapabilityRegistry& registry);
void register_normalization_ops(CapabilityRegistry& registry);
void register_matmul_ops(CapabilityRegistry& registry);
void register_convolution_ops(CapabilityRegistry& registry);
void register_attention_ops(CapabilityRegistry& registry);
void register_view_ops(CapabilityRegistry& registry);
void register_unclaimed_layout_contracts(CapabilityRegistry& registry);

}  // namespace mybackend
