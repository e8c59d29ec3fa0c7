#include "runtime/generated/cuda_driver.h"

#ifdef MYBACKEND_WITH_CUDA

#include <dlfcn.h>

#include <map>
#include <mutex>

#include "common/error.h"

namespace mybackend::cuda {
namespace {

DriverApi open_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);  // kept open for the process
  MB_CHECK(lib != nullptr, "generated kernels need the CUDA driver (libcuda.so.1): ", dlerror());
  DriverApi api;
#define MB_CUDA_DRIVER_BIND(member, symbol)                                \
  api.member = reinterpret_cast<decltype(&::symbol)>(dlsym(lib, #symbol)); \
  MB_CHECK(api.member != nullptr, "the CUDA driver lacks " #symbol);
  MB_CUDA_DRIVER_CALLS(MB_CUDA_DRIVER_BIND)
#undef MB_CUDA_DRIVER_BIND
  const CUresult result = api.init(0);
  if (result != CUDA_SUCCESS) {
    const char* text = nullptr;
    api.get_error_string(result, &text);
    MB_CHECK(false, "cuInit(0) failed: ", text ? text : "unknown error");
  }
  return api;
}

}  // namespace

const DriverApi& driver() {
  static const DriverApi api = open_driver();  // a failure throws again on the next call
  return api;
}

void throw_driver_failure(const char* call, CUresult result, const char* file, int line) {
  const char* text = nullptr;
  if (driver().get_error_string(result, &text) != CUDA_SUCCESS) text = nullptr;
  throw Error(detail::concat("CUDA driver call ", call, " failed: ", text ? text : "unknown error",
                             " (", static_cast<int>(result), ") [", file, ":", line, "]"));
}

Module::Module(const std::string& image) {
  MB_CU_CHECK(driver().module_load_data(&module_, image.data()));
}

Module::~Module() {
  // Unloading cannot be reported from a destructor; at process exit the
  // driver may already be gone, which is harmless.
  if (module_ != nullptr) driver().module_unload(module_);
}

CUfunction Module::function(const std::string& name) const {
  CUfunction fn = nullptr;
  MB_CU_CHECK(driver().module_get_function(&fn, module_, name.c_str()));
  return fn;
}

CUcontext primary_context(int index) {
  static std::mutex mutex;
  static std::map<int, CUcontext> contexts;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = contexts.find(index);
  if (it != contexts.end()) return it->second;
  CUdevice device = 0;
  MB_CU_CHECK(driver().device_get(&device, index));
  CUcontext primary = nullptr;
  MB_CU_CHECK(driver().primary_ctx_retain(&primary, device));
  contexts.emplace(index, primary);
  return primary;
}

void ensure_current(CUcontext context) {
  CUcontext current = nullptr;
  MB_CU_CHECK(driver().ctx_get_current(&current));
  if (current != context) MB_CU_CHECK(driver().ctx_set_current(context));
}

}  // namespace mybackend::cuda

#endif  // MYBACKEND_WITH_CUDA
