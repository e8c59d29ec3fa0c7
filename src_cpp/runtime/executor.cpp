#include "runtime/executor.h"

#include "common/error.h"
#include "runtime/builtin_ops.h"

namespace mybackend {

Executor::Executor(std::shared_ptr<const Graph> graph, const PartitionResult& partitions,
                   const FusionPlan& fusion, PythonFallback python_fallback,
                   const KernelCacheLocation& kernel_cache)
    : graph_(std::move(graph)), binder_(*graph_), python_fallback_(std::move(python_fallback)) {
  std::size_t total_calls = graph_->nodes().size();
  calls_.reserve(total_calls);  // AtenCall addresses stay put: steps hold indices anyway
  prepare_engine_groups(fusion, kernel_cache);
  for (const ScheduleStep& scheduled : partitions.schedule) {
    if (scheduled.is_partition) {
      add_partition_steps(fusion, scheduled.index);
    } else {
      add_node_step(graph_->node(scheduled.index));
    }
  }
  plan_releases();
}

// Prepares every engine group of the plan, in plan order. Generated
// kernels compile at once (NVRTC in parallel, through the kernel cache);
// matmul groups only get their runner (cuBLASLt is asked on the first run).
// Groups that cannot be prepared keep only their ATen form.
void Executor::prepare_engine_groups(const FusionPlan& fusion,
                                     const KernelCacheLocation& kernel_cache) {
  std::vector<const KernelGroup*> to_compile;
  std::vector<std::size_t> compiled_into;  // per entry of to_compile: index into engine_groups_
  for (const PartitionPlan& plan : fusion.partitions) {
    for (std::size_t g = 0; g < plan.groups.size(); ++g) {
      const KernelGroup& group = plan.groups[g];
      const bool generated = (group.kind == KernelKind::Pointwise && group.pointwise) ||
                             (group.kind == KernelKind::Reduction && group.reduction) ||
                             (group.kind == KernelKind::Norm && group.norm);
      const bool matmul = group.kind == KernelKind::Matmul && group.matmul;
      const bool attention = group.kind == KernelKind::Attention && group.attention;
      const bool conv = group.kind == KernelKind::Conv && group.conv;
      if (!generated && !matmul && !attention && !conv) continue;
      EngineGroup entry;
      entry.status.partition = plan.partition;
      entry.status.group = static_cast<int>(g);
      if (matmul) {
        RunnerResult made = make_matmul_runner(*graph_, group.matmul);
        entry.runner = std::move(made.runner);
        entry.status.problem = std::move(made.problem);
      } else if (attention) {
        RunnerResult made = make_attention_runner(*graph_, group.attention);
        entry.runner = std::move(made.runner);
        entry.status.problem = std::move(made.problem);
      } else if (conv) {
        RunnerResult made = make_conv_runner(*graph_, group.conv);
        entry.runner = std::move(made.runner);
        entry.status.problem = std::move(made.problem);
      } else {
        compiled_into.push_back(engine_groups_.size());
        to_compile.push_back(&group);
      }
      engine_groups_.push_back(std::move(entry));
    }
  }
  // The groups' specs are shared_ptrs the kernels keep; the plan itself may go.
  std::vector<GeneratedCompileResult> results =
      compile_generated_groups(*graph_, to_compile, kernel_cache);
  for (std::size_t k = 0; k < results.size(); ++k) {
    EngineGroup& entry = engine_groups_[compiled_into[k]];
    entry.runner = std::move(results[k].kernel);
    entry.status.problem = std::move(results[k].problem);
  }
  for (EngineGroup& entry : engine_groups_) {
    entry.status.compiled = entry.runner != nullptr;
    if (entry.runner) entry.status.kernel = entry.runner->description();
  }
}

void Executor::add_partition_steps(const FusionPlan& fusion, int partition) {
  MB_ASSERT(partition >= 0 && partition < static_cast<int>(fusion.partitions.size()),
            "schedule names partition ", partition, " that the fusion plan lacks");
  const auto& groups = fusion.partitions[partition].groups;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const KernelGroup& group = groups[g];
    Step step;
    step.kind = StepKind::KernelGroup;
    for (std::size_t k = 0; k < engine_groups_.size(); ++k) {
      const GeneratedGroupStatus& status = engine_groups_[k].status;
      if (status.partition == partition && status.group == static_cast<int>(g) &&
          engine_groups_[k].runner) {
        step.engine = static_cast<int>(k);
      }
    }
    for (NodeId id : group.nodes) {
      step.calls.push_back(calls_.size());
      calls_.emplace_back(*graph_, graph_->node(id));
    }
    if (group.kind == KernelKind::Matmul && group.matmul) step.reads = group.matmul->inputs();
    if (group.kind == KernelKind::Attention && group.attention)
      step.reads = group.attention->inputs();
    if (group.kind == KernelKind::Conv && group.conv) step.reads = group.conv->inputs();
    steps_.push_back(std::move(step));
  }
}

void Executor::add_node_step(const Node& node) {
  Step step;
  step.node = node.id;
  switch (node.kind) {
    case NodeKind::Aten:
      step.kind = StepKind::AtenNode;
      step.calls.push_back(calls_.size());
      calls_.emplace_back(*graph_, node);
      break;
    case NodeKind::Builtin:
      MB_CHECK(is_known_builtin(node.op), "node ", node.name, " uses unknown builtin ", node.op);
      step.kind = StepKind::BuiltinNode;
      break;
    case NodeKind::Python:
      MB_CHECK(python_fallback_ != nullptr, "node ", node.name,
               " needs the Python fallback, which was not provided");
      step.kind = StepKind::PythonNode;
      break;
  }
  steps_.push_back(std::move(step));
}

// Each value is released after the last step that reads it, unless the
// graph returns it.
void Executor::plan_releases() {
  std::vector<int> last_use(graph_->values().size(), -1);
  auto nodes_of = [&](const Step& step) {
    std::vector<NodeId> ids;
    if (step.kind == StepKind::KernelGroup || step.kind == StepKind::AtenNode) {
      for (std::size_t c : step.calls) ids.push_back(calls_[c].node().id);
    } else {
      ids.push_back(step.node);
    }
    return ids;
  };
  for (std::size_t s = 0; s < steps_.size(); ++s) {
    for (ValueId v : steps_[s].reads) last_use[v] = static_cast<int>(s);
    for (NodeId id : nodes_of(steps_[s])) {
      for (ValueId v : graph_->node(id).input_values()) last_use[v] = static_cast<int>(s);
      // Outputs nobody reads are dropped at once.
      for (ValueId v : graph_->node(id).outputs) {
        if (last_use[v] < static_cast<int>(s)) last_use[v] = static_cast<int>(s);
      }
    }
  }
  for (const Argument& out : graph_->outputs())
    out.for_each_value([&](ValueId v) { last_use[v] = -1; });
  for (std::size_t v = 0; v < last_use.size(); ++v) {
    if (last_use[v] >= 0) steps_[last_use[v]].release_after.push_back(static_cast<ValueId>(v));
  }
}

std::vector<c10::IValue> Executor::run(std::vector<c10::IValue> inputs) const {
  const auto& input_ids = graph_->inputs();
  MB_CHECK(inputs.size() == input_ids.size(), "the compiled graph takes ", input_ids.size(),
           " inputs, but ", inputs.size(), " were given");
  const SymbolBindings bindings = binder_.bind(inputs);
  ValueSlots slots(graph_->values().size());
  for (std::size_t i = 0; i < inputs.size(); ++i) slots[input_ids[i]] = std::move(inputs[i]);
  for (const Step& step : steps_) {
    run_step(step, slots, bindings);
    for (ValueId v : step.release_after) slots[v] = c10::IValue();
  }
  std::vector<c10::IValue> outputs;
  outputs.reserve(graph_->outputs().size());
  for (const Argument& out : graph_->outputs()) {
    outputs.push_back(out.kind == Argument::Kind::Value
                          ? slots[out.value]
                          : argument_to_ivalue(out, c10::AnyType::get(), slots));
  }
  counters_.calls.fetch_add(1, std::memory_order_relaxed);
  return outputs;
}

void Executor::run_step(const Step& step, ValueSlots& slots, const SymbolBindings& bindings) const {
  switch (step.kind) {
    case StepKind::KernelGroup:
      if (step.engine >= 0) {
        const GroupRunner& runner = *engine_groups_[static_cast<std::size_t>(step.engine)].runner;
        const bool ran = runner.run(slots, bindings);
        count_engine_run(runner, ran);
        if (!ran) {
          for (std::size_t c : step.calls) calls_[c].run(slots);
        }
      } else {
        for (std::size_t c : step.calls) calls_[c].run(slots);
      }
      counters_.groups.fetch_add(1, std::memory_order_relaxed);
      counters_.in_partitions.fetch_add(static_cast<std::int64_t>(step.calls.size()),
                                        std::memory_order_relaxed);
      return;
    case StepKind::AtenNode:
      calls_[step.calls[0]].run(slots);
      counters_.aten.fetch_add(1, std::memory_order_relaxed);
      return;
    case StepKind::BuiltinNode:
      run_builtin(graph_->node(step.node), slots);
      counters_.builtin.fetch_add(1, std::memory_order_relaxed);
      return;
    case StepKind::PythonNode:
      run_python(graph_->node(step.node), slots);
      counters_.python.fetch_add(1, std::memory_order_relaxed);
      return;
  }
}

// Generated kernels count as generated (and per kind), matmul groups as
// cuBLASLt calls; a fallback counts for the engine that declined.
void Executor::count_engine_run(const GroupRunner& runner, bool ran) const {
  const KernelKind kind = runner.kind();
  if (kind == KernelKind::Matmul) {
    (ran ? counters_.matmul : counters_.matmul_fallbacks).fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (kind == KernelKind::Attention) {
    (ran ? counters_.attention : counters_.attention_fallbacks)
        .fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (kind == KernelKind::Conv) {
    (ran ? counters_.conv : counters_.conv_fallbacks).fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (!ran) {
    counters_.generated_fallbacks.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  counters_.generated.fetch_add(1, std::memory_order_relaxed);
  switch (kind) {
    case KernelKind::Pointwise: counters_.generated_pointwise.fetch_add(1); break;
    case KernelKind::Reduction: counters_.generated_reductions.fetch_add(1); break;
    case KernelKind::Norm: counters_.generated_norms.fetch_add(1); break;
    case KernelKind::AtenSequence:
    case KernelKind::Matmul:
    case KernelKind::Attention:
    case KernelKind::Conv: break;
  }
}

void Executor::run_builtin(const Node& node, ValueSlots& slots) const {
  std::vector<c10::IValue> operands;
  operands.reserve(node.args.size());
  for (const Argument& arg : node.args) {
    operands.push_back(argument_to_ivalue(arg, c10::AnyType::get(), slots));
  }
  MB_CHECK(node.outputs.size() == 1, "builtin node ", node.name, " must have one output");
  slots[node.outputs[0]] = evaluate_builtin(node.op, operands);
}

void Executor::run_python(const Node& node, ValueSlots& slots) const {
  std::vector<c10::IValue> inputs;
  for (ValueId v : node.input_values()) inputs.push_back(slots[v]);
  std::vector<c10::IValue> results = python_fallback_(node.id, std::move(inputs));
  store_outputs(node, results, {}, slots);
}

ExecutionStats Executor::stats() const {
  ExecutionStats stats;
  stats.calls = counters_.calls.load();
  stats.kernel_groups_run = counters_.groups.load();
  stats.nodes_run_in_partitions = counters_.in_partitions.load();
  stats.nodes_run_as_aten_fallback = counters_.aten.load();
  stats.nodes_run_as_builtin = counters_.builtin.load();
  stats.nodes_run_in_python = counters_.python.load();
  stats.generated_kernels_run = counters_.generated.load();
  stats.generated_pointwise_run = counters_.generated_pointwise.load();
  stats.generated_reductions_run = counters_.generated_reductions.load();
  stats.generated_norms_run = counters_.generated_norms.load();
  stats.generated_kernel_fallbacks = counters_.generated_fallbacks.load();
  stats.matmul_groups_run = counters_.matmul.load();
  stats.matmul_fallbacks = counters_.matmul_fallbacks.load();
  stats.attention_groups_run = counters_.attention.load();
  stats.attention_fallbacks = counters_.attention_fallbacks.load();
  stats.conv_groups_run = counters_.conv.load();
  stats.conv_fallbacks = counters_.conv_fallbacks.load();
  return stats;
}

std::vector<GeneratedGroupStatus> Executor::generated_groups() const {
  std::vector<GeneratedGroupStatus> out;
  for (const EngineGroup& g : engine_groups_) {
    GeneratedGroupStatus status = g.status;
    if (g.runner) {
      const std::string problem = g.runner->problem();
      if (!problem.empty()) status.problem = problem;
    }
    out.push_back(std::move(status));
  }
  return out;
}

}  // namespace mybackend
