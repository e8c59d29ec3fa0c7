// Generated kernels compiled beside the caller.
//
// Note [Kernels compiled beside the caller]
// A training compile hands mybackend the forward graph, then the backward,
// then runs the forward: NVRTC for one graph took the wall time of its
// slowest kernel (0.5-0.8 s) with nothing else going on, twice. The codegen
// stage (pipeline.cpp) now starts a graph's compile batch on a thread of its
// own and returns at once, handing the executor a future per group: the backward graph is lowered
// and planned, and its batch compiles, while the forward's batch is still compiling, and the
// backward's batch overlaps the forward's first run. Each generated group gets a PendingKernel in
// its place; its first run() waits for the batch (no GPU work is waited for, only the host's
// compile), then it runs the compiled kernel, or returns false with the compile's problem so that
// the executor runs the group's ATen calls (Note [Never an error to the user]).
//
// A batch's thread never touches Python. It is joined when the batch's last
// PendingKernel is destroyed, and wait_for_background_compiles() (called at
// interpreter exit, mybackend/__init__.py) waits for every batch still
// compiling, so that no compile runs while the process tears down the
// kernel cache and NVRTC. A child forked while a batch compiles has no
// thread for it: it waits for none of its parent's batches, and its groups
// of such a batch run as ATen calls.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fusion/fusion_plan.h"
#include "ir/graph.h"
#include "runtime/generated/generated_kernel.h"
#include "runtime/group_runner.h"

namespace mybackend {

// The codegen stage's result: one runner per generated group of a fusion
// plan, keyed by (partition, group index), each waiting for its batch on
// first use. The executor takes them over.
class CompileFutures {
 public:
  void add(int partition, int group, std::unique_ptr<GroupRunner> runner);
  // Group `group` of partition `partition`'s runner, or null when it has none.
  std::unique_ptr<GroupRunner> take(int partition, int group);
  std::size_t size() const { return runners_.size(); }

 private:
  std::map<std::pair<int, int>, std::unique_ptr<GroupRunner>> runners_;
};

// Starts compiling `groups` on a thread of their own and returns at once, a
// runner for each under its (partition, index) (Note [Kernels compiled
// beside the caller]).
CompileFutures start_generated_compiles(std::shared_ptr<const Graph> graph,
                                        std::vector<GeneratedGroup> groups,
                                        CodegenOptions options = {});

// Blocks until every batch started so far has finished compiling.
void wait_for_background_compiles();

// Microseconds callers have spent waiting for batches, process-wide.
std::uint64_t background_compile_wait_us();

}  // namespace mybackend
