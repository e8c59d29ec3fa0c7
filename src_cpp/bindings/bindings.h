// The only pybind11 code in the project. One file per topic; no logic here
// beyond converting between Python objects and the core's types.
#pragma once

#include <torch/extension.h>

#include "capability/registry.h"
#include "partition/partitioner.h"

namespace mybackend::bindings {

namespace py = pybind11;

void bind_ir(py::module_& m);
void bind_capability(py::module_& m);
void bind_partition(py::module_& m);
void bind_compile(py::module_& m);
void bind_matmul(py::module_& m);
void bind_conv(py::module_& m);

// Shared by the topic files: compile options and reports use them too.
CapabilityOptions capability_options_from(const py::dict& options);  // compile.cpp
py::dict partition_result_to_dict(const PartitionResult& result);    // partition.cpp

// Python value <-> IValue for the runtime's inputs, outputs and fallbacks.
c10::IValue to_ivalue(py::handle object);
py::object from_ivalue(const c10::IValue& value);

}  // namespace mybackend::bindings
