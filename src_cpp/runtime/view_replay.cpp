#include "runtime/view_replay.h"

#include <ATen/core/grad_mode.h>
#include <c10/core/TensorImpl.h>

#include <typeinfo>

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

// A tensor whose view is the plain alias built below (Note [Views replayed
// without the dispatcher]).
bool plain_base(const at::Tensor& t) {
  if (!t.defined() || t.layout() != c10::kStrided) return false;
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (typeid(*impl) != typeid(c10::TensorImpl) || impl->is_python_dispatch()) return false;
  return !(at::GradMode::is_enabled() && t.requires_grad());
}

const at::Tensor* slot_tensor(const ValueSlots& slots, ValueId value) {
  const c10::IValue& v = slots[static_cast<std::size_t>(value)];
  return v.isTensor() ? &v.toTensor() : nullptr;
}

}  // namespace

std::unique_ptr<ViewReplay> ViewReplay::for_node(const Graph& graph, const Node& node,
                                                 const c10::OperatorHandle& op,
                                                 const std::vector<bool>& constant_args) {
  const c10::FunctionSchema& schema = op.schema();
  if (node.outputs.empty() || node.args.empty() || schema.arguments().empty()) return nullptr;
  if (node.args[0].kind != Argument::Kind::Value) return nullptr;
  const bool unsafe_view = schema.name() == "aten::_unsafe_view";
  if (!unsafe_view) {
    if (!reads_without_writing(schema.arguments()[0].alias_info())) return nullptr;
    for (const c10::Argument& ret : schema.returns())
      if (!reads_without_writing(ret.alias_info())) return nullptr;
  }
  for (std::size_t i = 1; i < constant_args.size(); ++i)
    if (!constant_args[i]) return nullptr;
  for (ValueId out : node.outputs)
    if (graph.value(out).kind != ValueKind::Tensor || is_graph_output(graph, out)) return nullptr;
  return std::unique_ptr<ViewReplay>(new ViewReplay(node, node.args[0].value));
}

bool ViewReplay::replay(ValueSlots& slots) const {
  if (state_.load(std::memory_order_acquire) != kReady) return false;
  const at::Tensor* base = slot_tensor(slots, base_);
  if (base == nullptr || !plain_base(*base) || base->scalar_type() != dtype_ ||
      base->storage_offset() != base_layout_.offset || base->sizes() != base_layout_.sizes ||
      base->strides() != base_layout_.strides)
    return false;
  c10::TensorImpl* base_impl = base->unsafeGetTensorImpl();
  for (std::size_t k = 0; k < results_.size(); ++k) {
    const Layout& r = results_[k];
    at::Tensor view = at::detail::make_tensor<c10::TensorImpl>(
        c10::TensorImpl::VIEW, c10::Storage(base->storage()), base->key_set(), base->dtype());
    c10::TensorImpl* impl = view.unsafeGetTensorImpl();
    impl->set_sizes_and_strides(r.sizes, r.strides, r.offset);
    impl->set_version_counter(base_impl->version_counter());
    slots[static_cast<std::size_t>(node_->outputs[k])] = std::move(view);
  }
  return true;
}

void ViewReplay::remember(const ValueSlots& slots) {
  if (state_.load(std::memory_order_acquire) != kUnknown) return;
  std::lock_guard<std::mutex> lock(mutex_);
  if (state_.load(std::memory_order_relaxed) != kUnknown) return;
  const at::Tensor* base = slot_tensor(slots, base_);
  if (base == nullptr || !plain_base(*base)) return;  // perhaps on a later call
  auto layout_of = [](const at::Tensor& t) {
    return Layout{t.sizes().vec(), t.strides().vec(), t.storage_offset()};
  };
  std::vector<Layout> results;
  for (ValueId out : node_->outputs) {
    const at::Tensor* t = slot_tensor(slots, out);
    const bool view =
        t != nullptr && t->defined() &&
        t->storage().unsafeGetStorageImpl() == base->storage().unsafeGetStorageImpl() &&
        t->scalar_type() == base->scalar_type() && t->key_set() == base->key_set() &&
        typeid(*t->unsafeGetTensorImpl()) == typeid(c10::TensorImpl);
    if (!view) {
      state_.store(kNever, std::memory_order_release);
      return;
    }
    results.push_back(layout_of(*t));
  }
  base_layout_ = layout_of(*base);
  dtype_ = base->scalar_type();
  results_ = std::move(results);
  state_.store(kReady, std::memory_order_release);
}

}  // namespace mybackend
