#include "bindings/bindings.h"
#include "partition/partitioner.h"

namespace mybackend::bindings {

py::dict partition_result_to_dict(const PartitionResult& result) {
  py::list dropped, schedule;
  for (const auto& d : result.dropped) dropped.append(py::make_tuple(d.node, d.reason));
  for (const auto& s : result.schedule) {
    schedule.append(py::make_tuple(s.is_partition ? "partition" : "node", s.index));
  }
  py::dict out;
  out["partition_of"] = result.partition_of;
  out["partitions"] = result.partitions;
  out["dropped"] = dropped;
  out["schedule"] = schedule;
  return out;
}

void bind_partition(py::module_& m) {
  m.def(
      "partition_dag",
      [](std::vector<std::vector<int>> producers, std::vector<bool> supported,
         std::vector<bool> view_only, int min_partition_size, bool allow_single_node_partition) {
        PartitionerInput input{std::move(producers), std::move(supported), std::move(view_only)};
        PartitionerOptions options{min_partition_size, allow_single_node_partition};
        PartitionResult result;
        {
          py::gil_scoped_release release;
          result = partition_dag(input, options);
        }
        return partition_result_to_dict(result);
      },
      py::arg("producers"), py::arg("supported"), py::arg("view_only"),
      py::arg("min_partition_size") = 1, py::arg("allow_single_node_partition") = true,
      "Partition an abstract DAG (nodes in topological order); for tests and benchmarks.");
}

}  // namespace mybackend::bindings
