// The graph IR: what the lowering builds from an ATen FX graph and every
// later stage reads. A Graph is immutable once built (see GraphBuilder):
// stages return new data (a partition plan, a fusion plan) instead of
// rewriting it, so a report can always point back at the original nodes.
//
// Note [Value numbering]
// Values are numbered densely in definition order: graph inputs first, then
// each node's outputs in node order. Node ids are dense in topological order
// (the FX order). Stages index vectors by these ids.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/sym_expr.h"

namespace mybackend {

using ValueId = std::int32_t;
using NodeId = std::int32_t;
constexpr NodeId kGraphInput = -1;

struct TensorType {
  DType dtype = DType::Float32;
  Device device;
  std::vector<Dim> sizes;
  std::vector<Dim> strides;
  std::int64_t rank() const { return static_cast<std::int64_t>(sizes.size()); }
  bool is_contiguous() const;  // true only when provably contiguous (static sizes)
};

enum class ValueKind : std::int8_t { Tensor, Int, Float, Bool, Opaque };

struct Value {
  ValueId id = 0;
  ValueKind kind = ValueKind::Opaque;
  TensorType tensor;            // meaningful when kind == Tensor
  std::optional<Dim> symbolic;  // for Int values: the expression dynamo knows it by
  NodeId producer = kGraphInput;
  int output_index = 0;  // position among the producer's outputs, or among graph inputs
  std::string name;      // the FX name, for reports
};

// A node argument, in schema order. Lists nest (Tensor?[] holds None and
// values; SymInt[] mixes Int and Value).
struct Argument {
  enum class Kind : std::int8_t {
    None,
    Bool,
    Int,
    Float,
    String,
    DType,
    Layout,
    MemoryFormat,
    Device,
    Value,
    List
  };
  Kind kind = Kind::None;
  bool b = false;
  std::int64_t i = 0;  // Int, Layout and MemoryFormat codes, DType code
  double f = 0.0;
  std::string s;  // String, Device
  ValueId value = -1;
  std::vector<Argument> items;

  static Argument none() { return {}; }
  static Argument of_bool(bool v);
  static Argument of_int(std::int64_t v);
  static Argument of_float(double v);
  static Argument of_string(std::string v);
  static Argument of_dtype(DType v);
  static Argument of_layout(std::int64_t code);
  static Argument of_memory_format(std::int64_t code);
  static Argument of_device(const Device& v);
  static Argument of_value(ValueId v);
  static Argument of_list(std::vector<Argument> v);

  // Calls f(ValueId) for every value this argument (or a nested item) names.
  template <typename F>
  void for_each_value(F&& f) const {
    if (kind == Kind::Value) f(value);
    for (const auto& item : items) item.for_each_value(f);
  }
};

enum class NodeKind : std::int8_t {
  Aten,     // an operator the c10 dispatcher knows: op is "ns::name.overload"
  Builtin,  // symbolic-size arithmetic the runtime evaluates itself: op is "builtin::mul", ...
  Python,   // anything else: the runtime calls back into Python (op names the callable)
};

struct Node {
  NodeId id = 0;
  NodeKind kind = NodeKind::Aten;
  std::string op;
  std::vector<Argument> args;
  std::vector<ValueId> outputs;
  std::string name;    // the FX name
  std::string source;  // the user's source line, when dynamo recorded one

  std::vector<ValueId> input_values() const;  // every value the args name, in order, repeats kept
};

class Graph {
 public:
  const std::vector<Value>& values() const { return values_; }
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<ValueId>& inputs() const { return inputs_; }
  const std::vector<Argument>& outputs() const { return outputs_; }
  const Value& value(ValueId id) const;
  const Node& node(NodeId id) const;

  // Nodes that read each node's outputs, deduplicated, in node order.
  std::vector<std::vector<NodeId>> node_users() const;
  // Nodes whose outputs each node reads, deduplicated, in node order.
  std::vector<std::vector<NodeId>> node_producers() const;

  // The text form: one line per node, types inline. Stable across runs;
  // debug information (FX names, source lines) only when asked for.
  std::string to_text(bool with_debug_info = false) const;
  // Hash of the debug-free text form: equal for structurally equal graphs.
  std::uint64_t structural_hash() const;
  // Throws Error naming the first broken invariant.
  void verify() const;

 private:
  friend class GraphBuilder;
  std::vector<Value> values_;
  std::vector<Node> nodes_;
  std::vector<ValueId> inputs_;
  std::vector<Argument> outputs_;
};

// The only way to make a Graph: append inputs, then nodes in topological
// order, then the outputs; build() verifies and hands the graph over.
class GraphBuilder {
 public:
  struct OutputSpec {
    ValueKind kind = ValueKind::Tensor;
    TensorType tensor;
    std::optional<Dim> symbolic;
    std::string name;
  };

  ValueId add_input(const OutputSpec& spec);
  std::vector<ValueId> add_node(NodeKind kind, std::string op, std::vector<Argument> args,
                                const std::vector<OutputSpec>& outputs, std::string name = {},
                                std::string source = {});
  void set_outputs(std::vector<Argument> outputs);
  Graph build();

 private:
  ValueId add_value(const OutputSpec& spec, NodeId producer, int output_index);
  Graph graph_;
  bool outputs_set_ = false;
};

}  // namespace mybackend
