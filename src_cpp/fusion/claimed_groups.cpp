#include "fusion/claimed_groups.h"

#include <utility>

#include "common/error.h"

namespace mybackend {

void ClaimedGroups::claim(KernelGroup group) {
  for (NodeId n : group.nodes) {
    MB_ASSERT(nodes_.insert(n).second, "a node was claimed by two kernel groups");
    refusals_.erase(n);
  }
  groups_.push_back(std::move(group));
}

void ClaimedGroups::refuse(NodeId node, std::string reason) {
  if (!claimed(node)) refusals_[node] = std::move(reason);
}

}  // namespace mybackend
