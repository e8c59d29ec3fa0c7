// Generated batch-norm reductions at run time (Note [Batch-norm reductions]
// in fusion/norm_lowering.h, device/mb_batch_norm.cuh): x (and grad_out)
// viewed as [rows, channels] with the channels contiguous, reduced in row
// chunks into a workspace of partials, then per channel. Group norm's
// statistics (Note [Group-norm units] in device/mb_group_norm.cuh) run the
// same chunk stage per image.
#include "runtime/generated/norm_kernel.h"

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/cuda/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <numeric>

#include "codegen/launch_tuning.h"

namespace mybackend {
namespace {

// kChannelBlock and kTotalsLanes of mb_batch_norm.cuh.
constexpr std::int64_t kChannelBlock = 256;
constexpr std::int64_t kTotalsLanes = 32;
// Bytes of one partial: Welford (mean, m2, n) or a pair of sums, as floats.
constexpr std::int64_t kStatsPartialFloats = 3;
constexpr std::int64_t kBackwardPartialFloats = 2;

// The same lane count as channel_lanes<VEC, LANES> in the device code,
// whose LANES the emitter took from the same tuning (the spec's bn_max_lanes).
std::int64_t channel_lanes(std::int64_t cols, std::int64_t vec, int max_lanes) {
  const std::int64_t most = std::min<std::int64_t>(kChannelBlock, max_lanes);
  std::int64_t lanes = 1;
  while (lanes < most && lanes * vec < cols) lanes *= 2;
  return lanes;
}

// `t` as [rows, channels] with the channels contiguous: the channels-last
// permutation of its dims, copied only when the data is not in that order.
at::Tensor channels_innermost(const at::Tensor& t) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(t.dim()));
  std::iota(order.begin(), order.end(), 0);
  std::rotate(order.begin() + 1, order.begin() + 2, order.end());  // (0, 2, ..., n-1, 1)
  at::Tensor moved = t.permute(order);
  return moved.is_contiguous() ? moved : moved.contiguous();
}

// Row chunks per image: one wave of blocks over all images' column tiles,
// as many as the SMs hold at once (the kernel's registers allow 2 of 256
// threads per SM on an H100, where a fixed 4 per SM ran as two waves), or
// bn_blocks_per_sm when set; each chunk at least bn_chunk_passes unrolled
// passes of the block's row groups: shorter chunks and the merges and
// partials cost more than the reads.
std::int64_t row_splits(std::int64_t rows, std::int64_t jobs_per_split, std::int64_t lanes,
                        const DeviceModules::Loaded& l, const LaunchTuning& tuning) {
  const std::int64_t per_sm =
      tuning.bn_blocks_per_sm > 0 ? tuning.bn_blocks_per_sm : l.resident_blocks[0];
  const std::int64_t pass_rows = (kChannelBlock / lanes) * tuning.bn_row_unroll;
  const std::int64_t wanted =
      (static_cast<std::int64_t>(l.sm_count) * per_sm + jobs_per_split - 1) / jobs_per_split;
  return std::max<std::int64_t>(1, std::min(wanted, rows / (pass_rows * tuning.bn_chunk_passes)));
}

// The columns of a contiguous group norm's view [run / cols, cols] of each
// group's run of memory (Note [Group-norm units]): the widest power of two
// up to 256 that divides the run and is a multiple of the vector width, so
// that each row group reads whole vectors; 0 when none does.
std::int64_t run_columns(std::int64_t run, std::int64_t vec) {
  for (std::int64_t cols = 256; cols >= vec; cols /= 2) {
    if (run % cols == 0 && cols % vec == 0) return cols;
  }
  return 0;
}

}  // namespace

bool NormKernel::launch_batch_norm(ValueSlots& slots, const SymbolBindings& bindings,
                                   PlannedOutputs& planned) const {
  const NormGroup& g = *group_;
  auto inputs = input_tensors(slots);
  if (!inputs) return false;
  std::map<std::string, at::Tensor>& tensors = *inputs;
  const std::vector<std::int64_t> shape = tensors.at("x").sizes().vec();
  const c10::Device device = tensors.at("x").device();
  if (shape.size() < 2) return fail("x has fewer than 2 dims");
  const std::int64_t cols = shape[1];
  const std::int64_t rows = cols == 0 ? 0 : tensors.at("x").numel() / cols;
  if (rows == 0 || cols == 0) return fail("an empty batch: ATen handles that edge");
  for (auto& [name, t] : tensors) {
    if (t.device() != device) return fail("inputs on different devices");
    if (norm_reads_rows(name)) {
      if (t.sizes() != c10::IntArrayRef(shape)) return fail(name + " and x differ in shape");
      t = channels_innermost(t);
    } else {
      if (t.numel() != cols) return fail(name + " does not have one value per channel");
      t = t.contiguous();
    }
  }
  c10::cuda::CUDAGuard guard(device);
  const auto options = tensors.at("x").options();
  for (const auto& [name, value] : g.outputs) {
    if (norm_tensor_dtype(g.spec, name) != graph_.value(value).tensor.dtype)
      return fail("the output " + name + " has another dtype than the kernel writes");
    const std::optional<at::Tensor> t = planned_output(name, value, options, bindings, planned);
    if (!t) return false;
    if (!t->is_contiguous() || t->numel() != cols)
      return fail("the output " + name + " is not one contiguous value per channel");
    tensors[name] = *t;
  }
  // The first variant reads whole vectors with 32-bit indices.
  bool fast =
      rows * cols < kIndex32Limit && cols % variants_[0].kernel.entries[0].elements_per_thread == 0;
  for (const auto& [name, t] : tensors) fast = fast && aligned16(t);
  const std::size_t v = fast || variants_.size() == 1 ? 0 : variants_.size() - 1;
  const DeviceModules::Loaded& l = modules_.on(device.index(), v);
  const std::vector<KernelEntry>& entries = variants_[v].kernel.entries;
  const std::int64_t vec = entries[0].elements_per_thread;
  if (cols % vec != 0) return fail("the channel count is not a multiple of the vector width");
  const std::int64_t lanes = channel_lanes(cols, vec, g.spec.tuning.bn_max_lanes);
  const std::int64_t tiles = (cols + lanes * vec - 1) / (lanes * vec);
  const std::int64_t splits = row_splits(rows, tiles, lanes, l, g.spec.tuning);
  const bool stats = g.spec.kind == NormKind::BatchNormStats;
  tensors["partials"] = at::detail::empty_cuda(
      {splits * cols * (stats ? kStatsPartialFloats : kBackwardPartialFloats)}, at::kFloat,
      options.device(), std::nullopt);
  const std::map<std::string, std::int64_t> ints = {
      {"rows", rows}, {"cols", cols}, {"splits", splits}};
  const std::map<std::string, double> floats = {{"eps", g.eps}, {"momentum", g.momentum}};
  const std::int64_t blocks[2] = {tiles * splits, (cols + kTotalsLanes - 1) / kTotalsLanes};
  for (std::size_t e = 0; e < 2; ++e) {
    KernelArgs args = norm_kernel_args(entries[e], tensors, ints, floats);
    const std::int64_t grid =
        std::min<std::int64_t>(blocks[e], static_cast<std::int64_t>(l.sm_count) * 16);
    launch_on_stream(l, l.functions[e], grid, entries[e], args, device.index());
  }
  for (const auto& [name, value] : g.outputs)
    slots[static_cast<std::size_t>(value)] = tensors[name];
  return true;
}

bool NormKernel::launch_group_norm(ValueSlots& slots, const SymbolBindings& bindings,
                                   PlannedOutputs& planned) const {
  const NormGroup& g = *group_;
  auto inputs = input_tensors(slots);
  if (!inputs) return false;
  std::map<std::string, at::Tensor>& tensors = *inputs;
  const at::Tensor x = tensors.at("x");
  if (x.dim() < 2) return fail("x has fewer than 2 dims");
  const std::int64_t batch = x.size(0);
  const std::int64_t channels = x.size(1);
  const std::int64_t spatial = channels == 0 || batch == 0 ? 0 : x.numel() / (batch * channels);
  if (spatial == 0) return fail("an empty input: ATen handles that edge");
  c10::cuda::CUDAGuard guard(x.device());
  const auto options = x.options();
  for (const auto& [name, value] : g.outputs) {
    const std::optional<at::Tensor> t = planned_output(name, value, options, bindings, planned);
    if (!t) return false;
    if (!t->is_contiguous() || t->dim() != 2 || t->size(0) != batch)
      return fail("the output " + name + " is not a contiguous [N, groups or channels]");
    tensors[name] = *t;
  }
  const std::int64_t groups = tensors.at("mean").size(1);
  if (groups <= 0 || channels % groups != 0 || tensors.at("channel_mean").size(1) != channels)
    return fail("the channels do not split into the groups");
  const std::int64_t group_channels = channels / groups;
  // Note [Group-norm units]: an image of [spatial, C] per sample when the
  // channels are innermost, else one of [run / cols, cols] per group.
  std::vector<std::int64_t> order(static_cast<std::size_t>(x.dim()));
  std::iota(order.begin(), order.end(), 0);
  std::rotate(order.begin() + 1, order.begin() + 2, order.end());
  const at::Tensor moved = x.permute(order);
  const bool innermost = moved.is_contiguous();
  const at::Tensor data = innermost ? moved : x.contiguous();
  const std::int64_t run = group_channels * spatial;
  // The first variant reads whole vectors with 32-bit indices, the last
  // one element at a time.
  auto fits = [&](std::int64_t vec) {
    return innermost ? channels % vec == 0 : run_columns(run, vec) != 0;
  };
  bool fast = x.numel() < kIndex32Limit && fits(variants_[0].kernel.entries[0].elements_per_thread);
  for (const auto& [name, t] : tensors) fast = fast && (name == "x" || aligned16(t));
  fast = fast && aligned16(data);
  const std::size_t v = fast || variants_.size() == 1 ? 0 : variants_.size() - 1;
  const DeviceModules::Loaded& l = modules_.on(x.device().index(), v);
  const std::vector<KernelEntry>& entries = variants_[v].kernel.entries;
  const std::int64_t vec = entries[0].elements_per_thread;
  if (!fits(vec)) return fail("no view of the groups' values the kernel reads by vectors");
  std::int64_t images = 0, rows = 0, cols = 0, units_per_image = 0, unit_cols = 0;
  tensors["x"] = data;
  if (innermost) {
    images = batch, rows = spatial, cols = channels;
    units_per_image = groups, unit_cols = group_channels;
  } else {
    cols = run_columns(run, vec);
    images = batch * groups, rows = run / cols;
    units_per_image = 1, unit_cols = cols;
  }
  const std::int64_t lanes = channel_lanes(cols, vec, g.spec.tuning.bn_max_lanes);
  const std::int64_t tiles = (cols + lanes * vec - 1) / (lanes * vec);
  const std::int64_t splits = row_splits(rows, tiles * images, lanes, l, g.spec.tuning);
  tensors["partials"] = at::detail::empty_cuda({images * splits * cols * kStatsPartialFloats},
                                               at::kFloat, options.device(), std::nullopt);
  const std::int64_t units = batch * groups;
  const std::map<std::string, std::int64_t> ints = {{"rows", rows},
                                                    {"cols", cols},
                                                    {"splits", splits},
                                                    {"images", images},
                                                    {"units_per_image", units_per_image},
                                                    {"unit_cols", unit_cols},
                                                    {"units", units},
                                                    {"group_channels", group_channels}};
  const std::map<std::string, double> floats = {{"eps", g.eps}};
  const std::int64_t blocks[2] = {images * tiles * splits, units};  // a block per unit
  for (std::size_t e = 0; e < 2; ++e) {
    KernelArgs args = norm_kernel_args(entries[e], tensors, ints, floats);
    const std::int64_t grid =
        std::min<std::int64_t>(blocks[e], static_cast<std::int64_t>(l.sm_count) * 16);
    launch_on_stream(l, l.functions[e], grid, entries[e], args, x.device().index());
  }
  for (const auto& [name, value] : g.outputs)
    slots[static_cast<std::size_t>(value)] = tensors[name];
  return true;
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
