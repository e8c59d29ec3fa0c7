// Tiled transposing copies at run time (Note [Tiled transposing copies] in
// fusion/transposed_copies.h): the call's input and its planned output
// viewed as [batch, a, b] and [batch, b, a] by the group's parts, one
// launch. A call whose tensors do not collapse into that view (an input of
// other strides than compiled), or that 32-bit offsets cannot reach, runs
// the group's ATen calls.
#include "runtime/generated/kernel_launch.h"

#ifdef MYBACKEND_WITH_CUDA

#include <c10/cuda/CUDAGuard.h>

#include <algorithm>

#include "common/error.h"
#include "fusion/transposed_copies.h"

namespace mybackend {
namespace {

class TransposeKernel final : public GroupKernel<TransposeGroup> {
 public:
  using GroupKernel::GroupKernel;

 private:
  bool launch(ValueSlots& slots, const SymbolBindings& bindings,
              PlannedOutputs& planned) const override {
    const TransposeGroup& g = *group_;
    std::string why;
    const std::optional<at::Tensor> in =
        cuda_tensor(slots[static_cast<std::size_t>(g.input)], g.spec.in_dtype(), &why);
    if (!in) return fail("the input" + why);
    const TensorType& out_type = graph_.value(g.output).tensor;
    const auto sizes = evaluate_dims(out_type.sizes, bindings);
    const auto out_strides = evaluate_dims(out_type.strides, bindings);
    if (!sizes || !out_strides) return fail("a size or stride depends on an unbound symbol");
    if (in->sizes() != c10::IntArrayRef(*sizes))
      return fail("the input's sizes differ from the output's");
    const std::vector<std::int64_t> in_strides(in->strides().begin(), in->strides().end());
    const std::optional<TransposeExtents> e =
        transpose_extents(g, *sizes, in_strides, *out_strides);
    if (!e)
      return fail(
          "the input's strides do not collapse into the compiled [batch, a, b] view "
          "(ran ATen for this call)");
    if (!g.spec.index64 &&
        (e->numel() >= kIndex32Limit || max_offset(*sizes, in_strides) >= kIndex32Limit))
      return fail("the input is beyond 32-bit offsets (ran ATen for this call)");
    c10::cuda::CUDAGuard guard(in->device());
    const at::Tensor out = planned.empty_strided(
        g.output, *sizes, *out_strides,
        in->options().dtype(static_cast<c10::ScalarType>(g.spec.out_dtype())));
    if (e->numel() > 0) launch_tiles(*in, out, *e, in->device().index());
    slots[static_cast<std::size_t>(g.output)] = out;
    return true;
  }

  void launch_tiles(const at::Tensor& in, const at::Tensor& out, const TransposeExtents& e,
                    int device_index) const {
    const KernelEntry& entry = variants_[0].kernel.entries[0];
    // emit_transpose's parameter order: in, out, then TransposeShape's.
    const std::int64_t shape[] = {e.batch,
                                  e.a,
                                  e.b,
                                  e.in_strides[0],
                                  e.in_strides[1],
                                  e.in_strides[2],
                                  e.out_strides[0],
                                  e.out_strides[1],
                                  e.out_strides[2]};
    constexpr std::size_t kShapeParams = sizeof(shape) / sizeof(shape[0]);
    MB_ASSERT(entry.params.size() == 2 + kShapeParams, "unexpected transpose kernel parameters");
    KernelArgs args(entry);
    args.set_pointer(0, in.data_ptr());
    args.set_pointer(1, out.data_ptr());
    for (std::size_t i = 0; i < kShapeParams; ++i) args.set_int(2 + i, shape[i]);
    const TransposeSpec& s = group_->spec;
    const std::int64_t tiles =
        e.batch * ((e.a + s.tile_a - 1) / s.tile_a) * ((e.b + s.tile_b - 1) / s.tile_b);
    const DeviceModules::Loaded& l = modules_.on(device_index, 0);
    // One wave of resident blocks at most: the kernel loops over tiles.
    launch_on_stream(l, l.functions[0], capped_grid(tiles, l.sm_count, l.resident_blocks[0]), entry,
                     args, device_index);
  }
};

}  // namespace

KernelBuild transpose_build(const Graph& graph, std::shared_ptr<const TransposeGroup> group) {
  KernelBuild build;
  build.device_index = graph.value(group->output).tensor.device.index;
  build.kernels.push_back(emit_transpose(group->spec));
  build.make = [&graph, group](std::vector<Variant> variants, std::string target) {
    return std::make_unique<TransposeKernel>(KernelKind::Transpose, graph, group,
                                             std::move(variants), std::move(target));
  };
  return build;
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
