// One IR node run as an ATen operator through the c10 dispatcher (boxed).
//
// Note [Prepared calls]
// Everything that does not depend on the inputs is done once, at compile
// time: the operator handle is resolved, and every argument that names no
// runtime value is converted to its IValue. A call then only fills the
// argument slots that name values and calls the kernel.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <memory>
#include <vector>

#include "ir/graph.h"
#include "runtime/rng_state.h"
#include "runtime/view_replay.h"

namespace mybackend {

// Builds the IValue for an IR argument against the schema's (boxed) type.
c10::IValue argument_to_ivalue(const Argument& arg, const c10::TypePtr& type,
                               const ValueSlots& slots);

// Stores a node's results into its output slots. Results whose schema type
// is a list (split, unbind) are spread over consecutive outputs, so the IR
// never holds a list value; list_returns marks them (empty: none is).
void store_outputs(const Node& node, std::vector<c10::IValue>& returns,
                   const std::vector<bool>& list_returns, ValueSlots& slots);

class AtenCall {
 public:
  // Throws Error naming the node when the operator is unknown to the
  // dispatcher or its arguments do not match the schema.
  // `replay_views`: views may be made without the dispatcher (Note [Views
  // replayed without the dispatcher]).
  AtenCall(const Graph& graph, const Node& node, bool replay_views = true);
  // True when the call was a view made without the dispatcher (Note [Views
  // replayed without the dispatcher] in view_replay.h).
  bool run(ValueSlots& slots) const;
  const Node& node() const { return *node_; }

 private:
  struct PreparedArgument {
    bool is_constant = true;
    c10::IValue constant;
    const Argument* argument = nullptr;  // owned by the graph, which outlives the call
    c10::TypePtr type;
  };
  const Node* node_;
  c10::OperatorHandle op_;
  std::vector<PreparedArgument> arguments_;
  std::vector<bool> list_returns_;
  RngStateArguments rng_state_;              // Note [RNG state follows the capture]
  std::unique_ptr<ViewReplay> view_replay_;  // null: not a view node
};

// Positions of the graph inputs that some ATen node writes to (its schema
// marks the argument as mutable: copy_, BatchNorm running statistics).
std::vector<int> mutated_inputs(const Graph& graph);

// Finds the dispatcher's handle for a node's operator; Error when unknown.
c10::OperatorHandle resolve_operator(const Node& node);

// Splits "aten::add.Tensor" into ("aten::add", "Tensor"); ".default" is the
// empty overload.
std::pair<std::string, std::string> split_operator_name(const std::string& op);

}  // namespace mybackend
