// The one way a fusion planner takes nodes of a partition for itself.
//
// Note [Claimed groups]
// Planners that form groups around an anchor op (matmul_planner.h: matrix
// products with their epilogues; conv_planner.h: convolutions with their
// epilogues; reduction_planner.h: reductions and norms with their
// elementwise prologue/epilogue; pool_planner.h: max pools with their
// elementwise prologue) run in a fixed order on each CUDA partition and
// share one ClaimedGroups: each claims only nodes no earlier planner
// claimed, and records why an anchor it could not use stays an ATen call.
// The matmul planner runs first (its epilogue is free inside the cuBLASLt
// call, and a bias-gradient sum is better as BGRADB than as a generated
// reduction), the conv planner second (its bias/batch-norm/residual/relu
// epilogue is free inside the cuDNN graph; it shares no anchor with the
// matmul planner), then reductions and norms, then pools (an elementwise
// node a reduction's prologue took is no pool's). The pointwise planner
// then grows elementwise groups around the claimed groups, each of which is
// one fixed unit (PointwisePlanner::plan): no node joins it and no
// pointwise group forms a cycle through it.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "fusion/fusion_plan.h"

namespace mybackend {

class ClaimedGroups {
 public:
  // Takes the group's nodes (none may be claimed already) and drops the
  // refusals recorded for them.
  void claim(KernelGroup group);
  // Why `node` (an anchor some planner looked at) stays an ATen call;
  // ignored for claimed nodes, a later reason replaces an earlier one.
  void refuse(NodeId node, std::string reason);
  bool claimed(NodeId node) const { return nodes_.count(node) != 0; }

  // Claimed groups in claiming order, their nodes ascending.
  const std::vector<KernelGroup>& groups() const { return groups_; }
  const std::map<NodeId, std::string>& refusals() const { return refusals_; }

 private:
  std::vector<KernelGroup> groups_;
  std::set<NodeId> nodes_;
  std::map<NodeId, std::string> refusals_;
};

}  // namespace mybackend
