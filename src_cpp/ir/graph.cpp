#include "ir/graph.h"

#include <algorithm>
#include <utility>

#include "common/error.h"
#include "common/hash.h"

namespace mybackend {

Argument Argument::of_bool(bool v) {
  Argument a;
  a.kind = Kind::Bool;
  a.b = v;
  return a;
}
Argument Argument::of_int(std::int64_t v) {
  Argument a;
  a.kind = Kind::Int;
  a.i = v;
  return a;
}
Argument Argument::of_float(double v) {
  Argument a;
  a.kind = Kind::Float;
  a.f = v;
  return a;
}
Argument Argument::of_string(std::string v) {
  Argument a;
  a.kind = Kind::String;
  a.s = std::move(v);
  return a;
}
Argument Argument::of_dtype(DType v) {
  Argument a;
  a.kind = Kind::DType;
  a.i = static_cast<std::int64_t>(v);
  return a;
}
Argument Argument::of_layout(std::int64_t code) {
  Argument a;
  a.kind = Kind::Layout;
  a.i = code;
  return a;
}
Argument Argument::of_memory_format(std::int64_t code) {
  Argument a;
  a.kind = Kind::MemoryFormat;
  a.i = code;
  return a;
}
Argument Argument::of_device(const Device& v) {
  Argument a;
  a.kind = Kind::Device;
  a.s = v.str();
  return a;
}
Argument Argument::of_value(ValueId v) {
  Argument a;
  a.kind = Kind::Value;
  a.value = v;
  return a;
}
Argument Argument::of_list(std::vector<Argument> v) {
  Argument a;
  a.kind = Kind::List;
  a.items = std::move(v);
  return a;
}

bool TensorType::is_contiguous() const {
  std::int64_t expected = 1;
  for (std::size_t d = sizes.size(); d-- > 0;) {
    if (!sizes[d].is_static() || !strides[d].is_static()) return false;
    std::int64_t size = sizes[d].static_value();
    if (size != 1 && strides[d].static_value() != expected) return false;
    expected *= size;
  }
  return true;
}

std::vector<ValueId> Node::input_values() const {
  std::vector<ValueId> ids;
  for (const auto& arg : args) arg.for_each_value([&](ValueId id) { ids.push_back(id); });
  return ids;
}

const Value& Graph::value(ValueId id) const {
  MB_ASSERT(id >= 0 && id < static_cast<ValueId>(values_.size()), "value id ", id, " out of range");
  return values_[id];
}

const Node& Graph::node(NodeId id) const {
  MB_ASSERT(id >= 0 && id < static_cast<NodeId>(nodes_.size()), "node id ", id, " out of range");
  return nodes_[id];
}

std::vector<std::vector<NodeId>> Graph::node_producers() const {
  std::vector<std::vector<NodeId>> producers(nodes_.size());
  for (const auto& node : nodes_) {
    auto& list = producers[node.id];
    for (ValueId id : node.input_values()) {
      NodeId producer = values_[id].producer;
      if (producer != kGraphInput) list.push_back(producer);
    }
    std::sort(list.begin(), list.end());
    list.erase(std::unique(list.begin(), list.end()), list.end());
  }
  return producers;
}

std::vector<std::vector<NodeId>> Graph::node_users() const {
  std::vector<std::vector<NodeId>> users(nodes_.size());
  auto producers = node_producers();
  for (const auto& node : nodes_) {
    for (NodeId producer : producers[node.id]) users[producer].push_back(node.id);
  }
  return users;  // already ascending: nodes are visited in order
}

std::uint64_t Graph::structural_hash() const { return fnv1a64(to_text(false)); }

void Graph::verify() const {
  std::vector<bool> defined(values_.size(), false);
  auto check_arg_defined = [&](const Argument& arg, const std::string& where) {
    arg.for_each_value([&](ValueId id) {
      MB_CHECK(id >= 0 && id < static_cast<ValueId>(values_.size()), where, " names value %", id,
               ", which does not exist");
      MB_CHECK(defined[id], where, " uses value %", id, " before it is defined");
    });
  };
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    const Value& v = value(inputs_[i]);
    MB_CHECK(v.producer == kGraphInput, "graph input %", v.id, " has a producer");
    defined[v.id] = true;
  }
  for (std::size_t n = 0; n < nodes_.size(); ++n) {
    const Node& node = nodes_[n];
    MB_CHECK(node.id == static_cast<NodeId>(n), "node ", n, " has id ", node.id);
    MB_CHECK(!node.op.empty(), "node ", n, " has no operator name");
    for (const auto& arg : node.args) check_arg_defined(arg, "node " + node.op);
    for (std::size_t k = 0; k < node.outputs.size(); ++k) {
      const Value& out = value(node.outputs[k]);
      MB_CHECK(out.producer == node.id && out.output_index == static_cast<int>(k), "value %",
               out.id, " does not record node ", n, " as its producer");
      MB_CHECK(!defined[out.id], "value %", out.id, " is defined twice");
      defined[out.id] = true;
    }
  }
  for (const auto& arg : outputs_) check_arg_defined(arg, "graph output");
  for (const auto& v : values_) {
    if (v.kind != ValueKind::Tensor) continue;
    MB_CHECK(v.tensor.sizes.size() == v.tensor.strides.size(), "tensor value %", v.id, " has ",
             v.tensor.sizes.size(), " sizes but ", v.tensor.strides.size(), " strides");
  }
}

ValueId GraphBuilder::add_value(const OutputSpec& spec, NodeId producer, int output_index) {
  Value value;
  value.id = static_cast<ValueId>(graph_.values_.size());
  value.kind = spec.kind;
  value.tensor = spec.tensor;
  value.symbolic = spec.symbolic;
  value.producer = producer;
  value.output_index = output_index;
  value.name = spec.name;
  graph_.values_.push_back(std::move(value));
  return graph_.values_.back().id;
}

ValueId GraphBuilder::add_input(const OutputSpec& spec) {
  MB_CHECK(graph_.nodes_.empty(), "graph inputs must be added before any node");
  ValueId id = add_value(spec, kGraphInput, static_cast<int>(graph_.inputs_.size()));
  graph_.inputs_.push_back(id);
  return id;
}

std::vector<ValueId> GraphBuilder::add_node(NodeKind kind, std::string op,
                                            std::vector<Argument> args,
                                            const std::vector<OutputSpec>& outputs,
                                            std::string name, std::string source) {
  MB_CHECK(!outputs_set_, "nodes cannot be added after the outputs are set");
  Node node;
  node.id = static_cast<NodeId>(graph_.nodes_.size());
  node.kind = kind;
  node.op = std::move(op);
  node.args = std::move(args);
  node.name = std::move(name);
  node.source = std::move(source);
  for (const auto& arg : node.args) {
    arg.for_each_value([&](ValueId id) {
      MB_CHECK(id >= 0 && id < static_cast<ValueId>(graph_.values_.size()), "node ", node.op,
               " uses value %", id, " before it is defined");
    });
  }
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    node.outputs.push_back(add_value(outputs[k], node.id, static_cast<int>(k)));
  }
  graph_.nodes_.push_back(std::move(node));
  return graph_.nodes_.back().outputs;
}

void GraphBuilder::set_outputs(std::vector<Argument> outputs) {
  graph_.outputs_ = std::move(outputs);
  outputs_set_ = true;
}

Graph GraphBuilder::build() {
  MB_CHECK(outputs_set_, "graph outputs were never set");
  graph_.verify();
  Graph result = std::move(graph_);
  graph_ = Graph();
  outputs_set_ = false;
  return result;
}

}  // namespace mybackend
