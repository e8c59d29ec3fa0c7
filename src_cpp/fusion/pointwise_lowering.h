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
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "spec/kernel_spec.h"

namespace mybackend {

// Builds the SSA of a pointwise group, node by node.
class PointwiseSsa {
 public:
  explicit PointwiseSsa(const Graph& graph) : graph_(&graph) {}

  // Appends `node`'s instructions. Returns the reason it cannot (and leaves
  // the spec unchanged in that case), or empty.
  std::string add_node(const Node& node);

  // The instruction holding `value` in its logical dtype (casting if
  // needed); loads the value as a new input when the group does not
  // compute it.
  std::int32_t logical(ValueId value);

  PointwiseSpec& spec() { return spec_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }

 private:
  friend class PwNodeBuilder;
  struct Rep {
    std::int32_t instr = 0;
    DType logical = DType::Float32;
  };
  std::int32_t emit(PwOp op, DType dtype, std::vector<std::int32_t> args, std::int32_t index = -1);
  std::int32_t cast(std::int32_t instr, DType to);
  std::int32_t literal(DType dtype, double f, std::int64_t i);
  Rep value(ValueId v);

  const Graph* graph_;
  PointwiseSpec spec_;
  std::vector<ValueId> inputs_;
  std::unordered_map<ValueId, Rep> values_;
};

// True when `op` is in the table (the node may still be refused: dtypes,
// argument values).
bool has_pointwise_lowering(const std::string& op);
// The overloads in the table, sorted (docs and tests).
std::vector<std::string> pointwise_lowering_ops();

}  // namespace mybackend
