// Small readers of IR nodes the pattern-matching planners share (matmul,
// attention): typed access to a node's arguments and the view/transposition
// shapes they see through. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "fusion/graph_index.h"
#include "ir/graph.h"

namespace mybackend::ir_match {

// The tensor value argument `index` names, or -1.
ValueId tensor_arg(const Graph& graph, const Node& node, std::size_t index);
// A number known at compile time (Int, Float or Bool literal).
std::optional<double> scalar(const Argument& arg);
std::optional<double> scalar_arg(const Node& node, std::size_t index);
std::optional<bool> bool_arg(const Node& node, std::size_t index);
std::optional<std::int64_t> int_arg(const Node& node, std::size_t index);
std::optional<std::vector<std::int64_t>> int_list_arg(const Node& node, std::size_t index);
bool none_arg(const Node& node, std::size_t index);  // absent or None
std::int64_t normalize_dim(std::int64_t dim, std::int64_t rank);
// t, transpose.int or permute that swaps exactly the last two dims.
bool swaps_last_two_dims(const Graph& graph, const Node& node);
// view, _unsafe_view or reshape.
bool is_shape_view(const Node& node);
// _to_copy or convert_element_type of one tensor to another dtype.
bool is_dtype_cast(const Graph& graph, const Node& node);
// The nodes that carry `value` (rank >= 1) to a dtype cast, the cast last:
// shape views keeping the last dim, each value on the way read once, by a
// node `usable` accepts, and not returned by the graph; the cast's output is
// contiguous. Empty when the chain ends otherwise. (A product or a norm
// takes such a cast in: Note [Products written in f32], Note [Norm outputs
// in 16 bits].)
std::vector<NodeId> views_then_cast(const GraphIndex& index, ValueId value,
                                    const std::function<bool(NodeId)>& usable);
bool same_dim(const Dim& a, const Dim& b);
bool same_shape(const TensorType& a, const TensorType& b);
bool same_strides(const TensorType& a, const TensorType& b);

}  // namespace mybackend::ir_match
