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

// What one kernel parameter carries at a launch, parsed from its name once
// per variant: "in3" / "stride_in3" / "period_in3" name tensor 3, "out1"
// tensor n_inputs + 1 (inputs, then outputs), "scalar2" the spec's scalar 2.
struct ParamRole {
  enum class Kind : std::int8_t {
    Pointer,
    Strides,
    Shape,
    ShapeDivisors,
    Numel,
    Scalar,
    Period,
    PeriodDivisor,
    Block,
    BlockDivisor,
    CoordDim
  };
  Kind kind = Kind::Numel;
  int index = -1;  // the tensor or the scalar
};

std::vector<ParamRole> parameter_roles(const KernelEntry& entry, std::size_t n_inputs) {
  using Kind = ParamRole::Kind;
  auto tensor_of = [n_inputs](const std::string& name) {
    if (name.rfind("out", 0) == 0) return static_cast<int>(n_inputs + std::stoul(name.substr(3)));
    MB_ASSERT(name.rfind("in", 0) == 0, "unexpected kernel parameter ", name);
    return static_cast<int>(std::stoul(name.substr(2)));
  };
  auto starts = [](const std::string& name, const char* prefix) {
    return name.rfind(prefix, 0) == 0;
  };
  std::vector<ParamRole> out;
  out.reserve(entry.params.size());
  for (const KernelParam& p : entry.params) {
    const std::string& n = p.name;
    if (starts(n, "scalar")) {
      out.push_back({Kind::Scalar, static_cast<int>(std::stoul(n.substr(6)))});
    } else if (starts(n, "coord_dim")) {
      out.push_back({Kind::CoordDim, static_cast<int>(std::stoul(n.substr(9)))});
    } else if (n == "numel") {
      out.push_back({Kind::Numel, -1});
    } else if (n == "shape") {
      out.push_back({Kind::Shape, -1});
    } else if (n == "shape_div") {
      out.push_back({Kind::ShapeDivisors, -1});
    } else if (starts(n, "period_div_")) {
      out.push_back({Kind::PeriodDivisor, tensor_of(n.substr(11))});
    } else if (starts(n, "period_")) {
      out.push_back({Kind::Period, tensor_of(n.substr(7))});
    } else if (starts(n, "block_div_")) {
      out.push_back({Kind::BlockDivisor, tensor_of(n.substr(10))});
    } else if (starts(n, "block_")) {
      out.push_back({Kind::Block, tensor_of(n.substr(6))});
    } else if (starts(n, "stride_")) {
      out.push_back({Kind::Strides, tensor_of(n.substr(7))});
    } else {
      MB_ASSERT(p.kind == KernelParam::Kind::Pointer, "unexpected kernel parameter ", n);
      out.push_back({Kind::Pointer, tensor_of(n)});
    }
  }
  return out;
}

class PointwiseKernel final : public GroupKernel<PointwiseGroup> {
 public:
  PointwiseKernel(KernelKind kind, const Graph& graph, std::shared_ptr<const PointwiseGroup> group,
                  std::vector<Variant> variants, std::string target)
      : GroupKernel(kind, graph, std::move(group), std::move(variants), std::move(target)),
        vector_width_(pointwise_vector_width(group_->spec)) {
    for (const Variant& v : variants_)
      parameter_roles_.push_back(parameter_roles(v.kernel.entries[0], group_->inputs.size()));
    // Note [Concatenations in pointwise kernels]: what launch() indexes.
    const std::size_t rank = graph.value(group_->outputs[0]).tensor.rank();
    MB_CHECK(static_cast<int>(group_->coord_dims.size()) == group_->spec.coords,
             "a pointwise group has ", group_->coord_dims.size(), " coordinate dims for ",
             group_->spec.coords, " axes");
    for (int dim : group_->coord_dims)
      MB_CHECK(dim >= 0 && static_cast<std::size_t>(dim) < rank, "coordinate dim ", dim,
               " outside the output's rank ", rank);
  }

 private:
  bool has_fast() const { return variants_.size() > 1; }

  // The fast variant's assumptions, on this call's tensors; `periodic` gets
  // each Periodic tensor's layout (Note [Periodic operands]).
  bool fast_fits(const std::vector<at::Tensor>& tensors, const std::vector<TensorArg>& args,
                 const std::vector<std::vector<std::int64_t>>& strides,
                 const std::vector<std::int64_t>& shape, std::int64_t numel,
                 std::vector<PeriodicLayout>& periodic) const {
    if (!group_->spec.index64 && numel >= kIndex32Limit) return false;
    periodic.assign(tensors.size(), PeriodicLayout{});
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      const at::Tensor& t = tensors[k];
      if (args[k].mode == IndexMode::Strided) {
        if (!group_->spec.index64 && max_offset(shape, strides[k]) >= kIndex32Limit) return false;
        continue;
      }
      if (is_periodic(args[k].mode)) {
        periodic[k] = fitting_periodic_layout(args[k].mode, shape, strides[k], numel);
        const std::int64_t period = periodic[k].period;
        if (period == 0 || period % vector_width_ != 0 || !aligned16(t)) return false;
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
    // Note [Concatenations in pointwise kernels]: a guarded input walks its
    // piece's shape, its pointer moved back by its range's first coordinates
    // (`shifts`, elements per tensor; empty when the group has no guards).
    const bool guarded = !g.spec.guards.empty();
    std::vector<std::int64_t> piece;
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      if (guarded) piece = piece_shape(k, *shape);
      if (!iteration_strides(tensors[k], guarded ? piece : *shape, strides[k]))
        return fail("input " + std::to_string(k) + " does not broadcast to the output shape");
    }
    std::vector<std::int64_t> shifts;
    if (guarded) shifts.assign(g.inputs.size() + g.outputs.size(), 0);
    for (const PwGuard& guard : g.spec.guards) {
      const auto k = static_cast<std::size_t>(guard.input);
      const auto dim = static_cast<std::size_t>(g.coord_dims[static_cast<std::size_t>(guard.axis)]);
      shifts[k] += g.spec.scalars[static_cast<std::size_t>(guard.lo)].i * strides[k][dim];
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
    // Note [Concatenations in pointwise kernels]: one stride vector per
    // coordinate axis, 1 on its dim and 0 elsewhere, keeps the axis a dim of
    // its own through coalescing and says where it ends up.
    for (int dim : g.coord_dims) {
      std::vector<std::int64_t> marker(shape->size(), 0);
      marker[static_cast<std::size_t>(dim)] = 1;
      strides.push_back(std::move(marker));
    }
    if (!g.order.empty()) {  // Note [Iteration order] in pointwise_planner.h
      *shape = permuted(*shape, g.order);
      for (auto& s : strides) s = permuted(s, g.order);
    }
    if (group_->spec.tuning.pw_coalesce_dims)
      coalesce_dims(*shape, strides);  // Note [Coalesced dims]
    std::vector<std::int64_t> coord_positions;
    for (std::size_t a = 0; a < g.coord_dims.size(); ++a) {
      const std::vector<std::int64_t>& marker = strides[tensors.size() + a];
      const auto at =
          std::find_if(marker.begin(), marker.end(), [](std::int64_t v) { return v != 0; });
      // A dim of size 1 is dropped: its coordinate is 0 everywhere.
      coord_positions.push_back(at == marker.end() ? -1 : at - marker.begin());
    }
    strides.resize(tensors.size());
    if (numel > 0) {
      std::vector<TensorArg> args;
      for (const auto& t : g.spec.inputs) args.push_back(t);
      for (const auto& o : g.spec.outputs) args.push_back(o.tensor);
      std::vector<PeriodicLayout> periodic;
      const bool fast = has_fast() && fast_fits(tensors, args, strides, *shape, numel, periodic);
      launch_variant(fast ? 0 : variants_.size() - 1, tensors, shifts, strides, *shape, numel,
                     periodic, coord_positions, device.index());
    }
    for (std::size_t k = 0; k < g.outputs.size(); ++k) {
      slots[static_cast<std::size_t>(g.outputs[k])] = tensors[g.inputs.size() + k];
    }
    return true;
  }

  // The shape input k walks: the output's, or for a guarded input (Note
  // [Concatenations in pointwise kernels]) its range's length on each of
  // its guards' dims.
  std::vector<std::int64_t> piece_shape(std::size_t k, std::vector<std::int64_t> shape) const {
    const PointwiseGroup& g = *group_;
    for (const PwGuard& guard : g.spec.guards) {
      if (static_cast<std::size_t>(guard.input) != k) continue;
      const auto dim = static_cast<std::size_t>(g.coord_dims[static_cast<std::size_t>(guard.axis)]);
      shape[dim] = g.spec.scalars[static_cast<std::size_t>(guard.hi)].i -
                   g.spec.scalars[static_cast<std::size_t>(guard.lo)].i;
    }
    return shape;
  }

  void launch_variant(std::size_t v, const std::vector<at::Tensor>& tensors,
                      const std::vector<std::int64_t>& shifts,
                      const std::vector<std::vector<std::int64_t>>& strides,
                      const std::vector<std::int64_t>& shape, std::int64_t numel,
                      const std::vector<PeriodicLayout>& periodic,
                      const std::vector<std::int64_t>& coord_positions, int device_index) const {
    using Kind = ParamRole::Kind;
    const KernelEntry& entry = variants_[v].kernel.entries[0];
    const std::vector<ParamRole>& roles = parameter_roles_[v];
    KernelArgs args(entry);
    for (std::size_t i = 0; i < entry.params.size(); ++i) {
      const auto k = static_cast<std::size_t>(roles[i].index);
      switch (roles[i].kind) {
        case Kind::Pointer:  // guarded inputs start lo strides early (never read there)
          args.set_pointer(
              i, shifts.empty() ? tensors[k].data_ptr()
                                : static_cast<char*>(tensors[k].data_ptr()) -
                                      shifts[k] * static_cast<std::int64_t>(tensors[k].itemsize()));
          break;
        case Kind::CoordDim: args.set_int(i, coord_positions.at(k)); break;
        case Kind::Strides: args.set_dims(i, strides[k]); break;
        case Kind::Shape: args.set_dims(i, shape); break;
        case Kind::ShapeDivisors:  // Note [Divisors as multipliers]
          args.set_dims(i, packed_divisors(shape));
          break;
        case Kind::Numel: args.set_int(i, numel); break;
        // Note [Periodic operands]
        case Kind::Period: args.set_int(i, periodic.at(k).period); break;
        case Kind::PeriodDivisor: args.set_int(i, packed_divisor(periodic.at(k).period)); break;
        case Kind::Block: args.set_int(i, periodic.at(k).block); break;
        case Kind::BlockDivisor: args.set_int(i, packed_divisor(periodic.at(k).block)); break;
        case Kind::Scalar: {  // Note [Scalars as kernel arguments]
          const PwScalar& scalar = group_->spec.scalars[k];
          if (entry.params[i].kind == KernelParam::Kind::Float64)
            args.set_double(i, scalar.f);
          else
            args.set_int(i, scalar.i);
          break;
        }
      }
    }
    const DeviceModules::Loaded& l = modules_.on(device_index, v);
    const std::int64_t per_block =
        static_cast<std::int64_t>(entry.block_x) * std::max(1, entry.elements_per_thread);
    const std::int64_t blocks = capped_grid((numel + per_block - 1) / per_block, l.sm_count,
                                            group_->spec.tuning.pw_blocks_per_sm);
    launch_on_stream(l, l.functions[0], blocks, entry, args, device_index);
  }

  std::vector<std::vector<ParamRole>> parameter_roles_;  // per variant
  int vector_width_;  // the fast variant's, which a Periodic tensor's period is a multiple of
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
