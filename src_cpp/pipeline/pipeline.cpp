#include "pipeline/pipeline.h"

#include <algorithm>

#include "pipeline/plan_archive.h"
#include "runtime/kernel_kinds.h"

namespace mybackend {
namespace {

void run_capability(CompileState& state) {
  const auto& registry = CapabilityRegistry::builtin();
  for (const Node& node : state.graph->nodes()) {
    state.report.decisions.push_back(registry.check(*state.graph, node, state.options.capability));
  }
}

void run_partition(CompileState& state) {
  std::vector<bool> supported, view_only;
  for (const SupportDecision& decision : state.report.decisions) {
    supported.push_back(decision.supported);
    view_only.push_back(decision.op_class == OpClass::View);
  }
  state.report.partitions =
      partition_graph(*state.graph, supported, view_only, state.options.partitioner);
}

void run_fusion(CompileState& state) {
  state.report.fusion = plan_fusion(*state.graph, state.report.partitions, state.options.fusion);
}

// Starts compiling the plan's generated kernels on a thread of their own and
// returns at once (Note [Kernels compiled beside the caller]): the futures
// wait for the batch on their first run.
void run_codegen(CompileState& state) {
  state.compiles = start_generated_compiles(state.graph, generated_groups(state.report.fusion),
                                            state.options.codegen);
}

void run_runtime(CompileState& state) {
  GroupFloorSettings floor;
  floor.enabled = state.options.group_floor;
  floor.context = state.options.group_floor_context;
  if (floor.enabled) {
    const KernelCacheLocation& cache = state.options.codegen.cache;
    std::optional<std::string> root;
    if (cache.kind != KernelCacheLocation::Kind::Off)
      root = kernel_cache_root(cache.kind == KernelCacheLocation::Kind::Directory
                                   ? std::optional<std::string>(cache.directory)
                                   : std::nullopt);
    floor.cache_root = root.value_or("");
  }
  state.executor =
      std::make_unique<Executor>(state.graph, state.report.partitions, state.report.fusion,
                                 state.python_fallback, std::move(state.compiles), floor,
                                 RunSettings{state.options.view_replay, state.options.host_times});
}

}  // namespace

std::vector<c10::IValue> CompiledGraph::run_owning(std::vector<c10::IValue> inputs,
                                                   std::vector<c10::IValue>& given_back) const {
  const std::uint64_t signature = input_signature(inputs);
  if (!recovery_.is_trial(signature)) return runner_->run(std::move(inputs));
  std::vector<c10::IValue> kept = inputs;  // references, for recovery
  std::vector<c10::IValue> outputs;
  try {
    outputs = runner_->run(std::move(inputs));
  } catch (...) {
    given_back = std::move(kept);
    throw;
  }
  recovery_.prove(signature);
  return outputs;
}

std::string CompiledGraph::plan_bytes() const { return save_plan(graph(), planning_, report_); }

std::vector<Stage> compile_stages() {
  return {
      {"verify", [](CompileState& state) { state.graph->verify(); }},
      {"capability", run_capability},
      {"partition", run_partition},
      {"fusion", run_fusion},
      {"codegen", run_codegen},
      {"runtime", run_runtime},
  };
}

std::vector<Stage> planned_stages(std::string plan) {
  const std::vector<Stage> all = compile_stages();
  auto stage = [&all](const char* name) {
    return *std::find_if(all.begin(), all.end(), [name](const Stage& s) { return s.name == name; });
  };
  auto load = [plan = std::move(plan)](CompileState& state) {
    static_cast<CorePlan&>(state.report) = load_plan(*state.graph, state.options, plan);
  };
  return {stage("verify"), {"load_plan", load}, stage("codegen"), stage("runtime")};
}

namespace {

std::unique_ptr<CompiledGraph> run_stages(const std::vector<Stage>& stages,
                                          std::shared_ptr<const Graph> graph,
                                          const CompileOptions& options,
                                          PythonFallback python_fallback) {
  CompileState state;
  state.graph = std::move(graph);
  state.options = options;
  state.python_fallback = std::move(python_fallback);
  for (const Stage& stage : stages) {
    StageTimer timer(state.report.stage_times, stage.name);
    stage.run(state);
  }
  return std::make_unique<CompiledGraph>(std::move(state.executor), std::move(state.report),
                                         state.options);
}

}  // namespace

std::unique_ptr<CompiledGraph> compile_graph(std::shared_ptr<const Graph> graph,
                                             const CompileOptions& options,
                                             PythonFallback python_fallback) {
  return run_stages(compile_stages(), std::move(graph), options, std::move(python_fallback));
}

std::unique_ptr<CompiledGraph> compile_planned_graph(std::shared_ptr<const Graph> graph,
                                                     std::string plan,
                                                     const CompileOptions& options,
                                                     PythonFallback python_fallback) {
  return run_stages(planned_stages(std::move(plan)), std::move(graph), options,
                    std::move(python_fallback));
}

}  // namespace mybackend
