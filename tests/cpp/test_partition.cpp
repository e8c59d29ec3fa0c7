// Stage 6: the partitioner against Note [Partition contract].
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/error.h"
#include "ir/graph.h"
#include "partition/dynamic_order.h"
#include "partition/node_set.h"
#include "partition/partitioner.h"
#include "random_dag.h"

namespace mybackend {
namespace {

// ---- helpers -----------------------------------------------------------------

PartitionerInput make_input(std::vector<std::vector<int>> producers, std::vector<bool> supported,
                            std::vector<bool> view_only = {}) {
  if (view_only.empty()) view_only.assign(producers.size(), false);
  return {std::move(producers), std::move(supported), std::move(view_only)};
}

// The group of each node once partitions are contracted: partition index, or
// partitions.size() + node for a node outside every partition.
std::vector<int> contracted_groups(const PartitionResult& result) {
  std::vector<int> group(result.partition_of.size());
  for (std::size_t i = 0; i < group.size(); ++i) {
    const int p = result.partition_of[i];
    group[i] = p >= 0 ? p : static_cast<int>(result.partitions.size() + i);
  }
  return group;
}

// Whether the graph stays acyclic with each node replaced by its group.
bool contracted_is_acyclic(const std::vector<std::vector<int>>& producers,
                           const std::vector<int>& group) {
  const int groups = group.empty() ? 0 : *std::max_element(group.begin(), group.end()) + 1;
  std::vector<std::vector<int>> succ(groups);
  std::vector<int> indegree(groups, 0);
  for (std::size_t i = 0; i < producers.size(); ++i) {
    for (int p : producers[i]) {
      if (group[p] == group[i]) continue;
      succ[group[p]].push_back(group[i]);
      ++indegree[group[i]];
    }
  }
  std::vector<int> ready;
  for (int g = 0; g < groups; ++g) {
    if (indegree[g] == 0) ready.push_back(g);
  }
  int done = 0;
  while (!ready.empty()) {
    const int g = ready.back();
    ready.pop_back();
    ++done;
    for (int s : succ[g]) {
      if (--indegree[s] == 0) ready.push_back(s);
    }
  }
  return done == groups;
}

void expect_valid_schedule(const PartitionerInput& input, const PartitionResult& result) {
  const int n = static_cast<int>(input.producers.size());
  std::vector<int> partition_pos(result.partitions.size(), -1);
  std::vector<int> node_pos(n, -1);
  for (int pos = 0; pos < static_cast<int>(result.schedule.size()); ++pos) {
    const ScheduleStep& step = result.schedule[pos];
    if (step.is_partition) {
      ASSERT_TRUE(step.index >= 0 && step.index < static_cast<int>(result.partitions.size()));
      ASSERT_EQ(partition_pos[step.index], -1) << "partition scheduled twice";
      partition_pos[step.index] = pos;
    } else {
      ASSERT_TRUE(step.index >= 0 && step.index < n);
      ASSERT_EQ(result.partition_of[step.index], -1) << "partitioned node scheduled alone";
      ASSERT_EQ(node_pos[step.index], -1) << "node scheduled twice";
      node_pos[step.index] = pos;
    }
  }
  auto position = [&](int node) {
    const int p = result.partition_of[node];
    return p >= 0 ? partition_pos[p] : node_pos[node];
  };
  for (int i = 0; i < n; ++i) {
    ASSERT_GE(position(i), 0) << "node " << i << " is never scheduled";
    for (int p : input.producers[i]) {
      if (position(p) == position(i)) continue;
      EXPECT_LT(position(p), position(i)) << "node " << i << " runs before its input " << p;
    }
  }
}

void expect_rules_hold(const PartitionerInput& input, const PartitionerOptions& options,
                       const PartitionResult& result) {
  const int n = static_cast<int>(input.producers.size());
  ASSERT_EQ(result.partition_of.size(), static_cast<std::size_t>(n));
  std::vector<int> dropped_count(n, 0);
  for (std::size_t k = 0; k < result.dropped.size(); ++k) {
    const DroppedNode& d = result.dropped[k];
    ASSERT_TRUE(d.node >= 0 && d.node < n);
    if (k > 0) {
      EXPECT_LT(result.dropped[k - 1].node, d.node) << "dropped not ascending/unique";
    }
    EXPECT_FALSE(d.reason.empty());
    ++dropped_count[d.node];
  }
  for (int i = 0; i < n; ++i) {
    const bool in_partition = result.partition_of[i] >= 0;
    if (input.supported[i]) {
      EXPECT_EQ(int(in_partition) + dropped_count[i], 1) << "supported node " << i;
    } else {
      EXPECT_FALSE(in_partition) << "unsupported node " << i << " in a partition";
      EXPECT_EQ(dropped_count[i], 0) << "unsupported node " << i << " reported as dropped";
    }
  }
  for (std::size_t p = 0; p < result.partitions.size(); ++p) {
    const std::vector<int>& nodes = result.partitions[p];
    ASSERT_FALSE(nodes.empty());
    EXPECT_TRUE(std::is_sorted(nodes.begin(), nodes.end()));
    if (p > 0) {
      EXPECT_LT(result.partitions[p - 1].front(), nodes.front()) << "numbering";
    }
    for (int node : nodes) EXPECT_EQ(result.partition_of[node], static_cast<int>(p));
    EXPECT_FALSE(std::all_of(nodes.begin(), nodes.end(), [&](int x) { return input.view_only[x]; }))
        << "view-only partition kept";
    EXPECT_GE(static_cast<int>(nodes.size()), options.min_partition_size);
    if (!options.allow_single_node_partition) {
      EXPECT_GT(nodes.size(), 1u);
    }
  }
  const int in_partitions = std::count_if(result.partition_of.begin(), result.partition_of.end(),
                                          [](int p) { return p >= 0; });
  const std::size_t members =
      std::accumulate(result.partitions.begin(), result.partitions.end(), std::size_t{0},
                      [](std::size_t acc, const std::vector<int>& v) { return acc + v.size(); });
  EXPECT_EQ(members, static_cast<std::size_t>(in_partitions));
}

// No two partitions joined by an edge can be merged without a cycle: checked
// by contracting each such pair and looking for a cycle.
void expect_maximal(const PartitionerInput& input, const PartitionResult& result) {
  const std::vector<int> group = contracted_groups(result);
  for (std::size_t i = 0; i < input.producers.size(); ++i) {
    for (int p : input.producers[i]) {
      const int a = result.partition_of[p];
      const int b = result.partition_of[i];
      if (a < 0 || b < 0 || a == b) continue;
      std::vector<int> merged = group;
      for (int& g : merged) {
        if (g == b) g = a;
      }
      EXPECT_FALSE(contracted_is_acyclic(input.producers, merged))
          << "partitions " << a << " and " << b << " could have been merged (edge " << p << " -> "
          << i << ")";
    }
  }
}

void expect_contract(const PartitionerInput& input, const PartitionerOptions& options,
                     const PartitionResult& result) {
  expect_rules_hold(input, options, result);
  EXPECT_TRUE(contracted_is_acyclic(input.producers, contracted_groups(result)));
  expect_maximal(input, result);
  expect_valid_schedule(input, result);
}

bool same_result(const PartitionResult& x, const PartitionResult& y) {
  if (x.partition_of != y.partition_of || x.partitions != y.partitions) return false;
  if (x.dropped.size() != y.dropped.size() || x.schedule.size() != y.schedule.size()) return false;
  for (std::size_t k = 0; k < x.dropped.size(); ++k) {
    if (x.dropped[k].node != y.dropped[k].node || x.dropped[k].reason != y.dropped[k].reason) {
      return false;
    }
  }
  for (std::size_t k = 0; k < x.schedule.size(); ++k) {
    if (x.schedule[k].is_partition != y.schedule[k].is_partition ||
        x.schedule[k].index != y.schedule[k].index) {
      return false;
    }
  }
  return true;
}

std::vector<std::pair<bool, int>> steps(const PartitionResult& result) {
  std::vector<std::pair<bool, int>> out;
  for (const auto& s : result.schedule) out.emplace_back(s.is_partition, s.index);
  return out;
}

using Steps = std::vector<std::pair<bool, int>>;
constexpr bool kPart = true;
constexpr bool kNode = false;

// ---- hand-made graphs --------------------------------------------------------

TEST(Partition, EmptyGraph) {
  const PartitionResult result = partition_dag(make_input({}, {}), {});
  EXPECT_TRUE(result.partitions.empty());
  EXPECT_TRUE(result.schedule.empty());
}

TEST(Partition, ChainBecomesOnePartition) {
  const auto input = make_input({{}, {0}, {1}, {2}}, {true, true, true, true});
  const PartitionResult result = partition_dag(input, {});
  EXPECT_EQ(result.partitions, (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  EXPECT_EQ(steps(result), (Steps{{kPart, 0}}));
  expect_contract(input, {}, result);
}

TEST(Partition, UnsupportedNodeSplitsChain) {
  const auto input = make_input({{}, {0}, {1}, {2}, {3}}, {true, true, false, true, true});
  const PartitionResult result = partition_dag(input, {});
  EXPECT_EQ(result.partitions, (std::vector<std::vector<int>>{{0, 1}, {3, 4}}));
  EXPECT_EQ(result.partition_of, (std::vector<int>{0, 0, -1, 1, 1}));
  EXPECT_EQ(steps(result), (Steps{{kPart, 0}, {kNode, 2}, {kPart, 1}}));
  expect_contract(input, {}, result);
}

TEST(Partition, DiamondThroughUnsupportedNodeIsNotMerged) {
  // 0 -> 1 (unsupported) -> 2 and 0 -> 2: merging 0 and 2 would put 1 on a cycle.
  const auto input = make_input({{}, {0}, {0, 1}}, {true, false, true});
  const PartitionResult result = partition_dag(input, {});
  EXPECT_EQ(result.partitions, (std::vector<std::vector<int>>{{0}, {2}}));
  EXPECT_EQ(steps(result), (Steps{{kPart, 0}, {kNode, 1}, {kPart, 1}}));
  expect_contract(input, {}, result);
}

TEST(Partition, DiamondMergesTheSideWithoutTheUnsupportedBranch) {
  // 0 -> 1 -> 3 and 0 -> 2 (unsupported) -> 3: {0, 1} is fine, 3 must stay out.
  const auto input = make_input({{}, {0}, {0}, {1, 2}}, {true, true, false, true});
  const PartitionResult result = partition_dag(input, {});
  EXPECT_EQ(result.partitions, (std::vector<std::vector<int>>{{0, 1}, {3}}));
  EXPECT_EQ(steps(result), (Steps{{kPart, 0}, {kNode, 2}, {kPart, 1}}));
  expect_contract(input, {}, result);
}

TEST(Partition, FullySupportedDiamondIsOnePartition) {
  const auto input = make_input({{}, {0}, {0}, {1, 2}}, {true, true, true, true});
  const PartitionResult result = partition_dag(input, {});
  EXPECT_EQ(result.partitions, (std::vector<std::vector<int>>{{0, 1, 2, 3}}));
  expect_contract(input, {}, result);
}

TEST(Partition, SiblingsWithoutAPathShareAPartition) {
  // 1 and 2 share only an unsupported producer: no path links them, so the
  // horizontal sweep puts them in one partition (as torch's partitioner does).
  const auto input = make_input({{}, {0}, {0}}, {false, true, true});
  const PartitionResult result = partition_dag(input, {});
  EXPECT_EQ(result.partitions, (std::vector<std::vector<int>>{{1, 2}}));
  expect_contract(input, {}, result);
}

TEST(Partition, ViewOnlyPartitionIsDropped) {
  // 0 (unsupported) -> 1 (view) -> 2 (unsupported) -> 3 (view) -> 4 (compute)
  const auto input = make_input({{}, {0}, {1}, {2}, {3}}, {false, true, false, true, true},
                                {false, true, false, true, false});
  const PartitionResult result = partition_dag(input, {});
  EXPECT_EQ(result.partitions, (std::vector<std::vector<int>>{{3, 4}}));
  ASSERT_EQ(result.dropped.size(), 1u);
  EXPECT_EQ(result.dropped[0].node, 1);
  EXPECT_EQ(result.dropped[0].reason, "partition holds only view/shape ops");
  EXPECT_EQ(steps(result), (Steps{{kNode, 0}, {kNode, 1}, {kNode, 2}, {kPart, 0}}));
  expect_contract(input, {}, result);
}

TEST(Partition, MinPartitionSizeDropsSmallPartitions) {
  const auto input =
      make_input({{}, {0}, {1}, {2}, {3}, {4}}, {true, true, false, true, true, true});
  PartitionerOptions options;
  options.min_partition_size = 3;
  const PartitionResult result = partition_dag(input, options);
  EXPECT_EQ(result.partitions, (std::vector<std::vector<int>>{{3, 4, 5}}));
  ASSERT_EQ(result.dropped.size(), 2u);
  EXPECT_EQ(result.dropped[0].node, 0);
  EXPECT_EQ(result.dropped[1].node, 1);
  EXPECT_EQ(result.dropped[0].reason, "partition of 2 nodes is smaller than min_partition_size=3");
  EXPECT_EQ(steps(result), (Steps{{kNode, 0}, {kNode, 1}, {kNode, 2}, {kPart, 0}}));
  expect_contract(input, options, result);
}

TEST(Partition, SingleNodePartitionsDroppedWhenNotAllowed) {
  const auto input = make_input({{}, {0}, {1}, {2}}, {true, false, true, true});
  PartitionerOptions options;
  options.allow_single_node_partition = false;
  const PartitionResult result = partition_dag(input, options);
  EXPECT_EQ(result.partitions, (std::vector<std::vector<int>>{{2, 3}}));
  ASSERT_EQ(result.dropped.size(), 1u);
  EXPECT_EQ(result.dropped[0].node, 0);
  EXPECT_NE(result.dropped[0].reason.find("allow_single_node_partition"), std::string::npos);
  expect_contract(input, options, result);
}

TEST(Partition, ViewRuleIsReportedBeforeSizeRules) {
  const auto input = make_input({{}}, {true}, {true});
  PartitionerOptions options;
  options.min_partition_size = 2;
  options.allow_single_node_partition = false;
  const PartitionResult result = partition_dag(input, options);
  ASSERT_EQ(result.dropped.size(), 1u);
  EXPECT_EQ(result.dropped[0].reason, "partition holds only view/shape ops");
}

TEST(Partition, SupportedDetourIsAbsorbed) {
  // 0 -> 2 and 0 -> 1 -> 2: merging 0 and 2 is only safe once 1 has joined.
  const auto input = make_input({{}, {0}, {0, 1}}, {true, true, true});
  const PartitionResult result = partition_dag(input, {});
  EXPECT_EQ(result.partitions, (std::vector<std::vector<int>>{{0, 1, 2}}));
}

TEST(Partition, BlockedConsumerStaysOutWhileOthersJoin) {
  // 0 -> 1 (unsupported) -> 3, 0 -> 2 -> 3, 2 -> 4: {0, 2, 4} grows, but 3
  // cannot join it, since 1 would then sit on a cycle.
  const auto input = make_input({{}, {0}, {0}, {1, 2}, {2}}, {true, false, true, true, true});
  const PartitionResult result = partition_dag(input, {});
  EXPECT_EQ(result.partitions, (std::vector<std::vector<int>>{{0, 2, 4}, {3}}));
  EXPECT_EQ(steps(result), (Steps{{kPart, 0}, {kNode, 1}, {kPart, 1}}));
  expect_contract(input, {}, result);
}

TEST(Partition, ScheduleKeepsProgramOrderAmongIndependentSteps) {
  // Independent unsupported nodes run in node order, before the partition
  // that reads both.
  const auto input = make_input({{}, {}, {0}, {1}}, {false, false, true, true});
  const PartitionResult result = partition_dag(input, {});
  EXPECT_EQ(steps(result), (Steps{{kNode, 0}, {kNode, 1}, {kPart, 0}}));
}

TEST(Partition, ScheduleMovesAPartitionAfterAllItsInputs) {
  // Partition {0, 2} needs 1, which is outside it: 1 runs first.
  const auto input = make_input({{}, {}, {0, 1}}, {true, false, true});
  const PartitionResult result = partition_dag(input, {});
  EXPECT_EQ(result.partitions, (std::vector<std::vector<int>>{{0, 2}}));
  EXPECT_EQ(steps(result), (Steps{{kNode, 1}, {kPart, 0}}));
}

TEST(Partition, RejectsBadInput) {
  EXPECT_THROW(partition_dag(make_input({{}, {0}}, {true}), {}), Error);
  EXPECT_THROW(partition_dag({{{}, {0}}, {true, true}, {false}}, {}), Error);
  EXPECT_THROW(partition_dag(make_input({{}, {1}}, {true, true}), {}), Error);
  EXPECT_THROW(partition_dag(make_input({{}, {-1}}, {true, true}), {}), Error);
  try {
    partition_dag(make_input({{}, {1}}, {true, true}), {});
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("topological order"), std::string::npos) << e.what();
  }
}

TEST(Partition, DeterministicAndIndependentOfProducerListOrder) {
  std::mt19937 rng(7);
  for (unsigned seed = 0; seed < 50; ++seed) {
    testing::RandomDagShape shape;
    shape.nodes = 300;
    shape.window = seed % 2 ? 12 : 0;
    PartitionerInput input = testing::random_dag(shape, seed);
    const PartitionResult first = partition_dag(input, {});
    EXPECT_TRUE(same_result(first, partition_dag(input, {})));
    for (auto& list : input.producers) {
      if (!list.empty()) list.push_back(list.front());  // repeated reads
      std::shuffle(list.begin(), list.end(), rng);
    }
    EXPECT_TRUE(same_result(first, partition_dag(input, {}))) << "seed " << seed;
  }
}

// ---- the merger's building blocks ----------------------------------------------

TEST(NodeSet, MatchesStdSetThroughGrowthAndShrinking) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 40; ++trial) {
    NodeSet set;
    std::set<int> reference;
    const int range = std::uniform_int_distribution<int>(4, 3000)(rng);
    for (int k = 0; k < 10000; ++k) {
      const int x = std::uniform_int_distribution<int>(0, range)(rng);
      switch (rng() % 3) {
        case 0:
          set.erase(x);
          reference.erase(x);
          break;
        case 1:
          set.insert(x);
          reference.insert(x);
          break;
        default: ASSERT_EQ(set.contains(x), reference.count(x) > 0) << x;
      }
      ASSERT_EQ(set.size(), reference.size());
    }
    EXPECT_EQ(std::set<int>(set.items().begin(), set.items().end()), reference);
  }
}

TEST(DynamicOrder, KeepsOrderWhenGapsRunOut) {
  // Each move lands in the gap right after 0, halving it: after a few dozen
  // moves every label has to be spaced out again.
  constexpr int kNodes = 200;
  DynamicOrder order(kNodes);
  for (int x = kNodes - 1; x >= 1; --x) order.move_after({x}, 0);
  for (int x = 0; x + 1 < kNodes; ++x) EXPECT_TRUE(order.before(x, x + 1)) << x;
  order.move_before({kNodes - 1, 3}, 1);
  order.remove(2);
  const std::vector<int> expected = {0, kNodes - 1, 3, 1, 4, 5};
  for (std::size_t k = 0; k + 1 < expected.size(); ++k) {
    EXPECT_TRUE(order.before(expected[k], expected[k + 1])) << k;
  }
}

// ---- the IR adapter ----------------------------------------------------------

TEST(PartitionGraph, UsesTheGraphsValueUses) {
  GraphBuilder b;
  GraphBuilder::OutputSpec scalar;
  scalar.kind = ValueKind::Int;
  const ValueId x = b.add_input(scalar);
  const ValueId n0 = b.add_node(NodeKind::Builtin, "builtin::mul",
                                {Argument::of_value(x), Argument::of_value(x)}, {scalar})[0];
  const ValueId n1 = b.add_node(NodeKind::Python, "f", {Argument::of_value(n0)}, {scalar})[0];
  const ValueId n2 = b.add_node(NodeKind::Builtin, "builtin::add",
                                {Argument::of_value(n0), Argument::of_value(n1)}, {scalar})[0];
  b.set_outputs({Argument::of_value(n2)});
  const Graph graph = b.build();

  const PartitionResult result =
      partition_graph(graph, {true, false, true}, {false, false, false}, {});
  EXPECT_EQ(result.partitions, (std::vector<std::vector<int>>{{0}, {2}}));
  EXPECT_EQ(steps(result), (Steps{{kPart, 0}, {kNode, 1}, {kPart, 1}}));

  EXPECT_THROW(partition_graph(graph, {true, true}, {false, false, false}, {}), Error);
  EXPECT_THROW(partition_graph(graph, {true, true, true}, {false}, {}), Error);
}

// ---- randomized properties ---------------------------------------------------

TEST(PartitionProperty, RandomDagsMeetTheContract) {
  std::mt19937 rng(20240611);
  for (int trial = 0; trial < 4000; ++trial) {
    testing::RandomDagShape shape;
    shape.nodes = std::uniform_int_distribution<int>(1, trial < 3000 ? 14 : 60)(rng);
    shape.mean_producers = std::uniform_real_distribution<double>(0.5, 3.5)(rng);
    shape.window = std::uniform_int_distribution<int>(0, 1)(rng) ? 0 : 4;
    shape.supported = std::uniform_real_distribution<double>(0.4, 0.95)(rng);
    shape.view_only = std::uniform_real_distribution<double>(0.0, 0.4)(rng);
    const PartitionerInput input = testing::random_dag(shape, rng());
    PartitionerOptions options;
    if (trial % 3 == 1) options.min_partition_size = std::uniform_int_distribution<int>(1, 3)(rng);
    if (trial % 3 == 2) options.allow_single_node_partition = false;

    const PartitionResult result = partition_dag(input, options);
    SCOPED_TRACE("trial " + std::to_string(trial) + ", " + std::to_string(shape.nodes) + " nodes");
    expect_contract(input, options, result);
    if (::testing::Test::HasFailure()) break;  // one broken graph is enough to read
  }
}

TEST(PartitionProperty, WithoutDropRulesEverySupportedNodeIsPartitioned) {
  std::mt19937 rng(99);
  for (int trial = 0; trial < 500; ++trial) {
    testing::RandomDagShape shape;
    shape.nodes = std::uniform_int_distribution<int>(1, 40)(rng);
    shape.view_only = 0.0;
    const PartitionerInput input = testing::random_dag(shape, rng());
    const PartitionResult result = partition_dag(input, {});
    EXPECT_TRUE(result.dropped.empty());
    expect_contract(input, {}, result);
    if (::testing::Test::HasFailure()) break;
  }
}

// With every node supported nothing can block a merge for good, so each
// weakly connected component must end up as one partition.
TEST(PartitionProperty, FullySupportedGraphIsOnePartition) {
  // With every node supported no path can leave a partition, so edges merge
  // each component and the horizontal sweep merges the components.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 300; ++trial) {
    testing::RandomDagShape shape;
    shape.nodes = std::uniform_int_distribution<int>(1, 200)(rng);
    shape.mean_producers = std::uniform_real_distribution<double>(0.3, 3.0)(rng);
    shape.supported = 1.0;
    shape.view_only = 0.0;
    const PartitionerInput input = testing::random_dag(shape, rng());
    const PartitionResult result = partition_dag(input, {});
    ASSERT_EQ(result.partitions.size(), 1u) << "trial " << trial;
    EXPECT_EQ(static_cast<int>(result.partitions[0].size()), shape.nodes);
  }
}

TEST(PartitionProperty, LargeGraphStaysAcyclicAndSchedulable) {
  for (unsigned seed = 0; seed < 4; ++seed) {
    testing::RandomDagShape shape;
    shape.nodes = 5000;
    shape.window = seed % 2 ? 0 : 40;
    const PartitionerInput input = testing::random_dag(shape, seed);
    const PartitionResult result = partition_dag(input, {});
    expect_rules_hold(input, {}, result);
    EXPECT_TRUE(contracted_is_acyclic(input.producers, contracted_groups(result)));
    expect_valid_schedule(input, result);
  }
}

}  // namespace
}  // namespace mybackend
