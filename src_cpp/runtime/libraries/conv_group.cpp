#include "runtime/libraries/conv_group.h"

#ifdef MYBACKEND_WITH_CUDNN

#include <ATen/ATen.h>
#include <ATen/cuda/EmptyTensor.h>
#include <c10/core/MemoryFormat.h>
#include <c10/util/strides.h>

#include <algorithm>

#include "libs/cudnn_conv.h"

namespace mybackend {
namespace {

// Note [Size-one strides]
// A dense tensor's stride along a dim of size 1 says nothing about its
// memory: a 1x1 convolution's weight [K, C, 1, 1] with strides (C, 1, 1, 1)
// is contiguous and channels-last at once (the channels-last plan reads it as
// it is, mybackend/passes/layout.py). cuDNN infers the layout from the strides, so
// every operand is described with the strides of the layout the convolution
// runs in, as ATen's own cuDNN descriptors do: a view of the same memory,
// never a copy.
at::Tensor in_layout(const at::Tensor& t, c10::MemoryFormat format) {
  // is_contiguous first: no dispatcher call for the usual dense operand.
  at::Tensor dense = t.is_contiguous(format) ? t : t.contiguous(format);
  const c10::IntArrayRef sizes = dense.sizes();
  // Without a dim of size 1, dense in `format` means that layout's strides.
  if (std::find(sizes.begin(), sizes.end(), 1) == sizes.end()) return dense;
  std::vector<std::int64_t> strides;
  switch (format) {
    case c10::MemoryFormat::ChannelsLast: strides = c10::get_channels_last_strides_2d(sizes); break;
    case c10::MemoryFormat::ChannelsLast3d:
      strides = c10::get_channels_last_strides_3d(sizes);
      break;
    default: {
      const c10::DimVector contiguous = c10::contiguous_strides(sizes);
      strides.assign(contiguous.begin(), contiguous.end());
    }
  }
  if (dense.strides() == c10::IntArrayRef(strides)) return dense;
  return dense.as_strided(sizes, strides);
}

class ConvGroup final : public LibraryGroup {
 public:
  ConvGroup(const Graph& graph, std::shared_ptr<const ConvSpec> spec)
      : LibraryGroup(graph, "cuDNN",
                     {spec->output, spec->grad_input, spec->grad_weight, spec->grad_bias}),
        spec_(std::move(spec)) {
    geometry_.stride = spec_->stride;
    geometry_.padding = spec_->padding;
    geometry_.dilation = spec_->dilation;
    geometry_.groups = spec_->groups;
  }

  std::string description() const override {
    return spec_->direction == ConvDirection::Forward
               ? "cudnn: conv_fprop epilogue " + spec_->epilogue_name()
               : std::string("cudnn: conv_dgrad/conv_wgrad");
  }

  KernelKind kind() const override { return KernelKind::Conv; }

 private:
  bool launch(ValueSlots& slots, const SymbolBindings& bindings) const override {
    return spec_->direction == ConvDirection::Forward ? forward(slots, bindings) : backward(slots);
  }

  // Note [Conv layout]: eager's cudnn_conv_suggest_memory_format.
  c10::MemoryFormat layout(const at::Tensor& x, const at::Tensor& w) const {
    const c10::MemoryFormat channels_last = spec_->spatial_dims == 3
                                                ? c10::MemoryFormat::ChannelsLast3d
                                                : c10::MemoryFormat::ChannelsLast;
    return x.suggest_memory_format() == channels_last || w.suggest_memory_format() == channels_last
               ? channels_last
               : c10::MemoryFormat::Contiguous;
  }

  // Input and weight as planned: the dtype, a CUDA device, the rank.
  std::string operand_problem(const at::Tensor* x, const at::Tensor* w) const {
    if (x == nullptr || w == nullptr) return "input or weight is not a tensor";
    if (static_cast<DType>(x->scalar_type()) != spec_->dtype ||
        w->scalar_type() != x->scalar_type())
      return "input or weight of another dtype than planned";
    if (!x->is_cuda() || w->device() != x->device()) return "input and weight not on one GPU";
    if (x->dim() != spec_->spatial_dims + 2 || w->dim() != x->dim())
      return "input or weight of another rank than planned";
    return {};
  }

  // Folded inference batch norm (Note [Conv epilogue order]): f32 scale and
  // shift from this call's statistics and affine parameters.
  bool batch_norm_scale_shift(const ValueSlots& slots, at::Tensor& scale, at::Tensor& shift) const {
    const ConvBatchNorm& bn = spec_->bn;
    const at::Tensor* mean = tensor(slots, bn.mean);
    const at::Tensor* var = tensor(slots, bn.var);
    if (mean == nullptr || var == nullptr) return false;
    scale = at::rsqrt(var->to(at::kFloat) + bn.eps);
    if (const at::Tensor* weight = tensor(slots, bn.weight)) scale = scale * weight->to(at::kFloat);
    shift = -mean->to(at::kFloat) * scale;
    if (const at::Tensor* bias = tensor(slots, bn.bias)) shift = shift + bias->to(at::kFloat);
    return true;
  }

  bool forward(ValueSlots& slots, const SymbolBindings& bindings) const {
    const ConvSpec& spec = *spec_;
    const at::Tensor* x_in = tensor(slots, spec.input);
    const at::Tensor* w_in = tensor(slots, spec.weight);
    if (std::string p = operand_problem(x_in, w_in); !p.empty()) return fail(p);
    const c10::MemoryFormat format = layout(*x_in, *w_in);
    cudnn::ConvFpropArgs args;
    args.x = in_layout(*x_in, format);
    args.w = in_layout(*w_in, format);
    args.geometry = geometry_;
    std::vector<std::int64_t> sizes;
    for (const Dim& d : graph_.value(spec.output).tensor.sizes) {
      std::optional<std::int64_t> size = d.evaluate(bindings);
      if (!size) return fail("an output size depends on an unbound symbol");
      sizes.push_back(*size);
    }
    if (spec.bias >= 0) {
      const at::Tensor* bias = tensor(slots, spec.bias);
      if (bias == nullptr) return fail("the bias is not a tensor");
      // [C], [C,1,1] or [1,C,1,1]: cuDNN reads K adjacent elements.
      args.bias = bias->is_contiguous() ? *bias : bias->reshape({bias->numel()}).contiguous();
    }
    if (spec.batch_norm && !batch_norm_scale_shift(slots, args.scale, args.shift))
      return fail("the batch norm's statistics are not tensors");
    if (spec.residual >= 0) {
      const at::Tensor* residual = tensor(slots, spec.residual);
      if (residual == nullptr || residual->sizes() != c10::IntArrayRef(sizes))
        return fail("the residual is not a tensor of the output's sizes");
      args.residual = in_layout(*residual, format);
    }
    args.relu = spec.relu;
    // Without the dispatcher (Note [Aliases without the dispatcher]).
    args.y = at::detail::empty_cuda(sizes, args.x.scalar_type(), args.x.device(), format);
    if (std::string p = cudnn::conv_fprop(args); !p.empty()) return fail(p);
    slots[static_cast<std::size_t>(spec.output)] = args.y;
    return true;
  }

  bool backward(ValueSlots& slots) const {
    const ConvSpec& spec = *spec_;
    const at::Tensor* x_in = tensor(slots, spec.input);
    const at::Tensor* w_in = tensor(slots, spec.weight);
    const at::Tensor* dy_in = tensor(slots, spec.grad_output);
    if (std::string p = operand_problem(x_in, w_in); !p.empty()) return fail(p);
    if (dy_in == nullptr || dy_in->scalar_type() != x_in->scalar_type() ||
        dy_in->device() != x_in->device() || dy_in->dim() != x_in->dim())
      return fail("grad_output is not a tensor like the input");
    const c10::MemoryFormat format = layout(*x_in, *w_in);
    const at::Tensor dy = in_layout(*dy_in, format);
    at::Tensor dx, dw, db;
    if (spec.grad_input >= 0) {
      dx = at::detail::empty_cuda(x_in->sizes(), x_in->scalar_type(), x_in->device(), format);
      if (std::string p = cudnn::conv_dgrad(dy, in_layout(*w_in, format), geometry_, dx);
          !p.empty())
        return fail("dgrad: " + p);
    }
    if (spec.grad_weight >= 0) {
      dw = at::detail::empty_cuda(w_in->sizes(), w_in->scalar_type(), w_in->device(), format);
      if (std::string p = cudnn::conv_wgrad(dy, in_layout(*x_in, format), geometry_, dw);
          !p.empty())
        return fail("wgrad: " + p);
    }
    if (spec.grad_bias >= 0) {
      // As eager's convolution_backward: a sum of grad_output over all dims but channels.
      std::vector<std::int64_t> dims{0};
      for (std::int64_t d = 2; d < dy_in->dim(); ++d) dims.push_back(d);
      db = at::sum(*dy_in, dims);
    }
    const std::vector<ValueId>& outputs = graph_.node(spec.conv).outputs;
    const at::Tensor results[3] = {dx, dw, db};
    for (std::size_t k = 0; k < 3; ++k) slots[static_cast<std::size_t>(outputs[k])] = results[k];
    return true;
  }

  std::shared_ptr<const ConvSpec> spec_;
  cudnn::ConvGeometry geometry_;
};

}  // namespace

RunnerResult make_conv_runner(const Graph& graph, std::shared_ptr<const ConvSpec> spec) {
  return {std::make_unique<ConvGroup>(graph, std::move(spec)), ""};
}

std::vector<std::pair<std::string, std::uint64_t>> conv_plan_cache_counters() {
  const cudnn::PlanCacheStats stats = cudnn::plan_cache_stats();
  return {{"hits", stats.hits},
          {"misses", stats.misses},
          {"entries", stats.entries},
          {"failures", stats.failures}};
}

}  // namespace mybackend

#else  // !MYBACKEND_WITH_CUDNN

namespace mybackend {

RunnerResult make_conv_runner(const Graph&, std::shared_ptr<const ConvSpec>) {
  return {nullptr, "this build of mybackend has no cuDNN (cmake/cudnn.cmake)"};
}

std::vector<std::pair<std::string, std::uint64_t>> conv_plan_cache_counters() {
  return {{"hits", 0}, {"misses", 0}, {"entries", 0}, {"failures", 0}};
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDNN
