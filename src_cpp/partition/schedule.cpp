#include <functional>
#include <queue>

#include "common/error.h"
#include "partition/partition_steps.h"

namespace mybackend::partition_detail {
namespace {

// The steps of the schedule, numbered by their smallest node, so that
// "smallest step first" is the tie-break "smallest node first": the schedule
// stays close to the original program order.
std::vector<ScheduleStep> number_steps(const PartitionResult& result, std::vector<int>& step_of) {
  const int n = static_cast<int>(result.partition_of.size());
  std::vector<int> step_of_partition(result.partitions.size(), -1);
  std::vector<ScheduleStep> steps;
  step_of.assign(n, -1);
  for (int i = 0; i < n; ++i) {
    const int p = result.partition_of[i];
    if (p < 0) {
      step_of[i] = static_cast<int>(steps.size());
      steps.push_back({false, i});
      continue;
    }
    if (step_of_partition[p] < 0) {
      step_of_partition[p] = static_cast<int>(steps.size());
      steps.push_back({true, p});
    }
    step_of[i] = step_of_partition[p];
  }
  return steps;
}

}  // namespace

std::vector<ScheduleStep> schedule_steps(const std::vector<std::vector<int>>& producers,
                                         const PartitionResult& result) {
  std::vector<int> step_of;
  const std::vector<ScheduleStep> steps = number_steps(result, step_of);
  const int n = static_cast<int>(producers.size());
  const int count = static_cast<int>(steps.size());

  // Successor lists of the contracted graph in one array (CSR). Parallel
  // edges are counted on both sides of Kahn's algorithm, so they may stay.
  std::vector<int> first(count + 1, 0);
  std::vector<int> pending_inputs(count, 0);
  for (int i = 0; i < n; ++i) {
    for (int p : producers[i]) {
      if (step_of[p] == step_of[i]) continue;
      ++first[step_of[p] + 1];
      ++pending_inputs[step_of[i]];
    }
  }
  for (int s = 0; s < count; ++s) first[s + 1] += first[s];
  std::vector<int> successors(first[count]);
  std::vector<int> fill(first.begin(), first.end() - 1);
  for (int i = 0; i < n; ++i) {
    for (int p : producers[i]) {
      if (step_of[p] != step_of[i]) successors[fill[step_of[p]]++] = step_of[i];
    }
  }

  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int s = 0; s < count; ++s) {
    if (pending_inputs[s] == 0) ready.push(s);
  }
  std::vector<ScheduleStep> schedule;
  schedule.reserve(count);
  while (!ready.empty()) {
    const int s = ready.top();
    ready.pop();
    schedule.push_back(steps[s]);
    for (int k = first[s]; k < first[s + 1]; ++k) {
      if (--pending_inputs[successors[k]] == 0) ready.push(successors[k]);
    }
  }
  MB_ASSERT(schedule.size() == steps.size(),
            "partitioner: the contracted graph has a cycle, so no schedule exists");
  return schedule;
}

}  // namespace mybackend::partition_detail
