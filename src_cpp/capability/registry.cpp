#include "capability/registry.h"

#include <algorithm>

#include "common/error.h"

namespace mybackend {
namespace {

// The gradients a backward op's output_mask (its last argument) leaves out
// are None (an opaque value to the IR), not tensors the runtime could not
// handle: a layer norm without bias asks for no grad_bias.
bool masked_out_output(const Node& node, std::size_t index) {
  static const char* const kMasked[] = {
      "aten::convolution_backward.default", "aten::native_layer_norm_backward.default",
      "aten::native_batch_norm_backward.default", "aten::native_group_norm_backward.default",
      "aten::_fused_rms_norm_backward.default"};
  const bool masked_op = std::any_of(std::begin(kMasked), std::end(kMasked),
                                     [&node](const char* op) { return node.op == op; });
  if (!masked_op || node.args.empty()) return false;
  const Argument& mask = node.args.back();
  return mask.kind == Argument::Kind::List && index < mask.items.size() &&
         mask.items[index].kind == Argument::Kind::Bool && !mask.items[index].b;
}

// The checks every op shares, whatever its class: tensors must be of a kind
// the runtime can hand to a kernel at all. The attention ops' auxiliary
// outputs are the exception: None (flash's cum_seq_q/k) and RNG state
// that meta kernels place on the meta device (Note [Forward and backward
// agree] in fusion/attention_planner.h); the ATen call returns them as the
// op does, and no kernel reads them as data.
std::optional<std::string> check_common(const Graph& graph, const Node& node, OpClass op_class) {
  auto check_value = [&](ValueId id, bool output) -> std::optional<std::string> {
    const Value& v = graph.value(id);
    const bool auxiliary = op_class == OpClass::Attention &&
                           (output || v.kind != ValueKind::Tensor || v.tensor.rank() <= 1);
    if (auxiliary && (v.kind == ValueKind::Opaque ||
                      (v.kind == ValueKind::Tensor && v.tensor.device.type == DeviceType::Meta)))
      return std::nullopt;
    if (v.kind == ValueKind::Opaque) {
      return "value %" + std::to_string(id) + " (" + v.name +
             ") is not a strided tensor or a scalar (sparse, nested or opaque)";
    }
    if (v.kind != ValueKind::Tensor) return std::nullopt;
    DeviceType type = v.tensor.device.type;
    if (type != DeviceType::CPU && type != DeviceType::CUDA) {
      return "tensor %" + std::to_string(id) + " is on device " + v.tensor.device.str() +
             "; the core runs cpu and cuda";
    }
    return std::nullopt;
  };
  for (ValueId id : node.input_values()) {
    if (auto reason = check_value(id, false)) return reason;
  }
  for (std::size_t k = 0; k < node.outputs.size(); ++k) {
    if (masked_out_output(node, k)) continue;
    if (auto reason = check_value(node.outputs[k], true)) return reason;
  }
  return std::nullopt;
}

bool contains(const std::vector<std::string>& list, std::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

}  // namespace

std::string_view op_class_name(OpClass op_class) {
  switch (op_class) {
    case OpClass::Pointwise: return "pointwise";
    case OpClass::Reduction: return "reduction";
    case OpClass::Normalization: return "normalization";
    case OpClass::Matmul: return "matmul";
    case OpClass::Convolution: return "convolution";
    case OpClass::Attention: return "attention";
    case OpClass::View: return "view";
    case OpClass::Other: return "other";
  }
  return "other";
}

std::string_view layout_contract_name(LayoutContract contract) {
  switch (contract) {
    case LayoutContract::AnyStrides: return "any";
    case LayoutContract::TracedStrides: return "traced";
    case LayoutContract::TracedStorage: return "storage";
  }
  return "traced";
}

const CapabilityRegistry& CapabilityRegistry::builtin() {
  static const CapabilityRegistry registry = [] {
    CapabilityRegistry r;
    register_pointwise_ops(r);
    register_reduction_ops(r);
    register_normalization_ops(r);
    register_matmul_ops(r);
    register_convolution_ops(r);
    register_attention_ops(r);
    register_view_ops(r);
    register_unclaimed_layout_contracts(r);
    return r;
  }();
  return registry;
}

void CapabilityRegistry::add(std::string op, OpClass op_class, SupportPredicate predicate,
                             LayoutContract layout) {
  MB_ASSERT(entries_.count(op) == 0 && unclaimed_layouts_.count(op) == 0, "op ", op,
            " registered twice");
  OpEntry entry{op, op_class, std::move(predicate), layout};
  entries_.emplace(std::move(op), std::move(entry));
}

void CapabilityRegistry::add_layout_contract(std::string op, LayoutContract layout) {
  MB_ASSERT(entries_.count(op) == 0 && unclaimed_layouts_.count(op) == 0, "op ", op,
            " registered twice");
  unclaimed_layouts_.emplace(std::move(op), layout);
}

LayoutContract CapabilityRegistry::layout_contract(std::string_view op) const {
  if (const OpEntry* entry = find(op)) return entry->layout;
  auto it = unclaimed_layouts_.find(std::string(op));
  return it == unclaimed_layouts_.end() ? LayoutContract::TracedStrides : it->second;
}

std::vector<std::pair<std::string, LayoutContract>> CapabilityRegistry::layout_contracts() const {
  std::vector<std::pair<std::string, LayoutContract>> all(unclaimed_layouts_.begin(),
                                                          unclaimed_layouts_.end());
  for (const auto& [name, entry] : entries_) all.emplace_back(name, entry.layout);
  std::sort(all.begin(), all.end());
  return all;
}

const OpEntry* CapabilityRegistry::find(std::string_view op) const {
  auto it = entries_.find(std::string(op));
  return it == entries_.end() ? nullptr : &it->second;
}

SupportDecision CapabilityRegistry::check(const Graph& graph, const Node& node,
                                          const CapabilityOptions& options) const {
  SupportDecision decision;
  if (node.kind != NodeKind::Aten) {
    decision.reason = node.kind == NodeKind::Builtin
                          ? "symbolic-size arithmetic runs in the executor itself"
                          : "no ATen schema: runs through the Python fallback";
    return decision;
  }
  const OpEntry* entry = find(node.op);
  if (entry == nullptr) {
    decision.reason = "operator " + node.op + " is not in the capability registry";
    return decision;
  }
  decision.op_class = entry->op_class;
  if (contains(options.disabled_ops, node.op)) {
    decision.reason = "operator " + node.op + " disabled by option disabled_ops";
    return decision;
  }
  if (contains(options.disabled_classes, op_class_name(entry->op_class))) {
    decision.reason = "op class " + std::string(op_class_name(entry->op_class)) +
                      " disabled by option disabled_op_classes";
    return decision;
  }
  if (auto reason = check_common(graph, node, entry->op_class)) {
    decision.reason = *reason;
    return decision;
  }
  if (entry->predicate) {
    if (auto reason = entry->predicate(graph, node)) {
      decision.reason = *reason;
      return decision;
    }
  }
  decision.supported = true;
  return decision;
}

std::vector<const OpEntry*> CapabilityRegistry::entries() const {
  std::vector<const OpEntry*> sorted;
  sorted.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(),
            [](const OpEntry* a, const OpEntry* b) { return a->op < b->op; });
  return sorted;
}

}  // namespace mybackend
