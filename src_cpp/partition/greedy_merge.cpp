#include <algorithm>
#include <utility>

#include "partition/cycle_free_merger.h"
#include "partition/partition_steps.h"

namespace mybackend::partition_detail {
namespace {

using Edge = std::pair<int, int>;  // producer, consumer

std::vector<Edge> supported_edges(const PartitionerInput& input) {
  std::vector<Edge> edges;
  for (int i = 0; i < static_cast<int>(input.producers.size()); ++i) {
    if (!input.supported[i]) continue;
    for (int p : input.producers[i]) {
      if (input.supported[p]) edges.emplace_back(p, i);
    }
  }
  return edges;
}

// How many partitions a cluster tries to join in the horizontal sweep: a
// small window keeps the sweep linear in the number of clusters.
constexpr std::size_t kHorizontalWindow = 16;

// Clusters that share no edge can still form one partition when no path
// links them; torch's CapabilityBasedPartitioner merges those too, and fewer
// partitions mean fewer boundaries. Each cluster, in node order, tries the
// most recently grown partitions first.
void merge_horizontally(const PartitionerInput& input, CycleFreeMerger& merger) {
  // Clusters are named by their smallest node, found before any merge here,
  // so the sweep order depends on the graph only, not on how merging went.
  const int n = static_cast<int>(input.producers.size());
  std::vector<bool> first_of_cluster(n, false);
  std::vector<bool> cluster_seen(n, false);
  for (int i = 0; i < n; ++i) {
    if (!input.supported[i] || cluster_seen[merger.cluster_of(i)]) continue;
    cluster_seen[merger.cluster_of(i)] = true;
    first_of_cluster[i] = true;
  }
  std::vector<int> recent;  // a node of each recently grown partition, most recent last
  for (int i = 0; i < n; ++i) {
    if (!first_of_cluster[i]) continue;
    bool joined = false;
    for (std::size_t k = recent.size(); k-- > 0 && !joined;) {
      if (merger.try_merge(recent[k], i)) {
        recent.erase(recent.begin() + static_cast<std::ptrdiff_t>(k));
        joined = true;
      }
    }
    recent.push_back(i);
    if (recent.size() > kHorizontalWindow) recent.erase(recent.begin());
  }
}

// Merges along edges, retrying refused edges until a round merges nothing:
// a merge refused now can become possible once the nodes on the blocking
// path have joined one side. That fixpoint is the maximality of
// Note [Partition contract]. Edges go in node order, so the result depends
// only on the graph.
void merge_along_edges(const PartitionerInput& input, CycleFreeMerger& merger) {
  std::vector<Edge> pending = supported_edges(input);
  while (!pending.empty()) {
    std::vector<Edge> refused;
    bool merged_any = false;
    for (const auto& [producer, consumer] : pending) {
      if (merger.cluster_of(producer) == merger.cluster_of(consumer)) continue;
      if (merger.try_merge(producer, consumer)) {
        merged_any = true;
      } else {
        refused.emplace_back(producer, consumer);
      }
    }
    if (!merged_any) break;
    pending = std::move(refused);
  }
}

// The second strategy, in the order torch's partitioner uses: nodes from
// last to first, each joining every recent partition it can, oldest first,
// then its users' partitions. A node that joined nothing starts a partition.
void merge_in_reverse(const PartitionerInput& input, CycleFreeMerger& merger) {
  const int n = static_cast<int>(input.producers.size());
  std::vector<std::vector<int>> users(n);
  for (const auto& [producer, consumer] : supported_edges(input)) {
    users[producer].push_back(consumer);
  }
  std::vector<int> recent;  // a node of each partition, oldest first
  for (int i = n - 1; i >= 0; --i) {
    if (!input.supported[i]) continue;
    bool joined = false;
    for (int partition : recent) joined = merger.try_merge(partition, i) || joined;
    for (int user : users[i]) joined = merger.try_merge(user, i) || joined;
    if (joined) {
      // i may have joined several partitions into one: keep one entry each.
      std::vector<int> distinct;
      for (int partition : recent) {
        bool seen = false;
        for (int kept : distinct)
          seen = seen || merger.cluster_of(kept) == merger.cluster_of(partition);
        if (!seen) distinct.push_back(partition);
      }
      recent = std::move(distinct);
      continue;
    }
    recent.push_back(i);
    if (recent.size() > kHorizontalWindow) recent.erase(recent.begin());
  }
}

std::vector<int> clusters_of(const PartitionerInput& input, CycleFreeMerger& merger) {
  std::vector<int> cluster(input.producers.size(), -1);
  for (int i = 0; i < static_cast<int>(cluster.size()); ++i) {
    if (input.supported[i]) cluster[i] = merger.cluster_of(i);
  }
  return cluster;
}

std::size_t count_clusters(const std::vector<int>& cluster) {
  std::vector<int> ids;
  for (int c : cluster) {
    if (c >= 0) ids.push_back(c);
  }
  std::sort(ids.begin(), ids.end());
  return static_cast<std::size_t>(std::unique(ids.begin(), ids.end()) - ids.begin());
}

}  // namespace

// Greedy merging has no single best order: the edge-first sweep and the
// reverse sweep each win on some graphs, so both run and the one with fewer
// partitions is kept (the edge-first one on a tie).
std::vector<int> merge_supported_nodes(const PartitionerInput& input) {
  CycleFreeMerger edge_first(input.producers);
  merge_along_edges(input, edge_first);
  merge_horizontally(input, edge_first);
  std::vector<int> best = clusters_of(input, edge_first);

  CycleFreeMerger reverse(input.producers);
  merge_in_reverse(input, reverse);
  merge_along_edges(input, reverse);
  std::vector<int> candidate = clusters_of(input, reverse);
  if (count_clusters(candidate) < count_clusters(best)) best = std::move(candidate);
  return best;
}

}  // namespace mybackend::partition_detail
