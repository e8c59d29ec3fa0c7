#include "runtime/aten_call.h"

#include <ATen/ScalarOps.h>
#include <ATen/core/List.h>
#include <ATen/core/jit_type.h>

#include <algorithm>

#include "common/error.h"

namespace mybackend {
namespace {

bool names_any_value(const Argument& arg) {
  bool found = false;
  arg.for_each_value([&](ValueId) { found = true; });
  return found;
}

c10::IValue scalar_to_ivalue(const Argument& arg, const ValueSlots& slots) {
  using K = Argument::Kind;
  switch (arg.kind) {
    case K::Bool: return arg.b;
    case K::Int:
    case K::DType:
    case K::Layout:
    case K::MemoryFormat: return arg.i;
    case K::Float: return arg.f;
    case K::String: return arg.s;
    case K::Device: return c10::Device(arg.s);
    case K::Value: return slots[arg.value];
    case K::None: return c10::IValue();
    case K::List: break;
  }
  MB_ASSERT(false, "list argument where a scalar was expected");
  return c10::IValue();
}

c10::IValue list_to_ivalue(const Argument& arg, const c10::TypePtr& element_type,
                           const ValueSlots& slots) {
  if (element_type->kind() == c10::TypeKind::IntType) {
    c10::List<int64_t> list;
    list.reserve(arg.items.size());
    for (const auto& item : arg.items) list.push_back(scalar_to_ivalue(item, slots).toInt());
    return list;
  }
  if (element_type->kind() == c10::TypeKind::TensorType) {
    c10::List<at::Tensor> list;
    list.reserve(arg.items.size());
    for (const auto& item : arg.items) list.push_back(scalar_to_ivalue(item, slots).toTensor());
    return list;
  }
  c10::impl::GenericList list(element_type);
  list.reserve(arg.items.size());
  for (const auto& item : arg.items) list.push_back(argument_to_ivalue(item, element_type, slots));
  return list;
}

}  // namespace

c10::IValue argument_to_ivalue(const Argument& arg, const c10::TypePtr& type,
                               const ValueSlots& slots) {
  if (arg.kind == Argument::Kind::None) {
    // Autograd formulas hand undefined tensors to non-optional Tensor
    // parameters (cuDNN attention backward's attn_bias); traced graphs
    // record them as None, which a boxed call only accepts as an undefined
    // Tensor, as Python's argument parser converts it.
    if (type->kind() == c10::TypeKind::TensorType) return at::Tensor();
    return c10::IValue();
  }
  c10::TypePtr target = type;
  if (auto optional = target->cast<c10::OptionalType>()) target = optional->getElementType();
  if (arg.kind == Argument::Kind::List) {
    auto list_type = target->cast<c10::ListType>();
    MB_CHECK(list_type != nullptr, "a list was given where the schema expects ", type->str());
    return list_to_ivalue(arg, list_type->getElementType(), slots);
  }
  c10::IValue value = scalar_to_ivalue(arg, slots);
  // Python ints given for float parameters (e.g. eps=1) must become doubles.
  if (target->kind() == c10::TypeKind::FloatType && value.isInt()) {
    return static_cast<double>(value.toInt());
  }
  // Decompositions pass Python numbers where a schema says Tensor
  // (sub.Tensor(1, x)); Python's argument parser wraps them, so do we.
  if (target->kind() == c10::TypeKind::TensorType &&
      (value.isInt() || value.isDouble() || value.isBool())) {
    return at::native::wrapped_scalar_tensor(value.toScalar());
  }
  return value;
}

void store_outputs(const Node& node, std::vector<c10::IValue>& returns,
                   const std::vector<bool>& list_returns, ValueSlots& slots) {
  std::size_t next = 0;
  auto store = [&](c10::IValue value) {
    MB_CHECK(next < node.outputs.size(), "node ", node.name, " (", node.op, ") returned more ",
             "values than the graph recorded (", node.outputs.size(), ")");
    slots[node.outputs[next++]] = std::move(value);
  };
  for (std::size_t r = 0; r < returns.size(); ++r) {
    c10::IValue& result = returns[r];
    if (r < list_returns.size() && list_returns[r]) {
      for (const c10::IValue& element : result.toListRef()) store(element);
    } else {
      store(std::move(result));
    }
  }
  MB_CHECK(next == node.outputs.size(), "node ", node.name, " (", node.op, ") returned ", next,
           " values; the graph recorded ", node.outputs.size());
}

std::pair<std::string, std::string> split_operator_name(const std::string& op) {
  auto dot = op.rfind('.');
  auto colons = op.find("::");
  if (dot == std::string::npos || colons == std::string::npos || dot < colons) return {op, ""};
  std::string overload = op.substr(dot + 1);
  if (overload == "default") overload.clear();
  return {op.substr(0, dot), overload};
}

c10::OperatorHandle resolve_operator(const Node& node) {
  auto [name, overload] = split_operator_name(node.op);
  auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
  MB_CHECK(handle.has_value(), "operator ", node.op, " (node ", node.name,
           ") is not registered with the dispatcher");
  return *handle;
}

std::vector<int> mutated_inputs(const Graph& graph) {
  std::vector<int> positions;
  for (const Node& node : graph.nodes()) {
    if (node.kind != NodeKind::Aten) continue;
    const auto& schema_args = resolve_operator(node).schema().arguments();
    for (std::size_t i = 0; i < node.args.size() && i < schema_args.size(); ++i) {
      const c10::AliasInfo* alias = schema_args[i].alias_info();
      if (alias == nullptr || !alias->isWrite()) continue;
      node.args[i].for_each_value([&](ValueId id) {
        const Value& v = graph.value(id);
        if (v.producer == kGraphInput) positions.push_back(v.output_index);
      });
    }
  }
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());
  return positions;
}

AtenCall::AtenCall(const Graph& graph, const Node& node, bool replay_views)
    : node_(&node), op_(resolve_operator(node)), rng_state_(node, op_.schema()) {
  const auto& schema_args = op_.schema().arguments();
  MB_CHECK(node.args.size() <= schema_args.size(), "node ", node.name, " passes ", node.args.size(),
           " arguments to ", node.op, ", whose schema takes ", schema_args.size());
  for (const auto& ret : op_.schema().returns()) {
    list_returns_.push_back(ret.type()->kind() == c10::TypeKind::ListType);
  }
  arguments_.resize(schema_args.size());
  for (std::size_t i = 0; i < schema_args.size(); ++i) {
    PreparedArgument& prepared = arguments_[i];
    prepared.type = schema_args[i].type();
    if (i >= node.args.size()) {
      MB_CHECK(schema_args[i].default_value().has_value(), "node ", node.name, " omits argument '",
               schema_args[i].name(), "' of ", node.op, ", which has no default");
      prepared.constant = *schema_args[i].default_value();
    } else if (names_any_value(node.args[i])) {
      prepared.is_constant = false;
      prepared.argument = &node.args[i];
    } else {
      prepared.constant = argument_to_ivalue(node.args[i], prepared.type, ValueSlots{});
    }
  }
  if (!replay_views) return;
  std::vector<const Argument*> variable_args;
  for (const auto& prepared : arguments_)
    variable_args.push_back(prepared.is_constant ? nullptr : prepared.argument);
  view_replay_ = ViewReplay::for_node(graph, node, op_, variable_args);
}

bool AtenCall::run(ValueSlots& slots) const {
  if (view_replay_ && view_replay_->replay(slots)) return true;
  torch::jit::Stack stack;
  stack.reserve(arguments_.size());
  for (const auto& prepared : arguments_) {
    stack.push_back(prepared.is_constant
                        ? prepared.constant
                        : argument_to_ivalue(*prepared.argument, prepared.type, slots));
  }
  rng_state_.place_for_this_call(stack);
  op_.callBoxed(stack);
  store_outputs(*node_, stack, list_returns_, slots);
  if (view_replay_) view_replay_->remember(slots);
  return false;
}

}  // namespace mybackend
