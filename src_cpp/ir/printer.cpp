// The text form of the IR. Example:
//   graph(%0: f32[s0, 16]{16, 1} cpu, %1: int = s0):
//     %2: f32[s0, 16]{16, 1} cpu = aten::relu.default(%0)
//     return (%2)
#include <cstdio>
#include <sstream>

#include "ir/graph.h"

namespace mybackend {
namespace {

std::string format_float(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "%.17g", v);
  std::string text = buffer;
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";  // keep 1.0 apart from 1
  return text;
}

void print_dims(std::ostream& out, const std::vector<Dim>& dims) {
  for (std::size_t i = 0; i < dims.size(); ++i) out << (i ? ", " : "") << dims[i].str();
}

void print_value_type(std::ostream& out, const Value& v) {
  switch (v.kind) {
    case ValueKind::Tensor:
      out << dtype_short_name(v.tensor.dtype) << "[";
      print_dims(out, v.tensor.sizes);
      out << "]{";
      print_dims(out, v.tensor.strides);
      out << "} " << v.tensor.device.str();
      return;
    case ValueKind::Int:
      out << "int";
      if (v.symbolic && !v.symbolic->is_static()) out << " = " << v.symbolic->str();
      return;
    case ValueKind::Float: out << "float"; return;
    case ValueKind::Bool: out << "bool"; return;
    case ValueKind::Opaque: out << "opaque"; return;
  }
}

void print_argument(std::ostream& out, const Argument& a) {
  using K = Argument::Kind;
  switch (a.kind) {
    case K::None: out << "None"; return;
    case K::Bool: out << (a.b ? "True" : "False"); return;
    case K::Int: out << a.i; return;
    case K::Float: out << format_float(a.f); return;
    case K::String: out << '"' << a.s << '"'; return;
    case K::DType: out << dtype_name(static_cast<DType>(a.i)); return;
    case K::Layout: out << "layout(" << a.i << ")"; return;
    case K::MemoryFormat: out << "memory_format(" << a.i << ")"; return;
    case K::Device: out << "device(" << a.s << ")"; return;
    case K::Value: out << "%" << a.value; return;
    case K::List:
      out << "[";
      for (std::size_t i = 0; i < a.items.size(); ++i) {
        if (i) out << ", ";
        print_argument(out, a.items[i]);
      }
      out << "]";
      return;
  }
}

}  // namespace

std::string Graph::to_text(bool with_debug_info) const {
  std::ostringstream out;
  out << "graph(";
  for (std::size_t i = 0; i < inputs_.size(); ++i) {
    const Value& v = values_[inputs_[i]];
    out << (i ? ", " : "") << "%" << v.id << ": ";
    print_value_type(out, v);
  }
  out << "):\n";
  for (const auto& node : nodes_) {
    out << "  ";
    for (std::size_t k = 0; k < node.outputs.size(); ++k) {
      const Value& v = values_[node.outputs[k]];
      out << (k ? ", " : "") << "%" << v.id << ": ";
      print_value_type(out, v);
    }
    out << (node.outputs.empty() ? "" : " = ") << node.op << "(";
    for (std::size_t i = 0; i < node.args.size(); ++i) {
      if (i) out << ", ";
      print_argument(out, node.args[i]);
    }
    out << ")";
    if (with_debug_info && !node.name.empty()) out << "  # " << node.name;
    if (with_debug_info && !node.source.empty()) out << " @ " << node.source;
    out << "\n";
  }
  out << "  return (";
  for (std::size_t i = 0; i < outputs_.size(); ++i) {
    if (i) out << ", ";
    print_argument(out, outputs_[i]);
  }
  out << ")\n";
  return out.str();
}

}  // namespace mybackend
