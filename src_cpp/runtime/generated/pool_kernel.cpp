// Generated max-pool groups at run time: prologue + 2-d max pool (or its
// backward) in one kernel (Note [Pool groups]). Sizes come from this call's
// symbol bindings, the window from the plan; outputs come from the memory
// plan with the IR's strides. A call whose tensors are not laid out as the
// kernel was compiled for (a Window input not dense in its layout, a Channel
// input that is not one value per channel, the backward's indices not dense
// in the layout) runs the group's ATen calls.
#include "runtime/generated/kernel_launch.h"

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/ops/empty_strided.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>

#include "common/error.h"

namespace mybackend {
namespace {

// Grid cap: 256-thread blocks, eight resident per SM, two waves; the loop
// is grid-stride, so the cap only bounds the launch.
constexpr int kPoolBlocksPerSm = 16;

// Are `strides` (iteration strides over the window space [N, C, H, W]:
// 0 for size-1 dims) those of a tensor dense in `layout`?
bool dense_in_layout(const std::vector<std::int64_t>& strides,
                     const std::vector<std::int64_t>& shape, PoolLayout layout) {
  static const int kNchw[] = {0, 1, 2, 3};
  static const int kNhwc[] = {0, 2, 3, 1};
  const int* order = layout == PoolLayout::ChannelsLast ? kNhwc : kNchw;
  std::int64_t expected = 1;
  for (int k = 3; k >= 0; --k) {
    const auto d = static_cast<std::size_t>(order[k]);
    if (shape[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

// Element c at ptr[c], the same for every (n, h, w).
bool one_per_channel(const std::vector<std::int64_t>& strides,
                     const std::vector<std::int64_t>& shape) {
  return strides[0] == 0 && strides[2] == 0 && strides[3] == 0 &&
         (strides[1] == 1 || shape[1] == 1);
}

std::int64_t product(const std::vector<std::int64_t>& v) {
  std::int64_t p = 1;
  for (std::int64_t x : v) p *= x;
  return p;
}

class PoolKernel final : public GroupKernel<PoolGroup> {
 public:
  using GroupKernel::GroupKernel;

 private:
  struct Call {
    std::vector<std::int64_t> in_shape, out_shape;  // [N, C, H, W], [N, C, OH, OW]
    std::vector<at::Tensor> inputs;
    std::vector<std::vector<std::int64_t>> strides;  // per input, over read_space()
    at::Tensor output, indices;
    bool backward = false;
    // Where the prologue reads (the window space, or the backward's
    // gradient space) and what the kernel writes.
    const std::vector<std::int64_t>& read_space() const { return backward ? out_shape : in_shape; }
    const std::vector<std::int64_t>& result_shape() const {
      return backward ? in_shape : out_shape;
    }
  };

  DType input_dtype(std::size_t k) const {
    const PoolSpec& s = group_->spec;
    return s.prologue ? s.prologue->inputs[k].dtype : s.dtype;
  }

  // The fast variant's assumptions (Note [Pool groups]).
  bool fast_fits(const Call& c) const {
    const PoolSpec& s = group_->spec;
    if (product(c.in_shape) >= kIndex32Limit || product(c.out_shape) >= kIndex32Limit) return false;
    for (std::size_t k = 0; k < c.inputs.size(); ++k) {
      if (s.reads[k] == PoolRead::Strided &&
          max_offset(c.read_space(), c.strides[k]) >= kIndex32Limit)
        return false;
    }
    if (s.vector == 1) return true;
    if (c.in_shape[1] % s.vector != 0) return false;
    for (std::size_t k = 0; k < c.inputs.size(); ++k) {
      if (s.reads[k] != PoolRead::Strided && !aligned16(c.inputs[k])) return false;
    }
    return aligned16(c.output) && (!(s.store_indices || s.backward) || aligned16(c.indices));
  }

  bool launch(ValueSlots& slots, const SymbolBindings& bindings,
              PlannedOutputs& planned) const override {
    const PoolGroup& g = *group_;
    const PoolSpec& s = g.spec;
    Call c;
    c.backward = s.backward;
    std::string why;
    // The pooled values, or in the backward the indices, span the output space.
    const ValueId window_output = s.backward ? g.indices : g.output;
    const auto in_shape = evaluate_dims(graph_.value(g.pooled).tensor.sizes, bindings);
    const auto out_shape = evaluate_dims(graph_.value(window_output).tensor.sizes, bindings);
    const auto out_strides = evaluate_dims(graph_.value(g.output).tensor.strides, bindings);
    if (!in_shape || !out_shape || !out_strides)
      return fail("a size or stride depends on an unbound symbol");
    c.in_shape = *in_shape;
    c.out_shape = *out_shape;
    const std::string layout(pool_layout_name(s.layout));
    for (std::size_t k = 0; k < g.inputs.size(); ++k) {
      auto t = cuda_tensor(slots[static_cast<std::size_t>(g.inputs[k])], input_dtype(k), &why);
      if (!t) return fail("input " + std::to_string(k) + why);
      c.inputs.push_back(*t);
      c.strides.emplace_back();
      if (!iteration_strides(*t, c.read_space(), c.strides.back()))
        return fail("input " + std::to_string(k) + " does not broadcast to the pool's " +
                    (s.backward ? "gradient" : "input"));
      if (s.reads[k] == PoolRead::Window &&
          !dense_in_layout(c.strides[k], c.read_space(), s.layout))
        return fail("input " + std::to_string(k) + " is not dense " + layout +
                    " as compiled (ran ATen for this call)");
      if (s.reads[k] == PoolRead::Channel && !one_per_channel(c.strides[k], c.read_space()))
        return fail("input " + std::to_string(k) +
                    " is not one value per channel as compiled (ran ATen for this call)");
    }
    const c10::Device device = c.inputs[0].device();
    for (const at::Tensor& t : c.inputs) {
      if (t.device() != device) return fail("inputs on different devices");
    }
    if (s.backward) {
      auto t = cuda_tensor(slots[static_cast<std::size_t>(g.indices)], DType::Int64, &why);
      if (!t) return fail("the indices" + why);
      std::vector<std::int64_t> strides;
      if (t->device() != device || !iteration_strides(*t, c.out_shape, strides) ||
          !dense_in_layout(strides, c.out_shape, s.layout))
        return fail("the indices are not dense " + layout +
                    " on the gradient's device as compiled (ran ATen for this call)");
      c.indices = *t;
    }
    // The kernel stores values and indices at the offsets of an output dense
    // in its layout; the IR's strides say where they are.
    const std::vector<std::int64_t>& result_shape = c.result_shape();
    std::vector<std::int64_t> out_iteration(4, 0);
    for (std::size_t d = 0; d < 4; ++d)
      out_iteration[d] = result_shape[d] == 1 ? 0 : (*out_strides)[d];
    if (!dense_in_layout(out_iteration, result_shape, s.layout))
      return fail("the output's strides are not dense " + layout);
    c10::cuda::CUDAGuard guard(device);
    const auto options = c.inputs[0].options();
    c.output = planned.empty_strided(g.output, result_shape, *out_strides,
                                     options.dtype(static_cast<c10::ScalarType>(s.dtype)));
    if (s.store_indices)
      c.indices =
          planned.empty_strided(g.indices, c.out_shape, *out_strides, options.dtype(at::kLong));
    if (product(result_shape) > 0) {
      const bool fast = variants_.size() > 1 && fast_fits(c);
      launch_variant(fast ? 0 : variants_.size() - 1, c, device.index());
    }
    slots[static_cast<std::size_t>(g.output)] = c.output;
    if (s.store_indices) slots[static_cast<std::size_t>(g.indices)] = c.indices;
    return true;
  }

  // The int64 argument `name` (a size or the window) of this call.
  std::int64_t shape_argument(const std::string& name, const Call& c) const {
    const PoolGroup& g = *group_;
    if (name == "batch") return c.in_shape[0];
    if (name == "channels") return c.in_shape[1];
    if (name == "in_h") return c.in_shape[2];
    if (name == "in_w") return c.in_shape[3];
    if (name == "out_h") return c.out_shape[2];
    if (name == "out_w") return c.out_shape[3];
    const std::pair<const char*, const std::array<std::int64_t, 2>*> window[] = {
        {"kernel", &g.kernel},
        {"stride", &g.stride},
        {"pad", &g.padding},
        {"dilation", &g.dilation}};
    for (const auto& [prefix, values] : window) {
      if (name == std::string(prefix) + "_h") return (*values)[0];
      if (name == std::string(prefix) + "_w") return (*values)[1];
    }
    MB_ASSERT(false, "unexpected pool kernel parameter ", name);
    return 0;
  }

  void launch_variant(std::size_t v, const Call& c, int device_index) const {
    const KernelEntry& entry = variants_[v].kernel.entries[0];
    KernelArgs args(entry);
    for (std::size_t i = 0; i < entry.params.size(); ++i) {
      const KernelParam& p = entry.params[i];
      switch (p.kind) {
        case KernelParam::Kind::Pointer:
          if (p.name == "out") {
            args.set_pointer(i, c.output.data_ptr());
          } else if (p.name == "indices") {
            args.set_pointer(i, c.indices.data_ptr());
          } else {
            MB_ASSERT(p.name.rfind("in", 0) == 0, "unexpected pool kernel parameter ", p.name);
            args.set_pointer(i, c.inputs[std::stoul(p.name.substr(2))].data_ptr());
          }
          break;
        case KernelParam::Kind::Int64: args.set_int(i, shape_argument(p.name, c)); break;
        case KernelParam::Kind::Dims:
          MB_ASSERT(p.name.rfind("stride_in", 0) == 0, "unexpected pool kernel parameter ", p.name);
          args.set_dims(i, c.strides[std::stoul(p.name.substr(9))]);
          break;
        case KernelParam::Kind::Float64:
        case KernelParam::Kind::Bytes:
          MB_ASSERT(false, "pool groups take no scalar or struct arguments, got ", p.name);
      }
    }
    const std::int64_t sites = product(c.result_shape()) / entry.elements_per_thread;
    const DeviceModules::Loaded& l = modules_.on(device_index, v);
    const std::int64_t blocks = (sites + entry.block_x - 1) / entry.block_x;
    launch_on_stream(l, l.functions[0], capped_grid(blocks, l.sm_count, kPoolBlocksPerSm), entry,
                     args, device_index);
  }
};

}  // namespace

KernelBuild pool_build(const Graph& graph, std::shared_ptr<const PoolGroup> group) {
  const int device = graph.value(group->output).tensor.device.index;
  return two_variant_build<PoolKernel>(KernelKind::Pool, graph, std::move(group), device,
                                       emit_pool);
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
