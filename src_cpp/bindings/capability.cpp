#include "bindings/bindings.h"
#include "capability/registry.h"

namespace mybackend::bindings {

void bind_capability(py::module_& m) {
  m.def(
      "supported_ops",
      [] {
        py::list ops;
        for (const OpEntry* entry : CapabilityRegistry::builtin().entries()) {
          ops.append(py::make_tuple(entry->op, std::string(op_class_name(entry->op_class))));
        }
        return ops;
      },
      "Every ATen overload the core claims, with its op class, sorted by name.");
  m.def(
      "layout_contracts",
      [] {
        py::dict contracts;
        for (const auto& [op, contract] : CapabilityRegistry::builtin().layout_contracts()) {
          contracts[py::str(op)] = std::string(layout_contract_name(contract));
        }
        return contracts;
      },
      "Every op with a stated layout contract ('any', 'traced' or 'storage'), claimed or not; an "
      "op "
      "missing here gets 'traced' (Note [Layout contracts]).");
  m.def(
      "check_support",
      [](const Graph& graph, int node, const py::dict& options) -> py::object {
        auto decision = CapabilityRegistry::builtin().check(graph, graph.node(node),
                                                            capability_options_from(options));
        if (decision.supported) return py::none();
        return py::str(decision.reason);
      },
      py::arg("graph"), py::arg("node"), py::arg("options") = py::dict(),
      "None when the core runs the node, else the reason it does not.");
}

}  // namespace mybackend::bindings
