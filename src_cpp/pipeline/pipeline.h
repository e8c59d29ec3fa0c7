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
#include "runtime/cuda_graph_runner.h"
#include "runtime/executor.h"
#include "runtime/generated/background_compile.h"
#include "runtime/generated/generated_kernel.h"
#include "runtime/recovery_window.h"

namespace mybackend {

struct CompileOptions {
  CapabilityOptions capability;
  PartitionerOptions partitioner;
  CudaGraphPolicy cuda_graphs;
  FusionOptions fusion;
  // Where generated kernels persist, whether they compile at all, and for
  // which target (the codegen stage's own options).
  CodegenOptions codegen;
};

// Everything a compile decides, kept for reports.
struct CompileReport {
  StageTimes stage_times;
  std::vector<SupportDecision> decisions;  // per node
  PartitionResult partitions;
  FusionPlan fusion;
};

class CompiledGraph {
 public:
  CompiledGraph(std::unique_ptr<Executor> executor, CompileReport report,
                const CudaGraphPolicy& cuda_graphs)
      : executor_(std::move(executor)),
        runner_(std::make_unique<CudaGraphRunner>(*executor_, cuda_graphs)),
        report_(std::move(report)) {}
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
  ExecutionStats stats() const { return executor_->stats(); }
  const Graph& graph() const { return executor_->graph(); }
  const CudaGraphRunner& cuda_graphs() const { return *runner_; }
  const Executor& executor() const { return *executor_; }

 private:
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<CudaGraphRunner> runner_;  // declared after executor_: it refers to it
  CompileReport report_;
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

std::unique_ptr<CompiledGraph> compile_graph(std::shared_ptr<const Graph> graph,
                                             const CompileOptions& options,
                                             PythonFallback python_fallback);

}  // namespace mybackend
