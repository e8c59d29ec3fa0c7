// Generated pointwise groups at run time: one elementwise kernel over the
// output shape, the fast or the general variant per call (Note [Two
// pointwise variants]).
#include "runtime/generated/kernel_launch.h"

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/ops/empty_strided.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>

#include "codegen/launch_tuning.h"
#include "common/error.h"
#include "runtime/coalesced_dims.h"
#include "runtime/fast_divisors.h"

namespace mybackend {
namespace {

std::vector<std::int64_t> permuted(const std::vector<std::int64_t>& dims,
                                   const std::vector<int>& order) {
  std::vector<std::int64_t> out;
  out.reserve(order.size());
  for (int d : order) out.push_back(dims[static_cast<std::size_t>(d)]);
  return out;
}

// Row-major dense strides for `shape` (size-1 dims may have any stride).
bool dense_strides(const std::vector<std::int64_t>& shape,
                   const std::vector<std::int64_t>& strides) {
  std::int64_t expected = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

// Which of a call's tensors (inputs, then outputs) each parameter of an
// entry names: "in3" / "stride_in3" -> 3, "out1" -> inputs + 1; for a
// scalar argument "scalar2" its position in the spec's scalars, 2; -1 for
// numel and the shape, kShapeDivisors for the shape's divisors. Parsed once
// per variant, not per launch.
constexpr int kShapeDivisors = -2;

std::vector<int> parameter_tensors(const KernelEntry& entry, std::size_t n_inputs) {
  std::vector<int> out;
  out.reserve(entry.params.size());
  for (const KernelParam& p : entry.params) {
    if (p.name.rfind("scalar", 0) == 0) {
      out.push_back(static_cast<int>(std::stoul(p.name.substr(6))));
      continue;
    }
    if (p.kind != KernelParam::Kind::Pointer && p.kind != KernelParam::Kind::Dims) {
      out.push_back(-1);
      continue;
    }
    if (p.name == "shape") {
      out.push_back(-1);
      continue;
    }
    if (p.name == "shape_div") {
      out.push_back(kShapeDivisors);
      continue;
    }
    const std::string base = p.name.rfind("stride_", 0) == 0 ? p.name.substr(7) : p.name;
    if (base.rfind("out", 0) == 0) {
      out.push_back(static_cast<int>(n_inputs + std::stoul(base.substr(3))));
      continue;
    }
    MB_ASSERT(base.rfind("in", 0) == 0, "unexpected kernel parameter ", p.name);
    out.push_back(static_cast<int>(std::stoul(base.substr(2))));
  }
  return out;
}

class PointwiseKernel final : public GroupKernel<PointwiseGroup> {
 public:
  PointwiseKernel(KernelKind kind, const Graph& graph, std::shared_ptr<const PointwiseGroup> group,
                  std::vector<Variant> variants, std::string target)
      : GroupKernel(kind, graph, std::move(group), std::move(variants), std::move(target)) {
    for (const Variant& v : variants_)
      parameter_tensors_.push_back(parameter_tensors(v.kernel.entries[0], group_->inputs.size()));
  }

 private:
  bool has_fast() const { return variants_.size() > 1; }

  // The fast variant's assumptions, on this call's tensors.
  bool fast_fits(const std::vector<at::Tensor>& tensors, const std::vector<TensorArg>& args,
                 const std::vector<std::vector<std::int64_t>>& strides,
                 const std::vector<std::int64_t>& shape, std::int64_t numel) const {
    if (!group_->spec.index64 && numel >= kIndex32Limit) return false;
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      const at::Tensor& t = tensors[k];
      if (args[k].mode == IndexMode::Strided) {
        if (!group_->spec.index64 && max_offset(shape, strides[k]) >= kIndex32Limit) return false;
        continue;
      }
      // Dense in the walk's order (Note [Iteration order] in pointwise_planner.h).
      if (!dense_strides(shape, strides[k]) || t.numel() != numel) return false;
      if (args[k].mode == IndexMode::Aligned && !aligned16(t)) return false;
    }
    return true;
  }

  bool launch(ValueSlots& slots, const SymbolBindings& bindings,
              PlannedOutputs& planned) const override {
    const PointwiseGroup& g = *group_;
    std::vector<at::Tensor> tensors;  // inputs, then outputs
    std::string why;
    for (std::size_t k = 0; k < g.inputs.size(); ++k) {
      std::optional<at::Tensor> t =
          cuda_tensor(slots[static_cast<std::size_t>(g.inputs[k])], g.spec.inputs[k].dtype, &why);
      if (!t) return fail("input " + std::to_string(k) + why);
      if (k > 0 && t->device() != tensors[0].device()) return fail("inputs on different devices");
      tensors.push_back(*t);
    }
    if (tensors.empty()) return fail("the group reads no tensor");
    auto shape = evaluate_dims(graph_.value(g.outputs[0]).tensor.sizes, bindings);
    if (!shape) return fail("a size of the output depends on an unbound symbol");
    std::int64_t numel = 1;
    for (std::int64_t s : *shape) numel *= s;
    std::vector<std::vector<std::int64_t>> strides(g.inputs.size() + g.outputs.size());
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      if (!iteration_strides(tensors[k], *shape, strides[k]))
        return fail("input " + std::to_string(k) + " does not broadcast to the output shape");
    }
    const c10::Device device = tensors[0].device();
    c10::cuda::CUDAGuard guard(device);
    for (std::size_t k = 0; k < g.outputs.size(); ++k) {
      const auto out_strides = evaluate_dims(graph_.value(g.outputs[k]).tensor.strides, bindings);
      if (!out_strides) return fail("a stride of an output depends on an unbound symbol");
      const auto dtype = static_cast<c10::ScalarType>(g.spec.outputs[k].tensor.dtype);
      tensors.push_back(planned.empty_strided(g.outputs[k], *shape, *out_strides,
                                              tensors[0].options().dtype(dtype)));
      iteration_strides(tensors.back(), *shape, strides[g.inputs.size() + k]);
    }
    if (!g.order.empty()) {  // Note [Iteration order] in pointwise_planner.h
      *shape = permuted(*shape, g.order);
      for (auto& s : strides) s = permuted(s, g.order);
    }
    if (group_->spec.tuning.pw_coalesce_dims)
      coalesce_dims(*shape, strides);  // Note [Coalesced dims]
    if (numel > 0) {
      std::vector<TensorArg> args;
      for (const auto& t : g.spec.inputs) args.push_back(t);
      for (const auto& o : g.spec.outputs) args.push_back(o.tensor);
      const bool fast = has_fast() && fast_fits(tensors, args, strides, *shape, numel);
      launch_variant(fast ? 0 : variants_.size() - 1, tensors, strides, *shape, numel,
                     device.index());
    }
    for (std::size_t k = 0; k < g.outputs.size(); ++k) {
      slots[static_cast<std::size_t>(g.outputs[k])] = tensors[g.inputs.size() + k];
    }
    return true;
  }

  void launch_variant(std::size_t v, const std::vector<at::Tensor>& tensors,
                      const std::vector<std::vector<std::int64_t>>& strides,
                      const std::vector<std::int64_t>& shape, std::int64_t numel,
                      int device_index) const {
    const KernelEntry& entry = variants_[v].kernel.entries[0];
    const std::vector<int>& tensor_of = parameter_tensors_[v];
    KernelArgs args(entry);
    for (std::size_t i = 0; i < entry.params.size(); ++i) {
      const KernelParam& p = entry.params[i];
      const int t = tensor_of[i];
      switch (p.kind) {
        case KernelParam::Kind::Pointer:
          args.set_pointer(i, tensors[static_cast<std::size_t>(t)].data_ptr());
          break;
        case KernelParam::Kind::Int64:
          if (t >= 0) {
            args.set_int(i, group_->spec.scalars[static_cast<std::size_t>(t)].i);
            break;
          }
          MB_ASSERT(p.name == "numel", "unexpected kernel parameter ", p.name);
          args.set_int(i, numel);
          break;
        case KernelParam::Kind::Dims:
          if (t == kShapeDivisors) {  // Note [Divisors as multipliers]
            args.set_dims(i, packed_divisors(shape));
            break;
          }
          args.set_dims(i, t < 0 ? shape : strides[static_cast<std::size_t>(t)]);
          break;
        case KernelParam::Kind::Float64:  // Note [Scalars as kernel arguments]
          MB_ASSERT(t >= 0, "unexpected kernel parameter ", p.name);
          args.set_double(i, group_->spec.scalars[static_cast<std::size_t>(t)].f);
          break;
        case KernelParam::Kind::Bytes:
          MB_ASSERT(false, "pointwise groups take no struct arguments, got ", p.name);
      }
    }
    const DeviceModules::Loaded& l = modules_.on(device_index, v);
    const std::int64_t per_block =
        static_cast<std::int64_t>(entry.block_x) * std::max(1, entry.elements_per_thread);
    const std::int64_t blocks = capped_grid((numel + per_block - 1) / per_block, l.sm_count,
                                            group_->spec.tuning.pw_blocks_per_sm);
    launch_on_stream(l, l.functions[0], blocks, entry, args, device_index);
  }

  std::vector<std::vector<int>> parameter_tensors_;  // per variant
};

}  // namespace

KernelBuild pointwise_build(const Graph& graph, std::shared_ptr<const PointwiseGroup> group) {
  const int device = graph.value(group->outputs[0]).tensor.device.index;
  // Groups that differ only in a scalar share one program (Note [Scalars as
  // kernel arguments]); the fusion plan keeps its literals for the reports.
  auto launched = std::make_shared<PointwiseGroup>(*group);
  make_scalars_arguments(launched->spec);
  make_scalars_arguments(launched->general);
  return two_variant_build<PointwiseKernel>(KernelKind::Pointwise, graph,
                                            std::shared_ptr<const PointwiseGroup>(launched), device,
                                            emit_pointwise);
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
