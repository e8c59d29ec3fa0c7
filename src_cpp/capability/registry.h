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

// Returns the reason the node is rejected, or nullopt when accepted.
using SupportPredicate = std::function<std::optional<std::string>(const Graph&, const Node&)>;

struct OpEntry {
  std::string op;  // "aten::add.Tensor"
  OpClass op_class = OpClass::Other;
  SupportPredicate predicate;  // may be empty: accepted whenever the class rules pass
};

struct CapabilityOptions {
  std::vector<std::string> disabled_ops;  // forced unsupported (tests, bisecting a bad kernel)
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

  void add(std::string op, OpClass op_class, SupportPredicate predicate = {});
  const OpEntry* find(std::string_view op) const;
  SupportDecision check(const Graph& graph, const Node& node,
                        const CapabilityOptions& options) const;
  // Entries sorted by name: the order of supported_ops() and docs/ops.md.
  std::vector<const OpEntry*> entries() const;

 private:
  std::unordered_map<std::string, OpEntry> entries_;
};

// One registration function per op class, each in its own file.
void register_pointwise_ops(CapabilityRegistry& registry);
void register_reduction_ops(CapabilityRegistry& registry);
void register_normalization_ops(CapabilityRegistry& registry);
void register_matmul_ops(CapabilityRegistry& registry);
void register_convolution_ops(CapabilityRegistry& registry);
void register_attention_ops(CapabilityRegistry& registry);
void register_view_ops(CapabilityRegistry& registry);

}  // namespace mybackend
