// Note [Cycle-free merging]
// The partitioner grows partitions by merging clusters of nodes. Merging
// clusters A and B is safe exactly when no path leads from one to the other
// through a node outside A and B: such a path would become a cycle once A
// and B are one node of the contracted graph.
//
// CycleFreeMerger keeps the contracted graph together with a topological
// order of its clusters (a dynamic topological order, in the spirit of
// Pearce and Kelly and of XLA's GraphCycles::ContractEdge). The order bounds
// every search: with A before B, a path A -> ... -> B only visits clusters
// between the two. The check runs two searches in lockstep, forward from A
// and backward from B, so that it costs about as much as the smaller one:
//  * if they meet, a path exists and the merge is refused;
//  * if one runs out first, no path exists, and the clusters it visited are
//    exactly those that must move for the order to stay topological: the
//    descendants of A that sit before B move to just after the merged
//    cluster, which takes B's place (or, symmetrically, the ancestors of B
//    that sit after A move to just before it, in A's place).
//
// Cluster ids are node ids: a cluster is named by one of its nodes, and a
// union-find maps every node to its cluster.
#pragma once

#include <cstddef>
#include <vector>

#include "partition/dynamic_order.h"
#include "partition/node_set.h"

namespace mybackend {

class CycleFreeMerger {
 public:
  // producers[i]: nodes that node i reads, all < i (nodes in topological order).
  explicit CycleFreeMerger(const std::vector<std::vector<int>>& producers);

  // The cluster holding `node` (a node id that names the cluster).
  int cluster_of(int node);

  // Merges the clusters of nodes x and y unless that would close a cycle.
  // Returns whether they now share a cluster.
  bool try_merge(int x, int y);

 private:
  enum class Search { kPathFound, kForwardDone, kBackwardDone };

  struct Frame {
    int cluster;
    std::size_t edge;  // next edge of `cluster` to follow
  };

  bool has_two_step_path(int a, int b) const;
  Search search_between(int a, int b);
  bool step_forward(int a, int b);
  bool step_backward(int a, int b);
  int contract(int a, int b);
  void reorder(Search done, int a, int b, int merged);

  std::vector<int> parent_;  // union-find over nodes
  std::vector<NodeSet> out_;
  std::vector<NodeSet> in_;
  DynamicOrder order_;

  // Scratch space for the searches, kept to avoid reallocating per query.
  // mark_[c] is 2 * epoch_ (+1 when seen backward) for clusters seen now.
  std::vector<unsigned> mark_;
  unsigned epoch_ = 0;
  std::vector<Frame> forward_stack_;
  std::vector<Frame> backward_stack_;
  std::vector<int> forward_;   // seen from a: descendants of a ordered before b
  std::vector<int> backward_;  // seen from b: ancestors of b ordered after a
};

}  // namespace mybackend
