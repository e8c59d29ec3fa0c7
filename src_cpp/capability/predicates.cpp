#include "capability/predicates.h"

#include <algorithm>
#include <vector>

namespace mybackend::predicates {
namespace {

std::vector<ValueId> tensor_values(const Graph& graph, const Node& node) {
  std::vector<ValueId> ids = node.input_values();
  ids.insert(ids.end(), node.outputs.begin(), node.outputs.end());
  ids.erase(std::remove_if(ids.begin(), ids.end(),
                           [&](ValueId id) { return graph.value(id).kind != ValueKind::Tensor; }),
            ids.end());
  return ids;
}

}  // namespace

SupportPredicate tensors_with_dtypes(std::initializer_list<DType> dtypes) {
  std::vector<DType> allowed(dtypes);
  return [allowed](const Graph& graph, const Node& node) -> std::optional<std::string> {
    for (ValueId id : tensor_values(graph, node)) {
      DType dtype = graph.value(id).tensor.dtype;
      if (std::find(allowed.begin(), allowed.end(), dtype) == allowed.end()) {
        return "dtype " + std::string(dtype_name(dtype)) + " of %" + std::to_string(id) +
               " is not supported by " + node.op;
      }
    }
    return std::nullopt;
  };
}

SupportPredicate floating_tensors() {
  return tensors_with_dtypes({DType::Float16, DType::BFloat16, DType::Float32, DType::Float64});
}

SupportPredicate numeric_tensors() {
  return tensors_with_dtypes({DType::Float16, DType::BFloat16, DType::Float32, DType::Float64,
                              DType::UInt8, DType::Int8, DType::Int16, DType::Int32, DType::Int64,
                              DType::Bool});
}

SupportPredicate max_rank(int rank) {
  return [rank](const Graph& graph, const Node& node) -> std::optional<std::string> {
    for (ValueId id : tensor_values(graph, node)) {
      if (graph.value(id).tensor.rank() > rank) {
        return "tensor %" + std::to_string(id) + " has rank " +
               std::to_string(graph.value(id).tensor.rank()) + "; at most " + std::to_string(rank) +
               " is supported";
      }
    }
    return std::nullopt;
  };
}

SupportPredicate all_of(std::initializer_list<SupportPredicate> predicates) {
  std::vector<SupportPredicate> list(predicates);
  return [list](const Graph& graph, const Node& node) -> std::optional<std::string> {
    for (const auto& predicate : list) {
      if (auto reason = predicate(graph, node)) return reason;
    }
    return std::nullopt;
  };
}

}  // namespace mybackend::predicates
