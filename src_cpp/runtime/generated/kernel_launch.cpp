#include "runtime/generated/kernel_launch.h"

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <cstring>

#include "common/error.h"

namespace mybackend {

VariantImage::VariantImage(std::shared_ptr<const CompiledKernel> image)
    : state_(std::make_shared<State>()) {
  state_->image = std::move(image);
}

VariantImage::VariantImage(Compile compile) : state_(std::make_shared<State>()) {
  state_->compile = std::move(compile);
}

std::shared_ptr<const CompiledKernel> VariantImage::get() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (state_->image) return state_->image;
  if (state_->error.empty()) {
    try {
      MB_ASSERT(state_->compile != nullptr, "a variant image with neither image nor compile");
      state_->image = state_->compile();
      state_->compile = nullptr;  // the request's source is no longer needed
      return state_->image;
    } catch (const std::exception& e) {
      state_->error = std::string("compiling the variant on first use failed: ") + e.what();
    }
  }
  throw Error(state_->error);
}

bool VariantImage::compiled() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->image != nullptr;
}

const DeviceModules::Loaded& DeviceModules::on(int device_index, std::size_t variant) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto key = std::make_pair(device_index, variant);
  auto it = loaded_.find(key);
  if (it != loaded_.end()) return *it->second;
  MB_ASSERT(variant < variants_.size(), "variant ", variant, " of ", variants_.size());
  const Variant& v = variants_[variant];
  const std::shared_ptr<const CompiledKernel> image = v.image.get();
  auto entry = std::make_unique<Loaded>();
  entry->context = cuda::primary_context(device_index);
  cuda::ensure_current(entry->context);
  entry->module = std::make_unique<cuda::Module>(image->image);
  for (const KernelEntry& e : v.kernel.entries) {
    entry->functions.push_back(entry->module->function(e.name));
    int blocks = 0;
    MB_CU_CHECK(cuda::driver().occupancy_max_active_blocks(&blocks, entry->functions.back(),
                                                           e.block_x * e.block_y, 0));
    entry->resident_blocks.push_back(std::max(1, blocks));
  }
  entry->sm_count = std::max(1, at::cuda::getDeviceProperties(device_index)->multiProcessorCount);
  return *loaded_.emplace(key, std::move(entry)).first->second;
}

KernelArgs::KernelArgs(const KernelEntry& entry) : entry_(entry), pointers_(entry.params.size()) {
  std::vector<std::size_t> offsets;
  std::size_t total = 0;
  for (const KernelParam& p : entry.params) {
    offsets.push_back(total);
    total += std::max<std::size_t>(1, (p.size_bytes() + 7) / 8);
  }
  words_.assign(total, 0);
  for (std::size_t i = 0; i < pointers_.size(); ++i) pointers_[i] = words_.data() + offsets[i];
}

void KernelArgs::set_pointer(std::size_t i, const void* p) {
  MB_ASSERT(entry_.params[i].kind == KernelParam::Kind::Pointer, "parameter ",
            entry_.params[i].name, " is not a pointer");
  words(i)[0] = static_cast<std::int64_t>(reinterpret_cast<std::uintptr_t>(p));
}

void KernelArgs::set_int(std::size_t i, std::int64_t v) {
  MB_ASSERT(entry_.params[i].kind == KernelParam::Kind::Int64, "parameter ", entry_.params[i].name,
            " is not an int64");
  words(i)[0] = v;
}

void KernelArgs::set_double(std::size_t i, double v) {
  MB_ASSERT(entry_.params[i].kind == KernelParam::Kind::Float64, "parameter ",
            entry_.params[i].name, " is not a double");
  static_assert(sizeof(double) == sizeof(std::int64_t));
  std::memcpy(words(i), &v, sizeof v);
}

void KernelArgs::set_dims(std::size_t i, const std::vector<std::int64_t>& dims) {
  const KernelParam& p = entry_.params[i];
  MB_ASSERT(p.kind == KernelParam::Kind::Dims && static_cast<int>(dims.size()) == p.rank,
            "rank mismatch for ", p.name);
  std::copy(dims.begin(), dims.end(), words(i));
}

void KernelArgs::set_bytes(std::size_t i, const void* data, std::size_t size) {
  const KernelParam& p = entry_.params[i];
  MB_ASSERT(p.kind == KernelParam::Kind::Bytes && size == p.size_bytes(), "parameter ", p.name,
            " is not a struct of ", size, " bytes");
  std::memcpy(words(i), data, size);
}

void launch_on_stream(const DeviceModules::Loaded& loaded, CUfunction fn, std::int64_t blocks,
                      const KernelEntry& entry, KernelArgs& args, int device_index) {
  cuda::ensure_current(loaded.context);
  const auto stream =
      reinterpret_cast<CUstream>(at::cuda::getCurrentCUDAStream(device_index).stream());
  const std::int64_t grid = std::max<std::int64_t>(1, std::min<std::int64_t>(blocks, 1 << 30));
  MB_CU_CHECK(cuda::driver().launch_kernel(
      fn, static_cast<unsigned>(grid), 1, 1, static_cast<unsigned>(entry.block_x),
      static_cast<unsigned>(entry.block_y), 1, 0, stream, args.data(), nullptr));
}

std::int64_t capped_grid(std::int64_t wanted, int sm_count, int blocks_per_sm) {
  if (blocks_per_sm <= 0) return wanted;
  return std::min<std::int64_t>(wanted, static_cast<std::int64_t>(sm_count) * blocks_per_sm);
}

bool GeneratedKernelBase::run(ValueSlots& slots, const SymbolBindings& bindings,
                              PlannedOutputs& outputs) const {
  if (disabled_.load(std::memory_order_relaxed)) return false;
  try {
    return launch(slots, bindings, outputs);
  } catch (const std::exception& e) {
    // Load or launch failed: this group runs as ATen calls from now on.
    note(e.what());
    disabled_.store(true);
    return false;
  }
}

std::string GeneratedKernelBase::problem() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return problem_;
}

void GeneratedKernelBase::note(const std::string& why) const {
  std::lock_guard<std::mutex> lock(mutex_);
  problem_ = why;
}

bool GeneratedKernelBase::fail(const std::string& why) const {
  note(why);
  return false;
}

bool iteration_strides(const at::Tensor& t, const std::vector<std::int64_t>& shape,
                       std::vector<std::int64_t>& out) {
  const auto rank = static_cast<std::int64_t>(shape.size());
  out.assign(shape.size(), 0);
  if (t.dim() > rank) return false;
  const std::int64_t offset = rank - t.dim();
  for (std::int64_t k = 0; k < t.dim(); ++k) {
    const std::int64_t size = t.size(k);
    const std::size_t d = static_cast<std::size_t>(offset + k);
    if (size == shape[d]) {
      out[d] = size == 1 ? 0 : t.stride(k);
    } else if (size != 1) {
      return false;
    }
  }
  return true;
}

std::vector<std::int64_t> permuted(const std::vector<std::int64_t>& dims,
                                   const std::vector<int>& order) {
  std::vector<std::int64_t> out;
  out.reserve(order.size());
  for (int d : order) out.push_back(dims[static_cast<std::size_t>(d)]);
  return out;
}

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

std::int64_t max_offset(const std::vector<std::int64_t>& shape,
                        const std::vector<std::int64_t>& strides) {
  std::int64_t extent = 0;
  for (std::size_t d = 0; d < shape.size(); ++d)
    extent += (shape[d] - 1) * (strides[d] < 0 ? -strides[d] : strides[d]);
  return extent;
}

std::optional<std::vector<std::int64_t>> evaluate_dims(const std::vector<Dim>& dims,
                                                       const SymbolBindings& bindings) {
  std::vector<std::int64_t> out;
  out.reserve(dims.size());
  for (const Dim& d : dims) {
    std::optional<std::int64_t> v = d.evaluate(bindings);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

std::optional<at::Tensor> cuda_tensor(const c10::IValue& slot, DType dtype, std::string* why) {
  if (!slot.isTensor()) {
    *why = " is not a tensor";
    return std::nullopt;
  }
  const at::Tensor& t = slot.toTensor();
  if (!t.defined() || !t.is_cuda()) {
    *why = " is not a CUDA tensor";
    return std::nullopt;
  }
  if (static_cast<DType>(t.scalar_type()) != dtype) {
    *why = " has another dtype than compiled for";
    return std::nullopt;
  }
  return t;
}

bool aligned16(const at::Tensor& t) {
  return reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
}

PeriodicLayout fitting_periodic_layout(IndexMode mode, const std::vector<std::int64_t>& shape,
                                       const std::vector<std::int64_t>& strides, std::int64_t numel,
                                       bool unit_period) {
  const PeriodicLayout layout = periodic_layout(shape, strides);
  if (layout.period < (unit_period ? 1 : 2)) return {};
  if (mode == IndexMode::Periodic && layout.block != numel) return {};
  return layout;
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
