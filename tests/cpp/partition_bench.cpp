// Times partition_dag on 20,000-node random DAGs (not a test: prints numbers).
// Usage: partition_bench [nodes] [repeats]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "random_dag.h"

namespace {

using mybackend::PartitionerInput;
using mybackend::PartitionResult;
using mybackend::testing::RandomDagShape;

void time_shape(const char* label, const RandomDagShape& shape, int repeats) {
  std::vector<double> ms;
  std::size_t partitions = 0;
  for (int r = 0; r < repeats; ++r) {
    const PartitionerInput input = mybackend::testing::random_dag(shape, 1234u + r);
    const auto start = std::chrono::steady_clock::now();
    const PartitionResult result = mybackend::partition_dag(input, {});
    const auto stop = std::chrono::steady_clock::now();
    ms.push_back(std::chrono::duration<double, std::milli>(stop - start).count());
    partitions += result.partitions.size();
  }
  std::sort(ms.begin(), ms.end());
  std::printf("%-34s nodes=%d  median %.2f ms  min %.2f ms  max %.2f ms  (%zu partitions/graph)\n",
              label, shape.nodes, ms[ms.size() / 2], ms.front(), ms.back(),
              partitions / static_cast<std::size_t>(repeats));
}

}  // namespace

int main(int argc, char** argv) {
  const int nodes = argc > 1 ? std::atoi(argv[1]) : 20000;
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  for (double fan_in : {2.0, 2.5, 3.0}) {
    RandomDagShape shape;
    shape.nodes = nodes;
    shape.mean_producers = fan_in;
    shape.window = 0;
    char label[64];
    std::snprintf(label, sizeof label, "uniform producers, fan-in %.1f", fan_in);
    time_shape(label, shape, repeats);
    shape.window = 32;
    std::snprintf(label, sizeof label, "local producers (32), fan-in %.1f", fan_in);
    time_shape(label, shape, repeats);
  }
  return 0;
}
