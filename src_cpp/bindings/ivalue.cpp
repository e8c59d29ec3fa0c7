#include <torch/csrc/jit/python/pybind_utils.h>

#include "bindings/bindings.h"
#include "common/error.h"

namespace mybackend::bindings {

namespace {

// Lists of tensors become TensorLists and lists of ints IntLists, the forms
// ATen kernels take; anything else a generic list.
c10::IValue sequence_to_ivalue(py::handle sequence) {
  std::vector<c10::IValue> items;
  bool all_tensors = true, all_ints = true;
  for (py::handle item : sequence) {
    items.push_back(to_ivalue(item));
    all_tensors = all_tensors && items.back().isTensor();
    all_ints = all_ints && items.back().isInt();
  }
  if (all_tensors) {
    c10::List<at::Tensor> list;
    for (auto& item : items) list.push_back(std::move(item).toTensor());
    return list;
  }
  if (all_ints) {
    c10::List<int64_t> list;
    for (auto& item : items) list.push_back(item.toInt());
    return list;
  }
  c10::impl::GenericList list(c10::AnyType::get());
  for (auto& item : items) list.push_back(std::move(item));
  return list;
}

}  // namespace

c10::IValue to_ivalue(py::handle object) {
  if (THPVariable_Check(object.ptr())) return THPVariable_Unpack(object.ptr());
  if (object.is_none()) return c10::IValue();
  if (PyBool_Check(object.ptr())) return object.cast<bool>();
  if (PyLong_Check(object.ptr())) return object.cast<std::int64_t>();
  if (PyFloat_Check(object.ptr())) return object.cast<double>();
  if (py::isinstance<py::list>(object) || py::isinstance<py::tuple>(object)) {
    return sequence_to_ivalue(object);
  }
  MB_CHECK(false, "a ", Py_TYPE(object.ptr())->tp_name,
           " cannot cross into the C++ runtime (tensors, numbers, None and lists of them can)");
  return c10::IValue();
}

py::object from_ivalue(const c10::IValue& value) {
  if (value.isTensor())
    return py::reinterpret_steal<py::object>(THPVariable_Wrap(value.toTensor()));
  return torch::jit::toPyObject(value);
}

}  // namespace mybackend::bindings
