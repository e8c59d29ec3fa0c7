#include "bindings/bindings.h"
#include "common/error.h"
#ifdef MYBACKEND_WITH_CUDNN
#include "libs/cudnn_handles.h"
#endif

namespace mybackend::bindings {
namespace {

bool cuda_enabled() {
#ifdef MYBACKEND_WITH_CUDA
  return true;
#else
  return false;
#endif
}

// The loaded cuDNN's version (e.g. 91900), or None in builds without cuDNN.
pybind11::object cudnn_version() {
#ifdef MYBACKEND_WITH_CUDNN
  return pybind11::int_(mybackend::cudnn::loaded_version());
#else
  return pybind11::none();
#endif
}

}  // namespace
}  // namespace mybackend::bindings

PYBIND11_MODULE(_C, m) {
  namespace py = pybind11;
  using namespace mybackend::bindings;
  m.doc() = "mybackend's C++ core: graph IR, capability, partitioning, fusion, runtime";
  // Registered base first: pybind11 tries the most recently registered
  // translator first, so InternalError is matched before Error.
  auto error = py::register_exception<mybackend::Error>(m, "Error", PyExc_RuntimeError);
  py::register_exception<mybackend::InternalError>(m, "InternalError", error.ptr());
  m.def("cuda_enabled", &cuda_enabled, "True when the extension was built with CUDA kernels");
  m.def("cudnn_version", &cudnn_version,
        "The loaded cuDNN's version (major*10000 + minor*100 + patch), or None when the "
        "extension was built without cuDNN (convolution and attention then run as ATen ops)");
  bind_ir(m);
  bind_capability(m);
  bind_partition(m);
  bind_compile(m);
  bind_matmul(m);
  bind_conv(m);
}
