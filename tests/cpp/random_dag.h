// Random DAGs in the partitioner's input form, shared by test_partition and
// partition_bench. Deterministic for a given seed.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

#include "partition/partitioner.h"

namespace mybackend::testing {

struct RandomDagShape {
  int nodes = 100;
  double mean_producers = 2.5;  // per node, Poisson-like, fewer near the start
  int window = 0;               // > 0: producers among the previous `window` nodes; 0: any
  double supported = 0.7;       // probability a node is supported
  double view_only = 0.15;      // probability a supported node is view-only
};

inline PartitionerInput random_dag(const RandomDagShape& shape, unsigned seed) {
  std::mt19937 rng(seed);
  std::poisson_distribution<int> fan_in(shape.mean_producers);
  std::bernoulli_distribution supported(shape.supported);
  std::bernoulli_distribution view_only(shape.view_only);
  PartitionerInput input;
  input.producers.resize(shape.nodes);
  for (int i = 0; i < shape.nodes; ++i) {
    const int lo = shape.window > 0 ? std::max(0, i - shape.window) : 0;
    std::vector<int>& list = input.producers[i];
    for (int k = fan_in(rng); k > 0 && i > 0; --k) {
      list.push_back(std::uniform_int_distribution<int>(lo, i - 1)(rng));
    }
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
    const bool s = supported(rng);
    input.supported.push_back(s);
    input.view_only.push_back(s && view_only(rng));
  }
  return input;
}

}  // namespace mybackend::testing
