#include "libs/cudnn_handles.h"

#include <c10/cuda/CUDAGuard.h>

#include <map>
#include <memory>

namespace mybackend::cudnn {

Handle::Handle() { MB_CUDNN_CHECK(cudnnCreate(&handle_)); }

Handle::~Handle() {
  if (handle_ != nullptr) (void)cudnnDestroy(handle_);  // Note [cuDNN handle lifetime]
}

cudnnHandle_t handle_for(int device, cudaStream_t stream) {
  thread_local std::map<int, std::unique_ptr<Handle>> handles;
  auto it = handles.find(device);
  if (it == handles.end()) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    it = handles.emplace(device, std::make_unique<Handle>()).first;
  }
  MB_CUDNN_CHECK(cudnnSetStream(it->second->get(), stream));
  return it->second->get();
}

long loaded_version() { return static_cast<long>(cudnnGetVersion()); }

}  // namespace mybackend::cudnn
