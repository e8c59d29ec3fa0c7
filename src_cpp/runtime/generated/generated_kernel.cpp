#include "runtime/generated/generated_kernel.h"

#include "common/error.h"

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/cuda/CUDAContext.h>
#include <execinfo.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "codegen/compile_pool.h"
#include "codegen/device_sources.h"
#include "codegen/emit.h"
#include "codegen/kernel_cache.h"
#include "runtime/generated/kernel_launch.h"

namespace mybackend {
namespace {

// MYBACKEND_DEBUG_POINTWISE=1: trace compile steps to stderr, and print a
// native backtrace on a crash (debugging aid for GPU machines without gdb).
// The crash handlers go in with the first trace, at a compile: importing
// the extension installs none (issue 34).
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
  std::fprintf(stderr, "mybackend generated kernels: %s\n", text.c_str());
  std::fflush(stderr);
}

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

std::optional<std::string> kernel_cache_problem(const std::string& root) {
  std::string why;
  if (open_entries_directory(root, &why)) return std::nullopt;
  return why;
}

std::optional<std::string> kernel_cache_root(const std::optional<std::string>& directory) {
  if (directory && directory->empty()) return std::nullopt;  // the user turned it off
  KernelCacheOptions options;
  if (directory) options.directory = *directory;
  return resolve_cache_directory(options, process_environment(), nullptr);
}

std::vector<std::pair<std::string, std::uint64_t>> kernel_cache_counters() {
  const KernelCacheStats stats = kernel_cache().stats();
  return {{"memory_hits", stats.memory_hits},
          {"disk_hits", stats.disk_hits},
          {"compiles", stats.compiles},
          {"disk_rejects", stats.disk_rejects},
          {"disk_write_failures", stats.disk_write_failures},
          {"compile_us", stats.compile_us},
          {"batch_wall_us", stats.batch_wall_us}};
}

namespace {

// CUBIN for the GPU the graph runs on when there is one; else PTX for the
// oldest architecture NVRTC supports (loads anywhere newer).
GpuTarget target_for(int device_index, const std::string& forced) {
  if (!forced.empty()) return GpuTarget::parse(forced);  // CodegenOptions::forced_target
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

}  // namespace

namespace {

KernelBuild build_for(const Graph& graph, const GeneratedGroup& generated) {
  MB_ASSERT(generated.build != nullptr, "no generated kernel for kind ",
            kernel_kind_name(generated.group.kind()));
  return generated.build(graph, generated.group);
}

}  // namespace

std::vector<GeneratedCompileResult> compile_generated_groups(
    const Graph& graph, const std::vector<GeneratedGroup>& groups, const CodegenOptions& options) {
  std::vector<GeneratedCompileResult> results(groups.size());
  if (groups.empty()) return results;
  if (!options.switched_off.empty()) {  // Note [Generated-kernel kill switch]
    for (auto& r : results) r.problem = options.switched_off;
    return results;
  }
  struct Pending {
    KernelBuild build;
    std::size_t first_request = 0;
    std::string target;
    NvrtcOptions options;
  };
  std::vector<Pending> pending(groups.size());
  std::vector<CompileRequest> requests;
  std::map<int, GpuTarget> targets;
  trace("compile_generated_groups: " + std::to_string(groups.size()) + " groups");
  for (std::size_t k = 0; k < groups.size(); ++k) {
    try {
      Pending& p = pending[k];
      p.build = build_for(graph, groups[k]);
      auto it = targets.find(p.build.device_index);
      if (it == targets.end())
        it = targets
                 .emplace(p.build.device_index,
                          target_for(p.build.device_index, options.forced_target))
                 .first;
      p.options.target = it->second;
      p.target = p.options.target.name() + (p.options.target.cubin ? " cubin" : " ptx");
      p.first_request = requests.size();
      const std::size_t now = std::min(p.build.compiled_now, p.build.kernels.size());
      for (std::size_t v = 0; v < now; ++v)
        requests.push_back(compile_request(p.build.kernels[v], p.options));
    } catch (const std::exception& e) {
      results[k].problem = std::string("emitting the kernel failed: ") + e.what();
    }
  }
  std::vector<CompileOutcome> outcomes;
  trace("compiling " + std::to_string(requests.size()) + " requests");
  const std::string directory = entries_directory(options.cache);
  try {
    outcomes = kernel_cache().get_all(requests, CompilePool(0), directory);
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
    std::vector<Variant> variants;
    for (std::size_t v = 0; v < p.build.kernels.size(); ++v) {
      if (v >= p.build.compiled_now) {
        // Note [Variants compiled on first use]
        auto compile = [request = compile_request(p.build.kernels[v], p.options), directory] {
          return kernel_cache().get(request, directory);
        };
        variants.push_back(Variant{std::move(p.build.kernels[v]), VariantImage(compile)});
        continue;
      }
      const CompileOutcome& outcome = outcomes[p.first_request + v];
      if (!outcome.ok()) {
        results[k].problem = "NVRTC failed: " + outcome.error;
        break;
      }
      variants.push_back(Variant{std::move(p.build.kernels[v]), VariantImage(outcome.kernel)});
    }
    if (!results[k].problem.empty()) continue;
    trace("group " + std::to_string(k) + " ready");
    results[k].kernel = p.build.make(std::move(variants), p.target);
  }
  return results;
}

}  // namespace mybackend

#else  // !MYBACKEND_WITH_CUDA

namespace mybackend {

// Without CUDA no kernel is generated, so no cache folder is ever used.
std::optional<std::string> kernel_cache_problem(const std::string& /*root*/) {
  return std::nullopt;
}

std::optional<std::string> kernel_cache_root(const std::optional<std::string>& /*directory*/) {
  return std::nullopt;
}

std::vector<std::pair<std::string, std::uint64_t>> kernel_cache_counters() {
  return {{"memory_hits", 0},         {"disk_hits", 0},  {"compiles", 0},     {"disk_rejects", 0},
          {"disk_write_failures", 0}, {"compile_us", 0}, {"batch_wall_us", 0}};
}

std::vector<GeneratedCompileResult> compile_generated_groups(
    const Graph& graph, const std::vector<GeneratedGroup>& groups,
    const CodegenOptions& /*options*/) {
  (void)graph;
  std::vector<GeneratedCompileResult> results(groups.size());
  for (auto& r : results) r.problem = "this build of mybackend has no CUDA support";
  return results;
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
