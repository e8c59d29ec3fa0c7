// How the runtime runs each kind of kernel group: one row per kind.
//
// Note [One row per kernel kind]
// The executor, its counters, the stats() dictionary and the profiler
// ranges used to name every kind in a switch of their own; a new kind meant
// editing each. Now they read this table: a new kind adds its group (spec/,
// fusion/) as one alternative of KernelPayload (Note [One payload per
// group] in fusion/fusion_plan.h), its planner, its runner
// (runtime/generated/ or runtime/libraries/) and one row in
// kernel_kinds.cpp. A generated kind's row names the function that emits
// its kernels (the codegen stage compiles them, Note [Kernels compiled
// beside the caller]); a library kind's row names the function that makes
// its runner. A row's hooks read the group's payload: they are called only
// for groups of the row's kind, and a group's kind is its payload's.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "fusion/fusion_plan.h"
#include "ir/graph.h"
#include "runtime/generated/generated_kernel.h"
#include "runtime/libraries/library_group.h"

namespace mybackend {

enum class Engine : std::int8_t {
  Aten,       // its nodes run as ATen calls
  Generated,  // an NVRTC kernel of ours
  Library,    // a cuBLASLt or cuDNN call
};

struct KernelKindTraits {
  KernelKind kind = KernelKind::AtenSequence;
  Engine engine = Engine::Aten;
  // Its steps' range on torch.profiler's CPU timeline (Note [Profiler ranges]).
  const char* profiler_range = nullptr;
  // stats() keys: runs by its engine, and runs that fell back to ATen calls
  // (generated kinds share one fallback key). Null for ATen sequences.
  const char* run_counter = nullptr;
  const char* fallback_counter = nullptr;
  // The values the engine writes: the memory plan may place them in buffers.
  std::vector<ValueId> (*outputs)(const KernelGroup&) = nullptr;
  // Whether those buffers are sized as contiguous tensors (else by strides).
  bool contiguous_outputs = false;
  // Values the engine reads besides its nodes' inputs (kept alive for it).
  std::vector<ValueId> (*reads)(const KernelGroup&) = nullptr;
  // Library kinds: the runner (null runner: runs as ATen calls, with why).
  RunnerResult (*make_runner)(const Graph&, const KernelGroup&) = nullptr;
  // Generated kinds in CUDA builds: the kernels to compile and how to run them.
  KernelBuildFn build = nullptr;
  // Generated kinds in CUDA builds: the CUDA C++ of the plan's (fast) spec,
  // literals as planned, for explain().
  std::string (*source)(const KernelGroup&) = nullptr;
  // True when its groups may run twice for one call with the same result and
  // no other effect (no RNG, no mutation, fresh outputs): each is then timed
  // against its ATen form (Note [A group is timed against its ATen form] in
  // group_floor.h). A kind's property, known before its kernels compile.
  bool timed_against_aten = false;
};

// The row of `kind`.
const KernelKindTraits& kernel_kind_traits(KernelKind kind);

// True when an engine (generated kernel or library) would run `group`.
bool runs_on_engine(const KernelGroup& group);

// The CUDA C++ a generated group compiles, for explain(); empty for other
// groups and without CUDA.
std::string generated_source(const KernelGroup& group);

// The plan's groups a generated kernel would run, each with its kind's
// build: what the codegen stage compiles (Note [Kernels compiled beside the
// caller]).
std::vector<GeneratedGroup> generated_groups(const FusionPlan& fusion);

// Per-kind counts of engine runs and fallbacks, indexed by kind_index().
using KindCounts = std::array<std::int64_t, kKernelKindCount>;

// The stats() entries of the engine counters, in table order: the total of
// generated runs ("generated_kernels_run"), then each kind's run counter and
// fallback counter (a shared key sums its kinds).
std::vector<std::pair<std::string, std::int64_t>> engine_counters(const KindCounts& runs,
                                                                  const KindCounts& fallbacks);

}  // namespace mybackend
