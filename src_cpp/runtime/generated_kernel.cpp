#include "runtime/generated_kernel.h"

#include "common/error.h"

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/cuda/CUDAContext.h>
#include <ATen/ops/empty_strided.h>
#include <c10/cuda/CUDAGuard.h>
#include <execinfo.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "codegen/compile_pool.h"
#include "codegen/device_sources.h"
#include "codegen/emit.h"
#include "codegen/kernel_cache.h"
#include "runtime/cuda_driver.h"

namespace mybackend {
namespace {

constexpr std::int64_t kIndex32Limit = std::int64_t{1} << 30;  // see PointwiseSpec::index64

// MYBACKEND_DEBUG_POINTWISE=1: trace compile steps to stderr, and print a
// native backtrace on a crash (debugging aid for GPU machines without gdb).
bool debug_enabled() {
  static const bool on = [] {
    const char* v = std::getenv("MYBACKEND_DEBUG_POINTWISE");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  return on;
}

void on_crash(int signal) {
  void* frames[64];
  const int count = backtrace(frames, 64);
  std::fprintf(stderr, "mybackend: signal %d, native backtrace:\n", signal);
  backtrace_symbols_fd(frames, count, 2);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

void trace(const std::string& text) {
  if (!debug_enabled()) return;
  static const bool installed = [] {
    std::signal(SIGSEGV, on_crash);
    std::signal(SIGABRT, on_crash);
    return true;
  }();
  (void)installed;
  std::fprintf(stderr, "mybackend pointwise: %s\n", text.c_str());
  std::fflush(stderr);
}

// Installed when the extension loads, so that a crash anywhere is reported.
const bool kCrashHandlerInstalled = [] {
  if (!debug_enabled()) return false;
  std::signal(SIGSEGV, on_crash);
  std::signal(SIGABRT, on_crash);
  return true;
}();

KernelCache& kernel_cache() {
  // One per process: kernels compiled for one graph serve every other. Its
  // disk half is chosen per compile (entries_directory below).
  static KernelCache cache(
      KernelCacheOptions{KernelCacheMode::MemoryOnly, "", "mybackend-pointwise-runtime-1"});
  return cache;
}

// The disk cache's entries directory for one compile, or empty for memory
// only. Resolved at each compile, so that MYBACKEND_CACHE_DIR and the option
// take effect without restarting; an unusable directory costs only the disk
// half (Note [Never an error to the user]).
std::string entries_directory(const KernelCacheLocation& location) {
  if (location.kind == KernelCacheLocation::Kind::Off) return {};
  KernelCacheOptions options;
  if (location.kind == KernelCacheLocation::Kind::Directory) options.directory = location.directory;
  std::string why;
  std::optional<std::string> root = resolve_cache_directory(options, process_environment(), &why);
  std::optional<std::string> entries = root ? open_entries_directory(*root, &why) : std::nullopt;
  if (!entries) {
    trace("no disk cache: " + why);
    return {};
  }
  return *entries;
}

}  // namespace

std::vector<std::pair<std::string, std::uint64_t>> kernel_cache_counters() {
  const KernelCacheStats stats = kernel_cache().stats();
  return {{"memory_hits", stats.memory_hits},
          {"disk_hits", stats.disk_hits},
          {"compiles", stats.compiles},
          {"disk_rejects", stats.disk_rejects},
          {"disk_write_failures", stats.disk_write_failures}};
}

namespace {

// CUBIN for the GPU the graph runs on when there is one; else PTX for the
// oldest architecture NVRTC supports (loads anywhere newer).
GpuTarget target_for(int device_index) {
  // Debugging knob: compile for this target ("sm_90", "compute_80") instead.
  if (const char* forced = std::getenv("MYBACKEND_NVRTC_TARGET"); forced && *forced) {
    return GpuTarget::parse(forced);
  }
  std::vector<int> archs = nvrtc_supported_archs();
  MB_CHECK(!archs.empty(), "NVRTC reports no supported GPU architecture");
  std::sort(archs.begin(), archs.end());
  GpuTarget target;
  target.arch = archs.front();
  trace("target_for: checking for a GPU");
  if (at::cuda::is_available() && device_index < c10::cuda::device_count()) {
    const int index = device_index < 0 ? c10::cuda::current_device() : device_index;
    trace("target_for: device properties of " + std::to_string(index));
    const cudaDeviceProp* props = at::cuda::getDeviceProperties(index);
    const int arch = props->major * 10 + props->minor;
    trace("target_for: arch " + std::to_string(arch));
    if (std::find(archs.begin(), archs.end(), arch) != archs.end()) {
      target.arch = arch;
      target.cubin = true;
    } else {
      for (int a : archs) {
        if (a <= arch) target.arch = a;
      }
    }
  }
  return target;
}

struct Variant {
  EmittedKernel kernel;
  std::shared_ptr<const CompiledKernel> image;
};

class PointwiseKernel final : public GeneratedPointwise {
 public:
  PointwiseKernel(const Graph& graph, std::shared_ptr<const PointwiseGroup> group, Variant fast,
                  Variant general, bool has_fast, std::string target)
      : graph_(graph),
        group_(std::move(group)),
        fast_(std::move(fast)),
        general_(std::move(general)),
        has_fast_(has_fast),
        target_(std::move(target)) {}

  bool run(ValueSlots& slots, const SymbolBindings& bindings) const override {
    if (disabled_.load(std::memory_order_relaxed)) return false;
    try {
      return launch(slots, bindings);
    } catch (const std::exception& e) {
      // Load or launch failed: this group runs as ATen calls from now on.
      note(e.what());
      disabled_.store(true);
      return false;
    }
  }

  std::string problem() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return problem_;
  }

  std::string description() const override {
    std::string text = "pointwise: " + fast_.kernel.entries[0].name;
    if (has_fast_) text += " + " + general_.kernel.entries[0].name + " (general)";
    return text + " for " + target_;
  }

 private:
  struct Loaded {
    CUcontext context = nullptr;
    std::unique_ptr<cuda::Module> fast, general;
    CUfunction fast_fn = nullptr, general_fn = nullptr;
    int sm_count = 1;
  };

  void note(const std::string& why) const {
    std::lock_guard<std::mutex> lock(mutex_);
    problem_ = why;
  }
  bool fail(const std::string& why) const {
    note(why);
    return false;
  }

  const Loaded& loaded(int index) const {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = loaded_.find(index);
    if (it != loaded_.end()) return *it->second;
    auto entry = std::make_unique<Loaded>();
    entry->context = cuda::primary_context(index);
    cuda::ensure_current(entry->context);
    entry->general = std::make_unique<cuda::Module>(general_.image->image);
    entry->general_fn = entry->general->function(general_.kernel.entries[0].name);
    if (has_fast_) {
      entry->fast = std::make_unique<cuda::Module>(fast_.image->image);
      entry->fast_fn = entry->fast->function(fast_.kernel.entries[0].name);
    }
    entry->sm_count = std::max(1, at::cuda::getDeviceProperties(index)->multiProcessorCount);
    return *loaded_.emplace(index, std::move(entry)).first->second;
  }

  // Per-dim strides of `t` over the iteration space (stride 0 broadcasts);
  // false when t does not broadcast to `shape`.
  static bool iteration_strides(const at::Tensor& t, const std::vector<std::int64_t>& shape,
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

  static std::int64_t max_offset(const std::vector<std::int64_t>& shape,
                                 const std::vector<std::int64_t>& strides) {
    std::int64_t extent = 0;
    for (std::size_t d = 0; d < shape.size(); ++d)
      extent += (shape[d] - 1) * (strides[d] < 0 ? -strides[d] : strides[d]);
    return extent;
  }

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
      if (!t.is_contiguous() || t.numel() != numel) return false;
      if (args[k].mode == IndexMode::Aligned &&
          reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 != 0)
        return false;
    }
    return true;
  }

  bool launch(ValueSlots& slots, const SymbolBindings& bindings) const {
    const PointwiseGroup& g = *group_;
    const int rank = g.spec.rank;
    std::vector<at::Tensor> tensors;  // inputs, then outputs
    for (std::size_t k = 0; k < g.inputs.size(); ++k) {
      const c10::IValue& value = slots[static_cast<std::size_t>(g.inputs[k])];
      if (!value.isTensor()) return fail("input " + std::to_string(k) + " is not a tensor");
      const at::Tensor& t = value.toTensor();
      if (!t.defined() || !t.is_cuda()) return fail("input " + std::to_string(k) + " is not CUDA");
      if (k > 0 && t.device() != tensors[0].device()) return fail("inputs on different devices");
      if (static_cast<DType>(t.scalar_type()) != g.spec.inputs[k].dtype)
        return fail("input " + std::to_string(k) + " has another dtype than compiled for");
      tensors.push_back(t);
    }
    if (tensors.empty()) return fail("the group reads no tensor");
    std::vector<std::int64_t> shape(static_cast<std::size_t>(rank));
    std::int64_t numel = 1;
    const TensorType& out0 = graph_.value(g.outputs[0]).tensor;
    for (int d = 0; d < rank; ++d) {
      std::optional<std::int64_t> size = out0.sizes[static_cast<std::size_t>(d)].evaluate(bindings);
      if (!size) return fail("a size of the output depends on an unbound symbol");
      shape[static_cast<std::size_t>(d)] = *size;
      numel *= *size;
    }
    std::vector<std::vector<std::int64_t>> strides(g.inputs.size() + g.outputs.size());
    for (std::size_t k = 0; k < tensors.size(); ++k) {
      if (!iteration_strides(tensors[k], shape, strides[k]))
        return fail("input " + std::to_string(k) + " does not broadcast to the output shape");
    }
    const c10::Device device = tensors[0].device();
    c10::cuda::CUDAGuard guard(device);
    for (std::size_t k = 0; k < g.outputs.size(); ++k) {
      const TensorType& t = graph_.value(g.outputs[k]).tensor;
      std::vector<std::int64_t> out_strides(static_cast<std::size_t>(rank));
      for (int d = 0; d < rank; ++d) {
        std::optional<std::int64_t> s = t.strides[static_cast<std::size_t>(d)].evaluate(bindings);
        if (!s) return fail("a stride of an output depends on an unbound symbol");
        out_strides[static_cast<std::size_t>(d)] = *s;
      }
      const auto dtype = static_cast<c10::ScalarType>(g.spec.outputs[k].tensor.dtype);
      tensors.push_back(at::empty_strided(shape, out_strides, tensors[0].options().dtype(dtype)));
      iteration_strides(tensors.back(), shape, strides[g.inputs.size() + k]);
    }
    if (numel > 0) {
      std::vector<TensorArg> args;
      for (const auto& t : g.spec.inputs) args.push_back(t);
      for (const auto& o : g.spec.outputs) args.push_back(o.tensor);
      const bool fast = has_fast_ && fast_fits(tensors, args, strides, shape, numel);
      launch_variant(fast, tensors, strides, shape, numel, device.index());
    }
    for (std::size_t k = 0; k < g.outputs.size(); ++k) {
      slots[static_cast<std::size_t>(g.outputs[k])] = tensors[g.inputs.size() + k];
    }
    return true;
  }

  void launch_variant(bool fast, const std::vector<at::Tensor>& tensors,
                      const std::vector<std::vector<std::int64_t>>& strides,
                      const std::vector<std::int64_t>& shape, std::int64_t numel,
                      int device_index) const {
    const Variant& variant = fast ? fast_ : general_;
    const KernelEntry& entry = variant.kernel.entries[0];
    const std::size_t n_inputs = group_->inputs.size();
    std::vector<std::array<std::int64_t, kMaxKernelRank>> words(entry.params.size());
    std::vector<void*> args(entry.params.size());
    // Which tensor a parameter names: "in3" / "stride_in3" -> 3, "out1" -> n_inputs + 1.
    auto tensor_of = [&](const std::string& name) {
      const std::string base = name.rfind("stride_", 0) == 0 ? name.substr(7) : name;
      if (base.rfind("out", 0) == 0) return n_inputs + std::stoul(base.substr(3));
      MB_ASSERT(base.rfind("in", 0) == 0, "unexpected kernel parameter ", name);
      return static_cast<std::size_t>(std::stoul(base.substr(2)));
    };
    for (std::size_t i = 0; i < entry.params.size(); ++i) {
      const KernelParam& p = entry.params[i];
      auto& w = words[i];
      w.fill(0);
      switch (p.kind) {
        case KernelParam::Kind::Pointer:
          w[0] = reinterpret_cast<std::int64_t>(tensors[tensor_of(p.name)].data_ptr());
          break;
        case KernelParam::Kind::Int64:
          MB_ASSERT(p.name == "numel", "unexpected kernel parameter ", p.name);
          w[0] = numel;
          break;
        case KernelParam::Kind::Dims: {
          const std::vector<std::int64_t>& dims =
              p.name == "shape" ? shape : strides[tensor_of(p.name)];
          MB_ASSERT(static_cast<int>(dims.size()) == p.rank, "rank mismatch for ", p.name);
          std::copy(dims.begin(), dims.end(), w.begin());
          break;
        }
        case KernelParam::Kind::Float64:
          MB_ASSERT(false, "pointwise groups take no scalar arguments, got ", p.name);
      }
      args[i] = w.data();
    }
    const Loaded& l = loaded(device_index);
    cuda::ensure_current(l.context);
    const std::int64_t per_block =
        static_cast<std::int64_t>(entry.block_x) * std::max(1, entry.elements_per_thread);
    const std::int64_t blocks = std::max<std::int64_t>(
        1, std::min<std::int64_t>((numel + per_block - 1) / per_block,
                                  static_cast<std::int64_t>(l.sm_count) * 16));
    const auto stream =
        reinterpret_cast<CUstream>(at::cuda::getCurrentCUDAStream(device_index).stream());
    MB_CU_CHECK(cuda::driver().launch_kernel(
        fast ? l.fast_fn : l.general_fn, static_cast<unsigned>(blocks), 1, 1,
        static_cast<unsigned>(entry.block_x), static_cast<unsigned>(entry.block_y), 1, 0, stream,
        args.data(), nullptr));
  }

  const Graph& graph_;
  std::shared_ptr<const PointwiseGroup> group_;
  Variant fast_, general_;
  bool has_fast_;
  std::string target_;
  mutable std::mutex mutex_;
  mutable std::map<int, std::unique_ptr<Loaded>> loaded_;
  mutable std::atomic<bool> disabled_{false};
  mutable std::string problem_;
};

}  // namespace

bool generated_kernels_enabled() {
  const char* v = std::getenv("MYBACKEND_GENERATED_KERNELS");
  if (v == nullptr) return false;
  const std::string value(v);
  return value == "1" || value == "on" || value == "true";
}

std::vector<GeneratedCompileResult> compile_pointwise_groups(
    const Graph& graph, const std::vector<std::shared_ptr<const PointwiseGroup>>& groups,
    const KernelCacheLocation& cache) {
  std::vector<GeneratedCompileResult> results(groups.size());
  if (groups.empty()) return results;
  if (!generated_kernels_enabled()) {
    // Note [Generated kernels are opt-in for now]
    for (auto& r : results) {
      r.problem =
          "generated kernels are off until validated on a GPU: set "
          "MYBACKEND_GENERATED_KERNELS=1 to compile and launch them";
    }
    return results;
  }
  struct Pending {
    Variant fast, general;
    bool has_fast = false;
    std::size_t fast_request = 0, general_request = 0;
    std::string target;
  };
  std::vector<Pending> pending(groups.size());
  std::vector<CompileRequest> requests;
  std::map<int, GpuTarget> targets;
  trace("compile_pointwise_groups: " + std::to_string(groups.size()) + " groups");
  for (std::size_t k = 0; k < groups.size(); ++k) {
    const PointwiseGroup& g = *groups[k];
    try {
      const int index = graph.value(g.outputs[0]).tensor.device.index;
      auto it = targets.find(index);
      if (it == targets.end()) it = targets.emplace(index, target_for(index)).first;
      CompileOptions options;
      options.target = it->second;
      Pending& p = pending[k];
      p.target = options.target.name() + (options.target.cubin ? " cubin" : " ptx");
      p.general.kernel = emit_pointwise(g.general);
      p.has_fast = g.spec.to_string() != g.general.to_string();
      p.general_request = requests.size();
      requests.push_back(compile_request(p.general.kernel, options));
      if (p.has_fast) {
        p.fast.kernel = emit_pointwise(g.spec);
        p.fast_request = requests.size();
        requests.push_back(compile_request(p.fast.kernel, options));
      } else {
        p.fast.kernel = p.general.kernel;
      }
    } catch (const std::exception& e) {
      results[k].problem = std::string("emitting the kernel failed: ") + e.what();
    }
  }
  std::vector<CompileOutcome> outcomes;
  trace("compiling " + std::to_string(requests.size()) + " requests");
  try {
    outcomes = kernel_cache().get_all(requests, CompilePool(0), entries_directory(cache));
    trace("compiled");
  } catch (const std::exception& e) {
    for (auto& r : results) {
      if (r.problem.empty()) r.problem = std::string("compiling kernels failed: ") + e.what();
    }
    return results;
  }
  for (std::size_t k = 0; k < groups.size(); ++k) {
    if (!results[k].problem.empty()) continue;
    Pending& p = pending[k];
    const CompileOutcome& general = outcomes[p.general_request];
    if (!general.ok()) {
      results[k].problem = "NVRTC failed: " + general.error;
      continue;
    }
    p.general.image = general.kernel;
    if (p.has_fast) {
      const CompileOutcome& fast = outcomes[p.fast_request];
      if (!fast.ok()) {
        results[k].problem = "NVRTC failed: " + fast.error;
        continue;
      }
      p.fast.image = fast.kernel;
    }
    trace("group " + std::to_string(k) + " ready");
    results[k].kernel = std::make_unique<PointwiseKernel>(
        graph, groups[k], std::move(p.fast), std::move(p.general), p.has_fast, p.target);
  }
  return results;
}

}  // namespace mybackend

#else  // !MYBACKEND_WITH_CUDA

namespace mybackend {

bool generated_kernels_enabled() { return false; }

std::vector<std::pair<std::string, std::uint64_t>> kernel_cache_counters() {
  return {{"memory_hits", 0},
          {"disk_hits", 0},
          {"compiles", 0},
          {"disk_rejects", 0},
          {"disk_write_failures", 0}};
}

std::vector<GeneratedCompileResult> compile_pointwise_groups(
    const Graph& graph, const std::vector<std::shared_ptr<const PointwiseGroup>>& groups,
    const KernelCacheLocation& /*cache*/) {
  std::vector<GeneratedCompileResult> results(groups.size());
  for (auto& r : results) r.problem = "this build of mybackend has no CUDA support";
  return results;
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
