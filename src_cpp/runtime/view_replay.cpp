#include "runtime/view_replay.h"

#include <c10/core/TensorImpl.h>

#include <algorithm>
#include <typeinfo>

#include "runtime/tensor_alias.h"

namespace mybackend {
namespace {

bool reads_without_writing(const c10::AliasInfo* info) {
  return info != nullptr && !info->isWrite();
}

bool is_graph_output(const Graph& graph, ValueId value) {
  bool found = false;
  for (const Argument& out : graph.outputs())
    out.for_each_value([&](ValueId v) { found = found || v == value; });
  return found;
}

// An integer value of the graph (a symbolic size).
bool integer_value(const Graph& graph, const Argument& arg) {
  return arg.kind == Argument::Kind::Value && graph.value(arg.value).kind == ValueKind::Int;
}

const at::Tensor* slot_tensor(const ValueSlots& slots, ValueId value) {
  const c10::IValue& v = slots[static_cast<std::size_t>(value)];
  return v.isTensor() ? &v.toTensor() : nullptr;
}

}  // namespace

std::unique_ptr<ViewReplay> ViewReplay::for_node(
    const Graph& graph, const Node& node, const c10::OperatorHandle& op,
    const std::vector<const Argument*>& variable_args) {
  const c10::FunctionSchema& schema = op.schema();
  if (node.outputs.empty() || node.args.empty() || schema.arguments().empty()) return nullptr;
  if (node.args[0].kind != Argument::Kind::Value) return nullptr;
  const bool unsafe_view = schema.name() == "aten::_unsafe_view";
  if (!unsafe_view) {
    if (!reads_without_writing(schema.arguments()[0].alias_info())) return nullptr;
    for (const c10::Argument& ret : schema.returns())
      if (!reads_without_writing(ret.alias_info())) return nullptr;
  }
  std::vector<const Argument*> integers;
  for (std::size_t i = 1; i < variable_args.size(); ++i) {
    const Argument* arg = variable_args[i];
    if (arg == nullptr) continue;
    const bool integer = integer_value(graph, *arg) ||
                         (arg->kind == Argument::Kind::List &&
                          std::all_of(arg->items.begin(), arg->items.end(), [&](const Argument& a) {
                            return a.kind == Argument::Kind::Int || integer_value(graph, a);
                          }));
    if (!integer) return nullptr;
    integers.push_back(arg);
  }
  for (ValueId out : node.outputs)
    if (graph.value(out).kind != ValueKind::Tensor || is_graph_output(graph, out)) return nullptr;
  return std::unique_ptr<ViewReplay>(new ViewReplay(node, node.args[0].value, std::move(integers)));
}

bool ViewReplay::integers_of(const ValueSlots& slots, std::vector<std::int64_t>& out) const {
  out.clear();
  auto add = [&](const Argument& a) {
    if (a.kind == Argument::Kind::Int) {
      out.push_back(a.i);
      return true;
    }
    const c10::IValue& v = slots[static_cast<std::size_t>(a.value)];
    if (!v.isInt()) return false;
    out.push_back(v.toInt());
    return true;
  };
  for (const Argument* arg : integer_args_) {
    if (arg->kind != Argument::Kind::List) {
      if (!add(*arg)) return false;
      continue;
    }
    out.push_back(static_cast<std::int64_t>(arg->items.size()));
    for (const Argument& item : arg->items)
      if (!add(item)) return false;
  }
  return true;
}

const ViewReplay::Recipe* ViewReplay::find(const at::Tensor& base,
                                           const std::vector<std::int64_t>& integers) const {
  for (const Recipe& r : recipes_) {
    if (r.dtype == base.scalar_type() && r.base.offset == base.storage_offset() &&
        base.sizes() == r.base.sizes && base.strides() == r.base.strides && r.integers == integers)
      return &r;
  }
  return nullptr;
}

bool ViewReplay::replay(ValueSlots& slots) const {
  const at::Tensor* base = slot_tensor(slots, base_);
  if (base == nullptr || !plain_alias_base(*base)) return false;
  std::vector<std::int64_t> integers;
  if (!integer_args_.empty() && !integers_of(slots, integers)) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  const Recipe* recipe = find(*base, integers);
  if (recipe == nullptr) return false;
  for (std::size_t k = 0; k < recipe->results.size(); ++k) {
    const Layout& r = recipe->results[k];
    slots[static_cast<std::size_t>(node_->outputs[k])] =
        plain_alias(*base, r.sizes, r.strides, r.offset);
  }
  return true;
}

void ViewReplay::remember(const ValueSlots& slots) {
  const at::Tensor* base = slot_tensor(slots, base_);
  if (base == nullptr || !plain_alias_base(*base)) return;  // perhaps on a later call
  std::vector<std::int64_t> integers;
  if (!integer_args_.empty() && !integers_of(slots, integers)) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (never_ || find(*base, integers) != nullptr) return;
  auto layout_of = [](const at::Tensor& t) {
    return Layout{t.sizes().vec(), t.strides().vec(), t.storage_offset()};
  };
  Recipe recipe{layout_of(*base), base->scalar_type(), std::move(integers), {}};
  for (ValueId out : node_->outputs) {
    const at::Tensor* t = slot_tensor(slots, out);
    const bool view =
        t != nullptr && t->defined() &&
        t->storage().unsafeGetStorageImpl() == base->storage().unsafeGetStorageImpl() &&
        t->scalar_type() == base->scalar_type() && t->key_set() == base->key_set() &&
        typeid(*t->unsafeGetTensorImpl()) == typeid(c10::TensorImpl);
    if (!view) {
      never_ = true;
      recipes_.clear();
      return;
    }
    recipe.results.push_back(layout_of(*t));
  }
  if (recipes_.size() < kMaxRecipes) {
    recipes_.push_back(std::move(recipe));
    return;
  }
  recipes_[next_] = std::move(recipe);
  next_ = (next_ + 1) % kMaxRecipes;
}

}  // namespace mybackend
