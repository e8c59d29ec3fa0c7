#include "runtime/libraries/attention_group.h"

#ifdef MYBACKEND_WITH_CUDNN

#include <ATen/ATen.h>
#include <ATen/cuda/EmptyTensor.h>

#include "libs/cudnn_sdpa.h"
#include "runtime/tensor_alias.h"

namespace mybackend {
namespace {

class AttentionGroup final : public LibraryGroup {
 public:
  AttentionGroup(const Graph& graph, std::shared_ptr<const AttentionSpec> spec)
      : LibraryGroup(graph, "cuDNN SDPA", spec->outputs()), spec_(std::move(spec)) {}

  std::string description() const override {
    return "cudnn sdpa: " + std::string(attention_source_name(spec_->source)) +
           (spec_->bias >= 0 ? " bias" : "") + (spec_->causal ? " causal" : "");
  }

  KernelKind kind() const override { return KernelKind::Attention; }

 private:
  bool launch(ValueSlots& slots, const SymbolBindings& bindings) const override {
    return attention_is_backward(spec_->source) ? backward(slots, bindings)
                                                : forward(slots, bindings);
  }

  // A tensor of the IR's sizes, strides and dtype for `value` on `device`;
  // undefined when a size depends on an unbound symbol.
  at::Tensor empty_as_ir(ValueId value, const SymbolBindings& bindings,
                         const c10::Device& device) const {
    const TensorType& type = graph_.value(value).tensor;
    std::vector<std::int64_t> sizes, strides;
    for (const Dim& d : type.sizes) {
      const auto size = d.evaluate(bindings);
      if (!size) return {};
      sizes.push_back(*size);
    }
    for (const Dim& d : type.strides) {
      const auto stride = d.evaluate(bindings);
      if (!stride) return {};
      strides.push_back(*stride);
    }
    const auto dtype = static_cast<at::ScalarType>(static_cast<std::int8_t>(type.dtype));
    // Without the dispatcher: several a call of a host-bound step.
    return at::detail::empty_strided_cuda(sizes, strides, dtype, device);
  }

  // The aten op's other outputs (Note [Forward and backward agree]).
  bool fill_extra_outputs(ValueSlots& slots, const SymbolBindings& bindings, const at::Tensor& q,
                          const at::Tensor& k) const {
    for (ValueId id : spec_->extra_outputs) {
      const Value& value = graph_.value(id);
      c10::IValue result;
      if (value.kind == ValueKind::Int) {
        // flash's max_q / max_k (outputs 4 and 5).
        result = value.output_index == 4 ? q.size(2) : k.size(2);
      } else if (value.kind == ValueKind::Tensor) {
        at::Tensor t = empty_as_ir(id, bindings, q.device());
        if (!t.defined()) return fail("an output size depends on an unbound symbol");
        result = std::move(t);
      }
      slots[static_cast<std::size_t>(id)] = std::move(result);
    }
    return true;
  }

  bool operands(const ValueSlots& slots, cudnn::SdpaForwardArgs& args) const {
    const at::Tensor* q = tensor(slots, spec_->q);
    const at::Tensor* k = tensor(slots, spec_->k);
    const at::Tensor* v = tensor(slots, spec_->v);
    if (q == nullptr || k == nullptr || v == nullptr) return fail("q, k or v is not a tensor");
    if (static_cast<DType>(q->scalar_type()) != spec_->dtype || q->dim() != 4 ||
        k->scalar_type() != q->scalar_type() || v->scalar_type() != q->scalar_type())
      return fail("q, k, v are not of the dtype planned for");
    args.q = *q;
    args.k = *k;
    args.v = *v;
    if (spec_->bias >= 0) {
      const at::Tensor* bias = tensor(slots, spec_->bias);
      if (bias == nullptr || bias->scalar_type() != q->scalar_type())
        return fail("the bias is not a tensor of q's dtype");
      args.bias = *bias;
    }
    args.causal = spec_->causal;
    args.scale = spec_->scale;
    return true;
  }

  bool forward(ValueSlots& slots, const SymbolBindings& bindings) const {
    cudnn::SdpaForwardArgs args;
    if (!operands(slots, args)) return false;
    const at::Tensor& q = args.q;
    if (spec_->source == AttentionSource::Decomposed) {
      args.out = at::detail::empty_cuda({q.size(0), q.size(1), q.size(2), args.v.size(3)},
                                        q.scalar_type(), q.device(), std::nullopt);
    } else {
      args.out = empty_as_ir(spec_->out, bindings, q.device());
    }
    if (spec_->logsumexp >= 0) args.stats = empty_as_ir(spec_->logsumexp, bindings, q.device());
    if (!args.out.defined() || (spec_->logsumexp >= 0 && !args.stats.defined()))
      return fail("an output size depends on an unbound symbol");
    if (std::string problem = cudnn::sdpa_forward(args); !problem.empty()) return fail(problem);
    at::Tensor out = args.out;
    if (spec_->source == AttentionSource::Decomposed) {
      std::vector<std::int64_t> sizes;
      for (const Dim& d : graph_.value(spec_->out).tensor.sizes)
        sizes.push_back(*d.evaluate(bindings));
      out = viewed_alias(out, sizes);  // Note [Aliases without the dispatcher]
    }
    slots[static_cast<std::size_t>(spec_->out)] = std::move(out);
    if (spec_->logsumexp >= 0) slots[static_cast<std::size_t>(spec_->logsumexp)] = args.stats;
    return fill_extra_outputs(slots, bindings, q, args.k);
  }

  // Note [Gradients written stacked]: each gradient is its part of
  // `stacked` seen back through the views that made the part (undone last
  // first). Returns why not when a view disagrees with the IR's sizes.
  std::string stacked_gradients(const at::Tensor& stacked, const SymbolBindings& bindings,
                                cudnn::SdpaBackwardArgs& args) const {
    const GradientStack& stack = spec_->stack;
    at::Tensor* gradients[3] = {&args.grad_q, &args.grad_k, &args.grad_v};
    const ValueId ids[3] = {spec_->grad_q, spec_->grad_k, spec_->grad_v};
    std::int64_t offset = 0;
    for (const StackedGradient& part : stack.parts) {
      const auto length =
          graph_.value(part.part).tensor.sizes[static_cast<std::size_t>(stack.dim)].evaluate(
              bindings);
      if (!length) return "a part of the gradients' stack depends on an unbound symbol";
      at::Tensor t = stacked.narrow(stack.dim, offset, *length);
      offset += *length;
      for (auto view = part.views.rbegin(); view != part.views.rend(); ++view) {
        switch (view->kind) {
          case StackView::Kind::Permute: {
            std::vector<std::int64_t> inverse(view->dims.size());
            for (std::size_t d = 0; d < view->dims.size(); ++d)
              inverse[static_cast<std::size_t>(view->dims[d])] = static_cast<std::int64_t>(d);
            t = t.permute(inverse);
            break;
          }
          case StackView::Kind::Unsqueeze: t = t.squeeze(view->dims[0]); break;
          case StackView::Kind::Transpose: t = t.transpose(view->dims[0], view->dims[1]); break;
        }
      }
      const TensorType& type = graph_.value(ids[part.gradient]).tensor;
      if (t.dim() != static_cast<std::int64_t>(type.sizes.size()))
        return "a gradient's view of the stack has the wrong rank";
      for (std::size_t d = 0; d < type.sizes.size(); ++d) {
        if (type.sizes[d].evaluate(bindings) != t.size(static_cast<std::int64_t>(d)))
          return "a gradient's view of the stack has the wrong sizes";
      }
      *gradients[part.gradient] = std::move(t);
    }
    return {};
  }

  bool backward(ValueSlots& slots, const SymbolBindings& bindings) const {
    cudnn::SdpaForwardArgs in;
    if (!operands(slots, in)) return false;
    const at::Tensor* out = tensor(slots, spec_->out);
    const at::Tensor* grad_out = tensor(slots, spec_->grad_out);
    const at::Tensor* lse = tensor(slots, spec_->logsumexp);
    if (out == nullptr || grad_out == nullptr || lse == nullptr)
      return fail("the output, its gradient or the logsumexp is not a tensor");
    cudnn::SdpaBackwardArgs args;
    args.q = in.q;
    args.k = in.k;
    args.v = in.v;
    args.bias = in.bias;
    args.causal = in.causal;
    args.scale = in.scale;
    args.out = *out;
    args.stats = *lse;
    // cuDNN reads dO in O's layout (as PyTorch's cuDNN backend makes it).
    args.grad_out = grad_out->strides() == out->strides()
                        ? *grad_out
                        : at::Tensor(at::detail::empty_strided_cuda(out->sizes(), out->strides(),
                                                                    grad_out->scalar_type(),
                                                                    grad_out->device()))
                              .copy_(*grad_out);
    at::Tensor stacked;
    if (spec_->stack.value >= 0) {
      stacked = empty_as_ir(spec_->stack.value, bindings, in.q.device());
      if (!stacked.defined()) return fail("the gradients' stack depends on an unbound symbol");
      if (std::string problem = stacked_gradients(stacked, bindings, args); !problem.empty())
        return fail(problem);
    } else {
      args.grad_q = empty_as_ir(spec_->grad_q, bindings, in.q.device());
      args.grad_k = empty_as_ir(spec_->grad_k, bindings, in.q.device());
      args.grad_v = empty_as_ir(spec_->grad_v, bindings, in.q.device());
    }
    if (!args.grad_q.defined() || !args.grad_k.defined() || !args.grad_v.defined())
      return fail("a gradient size depends on an unbound symbol");
    if (std::string problem = cudnn::sdpa_backward(args); !problem.empty()) return fail(problem);
    if (stacked.defined()) slots[static_cast<std::size_t>(spec_->stack.value)] = stacked;
    slots[static_cast<std::size_t>(spec_->grad_q)] = args.grad_q;
    slots[static_cast<std::size_t>(spec_->grad_k)] = args.grad_k;
    slots[static_cast<std::size_t>(spec_->grad_v)] = args.grad_v;
    return fill_extra_outputs(slots, bindings, in.q, in.k);
  }

  std::shared_ptr<const AttentionSpec> spec_;
};

}  // namespace

RunnerResult make_attention_runner(const Graph& graph, std::shared_ptr<const AttentionSpec> spec) {
  return {std::make_unique<AttentionGroup>(graph, std::move(spec)), ""};
}

std::vector<std::pair<std::string, std::uint64_t>> attention_plan_cache_counters() {
  const cudnn::SdpaCacheStats stats = cudnn::sdpa_cache_stats();
  return {{"hits", stats.hits},
          {"misses", stats.misses},
          {"entries", stats.entries},
          {"unsupported", stats.unsupported}};
}

}  // namespace mybackend

#else  // !MYBACKEND_WITH_CUDNN

namespace mybackend {

RunnerResult make_attention_runner(const Graph&, std::shared_ptr<const AttentionSpec>) {
  return {nullptr, "this build of mybackend has no cuDNN support"};
}

std::vector<std::pair<std::string, std::uint64_t>> attention_plan_cache_counters() {
  return {{"hits", 0}, {"misses", 0}, {"entries", 0}, {"unsupported", 0}};
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDNN
