// Generated norm groups at run time: softmax / log_softmax, layer norm and
// RMS norm, forward and backward (Note [Norm groups]). The kernels view the
// data as [rows, cols] with contiguous rows: inputs that are not contiguous
// are made so first (eager's kernels do the same). Backward layer norm has a
// second entry point for the weight and bias grads (a column reduction).
#include "runtime/generated/norm_kernel.h"

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/ExpandUtils.h>
#include <ATen/cuda/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>

#include "codegen/launch_tuning.h"
#include "common/error.h"
#include "runtime/fast_divisors.h"
#include "runtime/tensor_alias.h"

namespace mybackend {
namespace {

DType stats_dtype(DType x) { return x == DType::Float64 ? DType::Float64 : DType::Float32; }

}  // namespace

int norm_indexed_tensor(const std::string& name, std::string_view prefix) {
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  int k = 0;
  for (std::size_t i = prefix.size(); i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    k = k * 10 + (name[i] - '0');
  }
  return k;
}

int norm_prologue_input(const std::string& name) { return norm_indexed_tensor(name, "in"); }

bool norm_reads_rows(const std::string& name) {
  return name == "x" || name == "grad_out" || name == "out" || norm_prologue_input(name) >= 0 ||
         norm_indexed_tensor(name, "ein") >= 0;
}

DType norm_tensor_dtype(const NormSpec& spec, const std::string& name) {
  if (spec.prologue) {
    if (const int k = norm_prologue_input(name); k >= 0)
      return spec.prologue->inputs.at(static_cast<std::size_t>(k)).dtype;
  }
  if (spec.epilogue) {
    if (const int k = norm_indexed_tensor(name, "ein"); k >= 0)
      return spec.epilogue->inputs.at(static_cast<std::size_t>(k)).dtype;
    if (const int k = norm_indexed_tensor(name, "eout"); k >= 0)
      return spec.epilogue->outputs.at(static_cast<std::size_t>(k)).tensor.dtype;
  }
  if (spec.kind == NormKind::GroupNormStats)
    return name == "channel_mean" || name == "channel_rstd" ? DType::Float32 : spec.dtype;
  if (is_channel_reduction(spec.kind)) {
    if (name == "running_mean" || name == "running_var" || name == "new_running_mean" ||
        name == "new_running_var")
      return spec.weight_dtype;
    if (name == "x" || name == "grad_out") return spec.dtype;
    return DType::Float32;  // mean, invstd, grad_bias, grad_weight
  }
  if (name == "weight" || name == "bias" || name == "grad_weight" || name == "grad_bias")
    return spec.weight_dtype;
  if (name == "mean" || name == "rstd") return stats_dtype(spec.dtype);
  if (name == "y") return spec.out_dtype;
  if (name == "target") return DType::Int64;
  if (name == "loss" || name == "lse" || name == "grad_loss") return DType::Float32;
  return spec.dtype;
}

bool norm_strided_input(const NormSpec& spec, const std::string& name) {
  const int k = spec.prologue ? norm_prologue_input(name) : -1;
  return k >= 0 && spec.prologue->inputs.at(static_cast<std::size_t>(k)).mode == IndexMode::Strided;
}

KernelArgs norm_kernel_args(const KernelEntry& entry,
                            const std::map<std::string, at::Tensor>& tensors,
                            const std::map<std::string, std::int64_t>& ints,
                            const std::map<std::string, double>& floats,
                            const std::map<std::string, std::vector<std::int64_t>>& dims) {
  KernelArgs args(entry);
  for (std::size_t i = 0; i < entry.params.size(); ++i) {
    const KernelParam& p = entry.params[i];
    if (p.kind == KernelParam::Kind::Dims) {
      auto it = dims.find(p.name);
      MB_ASSERT(it != dims.end(), "norm kernel parameter ", p.name, " has no dims");
      args.set_dims(i, it->second);
    } else if (p.kind == KernelParam::Kind::Pointer) {
      auto it = tensors.find(p.name);
      MB_ASSERT(it != tensors.end(), "norm kernel parameter ", p.name, " has no tensor");
      args.set_pointer(i, it->second.data_ptr());
    } else if (p.kind == KernelParam::Kind::Float64) {
      auto it = floats.find(p.name);
      MB_ASSERT(it != floats.end(), "unexpected norm kernel parameter ", p.name);
      args.set_double(i, it->second);
    } else {
      auto it = ints.find(p.name);
      MB_ASSERT(it != ints.end(), "unexpected norm kernel parameter ", p.name);
      args.set_int(i, it->second);
    }
  }
  return args;
}

std::optional<std::map<std::string, at::Tensor>> NormKernel::input_tensors(
    const ValueSlots& slots) const {
  std::map<std::string, at::Tensor> tensors;
  std::string why;
  for (const auto& [name, value] : group_->inputs) {
    auto t = cuda_tensor(slots[static_cast<std::size_t>(value)],
                         norm_tensor_dtype(group_->spec, name), &why);
    if (!t) {
      fail(name + why);
      return std::nullopt;
    }
    tensors[name] = *t;
  }
  return tensors;
}

std::optional<at::Tensor> NormKernel::planned_output(const std::string& name, ValueId value,
                                                     const at::TensorOptions& options,
                                                     const SymbolBindings& bindings,
                                                     PlannedOutputs& planned) const {
  const TensorType& type = graph_.value(value).tensor;
  const auto sizes = evaluate_dims(type.sizes, bindings);
  const auto strides = evaluate_dims(type.strides, bindings);
  if (!sizes || !strides) {
    fail("an output size depends on an unbound symbol");
    return std::nullopt;
  }
  const auto dtype = static_cast<c10::ScalarType>(norm_tensor_dtype(group_->spec, name));
  return planned.empty_strided(value, *sizes, *strides, options.dtype(dtype));
}

bool NormKernel::launch(ValueSlots& slots, const SymbolBindings& bindings,
                        PlannedOutputs& planned) const {
  const NormGroup& g = *group_;
  if (is_cross_entropy(g.spec.kind)) return launch_cross_entropy(slots, bindings, planned);
  if (g.spec.kind == NormKind::GroupNormStats) return launch_group_norm(slots, bindings, planned);
  if (is_channel_reduction(g.spec.kind)) return launch_batch_norm(slots, bindings, planned);
  const auto shape = evaluate_dims(graph_.value(g.rows_of).tensor.sizes, bindings);
  if (!shape) return fail("a size depends on an unbound symbol");
  const std::size_t split = shape->size() - static_cast<std::size_t>(g.normalized_dims);
  std::int64_t rows = 1, cols = 1;
  for (std::size_t d = 0; d < shape->size(); ++d) (d < split ? rows : cols) *= (*shape)[d];
  if (cols == 0 && rows > 0) return fail("normalizing empty rows: ATen handles that edge");
  auto inputs = input_tensors(slots);
  if (!inputs) return false;
  std::map<std::string, at::Tensor>& tensors = *inputs;
  std::optional<c10::Device> device;
  // Note [Softmax prologues with broadcast inputs]: a Strided input is read
  // in place, broadcast to x's shape by its strides.
  std::map<std::string, std::vector<std::int64_t>> dims;
  for (auto& [name, t] : tensors) {
    if (device && t.device() != *device) return fail("inputs on different devices");
    device = t.device();
    if (!norm_strided_input(g.spec, name)) {
      t = t.contiguous();
      continue;
    }
    if (!t.sizes().empty() && !at::is_expandable_to(t.sizes(), c10::IntArrayRef(*shape)))
      return fail(name + " does not broadcast to the compiled shape");
    if (std::any_of(t.strides().begin(), t.strides().end(), [](std::int64_t s) { return s < 0; }))
      t = t.contiguous();           // offsets are computed from non-negative strides
    t = expanded_alias(t, *shape);  // Note [Aliases without the dispatcher]
    dims["stride_" + name] = t.strides().vec();
  }
  if (!dims.empty()) {
    dims["shape"] = *shape;
    dims["shape_div"] = packed_divisors(*shape);  // Note [Row placement by multipliers]
  }
  if (!device) return fail("the group reads no tensor");
  for (const auto& [name, t] : tensors) {
    if (!norm_reads_rows(name)) continue;
    // A prologue's dense input may have the shape of a tensor x is a view
    // of (Note [A norm prologue read elsewhere]): contiguous, it lists the
    // same elements in the same order.
    const bool same = norm_prologue_input(name) >= 0 ? t.numel() == rows * cols
                                                     : t.sizes() == c10::IntArrayRef(*shape);
    if (!same) return fail(name + " does not have the compiled shape");
  }
  for (const char* name : {"weight", "bias"}) {
    auto it = tensors.find(name);
    if (it != tensors.end() && it->second.numel() != cols)
      return fail(std::string(name) + " does not have normalized_shape");
  }
  for (const char* name : {"mean", "rstd"}) {
    auto it = tensors.find(name);
    if (it != tensors.end() && it->second.numel() != rows)
      return fail(std::string(name) + " does not have one value per row");
  }
  c10::cuda::CUDAGuard guard(*device);
  const auto options = tensors.begin()->second.options();
  for (const auto& [name, value] : g.outputs) {
    const auto dtype = static_cast<c10::ScalarType>(norm_tensor_dtype(g.spec, name));
    if (value < 0) {  // computed but unused (a grad nobody asked for)
      tensors[name] = at::detail::empty_cuda({cols}, dtype, options.device(), std::nullopt);
      continue;
    }
    const std::optional<at::Tensor> t = planned_output(name, value, options, bindings, planned);
    if (!t) return false;
    if (!t->is_contiguous()) return fail("the output " + name + " is not contiguous");
    tensors[name] = *t;
  }
  bool aligned = rows * cols < kIndex32Limit;
  for (const auto& [name, t] : tensors) {
    // Strided inputs are read an element at a time; their offsets must fit I.
    if (norm_strided_input(g.spec, name)) {
      std::int64_t last = 0;
      for (std::size_t d = 0; d < shape->size(); ++d)
        last += ((*shape)[d] - 1) * t.stride(static_cast<int64_t>(d));
      aligned = aligned && last < kIndex32Limit;
    } else {
      aligned = aligned && aligned16(t);
    }
  }
  const std::size_t v = aligned || variants_.size() == 1 ? 0 : variants_.size() - 1;
  const DeviceModules::Loaded& l = modules_.on(device->index(), v);
  const std::vector<KernelEntry>& entries = variants_[v].kernel.entries;
  // A forward layer or RMS norm may carry a wide entry beside its narrow
  // one; exactly one of the two runs (Note [Wide rows for few rows]).
  const bool row_variants =
      (g.spec.kind == NormKind::LayerNormForward || g.spec.kind == NormKind::RmsNormForward) &&
      entries.size() == 2;
  std::size_t first = 0, last = entries.size();
  if (row_variants) {
    first = norm_prefers_wide_rows(entries[0], entries[1], rows, cols, l.sm_count, g.spec.tuning)
                ? 1
                : 0;
    last = first + 1;
  }
  // Parameter grads reduce in row chunks through a workspace of partial
  // (dw, db) pairs (Note [Split parameter grads]).
  const std::int64_t col_tiles = outer_column_tiles(1, cols);
  const std::int64_t splits = outer_row_splits(col_tiles, rows, l.sm_count, 32);
  if (!row_variants && entries.size() > 1) {
    const auto stats = static_cast<c10::ScalarType>(stats_dtype(g.spec.dtype));
    tensors["partials"] =
        at::detail::empty_cuda({splits, cols, 2}, stats, options.device(), std::nullopt);
  }
  for (std::size_t e = first; e < last; ++e) {
    const bool rows_entry = e == 0 || row_variants;
    const bool row_block = row_variants && e == 1;  // Note [A row per block]
    KernelEntry entry = entries[e];
    if (row_block) {
      entry.block_x = norm_row_block_threads(entry, cols);
    } else if (rows_entry) {
      entry = norm_launch_shape(entry, rows, cols, l.sm_count);
    }
    KernelArgs args =
        norm_kernel_args(entry, tensors, {{"rows", rows}, {"cols", cols}, {"splits", splits}},
                         {{"eps", g.eps}}, dims);
    // The rows entry: rows_per_block(...) rows per block; entries 1 and 2
    // of a backward (parameter grads): a column tile of one row chunk, then
    // of all chunks.
    const std::int64_t per_block = rows_entry && !row_block ? norm_rows_per_block(entry, cols) : 1;
    const std::int64_t blocks = rows_entry ? (rows + per_block - 1) / per_block
                                : e == 1   ? col_tiles * splits
                                           : col_tiles;
    if (blocks == 0) continue;
    const std::int64_t grid =
        rows_entry ? capped_grid(blocks, l.sm_count,
                                 g.spec.tuning.row_blocks_per_sm(is_softmax_forward(g.spec.kind)))
                   : std::min<std::int64_t>(blocks, static_cast<std::int64_t>(l.sm_count) * 16);
    launch_on_stream(l, l.functions[e], grid, entry, args, device->index());
  }
  for (const auto& [name, value] : g.outputs) {
    if (value >= 0) slots[static_cast<std::size_t>(value)] = tensors[name];
  }
  return true;
}

KernelBuild norm_build(const Graph& graph, std::shared_ptr<const NormGroup> group) {
  const int device = graph.value(group->rows_of).tensor.device.index;
  return two_variant_build<NormKernel>(KernelKind::Norm, graph, std::move(group), device,
                                       emit_norm);
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
