// Stage 9: run a compiled graph from one call.
//
// The executor walks the partitioner's schedule: each partition runs its
// kernel groups, each other node runs as an ATen call through the c10
// dispatcher, as symbolic-size arithmetic, or (no ATen schema) through the
// Python fallback. Values live in slots indexed by ValueId and are released
// right after their last use, ATen call by ATen call, and engine-group
// outputs reuse the memory of dead ones by a plan made once (Note [Memory
// plan] in memory_plan.h), so peak memory follows eager's.
#pragma once

#include <ATen/core/ivalue.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fusion/fusion_plan.h"
#include "ir/graph.h"
#include "partition/partitioner.h"
#include "runtime/aten_call.h"
#include "runtime/generated/background_compile.h"
#include "runtime/group_floor.h"
#include "runtime/group_runner.h"
#include "runtime/host_times.h"
#include "runtime/kernel_kinds.h"
#include "runtime/memory_plan.h"
#include "runtime/planned_outputs.h"
#include "runtime/symbol_binder.h"

namespace mybackend {

// Runs node `node_id` (NodeKind::Python) in Python on its input values, in
// the order Node::input_values() lists them, and returns its outputs.
using PythonFallback =
    std::function<std::vector<c10::IValue>(NodeId node_id, std::vector<c10::IValue> inputs)>;

struct ExecutionStats {
  std::int64_t calls = 0;
  std::int64_t kernel_groups_run = 0;
  std::int64_t nodes_run_in_partitions = 0;
  std::int64_t nodes_run_as_aten_fallback = 0;
  std::int64_t nodes_run_as_builtin = 0;
  std::int64_t nodes_run_in_python = 0;
  // Engine groups run per kind, and those that ran their ATen form instead
  // for one call (Note [Never an error to the user], Note [Matmul
  // fallback]); named by the kernel-kind table (Note [One row per kernel kind]).
  KindCounts engine_runs{};
  KindCounts engine_fallbacks{};
  // Engine outputs placed on a dead planned buffer's storage, and planned
  // hand-overs that could not happen (the storage was still shared).
  std::int64_t planned_outputs_taken = 0;
  std::int64_t planned_outputs_missed = 0;
  // Engine-group calls that ran the ATen form because it timed faster
  // (Note [A group is timed against its ATen form]).
  std::int64_t groups_run_as_faster_aten = 0;
  // View nodes made without the dispatcher (Note [Views replayed without
  // the dispatcher] in view_replay.h).
  std::int64_t views_replayed = 0;

  // Every counter under its stats() key, in a fixed order.
  std::vector<std::pair<std::string, std::int64_t>> named() const;
};

// A group run by an engine (generated pointwise, reduction or norm kernel,
// cuBLASLt matmul) and what became of it, for reports.
struct GeneratedGroupStatus {
  int partition = 0;
  int group = 0;          // index into the partition's kernel groups
  bool compiled = false;  // an engine runs it (else: always ATen calls)
  std::string kernel;     // description: entry names and target, or the cuBLASLt call
  std::string problem;    // why it (last) ran as ATen calls; empty if never
  std::string floor;      // its timings against its ATen form (GroupFloor::summary)
};

// How the executor runs, besides the plan.
struct RunSettings {
  // Note [Views replayed without the dispatcher] in view_replay.h.
  bool replay_views = true;
  // Note [Host time by step] in host_times.h.
  bool host_times = false;
};

class Executor {
 public:
  // `compiles`: the codegen stage's runners of the plan's generated groups
  // (a group without one runs as ATen calls).
  // `floor`: groups that allow it are timed against their ATen form, their
  // choices kept on disk (Note [A group is timed against its ATen form],
  // Note [Group floor choices on disk] in group_floor.h).
  Executor(std::shared_ptr<const Graph> graph, const PartitionResult& partitions,
           const FusionPlan& fusion, PythonFallback python_fallback, CompileFutures compiles = {},
           const GroupFloorSettings& floor = {}, const RunSettings& settings = {});
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Takes the inputs over: each is released after its last use (Note
  // [Input ownership] in recovery_window.h).
  std::vector<c10::IValue> run(std::vector<c10::IValue> inputs) const;
  ExecutionStats stats() const;
  // The host time of the runs so far by step label (Note [Host time by
  // step]); empty unless RunSettings::host_times.
  std::vector<HostTimeRow> host_times() const;
  // Times a call from Python to the graph and back, run included (null
  // times nothing): the bindings' share of the host time.
  HostTimer time_boundary() const { return HostTimer(host_times_.get(), boundary_host_slot_); }
  const Graph& graph() const { return *graph_; }
  // Every engine group of the fusion plan (generated kernels and matmul
  // groups), in plan order: compiled or not, and why it fell back to ATen
  // calls (Note [Never an error to the user], Note [Matmul fallback]).
  std::vector<GeneratedGroupStatus> generated_groups() const;
  // The plan of releases and buffers (Note [Memory plan]).
  const MemoryPlan& memory_plan() const { return plan_; }

 private:
  enum class StepKind : std::int8_t { KernelGroup, AtenNode, BuiltinNode, PythonNode };
  struct Step {
    StepKind kind = StepKind::AtenNode;
    std::vector<std::size_t> calls;  // indices into calls_ (KernelGroup, AtenNode)
    NodeId node = 0;                 // BuiltinNode, PythonNode
    int engine = -1;                 // KernelGroup: index into engine_groups_, or -1
    // Values an engine group reads besides its nodes' inputs (a matmul group
    // reads the input of a transpose it sees through): kept alive for it.
    std::vector<ValueId> reads;
    // Its label's slot of host_times_ (an engine step's, or its ATen
    // calls': Note [Host time by step]).
    std::size_t host_slot = 0;
    // Its first point of the memory plan. A step run by an engine, a builtin
    // or a Python node is one point; ATen calls are one point each, so a
    // value dies inside an ATen sequence right after its last reader.
    std::size_t first_point = 0;
  };
  struct Counters {
    std::atomic<std::int64_t> calls{0}, groups{0}, in_partitions{0}, aten{0}, builtin{0}, python{0},
        floored{0}, views{0};
    std::array<std::atomic<std::int64_t>, kKernelKindCount> runs{}, fallbacks{};
  };

  void prepare_engine_groups(const FusionPlan& fusion, CompileFutures& compiles,
                             const GroupFloorSettings& floor);
  void count_engine_run(const GroupRunner& runner, bool ran) const;
  // Runs calls_[call], counting a replayed view.
  void run_call(std::size_t call, ValueSlots& slots) const;
  // Runs an engine group; false when its ATen calls must run instead.
  bool run_engine_group(const Step& step, ValueSlots& slots, const SymbolBindings& bindings,
                        PlannedOutputs& planned) const;
  void add_partition_steps(const FusionPlan& fusion, int partition);
  void add_node_step(const Node& node);
  void plan_memory_use();
  MemoryPlanInput memory_plan_input() const;
  void run_step(const Step& step, ValueSlots& slots, const SymbolBindings& bindings,
                PlannedOutputs& planned) const;
  void finish_point(std::size_t point, ValueSlots& slots, PlannedOutputs& planned) const;
  void run_builtin(const Node& node, ValueSlots& slots) const;
  void run_python(const Node& node, ValueSlots& slots) const;

  // The slot of an ATen call's operator in host_times_.
  std::size_t host_slot_of(std::size_t call);

  std::shared_ptr<const Graph> graph_;
  bool replay_views_ = true;  // Note [Views replayed without the dispatcher]
  std::vector<AtenCall> calls_;
  // Note [Host time by step]: null unless timed; a slot per call of calls_.
  std::unique_ptr<HostTimes> host_times_;
  std::vector<std::size_t> call_host_slots_;
  std::size_t run_host_slot_ = 0, boundary_host_slot_ = 0;
  std::vector<Step> steps_;
  // A group of the plan an engine runs (generated kernel or cuBLASLt call).
  struct EngineGroup {
    GeneratedGroupStatus status;
    std::unique_ptr<GroupRunner> runner;   // null: runs as ATen calls
    std::vector<BufferCandidate> outputs;  // those with a static byte size
    // Values it reads besides its nodes' inputs (a matmul group reads the
    // input of a transpose it sees through): kept alive for it.
    std::vector<ValueId> reads;
    // Its timings against its ATen form, when its runner allows them.
    std::unique_ptr<GroupFloor> floor;
  };
  std::vector<EngineGroup> engine_groups_;
  MemoryPlan plan_;
  mutable PlannedOutputCounters planned_counters_;
  SymbolBinder binder_;
  PythonFallback python_fallback_;
  mutable Counters counters_;
};

}  // namespace mybackend
