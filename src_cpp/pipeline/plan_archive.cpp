#include "pipeline/plan_archive.h"

#include "common/archive.h"
#include "common/error.h"
#include "fusion/fusion_plan_archive.h"

namespace mybackend {

// Note [One archive function per struct]: the capability and partition
// stages' results and options (the fusion plan's are in fusion/).
template <class Ar>
void archive(Ar& ar, SupportDecision& d) {
  fields(ar, d.supported, d.op_class, d.reason);
}

template <class Ar>
void archive(Ar& ar, DroppedNode& d) {
  ar.id(d.node, IdSpace::Node);
  fields(ar, d.reason);
}

template <class Ar>
void archive(Ar& ar, ScheduleStep& step) {
  fields(ar, step.is_partition, step.index);  // a partition or a node: checked by check_plan
}

template <class Ar>
void archive(Ar& ar, PartitionResult& r) {
  fields(ar, r.partition_of);  // partition indices: checked by check_plan
  const std::size_t count = ar.count(r.partitions.size());
  if constexpr (Ar::kLoading) r.partitions.resize(count);
  for (std::vector<int>& nodes : r.partitions) archive_ids(ar, nodes, IdSpace::Node);
  fields(ar, r.dropped, r.schedule);
}

template <class Ar>
void archive(Ar& ar, CapabilityOptions& o) {
  fields(ar, o.disabled_ops, o.disabled_classes);
}

template <class Ar>
void archive(Ar& ar, PartitionerOptions& o) {
  fields(ar, o.min_partition_size, o.allow_single_node_partition);
}

template <class Ar>
void archive(Ar& ar, PlanningOptions& o) {
  fields(ar, o.capability, o.partitioner, o.fusion);
}

template <class Ar>
void archive(Ar& ar, CorePlan& plan) {
  fields(ar, plan.decisions, plan.partitions, plan.fusion);
}

namespace {

constexpr std::string_view kMagic = "MBPLAN\r\n";
constexpr const char* kWhat = "saved plan";

// The header (Note [Plan archive]): in a reader, checks it against `graph`
// and sets the id limits.
template <class Ar>
void archive_header(Ar& ar, const Graph& graph) {
  ar.tag(kMagic);
  std::uint32_t version = kPlanFormatVersion;
  fields(ar, version);
  MB_CHECK(version == kPlanFormatVersion, kWhat, " has format version ", version,
           "; this build reads version ", kPlanFormatVersion);
  const std::size_t graph_nodes = graph.nodes().size(), graph_values = graph.values().size();
  auto nodes = static_cast<std::uint32_t>(graph_nodes);
  auto values = static_cast<std::uint32_t>(graph_values);
  fields(ar, nodes, values);
  MB_CHECK(nodes == graph_nodes && values == graph_values, kWhat,
           " does not match the graph: it was made for ", nodes, " nodes and ", values,
           " values, the graph has ", graph_nodes, " and ", graph_values);
  const std::uint64_t graph_hash = graph.structural_hash();
  std::uint64_t hash = graph_hash;
  fields(ar, hash);
  MB_CHECK(hash == graph_hash, kWhat,
           " does not match the graph: it was made for another graph of as many nodes and values "
           "(structural hash ",
           hash, ", the graph's ", graph_hash, ")");
  if constexpr (Ar::kLoading) {
    ar.limit(IdSpace::Node, graph_nodes);
    ar.limit(IdSpace::Value, graph_values);
  }
}

// The saved options must be the compile's: under others, planning would
// decide otherwise.
void check_options(const PlanningOptions& saved, const PlanningOptions& options) {
  MB_CHECK(archived(saved.capability) == archived(options.capability), kWhat,
           " was made under other capability options (disabled ops or op classes)");
  MB_CHECK(archived(saved.partitioner) == archived(options.partitioner), kWhat,
           " was made under other partitioner options");
  MB_CHECK(archived(saved.fusion) == archived(options.fusion), kWhat,
           " was made under other fusion options (launch tuning ", saved.fusion.tuning.to_string(),
           "; now ", options.fusion.tuning.to_string(), ")");
}

// A matmul's or attention's spec names its anchor node's op.
void check_anchor(const Graph& graph, NodeId node, const std::string& op, const char* kind) {
  MB_CHECK(node >= 0 && graph.node(node).op == op, kWhat, " does not match the graph: its ", kind,
           " group's node ", node, " is not ", op);
}

// The plan's own invariants, which no single field's read checks.
void check_plan(const Graph& graph, const CorePlan& plan) {
  const auto nodes = static_cast<std::int64_t>(graph.nodes().size());
  const PartitionResult& r = plan.partitions;
  const auto partitions = static_cast<std::int64_t>(r.partitions.size());
  const char* mismatch = " does not match the graph: ";
  MB_CHECK(static_cast<std::int64_t>(plan.decisions.size()) == nodes, kWhat, mismatch,
           plan.decisions.size(), " decisions for ", nodes, " nodes");
  MB_CHECK(static_cast<std::int64_t>(r.partition_of.size()) == nodes, kWhat, mismatch,
           r.partition_of.size(), " partition indices for ", nodes, " nodes");
  std::vector<std::size_t> members(r.partitions.size());
  for (int p : r.partition_of) {
    MB_CHECK(p >= -1 && p < partitions, kWhat, " is garbled: partition ", p, " of ", partitions);
    if (p >= 0) ++members[static_cast<std::size_t>(p)];
  }
  // A partition lists the nodes in it, and its groups only those.
  auto check_member = [&](NodeId node, std::int64_t p) {
    MB_CHECK(node >= 0 && r.partition_of[static_cast<std::size_t>(node)] == p, kWhat,
             " is garbled: node ", node, " is listed in partition ", p, " but is not in it");
  };
  for (std::int64_t p = 0; p < partitions; ++p) {
    const std::vector<int>& listed = r.partitions[static_cast<std::size_t>(p)];
    MB_CHECK(listed.size() == members[static_cast<std::size_t>(p)], kWhat,
             " is garbled: ", members[static_cast<std::size_t>(p)], " nodes are in partition ", p,
             ", it lists ", listed.size());
    for (NodeId node : listed) check_member(node, p);
  }
  for (const DroppedNode& dropped : r.dropped)
    MB_CHECK(dropped.node >= 0, kWhat, " is garbled: dropped node ", dropped.node);
  for (const ScheduleStep& step : r.schedule) {
    MB_CHECK(step.index >= 0 && step.index < (step.is_partition ? partitions : nodes), kWhat,
             " is garbled: schedule step ", step.index, step.is_partition ? " (partition)" : "");
  }
  MB_CHECK(static_cast<std::int64_t>(plan.fusion.partitions.size()) == partitions, kWhat,
           " is garbled: ", plan.fusion.partitions.size(), " partition plans for ", partitions,
           " partitions");
  for (std::int64_t p = 0; p < partitions; ++p) {
    const PartitionPlan& partition = plan.fusion.partitions[static_cast<std::size_t>(p)];
    MB_CHECK(partition.partition == p, kWhat, " is garbled: partition plan ", p, " is numbered ",
             partition.partition);
    for (const KernelGroup& group : partition.groups) {
      for (NodeId node : group.nodes) check_member(node, p);
      if (const auto* matmul = group.get<MatmulSpec>())
        check_anchor(graph, matmul->product, matmul->op, "matmul");
      if (const auto* attention = group.get<AttentionSpec>())
        check_anchor(graph, attention->anchor, attention->op, "attention");
    }
  }
}

}  // namespace

std::string save_plan(const Graph& graph, const PlanningOptions& options, const CorePlan& plan) {
  Writer writer;
  archive_header(writer, graph);
  archive(writer, const_cast<PlanningOptions&>(options));  // the writer only reads them
  archive(writer, const_cast<CorePlan&>(plan));
  return writer.take();
}

CorePlan load_plan(const Graph& graph, const PlanningOptions& options, std::string_view bytes) {
  Reader reader(bytes, kWhat);
  archive_header(reader, graph);
  PlanningOptions saved;
  archive(reader, saved);
  check_options(saved, options);
  CorePlan plan;
  archive(reader, plan);
  reader.finish();
  check_plan(graph, plan);
  return plan;
}

}  // namespace mybackend
