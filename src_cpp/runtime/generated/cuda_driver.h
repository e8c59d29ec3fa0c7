// The few CUDA driver calls generated kernels need, reached through dlopen
// so that the extension neither links libcuda nor needs a driver to import
// (CPU machines never call any of this: the first call comes from the first
// launch of a generated kernel). CUDA builds only.
//
// Why not at::globalContext().getNVRTC(): its struct (at::cuda::NVRTC,
// ATen/cuda/nvrtc_stub/ATenNVRTC.h) is not in the headers a pip-installed
// torch ships, and its layout changes between torch builds.
#pragma once

#ifdef MYBACKEND_WITH_CUDA

#include <cuda.h>  // types only: every driver call goes through the table below

#include <string>

namespace mybackend::cuda {

// clang-format off
#define MB_CUDA_DRIVER_CALLS(X)                                                   \
  X(init, cuInit) X(get_error_string, cuGetErrorString)                           \
  X(device_get, cuDeviceGet) X(primary_ctx_retain, cuDevicePrimaryCtxRetain)      \
  X(ctx_get_current, cuCtxGetCurrent) X(ctx_set_current, cuCtxSetCurrent)         \
  X(module_load_data, cuModuleLoadData) X(module_unload, cuModuleUnload)          \
  X(module_get_function, cuModuleGetFunction) X(launch_kernel, cuLaunchKernel)      \
  X(occupancy_max_active_blocks, cuOccupancyMaxActiveBlocksPerMultiprocessor)
// clang-format on

struct DriverApi {
#define MB_CUDA_DRIVER_MEMBER(member, symbol) decltype(&::symbol) member = nullptr;
  MB_CUDA_DRIVER_CALLS(MB_CUDA_DRIVER_MEMBER)
#undef MB_CUDA_DRIVER_MEMBER
};

// Opens libcuda.so.1 on first use and calls cuInit; throws Error saying why
// when there is no usable driver.
const DriverApi& driver();

[[noreturn]] void throw_driver_failure(const char* call, CUresult result, const char* file,
                                       int line);

// RAII for one loaded module.
class Module {
 public:
  Module() = default;
  // Loads `image` (CUBIN or PTX) into the current context.
  explicit Module(const std::string& image);
  ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  CUfunction function(const std::string& name) const;

 private:
  CUmodule module_ = nullptr;
};

// The primary context of CUDA device `index` (the one torch's runtime API
// uses), retained once per process.
CUcontext primary_context(int index);
// Makes `context` current on this thread when it is not already.
void ensure_current(CUcontext context);

}  // namespace mybackend::cuda

// Every driver call: names the call and the driver's error string.
#define MB_CU_CHECK(call)                                                                \
  do {                                                                                   \
    const CUresult mb_cu_result_ = (call);                                               \
    if (mb_cu_result_ != CUDA_SUCCESS) {                                                 \
      ::mybackend::cuda::throw_driver_failure(#call, mb_cu_result_, __FILE__, __LINE__); \
    }                                                                                    \
  } while (0)

#endif  // MYBACKEND_WITH_CUDA
