#include <ATen/core/ivalue.h>

#include "bindings/bindings.h"
#include "common/error.h"
#include "fusion/pointwise_lowering.h"
#include "pipeline/environment.h"
#include "pipeline/pipeline.h"
#include "runtime/generated/background_compile.h"
#include "runtime/generated/generated_kernel.h"
#include "runtime/input_versions.h"
#include "runtime/kernel_kinds.h"

namespace mybackend::bindings {

CapabilityOptions capability_options_from(const py::dict& options) {
  CapabilityOptions capability;
  if (options.contains("disabled_ops")) {
    capability.disabled_ops = options["disabled_ops"].cast<std::vector<std::string>>();
  }
  if (options.contains("disabled_op_classes")) {
    capability.disabled_classes = options["disabled_op_classes"].cast<std::vector<std::string>>();
  }
  return capability;
}

namespace {

CompileOptions compile_options_from(const py::dict& options) {
  static const char* const kKeys[] = {"disabled_ops",       "disabled_op_classes",
                                      "min_partition_size", "allow_single_node_partition",
                                      "cuda_graphs",        "static_inputs",
                                      "max_cuda_graphs",    "generated_kernels",
                                      "min_fused_nodes",    "kernel_cache_dir",
                                      "cublaslt",           "autotune",
                                      "cudnn_attention",    "cudnn",
                                      "launch_tuning",      "group_floor",
                                      "group_floor_context"};
  for (auto item : options) {
    auto key = item.first.cast<std::string>();
    bool known = false;
    for (const char* k : kKeys) known = known || key == k;
    MB_CHECK(known, "unknown core option '", key, "'");
  }
  // The environment's knobs first (Note [Options from the environment]);
  // the caller's options override them.
  CompileOptions out = options_from_environment();
  out.capability = capability_options_from(options);
  if (options.contains("min_partition_size")) {
    out.partitioner.min_partition_size = options["min_partition_size"].cast<int>();
  }
  if (options.contains("allow_single_node_partition")) {
    out.partitioner.allow_single_node_partition =
        options["allow_single_node_partition"].cast<bool>();
  }
  if (options.contains("cuda_graphs"))
    out.cuda_graphs.enabled = options["cuda_graphs"].cast<bool>();
  if (options.contains("static_inputs")) {
    out.cuda_graphs.static_inputs = options["static_inputs"].cast<std::vector<int>>();
  }
  if (options.contains("generated_kernels")) {
    out.fusion.generated_kernels = options["generated_kernels"].cast<bool>();
  }
  if (options.contains("min_fused_nodes")) {
    out.fusion.min_pointwise_nodes = options["min_fused_nodes"].cast<int>();
  }
  // None (or absent): the environment decides; "": memory only; else a path.
  if (options.contains("kernel_cache_dir") && !options["kernel_cache_dir"].is_none()) {
    const auto dir = options["kernel_cache_dir"].cast<std::string>();
    out.codegen.cache.kind =
        dir.empty() ? KernelCacheLocation::Kind::Off : KernelCacheLocation::Kind::Directory;
    out.codegen.cache.directory = dir;
  }
  if (options.contains("cublaslt")) out.fusion.matmul = options["cublaslt"].cast<bool>();
  if (options.contains("autotune")) out.fusion.autotune = options["autotune"].cast<bool>();
  if (options.contains("cudnn_attention"))
    out.fusion.attention_beyond_cudnn_ops = options["cudnn_attention"].cast<bool>();
  if (options.contains("cudnn")) out.fusion.conv = options["cudnn"].cast<bool>();
  // Knob name -> value; the knobs it names override the environment's.
  if (options.contains("launch_tuning")) {
    for (auto item : options["launch_tuning"].cast<py::dict>()) {
      const std::string problem = set_launch_knob(out.fusion.tuning, item.first.cast<std::string>(),
                                                  item.second.cast<int>());
      MB_CHECK(problem.empty(), problem);
    }
  }
  if (options.contains("max_cuda_graphs")) {
    out.cuda_graphs.max_graphs = options["max_cuda_graphs"].cast<int>();
  }
  if (options.contains("group_floor")) out.group_floor = options["group_floor"].cast<bool>();
  if (options.contains("group_floor_context"))
    out.group_floor_context = options["group_floor_context"].cast<std::string>();
  return out;
}

// Owns a Python object that may be dropped on a thread without the GIL
// (run() and compile() release it).
struct GilSafeObject {
  py::object object;
  explicit GilSafeObject(py::object o) : object(std::move(o)) {}
  GilSafeObject(const GilSafeObject&) = delete;
  GilSafeObject& operator=(const GilSafeObject&) = delete;
  ~GilSafeObject() {
    py::gil_scoped_acquire gil;
    object = py::object();
  }
};

PythonFallback wrap_fallback(py::object fallback) {
  if (fallback.is_none()) return nullptr;
  auto holder = std::make_shared<GilSafeObject>(std::move(fallback));
  return [holder](NodeId node, std::vector<c10::IValue> inputs) {
    py::gil_scoped_acquire gil;
    py::list args;
    for (const auto& input : inputs) args.append(from_ivalue(input));
    py::object results = holder->object(node, args);
    std::vector<c10::IValue> out;
    for (py::handle result : results) out.push_back(to_ivalue(result));
    return out;
  };
}

py::list node_reports(const Graph& graph, const CompileReport& report) {
  py::list nodes;
  for (const Node& node : graph.nodes()) {
    const SupportDecision& decision = report.decisions[node.id];
    py::dict entry;
    entry["id"] = node.id;
    entry["name"] = node.name;
    entry["op"] = node.op;
    entry["source"] = node.source;
    entry["supported"] = decision.supported;
    entry["op_class"] = std::string(op_class_name(decision.op_class));
    entry["reason"] = decision.reason;
    entry["partition"] = report.partitions.partition_of[node.id];
    nodes.append(entry);
  }
  return nodes;
}

// Note [Memory plan] in runtime/memory_plan.h: the figures explain() shows.
py::dict memory_plan_to_dict(const MemoryPlan& plan) {
  py::dict out;
  std::size_t points = plan.release_after.size(), hand_overs = 0;
  for (const auto& over : plan.hand_over_after) hand_overs += over.size();
  out["points"] = points;
  out["planned_values"] = plan.planned_values;
  out["buffers"] = plan.buffers.size();
  out["reuses"] = hand_overs;
  out["bytes_without_reuse"] = plan.bytes_without_reuse;
  out["bytes_with_reuse"] = plan.bytes_with_reuse;
  out["peak_bytes"] = plan.peak_bytes;
  return out;
}

py::dict report_to_dict(const CompiledGraph& compiled) {
  const CompileReport& report = compiled.report();
  py::list stage_times, kernels;
  for (const auto& [stage, seconds] : report.stage_times)
    stage_times.append(py::make_tuple(stage, seconds));
  std::vector<GeneratedGroupStatus> generated;
  {
    // Waits for the kernels compiling in the background (Note [Kernels
    // compiled beside the caller]); they need no Python.
    py::gil_scoped_release release;
    generated = compiled.executor().generated_groups();
  }
  for (const PartitionPlan& plan : report.fusion.partitions) {
    for (std::size_t g = 0; g < plan.groups.size(); ++g) {
      const KernelGroup& group = plan.groups[g];
      py::dict kernel;
      kernel["partition"] = plan.partition;
      kernel["kind"] = std::string(kernel_kind_name(group.kind()));
      kernel["nodes"] = group.nodes;
      kernel["why"] = group.why;
      kernel["spec"] = group.spec;
      kernel["source"] = generated_source(group);
      for (const GeneratedGroupStatus& status : generated) {
        if (status.partition != plan.partition || status.group != static_cast<int>(g)) continue;
        kernel["compiled"] = status.compiled;
        kernel["kernel"] = status.kernel;
        kernel["problem"] = status.problem;
        kernel["floor"] = status.floor;
      }
      kernels.append(kernel);
    }
  }
  py::dict out = partition_result_to_dict(report.partitions);
  out["stage_times"] = stage_times;
  out["nodes"] = node_reports(compiled.graph(), report);
  out["kernels"] = kernels;
  out["cuda_graphs"] = compiled.cuda_graphs().status();
  out["memory_plan"] = memory_plan_to_dict(compiled.executor().memory_plan());
  return out;
}

py::dict stats_to_dict(const CompiledGraph& compiled) {
  const ExecutionStats stats = compiled.stats();
  py::dict out;
  out["cuda_graph_captures"] = compiled.cuda_graphs().captures();
  out["cuda_graph_replays"] = compiled.cuda_graphs().replays();
  out["cuda_graph_input_bytes_copied"] = compiled.cuda_graphs().input_bytes_copied();
  out["cuda_graph_output_bytes_moved"] = compiled.cuda_graphs().output_bytes_moved();
  for (const auto& [name, count] : stats.named()) out[name.c_str()] = count;
  return out;
}

// Note [Input ownership] in runtime/recovery_window.h: after the inputs
// are read, `args` holds no reference; the executor's slots hold the only
// ones the runtime has.
py::list run_boxed(const CompiledGraph& compiled, py::list args) {
  const HostTimer timed = compiled.executor().time_boundary();  // Note [Host time by step]
  std::vector<c10::IValue> inputs;
  inputs.reserve(args.size());
  for (py::handle arg : args) inputs.push_back(to_ivalue(arg));
  MB_CHECK(PyList_SetSlice(args.ptr(), 0, PY_SSIZE_T_MAX, nullptr) == 0,
           "emptying the argument list failed");
  std::vector<c10::IValue> outputs, given_back;
  std::exception_ptr failure;
  {
    py::gil_scoped_release release;
    try {
      outputs = compiled.run_owning(std::move(inputs), given_back);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (failure) {
    for (const auto& input : given_back) args.append(from_ivalue(input));
    given_back.clear();
    std::rethrow_exception(failure);
  }
  py::list result;
  for (const auto& output : outputs) result.append(from_ivalue(output));
  return result;
}

}  // namespace

void bind_compile(py::module_& m) {
  py::class_<CompiledGraph, std::shared_ptr<CompiledGraph>>(m, "CompiledGraph")
      .def(
          "run",
          [](const CompiledGraph& compiled, const py::list& args) {
            const HostTimer timed = compiled.executor().time_boundary();
            std::vector<c10::IValue> inputs;
            inputs.reserve(args.size());
            for (py::handle arg : args) inputs.push_back(to_ivalue(arg));
            std::vector<c10::IValue> outputs;
            {
              py::gil_scoped_release release;
              outputs = compiled.run(std::move(inputs));
            }
            py::list result;
            for (const auto& output : outputs) result.append(from_ivalue(output));
            return result;
          },
          py::arg("inputs"), "Run the graph on a list of inputs; returns the list of outputs.")
      .def("run_boxed", &run_boxed, py::arg("args"),
           "Run the graph on a list of inputs it takes over (aot's boxed convention): the list "
           "is emptied first, so each input dies after its last use in the graph. A call that "
           "fails on an input signature that never ran to the end refills the list with the "
           "inputs (and the constants passed with them) before raising (Note [Input "
           "ownership]).")
      .def("report", &report_to_dict)
      .def(
          "stage_times",
          [](const CompiledGraph& compiled) {
            py::list out;
            for (const auto& [stage, seconds] : compiled.report().stage_times)
              out.append(py::make_tuple(stage, seconds));
            return out;
          },
          "The C++ stages' wall times, (stage, seconds) each; unlike report() it never waits "
          "for the kernels compiling in the background.")
      .def(
          "plan_bytes",
          [](const CompiledGraph& compiled) {
            std::string bytes;
            {
              py::gil_scoped_release release;
              bytes = compiled.plan_bytes();
            }
            return py::bytes(bytes);
          },
          "The compile's plan (every node's capability decision, the partitions, the fusion "
          "plan with each kernel group's spec) and the planning options it was made under, as "
          "versioned bytes for compile_planned (Note [Plan archive]).")
      .def("stats", &stats_to_dict)
      .def(
          "host_times",
          [](const CompiledGraph& compiled) {
            py::list out;
            for (const HostTimeRow& row : compiled.executor().host_times())
              out.append(py::make_tuple(row.label, row.calls, row.nanoseconds / 1000.0));
            return out;
          },
          "The host time of the calls so far by step label, (label, calls, microseconds) each, "
          "the calls from Python and the whole runs first (Note [Host time by step]); empty "
          "unless the graph was compiled with MYBACKEND_HOST_TIMES=1.")
      .def_property_readonly("graph",
                             [](const CompiledGraph& c) { return c.graph().to_text(true); });

  py::class_<InputVersions>(m, "InputVersions")
      .def(py::init<std::vector<std::int64_t>>(), py::arg("positions"))
      .def(
          "changed",
          [](InputVersions& versions, const py::list& args) {
            std::vector<const at::Tensor*> tensors;
            tensors.reserve(versions.positions().size());
            const auto count = static_cast<std::int64_t>(PyList_GET_SIZE(args.ptr()));
            for (std::int64_t position : versions.positions()) {
              PyObject* item = position < count ? PyList_GET_ITEM(args.ptr(), position) : nullptr;
              tensors.push_back(
                  item != nullptr && THPVariable_Check(item) ? &THPVariable_Unpack(item) : nullptr);
            }
            return versions.changed(tensors);
          },
          py::arg("args"),
          "True on the first call and whenever an input at the watched positions is another "
          "tensor, or at another address, device or version, than at the last call that "
          "returned True (Note [Watching hoisted inputs])")
      .def("forget", &InputVersions::forget, "Makes the next changed() True.");

  m.def(
      "kernel_cache_stats",
      [] {
        py::dict out;
        for (const auto& [name, count] : kernel_cache_counters()) out[name.c_str()] = count;
        out["wait_us"] = background_compile_wait_us();
        return out;
      },
      "Counters of the process's generated-kernel cache: memory and disk hits, compiles, "
      "their NVRTC time, and the time runs waited for background compiles.");
  m.def(
      "kernel_cache_problem", [](const std::string& root) { return kernel_cache_problem(root); },
      py::arg("root"),
      "None when the disk cache under `root` is usable (its kernels/ folder created if "
      "missing), else why the core would keep kernels in memory only.");
  m.def(
      "kernel_cache_root",
      [](const std::optional<std::string>& directory) { return kernel_cache_root(directory); },
      py::arg("directory"),
      "The disk cache's root folder as the core resolves it (the kernel_cache_dir option "
      "when not None; '' turns the disk cache off), or None without one. Other caches, such "
      "as the eager floor's choices, live beside the kernels/ folder under it.");
  m.def(
      "launch_tuning_problem",
      [](const std::string& knob, int value) -> std::optional<std::string> {
        LaunchTuning tuning;
        std::string problem = set_launch_knob(tuning, knob, value);
        if (problem.empty()) return std::nullopt;
        return problem;
      },
      py::arg("knob"), py::arg("value"),
      "None when the launch_tuning option may set `knob` to `value`, else why not (an "
      "unknown knob, or a value it does not take).");
  m.def(
      "wait_for_background_compiles",
      [] {
        py::gil_scoped_release release;
        wait_for_background_compiles();
      },
      "Blocks until every generated-kernel compile started in the background has finished "
      "(Note [Kernels compiled beside the caller]); called at interpreter exit.");
  m.def("generated_pointwise_ops", &pointwise_lowering_ops,
        "The ATen overloads the pointwise planner can put in a generated kernel (sorted).");
  m.def(
      "compile",
      [](std::shared_ptr<Graph> graph, const py::dict& options, py::object python_fallback) {
        CompileOptions compile_options = compile_options_from(options);
        PythonFallback fallback = wrap_fallback(std::move(python_fallback));
        std::shared_ptr<CompiledGraph> compiled;
        {
          py::gil_scoped_release release;
          compiled = compile_graph(std::move(graph), compile_options, std::move(fallback));
        }
        return compiled;
      },
      py::arg("graph"), py::arg("options") = py::dict(), py::arg("python_fallback") = py::none(),
      "Run the C++ stages (verify, capability, partition, fusion, codegen, runtime) on a graph.");
  m.def(
      "compile_planned",
      [](std::shared_ptr<Graph> graph, const py::bytes& plan, const py::dict& options,
         py::object python_fallback) {
        CompileOptions compile_options = compile_options_from(options);
        PythonFallback fallback = wrap_fallback(std::move(python_fallback));
        std::string bytes(plan);
        std::shared_ptr<CompiledGraph> compiled;
        {
          py::gil_scoped_release release;
          compiled = compile_planned_graph(std::move(graph), std::move(bytes), compile_options,
                                           std::move(fallback));
        }
        return compiled;
      },
      py::arg("graph"), py::arg("plan"), py::arg("options") = py::dict(),
      py::arg("python_fallback") = py::none(),
      "compile() with the planning stages' results read from `plan` (CompiledGraph.plan_bytes() "
      "of a compile of the same graph under the same options): verify, load_plan, codegen, "
      "runtime. Raises Error when `plan` is truncated or garbled, of another format version, "
      "or not one for this graph and options (Note [Plan archive]).");
}

}  // namespace mybackend::bindings
