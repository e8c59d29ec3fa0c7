// A compile's plan as bytes, and back (the bindings CompiledGraph.plan_bytes
// and compile_planned; Note [Saved core plans] in mybackend/warm_start.py).
//
// Note [Plan archive]
// A saved plan is the CorePlan (every node's SupportDecision, the
// PartitionResult, the FusionPlan with each group's payload) and the
// PlanningOptions it was made under, written by the archive functions of
// its structs (Note [One archive function per struct] in common/archive.h),
// behind a header:
//   magic "MBPLAN\r\n", u32 format version (kPlanFormatVersion),
//   u32 node count, u32 value count, u64 Graph::structural_hash(),
// then the options, the decisions, the partitions and the fusion plan.
// load_plan() checks, in order, and raises Error naming what failed: the
// magic, the version, the counts and hash against the graph it is given,
// the options against the compile's (a plan made under other options, a
// launch tuning from the environment included, is another plan), then
// every read against the bytes left (truncation), every node and value id
// against the graph, every kernel kind against this build's, and last the
// plan's own invariants (a decision per node, partitions and schedule
// indices in range, each group's nodes in its partition, a matmul's or
// attention's anchor node of the op its spec names). Bytes of another
// build are not detected beyond that: the warm-start key holds the
// extension's hash, so they never reach it there. A change of the archived
// structs' fields changes the format: bump kPlanFormatVersion.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ir/graph.h"
#include "pipeline/core_plan.h"

namespace mybackend {

constexpr std::uint32_t kPlanFormatVersion = 8;  // 8: reductions' row epilogues

// The bytes of `plan`, made for `graph` under `options`.
std::string save_plan(const Graph& graph, const PlanningOptions& options, const CorePlan& plan);

// The plan `bytes` hold, for `graph` compiled under `options`; Error when
// they are not one for them (Note [Plan archive]).
CorePlan load_plan(const Graph& graph, const PlanningOptions& options, std::string_view bytes);

}  // namespace mybackend
