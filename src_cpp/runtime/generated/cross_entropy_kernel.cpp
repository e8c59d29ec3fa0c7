// Generated cross-entropy groups at run time (mybackend/ops/cross_entropy.py,
// device/mb_cross_entropy.cuh). Unlike the other norm groups the logits
// keep their row stride: the output layer's padded product hands over rows
// wider than the class count, and copying 400 MB of logits to close the gap
// would cost as much as the kernel itself.
#include "runtime/generated/norm_kernel.h"

#ifdef MYBACKEND_WITH_CUDA

#include <c10/cuda/CUDAGuard.h>

#include <map>

namespace mybackend {
namespace {

// Enough blocks per SM for the loads in flight to cover memory latency;
// the kernels loop over rows, so any grid is correct.
constexpr int kBlocksPerSm = 8;

}  // namespace

bool NormKernel::launch_cross_entropy(ValueSlots& slots, const SymbolBindings& bindings,
                                      PlannedOutputs& planned) const {
  const NormGroup& g = *group_;
  auto inputs = input_tensors(slots);
  if (!inputs) return false;
  std::map<std::string, at::Tensor>& tensors = *inputs;
  for (auto& [name, t] : tensors) {
    if (name != "x") t = t.contiguous();
  }
  at::Tensor& x = tensors.at("x");
  if (x.dim() != 2) return fail("the logits are not [rows, classes]");
  if (x.stride(1) != 1 || x.stride(0) < x.size(1)) x = x.contiguous();
  const std::int64_t rows = x.size(0), cols = x.size(1);
  const std::int64_t row_stride = rows > 1 ? x.stride(0) : cols;
  if (cols == 0 && rows > 0) return fail("no classes: ATen handles that edge");
  for (const auto& [name, t] : tensors) {
    if (t.device() != x.device()) return fail("inputs on different devices");
    if (name != "x" && (t.dim() != 1 || t.size(0) != rows))
      return fail(name + " does not have one value per row");
  }
  c10::cuda::CUDAGuard guard(x.device());
  for (const auto& [name, value] : g.outputs) {
    const std::optional<at::Tensor> t = planned_output(name, value, x.options(), bindings, planned);
    if (!t) return false;
    if (!t->is_contiguous()) return fail("the output " + name + " is not contiguous");
    tensors[name] = *t;
  }
  // The gradient may be wider than the logits: Note [Padded cross-entropy gradient].
  std::int64_t out_row_stride = cols;
  if (const auto grad = tensors.find("grad_in"); grad != tensors.end()) {
    const at::Tensor& t = grad->second;
    if (t.dim() != 2 || t.size(0) != rows || t.size(1) < cols)
      return fail("the gradient is not [rows, classes + pad]");
    out_row_stride = t.size(1);
  }
  if (rows > 0) {
    const bool index32 =
        (rows - 1) * row_stride + cols < kIndex32Limit && rows * out_row_stride < kIndex32Limit;
    const std::size_t v = index32 || variants_.size() == 1 ? 0 : variants_.size() - 1;
    const DeviceModules::Loaded& l = modules_.on(x.device().index(), v);
    const KernelEntry& entry = variants_[v].kernel.entries[0];
    KernelArgs args = norm_kernel_args(entry, tensors,
                                       {{"rows", rows},
                                        {"cols", cols},
                                        {"row_stride", row_stride},
                                        {"out_row_stride", out_row_stride},
                                        {"ignore_index", g.ignore_index}},
                                       {});
    launch_on_stream(l, l.functions[0], capped_grid(rows, l.sm_count, kBlocksPerSm), entry, args,
                     x.device().index());
  }
  for (const auto& [name, value] : g.outputs)
    slots[static_cast<std::size_t>(value)] = tensors[name];
  return true;
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
