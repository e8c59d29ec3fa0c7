// Graph construction from Python. Python values map to IR arguments:
//   None/bool/int/float/str      -> the scalar kinds
//   list                         -> Argument::List
//   ("v", id)                    -> a value reference
//   ("dtype", "float32"), ("layout", code), ("memory_format", code),
//   ("device", "cuda:0")         -> the tagged kinds
// Output specs are tuples: ("tensor", dtype, device, sizes, strides, name),
// ("int", symbolic_prefix_or_None, name), ("float", name), ("bool", name),
// ("opaque", name); a size or stride is an int or a symbolic prefix string.
#include "bindings/bindings.h"
#include "common/error.h"
#include "ir/graph.h"

namespace mybackend::bindings {
namespace {

Argument to_argument(py::handle object) {
  if (object.is_none()) return Argument::none();
  if (PyBool_Check(object.ptr())) return Argument::of_bool(object.cast<bool>());
  if (PyLong_Check(object.ptr())) return Argument::of_int(object.cast<std::int64_t>());
  if (PyFloat_Check(object.ptr())) return Argument::of_float(object.cast<double>());
  if (py::isinstance<py::str>(object)) return Argument::of_string(object.cast<std::string>());
  if (py::isinstance<py::list>(object)) {
    std::vector<Argument> items;
    for (py::handle item : object) items.push_back(to_argument(item));
    return Argument::of_list(std::move(items));
  }
  if (py::isinstance<py::tuple>(object)) {
    auto tuple = object.cast<py::tuple>();
    MB_CHECK(tuple.size() == 2, "a tagged argument must be a pair, got ",
             py::str(object).cast<std::string>());
    auto tag = tuple[0].cast<std::string>();
    if (tag == "v") return Argument::of_value(tuple[1].cast<ValueId>());
    if (tag == "layout") return Argument::of_layout(tuple[1].cast<std::int64_t>());
    if (tag == "memory_format") return Argument::of_memory_format(tuple[1].cast<std::int64_t>());
    if (tag == "device") return Argument::of_device(Device::parse(tuple[1].cast<std::string>()));
    if (tag == "dtype") {
      auto name = tuple[1].cast<std::string>();
      auto dtype = dtype_from_name(name);
      MB_CHECK(dtype.has_value(), "unknown dtype '", name, "'");
      return Argument::of_dtype(*dtype);
    }
    MB_CHECK(false, "unknown argument tag '", tag, "'");
  }
  MB_CHECK(false, "cannot pass a Python ", Py_TYPE(object.ptr())->tp_name, " as a graph argument");
  return Argument::none();
}

std::vector<Argument> to_arguments(const py::list& list) {
  std::vector<Argument> args;
  for (py::handle item : list) args.push_back(to_argument(item));
  return args;
}

Dim to_dim(py::handle object) {
  if (PyLong_Check(object.ptr())) return Dim(object.cast<std::int64_t>());
  return Dim(SymExpr::parse(object.cast<std::string>()));
}

std::vector<Dim> to_dims(py::handle list) {
  std::vector<Dim> dims;
  for (py::handle item : list) dims.push_back(to_dim(item));
  return dims;
}

GraphBuilder::OutputSpec to_spec(const py::tuple& spec) {
  GraphBuilder::OutputSpec out;
  auto kind = spec[0].cast<std::string>();
  if (kind == "tensor") {
    MB_CHECK(spec.size() == 6, "a tensor spec has 6 fields");
    out.kind = ValueKind::Tensor;
    auto dtype = dtype_from_name(spec[1].cast<std::string>());
    MB_CHECK(dtype.has_value(), "unknown dtype '", spec[1].cast<std::string>(), "'");
    out.tensor.dtype = *dtype;
    out.tensor.device = Device::parse(spec[2].cast<std::string>());
    out.tensor.sizes = to_dims(spec[3]);
    out.tensor.strides = to_dims(spec[4]);
    out.name = spec[5].cast<std::string>();
  } else if (kind == "int") {
    out.kind = ValueKind::Int;
    if (!spec[1].is_none()) out.symbolic = to_dim(spec[1]);
    out.name = spec[2].cast<std::string>();
  } else {
    MB_CHECK(kind == "float" || kind == "bool" || kind == "opaque", "unknown value kind '", kind,
             "'");
    out.kind = kind == "float"  ? ValueKind::Float
               : kind == "bool" ? ValueKind::Bool
                                : ValueKind::Opaque;
    out.name = spec[1].cast<std::string>();
  }
  return out;
}

NodeKind to_node_kind(const std::string& kind) {
  if (kind == "aten") return NodeKind::Aten;
  if (kind == "builtin") return NodeKind::Builtin;
  MB_CHECK(kind == "python", "unknown node kind '", kind, "' (aten, builtin or python)");
  return NodeKind::Python;
}

}  // namespace

void bind_ir(py::module_& m) {
  py::class_<Graph, std::shared_ptr<Graph>>(m, "Graph")
      .def("to_text", &Graph::to_text, py::arg("with_debug_info") = false)
      .def("structural_hash", &Graph::structural_hash)
      .def("verify", &Graph::verify)
      .def_property_readonly("num_nodes", [](const Graph& g) { return g.nodes().size(); })
      .def_property_readonly("num_values", [](const Graph& g) { return g.values().size(); })
      .def("__repr__", [](const Graph& g) { return g.to_text(false); });

  py::class_<GraphBuilder>(m, "GraphBuilder")
      .def(py::init<>())
      .def("add_input",
           [](GraphBuilder& b, const py::tuple& spec) { return b.add_input(to_spec(spec)); })
      .def(
          "add_node",
          [](GraphBuilder& b, const std::string& kind, std::string op, const py::list& args,
             const py::list& outputs, std::string name, std::string source) {
            std::vector<GraphBuilder::OutputSpec> specs;
            for (py::handle spec : outputs) specs.push_back(to_spec(spec.cast<py::tuple>()));
            return b.add_node(to_node_kind(kind), std::move(op), to_arguments(args), specs,
                              std::move(name), std::move(source));
          },
          py::arg("kind"), py::arg("op"), py::arg("args"), py::arg("outputs"), py::arg("name") = "",
          py::arg("source") = "")
      .def("set_outputs",
           [](GraphBuilder& b, const py::list& outputs) { b.set_outputs(to_arguments(outputs)); })
      .def("build", [](GraphBuilder& b) { return std::make_shared<Graph>(b.build()); });
}

}  // namespace mybackend::bindings
