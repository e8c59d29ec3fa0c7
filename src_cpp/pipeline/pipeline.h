// The C++ half of the pipeline, as data: an ordered list of named stages
// over one CompileState. The driver times each stage; explain() reports the
// times under the same names the folders carry.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "capability/registry.h"
#include "common/stage_timer.h"
#include "fusion/fusion_plan.h"
#include "ir/graph.h"
#include "partition/partitioner.h"
#include "pipeline/core_plan.h"
#include "runtime/cuda_graph_runner.h"
#include "runtime/executor.h"
#include "runtime/generated/background_compile.h"
#include "runtime/generated/generated_kernel.h"
#include "runtime/recovery_window.h"

namespace mybackend {

// The planning stages' options (capability, partitioner, fusion), then the rest.
struct CompileOptions : PlanningOptions {
  CudaGraphPolicy cuda_graphs;
  // Where generated kernels persist, whether they compile at all, and for
  // which target (the codegen stage's own options).
  CodegenOptions codegen;
  // Library groups timed against their ATen form (Note [A group is timed
  // against its ATen form] in runtime/group_floor.h; option eager_floor),
  // and what keys their saved choices (Note [Group floor choices on disk]).
  bool group_floor = false;
  std::string group_floor_context;
  // Views inside the graph made without the dispatcher from their second
  // call (Note [Views replayed without the dispatcher] in
  // runtime/view_replay.h); MYBACKEND_VIEW_REPLAY=0 turns it off.
  bool view_replay = true;
  // Host time by step label (Note [Host time by step] in
  // runtime/host_times.h); MYBACKEND_HOST_TIMES=1 turns it on.
  bool host_times = false;
};

// Everything a compile decides, kept for reports: the plan (decisions,
// partitions, fusion plan) and the stages' times.
struct CompileReport : CorePlan {
  StageTimes stage_times;
};

class CompiledGraph {
 public:
  CompiledGraph(std::unique_ptr<Executor> executor, CompileReport report,
                const CompileOptions& options)
      : executor_(std::move(executor)),
        runner_(std::make_unique<CudaGraphRunner>(*executor_, options.cuda_graphs)),
        report_(std::move(report)),
        planning_(options) {}
  std::vector<c10::IValue> run(std::vector<c10::IValue> inputs) const {
    return runner_->run(std::move(inputs));
  }
  // A boxed call (Note [Input ownership] in recovery_window.h): the inputs
  // are taken over and die as the graph runs, except on a trial call, which
  // keeps them and, when it fails, moves them to `given_back` before the
  // error propagates, so that the caller can rerun the graph eagerly.
  std::vector<c10::IValue> run_owning(std::vector<c10::IValue> inputs,
                                      std::vector<c10::IValue>& given_back) const;
  const CompileReport& report() const { return report_; }
  // The plan and the options it was made under, as bytes that
  // compile_planned_graph() takes (Note [Plan archive]).
  std::string plan_bytes() const;
  ExecutionStats stats() const { return executor_->stats(); }
  const Graph& graph() const { return executor_->graph(); }
  const CudaGraphRunner& cuda_graphs() const { return *runner_; }
  const Executor& executor() const { return *executor_; }

 private:
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<CudaGraphRunner> runner_;  // declared after executor_: it refers to it
  CompileReport report_;
  PlanningOptions planning_;         // what report_'s plan was made under
  mutable RecoveryWindow recovery_;  // run() is const: it only learns which calls may skip recovery
};

struct CompileState {
  std::shared_ptr<const Graph> graph;
  CompileOptions options;
  PythonFallback python_fallback;
  CompileReport report;
  CompileFutures compiles;  // codegen's, consumed by the runtime stage
  std::unique_ptr<Executor> executor;
};

struct Stage {
  std::string name;
  std::function<void(CompileState&)> run;
};

// verify -> capability -> partition -> fusion -> codegen -> runtime
std::vector<Stage> compile_stages();

// verify -> load_plan -> codegen -> runtime: compile_stages() with the
// planning stages' results read from `plan` (CompiledGraph::plan_bytes() of
// a compile of the same graph under the same planning options) instead.
std::vector<Stage> planned_stages(std::string plan);

std::unique_ptr<CompiledGraph> compile_graph(std::shared_ptr<const Graph> graph,
                                             const CompileOptions& options,
                                             PythonFallback python_fallback);

// The same from a saved plan: Error when `plan` is not one for this graph
// and these options (Note [Plan archive]), before anything is compiled.
std::unique_ptr<CompiledGraph> compile_planned_graph(std::shared_ptr<const Graph> graph,
                                                     std::string plan,
                                                     const CompileOptions& options,
                                                     PythonFallback python_fallback);

}  // namespace mybackend
