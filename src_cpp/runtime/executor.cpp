#include "runtime/executor.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <optional>

#include "common/error.h"
#include "runtime/builtin_ops.h"

namespace mybackend {
namespace {

// The bytes of storage a tensor of this type spans, when its sizes and
// strides are static (what at::empty_strided asks the allocator for).
std::optional<std::int64_t> static_storage_bytes(const TensorType& type, bool contiguous) {
  std::int64_t extent = 1, numel = 1;
  for (std::size_t d = 0; d < type.sizes.size(); ++d) {
    if (!type.sizes[d].is_static() || !type.strides[d].is_static()) return std::nullopt;
    const std::int64_t size = type.sizes[d].static_value();
    const std::int64_t stride = type.strides[d].static_value();
    if (size == 0) return std::int64_t{0};
    numel *= size;
    extent += (size - 1) * (stride < 0 ? -stride : stride);
  }
  return (contiguous ? numel : extent) * dtype_size_bytes(type.dtype);
}

// Reads, definitions and aliases of one node, for the memory plan. An ATen
// operator's schema says whether a result may alias an argument (views,
// in-place and out= results); then every output counts as an alias of every
// tensor input, and only when all results are such non-writing aliases does
// the node allocate nothing. A Python node may return or stash anything.
void add_node_to_point(const Graph& graph, const Node& node, PlanPoint& point) {
  const std::vector<ValueId> inputs = node.input_values();
  point.reads.insert(point.reads.end(), inputs.begin(), inputs.end());
  point.defines.insert(point.defines.end(), node.outputs.begin(), node.outputs.end());
  bool aliases = false;
  switch (node.kind) {
    case NodeKind::Builtin: point.allocates = false; return;
    case NodeKind::Python:
      point.same_stream = false;
      aliases = true;
      break;
    case NodeKind::Aten: {
      const c10::FunctionSchema& schema = resolve_operator(node).schema();
      bool fresh = schema.returns().empty();
      for (const c10::Argument& r : schema.returns()) {
        if (r.alias_info() == nullptr || r.alias_info()->isWrite()) fresh = true;
        if (r.alias_info() != nullptr) aliases = true;
      }
      for (const c10::Argument& a : schema.arguments())
        if (a.alias_info() != nullptr && a.alias_info()->isWrite()) fresh = true;
      if (!fresh) point.allocates = false;
      const std::string& ns = node.op;
      if (ns.rfind("aten::", 0) != 0 && ns.rfind("prims::", 0) != 0) point.same_stream = false;
      break;
    }
  }
  if (!aliases) return;
  for (ValueId out : node.outputs) {
    if (graph.value(out).kind != ValueKind::Tensor) continue;
    for (ValueId in : inputs)
      if (graph.value(in).kind == ValueKind::Tensor) point.aliases.emplace_back(out, in);
  }
}

// Note [Profiler ranges]: each call and each engine step is a range of
// torch.profiler's CPU timeline, named after the engine (its row of the
// kernel-kind table), so a profile splits the runtime's host time by kind
// (ATen calls, cuLaunchKernel and library calls show up inside them as their
// own ranges). Without an active profiler a range costs one thread-local
// check.

// A group's plan as text: its spec and the type of every value its nodes
// read and write (Note [Group floor choices on disk]).
std::string group_plan_text(const Graph& graph, const KernelGroup& group) {
  std::string text = group.spec;
  auto type_text = [&](ValueId v) {
    const Value& value = graph.value(v);
    if (value.kind != ValueKind::Tensor) return std::string(" ") + value.name;
    std::string t =
        " " + std::string(dtype_name(value.tensor.dtype)) + "@" + value.tensor.device.str() + "[";
    for (const Dim& d : value.tensor.sizes) t += d.str() + ",";
    t += "/";
    for (const Dim& d : value.tensor.strides) t += d.str() + ",";
    return t + "]";
  };
  for (NodeId n : group.nodes) {
    const Node& node = graph.node(n);
    text += "\n" + node.op + ":";
    for (ValueId v : node.input_values()) text += type_text(v);
    text += " ->";
    for (ValueId v : node.outputs) text += type_text(v);
  }
  return text;
}

}  // namespace

Executor::Executor(std::shared_ptr<const Graph> graph, const PartitionResult& partitions,
                   const FusionPlan& fusion, PythonFallback python_fallback,
                   CompileFutures compiles, const GroupFloorSettings& floor,
                   const RunSettings& settings)
    : graph_(std::move(graph)),
      replay_views_(settings.replay_views),
      host_times_(settings.host_times ? std::make_unique<HostTimes>() : nullptr),
      binder_(*graph_),
      python_fallback_(std::move(python_fallback)) {
  std::size_t total_calls = graph_->nodes().size();
  calls_.reserve(total_calls);  // AtenCall addresses stay put: steps hold indices anyway
  if (host_times_) {
    run_host_slot_ = host_times_->slot(HostTimes::kRunLabel);
    boundary_host_slot_ = host_times_->slot(HostTimes::kBoundaryLabel);
  }
  prepare_engine_groups(fusion, compiles, floor);
  for (const ScheduleStep& scheduled : partitions.schedule) {
    if (scheduled.is_partition) {
      add_partition_steps(fusion, scheduled.index);
    } else {
      add_node_step(graph_->node(scheduled.index));
    }
  }
  plan_memory_use();
}

// Prepares every engine group of the plan, in plan order. Generated
// kernels are already compiling (the codegen stage's futures, Note [Kernels
// compiled beside the caller]); library groups get their runner from their
// kind's row of the kernel-kind table (cuBLASLt is asked on the first run).
// Groups that cannot be prepared keep only their ATen form.
void Executor::prepare_engine_groups(const FusionPlan& fusion, CompileFutures& compiles,
                                     const GroupFloorSettings& floor) {
  for (const PartitionPlan& plan : fusion.partitions) {
    for (std::size_t g = 0; g < plan.groups.size(); ++g) {
      const KernelGroup& group = plan.groups[g];
      if (!runs_on_engine(group)) continue;
      const KernelKindTraits& traits = kernel_kind_traits(group.kind());
      EngineGroup entry;
      entry.status.partition = plan.partition;
      entry.status.group = static_cast<int>(g);
      for (ValueId v : traits.outputs(group)) {
        const Value& value = graph_->value(v);
        if (value.kind != ValueKind::Tensor) continue;
        const auto bytes = static_storage_bytes(value.tensor, traits.contiguous_outputs);
        if (bytes && *bytes > 0)
          entry.outputs.push_back(BufferCandidate{v, *bytes, value.tensor.device.str()});
      }
      if (traits.make_runner != nullptr) {
        RunnerResult made = traits.make_runner(*graph_, group);
        entry.runner = std::move(made.runner);
        entry.status.problem = std::move(made.problem);
      } else {
        entry.runner = compiles.take(plan.partition, static_cast<int>(g));
      }
      entry.reads = traits.reads(group);
      // A generated group's runner is still compiling: the kind says.
      if (floor.enabled && entry.runner && traits.timed_against_aten) {
        // Note [Group floor choices on disk]
        const std::string key =
            floor.context + "\n" + group_floor_context() + "\n" + group_plan_text(*graph_, group);
        entry.floor = std::make_unique<GroupFloor>(
            key,
            floor.cache_root.empty() ? std::string() : group_floor_file(floor.cache_root, key));
      }
      engine_groups_.push_back(std::move(entry));
    }
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
      const EngineGroup& engine = engine_groups_[k];
      if (engine.status.partition != partition || engine.status.group != static_cast<int>(g))
        continue;
      step.reads = engine.reads;
      if (engine.runner) step.engine = static_cast<int>(k);
      if (engine.runner && host_times_)
        step.host_slot =
            host_times_->slot(kernel_kind_traits(engine.runner->kind()).profiler_range);
    }
    for (NodeId id : group.nodes) {
      step.calls.push_back(calls_.size());
      calls_.emplace_back(*graph_, graph_->node(id), replay_views_);
      call_host_slots_.push_back(host_slot_of(calls_.size() - 1));
    }
    steps_.push_back(std::move(step));
  }
}

std::size_t Executor::host_slot_of(std::size_t call) {
  return host_times_ ? host_times_->slot(calls_[call].node().op) : 0;
}

void Executor::add_node_step(const Node& node) {
  Step step;
  step.node = node.id;
  switch (node.kind) {
    case NodeKind::Aten:
      step.kind = StepKind::AtenNode;
      step.calls.push_back(calls_.size());
      calls_.emplace_back(*graph_, node, replay_views_);
      call_host_slots_.push_back(host_slot_of(calls_.size() - 1));
      break;
    case NodeKind::Builtin:
      MB_CHECK(is_known_builtin(node.op), "node ", node.name, " uses unknown builtin ", node.op);
      step.kind = StepKind::BuiltinNode;
      if (host_times_) step.host_slot = host_times_->slot("mybackend::builtin");
      break;
    case NodeKind::Python:
      MB_CHECK(python_fallback_ != nullptr, "node ", node.name,
               " needs the Python fallback, which was not provided");
      step.kind = StepKind::PythonNode;
      if (host_times_) step.host_slot = host_times_->slot("mybackend::python");
      break;
  }
  steps_.push_back(std::move(step));
}

// One point per engine step, builtin and Python node, one per ATen call
// otherwise (Step::first_point); the candidates are the engine outputs of
// groups an engine runs.
MemoryPlanInput Executor::memory_plan_input() const {
  MemoryPlanInput in;
  in.value_count = graph_->values().size();
  in.graph_inputs = graph_->inputs();
  for (const Step& step : steps_) {
    if (step.kind == StepKind::BuiltinNode || step.kind == StepKind::PythonNode) {
      in.points.emplace_back();
      add_node_to_point(*graph_, graph_->node(step.node), in.points.back());
      continue;
    }
    const bool one_point = step.engine >= 0;
    for (std::size_t k = 0; k < step.calls.size(); ++k) {
      if (!one_point || k == 0) in.points.emplace_back();
      add_node_to_point(*graph_, calls_[step.calls[k]].node(), in.points.back());
    }
    if (step.calls.empty()) in.points.emplace_back();
    PlanPoint& last = in.points.back();
    last.reads.insert(last.reads.end(), step.reads.begin(), step.reads.end());
    if (one_point) last.allocates = true;
  }
  for (const Argument& out : graph_->outputs())
    out.for_each_value([&](ValueId v) { in.graph_outputs.push_back(v); });
  for (const Step& step : steps_) {
    if (step.engine < 0) continue;
    const EngineGroup& group = engine_groups_[static_cast<std::size_t>(step.engine)];
    in.candidates.insert(in.candidates.end(), group.outputs.begin(), group.outputs.end());
  }
  return in;
}

void Executor::plan_memory_use() {
  std::size_t point = 0;
  for (Step& step : steps_) {
    step.first_point = point;
    const bool per_call =
        step.engine < 0 && (step.kind == StepKind::KernelGroup || step.kind == StepKind::AtenNode);
    point += per_call ? std::max<std::size_t>(1, step.calls.size()) : 1;
  }
  plan_ = plan_memory(memory_plan_input());
  MB_ASSERT(plan_.release_after.size() == point, "memory plan has ", plan_.release_after.size(),
            " points, the steps ", point);
}

std::vector<c10::IValue> Executor::run(std::vector<c10::IValue> inputs) const {
  const auto& input_ids = graph_->inputs();
  MB_CHECK(inputs.size() == input_ids.size(), "the compiled graph takes ", input_ids.size(),
           " inputs, but ", inputs.size(), " were given");
  RECORD_FUNCTION("mybackend::run_graph", c10::ArrayRef<const c10::IValue>{});
  const HostTimer timed_run(host_times_.get(), run_host_slot_);
  const SymbolBindings bindings = binder_.bind(inputs);
  ValueSlots slots(graph_->values().size());
  for (std::size_t i = 0; i < inputs.size(); ++i) slots[input_ids[i]] = std::move(inputs[i]);
  inputs.clear();
  for (ValueId v : plan_.release_at_start) slots[v] = c10::IValue();
  std::vector<c10::Storage> waiting(plan_.buffers.size());
  PlannedOutputs planned(plan_, waiting, planned_counters_);
  for (const Step& step : steps_) run_step(step, slots, bindings, planned);
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

void Executor::run_step(const Step& step, ValueSlots& slots, const SymbolBindings& bindings,
                        PlannedOutputs& planned) const {
  const HostTimes* times = host_times_.get();
  switch (step.kind) {
    case StepKind::KernelGroup:
      if (step.engine >= 0) {
        const HostTimer timed(times, step.host_slot);
        if (!run_engine_group(step, slots, bindings, planned)) {
          for (std::size_t c : step.calls) run_call(c, slots);
        }
        finish_point(step.first_point, slots, planned);
      } else {
        for (std::size_t k = 0; k < step.calls.size(); ++k) {
          const HostTimer timed(times, call_host_slots_[step.calls[k]]);
          run_call(step.calls[k], slots);
          finish_point(step.first_point + k, slots, planned);
        }
      }
      counters_.groups.fetch_add(1, std::memory_order_relaxed);
      counters_.in_partitions.fetch_add(static_cast<std::int64_t>(step.calls.size()),
                                        std::memory_order_relaxed);
      return;
    case StepKind::AtenNode: {
      const HostTimer timed(times, call_host_slots_[step.calls[0]]);
      run_call(step.calls[0], slots);
      finish_point(step.first_point, slots, planned);
      counters_.aten.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    case StepKind::BuiltinNode: {
      const HostTimer timed(times, step.host_slot);
      RECORD_FUNCTION("mybackend::builtin", c10::ArrayRef<const c10::IValue>{});
      run_builtin(graph_->node(step.node), slots);
      finish_point(step.first_point, slots, planned);
      counters_.builtin.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    case StepKind::PythonNode: {
      const HostTimer timed(times, step.host_slot);
      RECORD_FUNCTION("mybackend::python", c10::ArrayRef<const c10::IValue>{});
      run_python(graph_->node(step.node), slots);
      finish_point(step.first_point, slots, planned);
      counters_.python.fetch_add(1, std::memory_order_relaxed);
      return;
    }
  }
}

bool Executor::run_engine_group(const Step& step, ValueSlots& slots, const SymbolBindings& bindings,
                                PlannedOutputs& planned) const {
  const EngineGroup& group = engine_groups_[static_cast<std::size_t>(step.engine)];
  const GroupRunner& runner = *group.runner;
  RECORD_FUNCTION(kernel_kind_traits(runner.kind()).profiler_range,
                  c10::ArrayRef<const c10::IValue>{});
  GroupFloor::Choice choice =
      group.floor ? group.floor->choice(bindings) : GroupFloor::Choice::Engine;
  if (choice == GroupFloor::Choice::Measure && current_stream_captures())
    choice = GroupFloor::Choice::Engine;  // timed on a later uncaptured call
  if (choice == GroupFloor::Choice::Aten) {
    counters_.floored.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  if (choice == GroupFloor::Choice::Engine) {
    const bool ran = runner.run(slots, bindings, planned);
    count_engine_run(runner, ran);
    return ran;
  }
  // Note [A group is timed against its ATen form]
  const std::optional<GroupTimes> times =
      time_against_aten([&] { return runner.run(slots, bindings, planned); },
                        [&] {
                          for (std::size_t c : step.calls) run_call(c, slots);
                        });
  if (!times) {
    group.floor->keep_engine(bindings);
    count_engine_run(runner, false);
    return false;
  }
  group.floor->record(bindings, times->engine_us, times->aten_us);
  count_engine_run(runner, true);
  return true;  // the ATen form ran last: its outputs are in place
}

void Executor::run_call(std::size_t call, ValueSlots& slots) const {
  if (calls_[call].run(slots)) counters_.views.fetch_add(1, std::memory_order_relaxed);
}

// After a point: what a new owner did not take is dropped, dead owners'
// storage waits for the next owner of their buffer, dead slots are cleared.
// The order matters: an owner made here may already be dead here.
void Executor::finish_point(std::size_t point, ValueSlots& slots, PlannedOutputs& planned) const {
  for (int buffer : plan_.drop_after[point]) planned.drop(buffer);
  for (const BufferHandOver& h : plan_.hand_over_after[point])
    planned.keep(slots[static_cast<std::size_t>(h.from)], h.buffer);
  for (ValueId v : plan_.release_after[point]) slots[static_cast<std::size_t>(v)] = c10::IValue();
}

// A run counts for its kind; a fallback for the kind whose engine declined.
void Executor::count_engine_run(const GroupRunner& runner, bool ran) const {
  const std::size_t k = kind_index(runner.kind());
  (ran ? counters_.runs[k] : counters_.fallbacks[k]).fetch_add(1, std::memory_order_relaxed);
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

std::vector<std::pair<std::string, std::int64_t>> ExecutionStats::named() const {
  std::vector<std::pair<std::string, std::int64_t>> out = {
      {"calls", calls},
      {"kernel_groups_run", kernel_groups_run},
      {"nodes_run_in_partitions", nodes_run_in_partitions},
      {"nodes_run_as_aten_fallback", nodes_run_as_aten_fallback},
      {"nodes_run_as_builtin", nodes_run_as_builtin},
      {"nodes_run_in_python", nodes_run_in_python}};
  for (auto& entry : engine_counters(engine_runs, engine_fallbacks))
    out.push_back(std::move(entry));
  out.emplace_back("planned_outputs_taken", planned_outputs_taken);
  out.emplace_back("planned_outputs_missed", planned_outputs_missed);
  out.emplace_back("groups_run_as_faster_aten", groups_run_as_faster_aten);
  out.emplace_back("views_replayed", views_replayed);
  return out;
}

ExecutionStats Executor::stats() const {
  ExecutionStats stats;
  stats.calls = counters_.calls.load();
  stats.kernel_groups_run = counters_.groups.load();
  stats.nodes_run_in_partitions = counters_.in_partitions.load();
  stats.nodes_run_as_aten_fallback = counters_.aten.load();
  stats.groups_run_as_faster_aten = counters_.floored.load();
  stats.views_replayed = counters_.views.load();
  stats.nodes_run_as_builtin = counters_.builtin.load();
  stats.nodes_run_in_python = counters_.python.load();
  for (std::size_t k = 0; k < kKernelKindCount; ++k) {
    stats.engine_runs[k] = counters_.runs[k].load();
    stats.engine_fallbacks[k] = counters_.fallbacks[k].load();
  }
  stats.planned_outputs_taken = planned_counters_.taken.load();
  stats.planned_outputs_missed = planned_counters_.missed.load();
  return stats;
}

std::vector<HostTimeRow> Executor::host_times() const {
  return host_times_ ? host_times_->rows() : std::vector<HostTimeRow>{};
}

std::vector<GeneratedGroupStatus> Executor::generated_groups() const {
  std::vector<GeneratedGroupStatus> out;
  for (const EngineGroup& g : engine_groups_) {
    GeneratedGroupStatus status = g.status;
    // A generated group's runner waits here for its compile (Note [Kernels
    // compiled beside the caller]).
    status.compiled = g.runner != nullptr && g.runner->usable();
    if (status.compiled) status.kernel = g.runner->description();
    if (g.runner) {
      const std::string problem = g.runner->problem();
      if (!problem.empty()) status.problem = problem;
    }
    if (g.floor) status.floor = g.floor->summary();
    out.push_back(std::move(status));
  }
  return out;
}

}  // namespace mybackend
