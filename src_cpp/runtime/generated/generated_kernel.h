// Generated kernels at run time (CUDA engine I: pointwise, reduction, norm,
// cast, pool and transpose groups): compiled with NVRTC when the graph is
// compiled, loaded into the GPU on first launch, launched on the current
// PyTorch CUDA stream. One file per kind (pointwise_kernel.cpp,
// reduction_kernel.cpp, norm_kernel.cpp, cast_group_kernel.cpp,
// pool_kernel.cpp, transpose_kernel.cpp); what they share is in
// kernel_launch.h.
//
// Note [Compile now, load later]
// compile_generated_groups() runs on a thread the codegen stage starts
// (Note [Kernels compiled beside the caller] in background_compile.h): it
// emits both spec variants of each group (Note [Two pointwise variants]) and
// compiles the fast one through the process-wide KernelCache on a
// CompilePool, the general one on first use (Note [Variants compiled on
// first use] in kernel_launch.h). NVRTC needs no GPU, so this works on CPU
// machines (PTX for the lowest architecture NVRTC supports). Nothing touches
// the driver until run() is first called: that is where the image is loaded
// (per device) and the functions looked up.
//
// Note [Never an error to the user]
// A group that fails to compile keeps running as ATen calls (the reason is
// kept in problems()); a group whose load or launch fails, or whose actual
// tensors break an assumption (device, dtype, broadcast), returns false
// from run() and the executor runs its ATen calls for that call. A load or
// launch failure also disables the group for later calls.
#pragma once

#include <ATen/core/ivalue.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fusion/fusion_plan.h"
#include "ir/graph.h"
#include "runtime/aten_call.h"
#include "runtime/group_runner.h"

namespace mybackend {

// A generated kernel (pointwise, reduction or norm): description() is
// "pointwise: mb_pointwise_<hash> (sm_90 cubin)" and the like.
class GeneratedKernel : public GroupRunner {};

// Note [Generated-kernel kill switch]
// MYBACKEND_GENERATED_KERNELS=0 (or off/false), read with the compile
// options (pipeline/environment.h), keeps every generated group planned and
// reported but run as ATen calls, with that reason in
// Executor::generated_groups(): a way to rule the code generator out when
// hunting a wrong result, without changing the program's options. It reaches
// the codegen stage as CodegenOptions::switched_off, the reason.

// Where compiled kernels are kept between processes (option
// kernel_cache_dir). The in-memory cache is one per process whatever this
// says; only the disk half moves or is turned off.
struct KernelCacheLocation {
  enum class Kind : std::int8_t {
    FromEnvironment,  // $MYBACKEND_CACHE_DIR, else $XDG_CACHE_HOME/mybackend, else ~/.cache
    Directory,        // `directory`
    Off,              // memory only
  };
  Kind kind = Kind::FromEnvironment;
  std::string directory;
};

// The counters of this process's kernel cache (memory_hits, disk_hits,
// compiles, disk_rejects, disk_write_failures, compile_us, batch_wall_us);
// all zero without CUDA.
std::vector<std::pair<std::string, std::uint64_t>> kernel_cache_counters();

// Why the disk cache under `root` is unusable (the core then keeps kernels in
// memory only, Note [Never an error to the user]), or nullopt; creates its
// entries folder when it can. The backend asks, to warn the user.
std::optional<std::string> kernel_cache_problem(const std::string& root);

// The disk cache's root folder as the core resolves it: `directory` when
// given ("" turns the disk cache off: nullopt), else the environment's
// (KernelCacheLocation::Kind::FromEnvironment); nullopt without one, and
// always without CUDA (no kernel is cached there).
std::optional<std::string> kernel_cache_root(const std::optional<std::string>& directory);

struct GeneratedCompileResult {
  std::unique_ptr<GeneratedKernel> kernel;  // null: the group runs as ATen calls
  std::string problem;                      // why it is null
};

struct KernelBuild;  // kernel_launch.h (CUDA builds)

// How a generated kind emits its kernels (its row of the kernel-kind table,
// runtime/kernel_kinds.h).
using KernelBuildFn = KernelBuild (*)(const Graph&, const KernelGroup&);

// A generated group of a fusion plan, where it sits, and how it is emitted.
struct GeneratedGroup {
  KernelGroup group;
  KernelBuildFn build = nullptr;
  int partition = 0;
  int index = 0;  // into the partition's kernel groups
};

// One result per group, in order (Note [Compile now, load later]). The
// groups must outlive the kernels.
// What the codegen stage is told besides the groups (the compile options'
// part that is its own).
struct CodegenOptions {
  KernelCacheLocation cache;  // where compiled kernels persist
  // Not empty: nothing compiles and every group keeps this reason (Note
  // [Generated-kernel kill switch]).
  std::string switched_off;
  // Not empty: compile for this target ("sm_90", "compute_80") instead of
  // the GPU's (a debugging knob, MYBACKEND_NVRTC_TARGET).
  std::string forced_target;
};

std::vector<GeneratedCompileResult> compile_generated_groups(
    const Graph& graph, const std::vector<GeneratedGroup>& groups,
    const CodegenOptions& options = {});

}  // namespace mybackend
