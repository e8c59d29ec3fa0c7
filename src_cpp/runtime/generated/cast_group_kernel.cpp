// Cast groups at run time (Note [Grouped casts] and Note [Grouped layout
// copies] in fusion/cast_groups.h): the members whose tensors fit the
// multi-tensor kernel go into its tables, one launch per kCastTableSize of
// them; each other member runs its own one-cast pointwise kernel, or its
// tiled transposing copy, for this call.
#include "runtime/generated/kernel_launch.h"

#ifdef MYBACKEND_WITH_CUDA

#include <c10/cuda/CUDAGuard.h>

#include <limits>

#include "codegen/device/mb_cast_table.cuh"
#include "codegen/launch_tuning.h"
#include "common/error.h"
#include "fusion/transposed_copies.h"

namespace mybackend {
namespace {

constexpr std::int64_t kMaxTableBlocks = std::numeric_limits<int>::max();

class CastGroupKernel final : public GroupKernel<CastGroup> {
 public:
  // variants: the cast-group kernel alone; singles: one runner per member
  // (CastGroup::singles or CastGroup::layout_copies).
  CastGroupKernel(const Graph& graph, std::shared_ptr<const CastGroup> group,
                  std::vector<Variant> variants, std::string target,
                  std::vector<std::unique_ptr<GeneratedKernel>> singles)
      : GroupKernel(KernelKind::CastGroup, graph, std::move(group), std::move(variants),
                    std::move(target)),
        singles_(std::move(singles)) {
    const KernelEntry& entry = variants_.at(0).kernel.entries.at(0);
    MB_ASSERT(entry.params.size() == 1 && entry.params[0].size_bytes() == sizeof(mb::CastTable),
              "a cast-group kernel takes one CastTable");
    MB_ASSERT(singles_.size() == group_->inputs.size(), "one lone runner per member");
    chunk_ = static_cast<std::int64_t>(entry.block_x) * entry.elements_per_thread;
  }

 private:
  bool launch(ValueSlots& slots, const SymbolBindings& bindings,
              PlannedOutputs& planned) const override {
    const CastGroup& g = *group_;
    const std::size_t n = g.inputs.size();
    std::vector<at::Tensor> inputs(n);
    std::vector<std::vector<std::int64_t>> shapes(n), out_strides(n);
    std::vector<std::pair<std::int64_t, std::int64_t>> layout(n, {0, 0});  // table a, b
    std::vector<std::size_t> grouped, alone;
    std::optional<c10::Device> device;
    std::string why;
    for (std::size_t k = 0; k < n; ++k) {
      const CastPair& pair = g.spec.pairs[static_cast<std::size_t>(g.pairs[k])];
      std::optional<at::Tensor> t =
          cuda_tensor(slots[static_cast<std::size_t>(g.inputs[k])], pair.from, &why);
      if (!t) return fail("input " + std::to_string(k) + why);
      if (device && t->device() != *device) return fail("inputs on different devices");
      device = t->device();
      auto shape = evaluate_dims(graph_.value(g.outputs[k]).tensor.sizes, bindings);
      auto strides = evaluate_dims(graph_.value(g.outputs[k]).tensor.strides, bindings);
      if (!shape || !strides)
        return fail("a size or stride of an output depends on an unbound symbol");
      bool fits = t->sizes() == c10::IntArrayRef(*shape) &&
                  (t->numel() + chunk_ - 1) / chunk_ <= kMaxTableBlocks;
      if (g.layout_copies[k]) {
        const std::vector<std::int64_t> in_strides(t->strides().begin(), t->strides().end());
        const auto e = fits ? dense_layout_copy(*g.layout_copies[k], *shape, in_strides, *strides)
                            : std::nullopt;
        fits = e.has_value();
        if (fits) layout[k] = *e;
      } else {
        fits = fits && t->is_contiguous();
      }
      (fits ? grouped : alone).push_back(k);
      inputs[k] = *t;
      shapes[k] = std::move(*shape);
      out_strides[k] = std::move(*strides);
    }
    // Before the grouped launch, so that a member declining sends the whole
    // group to its ATen calls with nothing launched twice.
    for (std::size_t k : alone) {
      if (!singles_[k]->run(slots, bindings, planned))
        return fail("cast " + std::to_string(k) + " alone: " + singles_[k]->problem());
    }
    if (!alone.empty()) {
      note(std::to_string(alone.size()) + " of " + std::to_string(n) +
           " members ran alone: an input is not of the planned shape or layout");
    }
    if (grouped.empty()) return true;
    c10::cuda::CUDAGuard guard(*device);
    std::vector<at::Tensor> outputs(n);
    for (std::size_t k : grouped) {
      const auto dtype =
          static_cast<c10::ScalarType>(g.spec.pairs[static_cast<std::size_t>(g.pairs[k])].to);
      outputs[k] = planned.empty_strided(g.outputs[k], shapes[k], out_strides[k],
                                         inputs[k].options().dtype(dtype));
      if (!g.layout_copies[k] && !outputs[k].is_contiguous())
        return fail("output " + std::to_string(k) + " is not contiguous");
    }
    const int device_index = device->index();
    mb::CastTable table{};
    for (std::size_t k : grouped) {
      const std::int64_t numel = inputs[k].numel();
      if (numel == 0) continue;  // Nothing to convert; the table never holds empty tensors.
      const std::int64_t blocks = (numel + chunk_ - 1) / chunk_;
      if (table.count == mb::kCastTableSize ||
          table.first_block[table.count] > kMaxTableBlocks - blocks) {
        launch_table(table, device_index);
        table = mb::CastTable{};
      }
      const int t = table.count;
      table.src[t] = inputs[k].data_ptr();
      table.dst[t] = outputs[k].data_ptr();
      table.numel[t] = numel;
      table.pair[t] = static_cast<unsigned char>(g.pairs[k]);
      table.a[t] = static_cast<int>(layout[k].first);
      table.b[t] = static_cast<int>(layout[k].second);
      table.first_block[t + 1] = table.first_block[t] + static_cast<int>(blocks);
      table.count = t + 1;
    }
    if (table.count > 0) launch_table(table, device_index);
    for (std::size_t k : grouped) slots[static_cast<std::size_t>(g.outputs[k])] = outputs[k];
    return true;
  }

  void launch_table(const mb::CastTable& table, int device_index) const {
    const KernelEntry& entry = variants_[0].kernel.entries[0];
    const DeviceModules::Loaded& l = modules_.on(device_index, 0);
    KernelArgs args(entry);
    args.set_bytes(0, &table, sizeof table);
    const std::int64_t blocks = capped_grid(table.first_block[table.count], l.sm_count,
                                            group_->spec.tuning.pw_blocks_per_sm);
    launch_on_stream(l, l.functions[0], blocks, entry, args, device_index);
  }

  // The table's a and b of a layout copy whose tensors are dense in its
  // planned [batch, a, b] and [batch, b, a] views (Note [Grouped layout
  // copies]); nullopt otherwise.
  static std::optional<std::pair<std::int64_t, std::int64_t>> dense_layout_copy(
      const TransposeGroup& copy, const std::vector<std::int64_t>& sizes,
      const std::vector<std::int64_t>& in_strides, const std::vector<std::int64_t>& out_strides) {
    const std::optional<TransposeExtents> e =
        transpose_extents(copy, sizes, in_strides, out_strides);
    if (!e || e->a >= kIndex32Limit || e->b >= kIndex32Limit) return std::nullopt;
    const std::int64_t plane = e->a * e->b;
    const bool batch_dense =
        e->batch == 1 || (e->in_strides[0] == plane && e->out_strides[0] == plane);
    if (!batch_dense || e->in_strides[1] != e->b || e->in_strides[2] != 1 ||
        e->out_strides[1] != 1 || e->out_strides[2] != e->a)
      return std::nullopt;
    return std::make_pair(e->a, e->b);
  }

  std::vector<std::unique_ptr<GeneratedKernel>> singles_;  // each member's lone runner, compiled
  std::int64_t chunk_ = 0;                                 // elements one block converts
};

}  // namespace

KernelBuild cast_group_build(const Graph& graph, std::shared_ptr<const CastGroup> group) {
  KernelBuild build;
  build.device_index = graph.value(group->outputs[0]).tensor.device.index;
  build.kernels.push_back(emit_cast_group(group->spec));
  // Each member's one-cast kernels follow; they compile and load only when a
  // call needs them (Note [Variants compiled on first use]).
  build.compiled_now = 1;
  std::vector<KernelBuild> singles;
  std::vector<std::size_t> first, count;
  for (std::size_t k = 0; k < group->singles.size(); ++k) {
    KernelBuild own = group->layout_copies[k] ? transpose_build(graph, group->layout_copies[k])
                                              : pointwise_build(graph, group->singles[k]);
    first.push_back(build.kernels.size());
    count.push_back(own.kernels.size());
    for (EmittedKernel& kernel : own.kernels) build.kernels.push_back(std::move(kernel));
    own.kernels.clear();
    singles.push_back(std::move(own));
  }
  build.make = [&graph, group, singles, first, count](std::vector<Variant> variants,
                                                      std::string target) {
    std::vector<std::unique_ptr<GeneratedKernel>> made;
    for (std::size_t k = 0; k < singles.size(); ++k) {
      const auto begin = variants.begin() + static_cast<std::ptrdiff_t>(first[k]);
      made.push_back(singles[k].make(
          std::vector<Variant>(begin, begin + static_cast<std::ptrdiff_t>(count[k])), target));
    }
    variants.erase(variants.begin() + 1, variants.end());
    return std::make_unique<CastGroupKernel>(graph, group, std::move(variants), std::move(target),
                                             std::move(made));
  };
  return build;
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
