// The cuDNN handle a graph executes with. CUDA builds with cuDNN only.
//
// Note [cuDNN handle lifetime]
// A cudnnHandle_t holds the stream it launches on, so one handle shared by
// two threads would race on cudnnSetStream. Each thread therefore owns one
// handle per device, created on first use (with that device current) and
// destroyed when the thread exits: the forward runs on the caller's thread,
// the backward on autograd's device threads, and neither waits on a lock.
// Destruction ignores errors: at process exit the driver may be gone.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "libs/cudnn_check.h"

namespace mybackend::cudnn {

class Handle {
 public:
  Handle();  // for the current device
  ~Handle();
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  cudnnHandle_t get() const { return handle_; }

 private:
  cudnnHandle_t handle_ = nullptr;
};

// This thread's handle for `device`, bound to `stream` (Note [cuDNN handle lifetime]).
cudnnHandle_t handle_for(int device, cudaStream_t stream);

// The version of the cuDNN library loaded in this process (e.g. 91900).
long loaded_version();

}  // namespace mybackend::cudnn
