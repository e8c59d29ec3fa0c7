// ATen elementwise overloads -> PwOp instructions (the "parametrise" step of
// the pointwise planner). One explicit table maps each overload the planner
// fuses to a builder that appends the node's SSA to a PointwiseSpec, with
// torch's type promotion written out as Cast instructions.
//
// Note [Logical and register dtypes]
// Every IR value has a logical dtype (what the IR records). Inside a kernel
// it lives in an instruction whose dtype may differ: an op whose result is
// fp16/bf16 computes in fp32 (opmath) and stays fp32, unrounded, until a
// consumer needs the logical dtype (a store, or an explicit dtype
// conversion), which then casts (and rounds) once. Integer and fp32/fp64
// values always live in their logical dtype.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "spec/kernel_spec.h"

namespace mybackend {

// Builds the SSA of a pointwise group, node by node.
class PointwiseSsa {
 public:
  explicit PointwiseSsa(const Graph& graph) : graph_(&graph) {}

  // The space the kernel walks (the group's stored output); concatenations
  // need it (Note [Concatenations in pointwise kernels] in
  // spec/kernel_spec.h). Unset, a concatenation walks its own output.
  void set_walk(const TensorType& walk) { walk_ = &walk; }
  // Nodes that only concatenations read (through each other): computed in
  // each piece's space, where a concatenation reads them, and never in the
  // walk's.
  void set_piece_nodes(std::set<NodeId> nodes) { piece_nodes_ = std::move(nodes); }

  // Appends `node`'s instructions. Returns the reason it cannot (and leaves
  // the spec unchanged in that case), or empty.
  std::string add_node(const Node& node);

  // The instruction holding `value` in its logical dtype (casting if
  // needed); loads the value as a new input when the group does not
  // compute it.
  std::int32_t logical(ValueId value);

  PointwiseSpec& spec() { return spec_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  // The walk's dim of each coordinate axis, counted from its last dim (-1:
  // the last); empty without concatenations.
  const std::vector<int>& coord_dims_from_end() const { return coord_dims_; }
  // True for an input read through guards (a piece or what a piece reads).
  bool guarded(std::size_t input) const;

 private:
  friend class PwNodeBuilder;
  struct Rep {
    std::int32_t instr = 0;
    DType logical = DType::Float32;
  };
  // A range of the walk's coordinates along one axis: where a piece lies.
  struct Range {
    int axis = 0;
    std::int64_t lo = 0;
    std::int64_t hi = 0;
    bool operator<(const Range& o) const {
      return std::tie(axis, lo, hi) < std::tie(o.axis, o.lo, o.hi);
    }
  };
  using Space = std::vector<Range>;  // sorted by axis; empty: the walk's
  struct State;

  std::int32_t emit(PwOp op, DType dtype, std::vector<std::int32_t> args, std::int32_t index = -1);
  std::int32_t cast(std::int32_t instr, DType to);
  std::int32_t literal(DType dtype, double f, std::int64_t i);
  // The instruction of leaf `op` (Scalar, Coord) at `index`, emitted once.
  std::int32_t leaf(PwOp op, DType dtype, std::int32_t index);
  std::int32_t bound(std::int64_t value);  // the i64 kernel-argument scalar of that value
  Rep value(ValueId v);
  void lower(const Node& node);      // throws Refuse
  void lower_cat(const Node& node);  // throws Refuse
  int coord_axis(int dim_from_end);

  const Graph* graph_;
  const TensorType* walk_ = nullptr;
  std::set<NodeId> piece_nodes_;
  PointwiseSpec spec_;
  std::vector<ValueId> inputs_;
  std::unordered_map<ValueId, Rep> values_;  // of the current space
  Space space_;
  std::map<Space, std::unordered_map<ValueId, Rep>> other_spaces_;
  std::vector<int> coord_dims_;
};

// True when `op` is in the table (the node may still be refused: dtypes,
// argument values).
bool has_pointwise_lowering(const std::string& op);
// The overloads in the table, sorted (docs and tests).
std::vector<std::string> pointwise_lowering_ops();

}  // namespace mybackend
