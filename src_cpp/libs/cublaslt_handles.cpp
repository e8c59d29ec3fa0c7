#include "libs/cublaslt_handles.h"

#include <c10/cuda/CUDAGuard.h>

#include <map>
#include <memory>
#include <mutex>

namespace mybackend::cublaslt {

Handle::Handle() { MB_CUBLASLT_CHECK(cublasLtCreate(&handle_)); }

Handle::~Handle() {
  if (handle_ != nullptr) (void)cublasLtDestroy(handle_);  // Note [cuBLASLt handle lifetime]
}

namespace {

struct HandleRegistry {
  std::mutex mutex;
  std::map<int, std::unique_ptr<Handle>> handles;
};

HandleRegistry& registry() {
  static HandleRegistry instance;
  return instance;
}

}  // namespace

cublasLtHandle_t handle_for_device(int device) {
  HandleRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.handles.find(device);
  if (it == r.handles.end()) {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    it = r.handles.emplace(device, std::make_unique<Handle>()).first;
  }
  return it->second->get();
}

MatmulDesc::MatmulDesc(cublasComputeType_t compute, cudaDataType_t scale) {
  MB_CUBLASLT_CHECK(cublasLtMatmulDescCreate(&desc_, compute, scale));
}

MatmulDesc::~MatmulDesc() {
  if (desc_ != nullptr) (void)cublasLtMatmulDescDestroy(desc_);
}

MatrixLayout::MatrixLayout(cudaDataType_t type, std::uint64_t rows, std::uint64_t cols,
                           std::int64_t ld) {
  MB_CUBLASLT_CHECK(cublasLtMatrixLayoutCreate(&layout_, type, rows, cols, ld));
}

MatrixLayout::~MatrixLayout() {
  if (layout_ != nullptr) (void)cublasLtMatrixLayoutDestroy(layout_);
}

void MatrixLayout::set_batch(std::int32_t count, std::int64_t stride) {
  set(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, count);
  set(CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, stride);
}

MatmulPreference::MatmulPreference() {
  MB_CUBLASLT_CHECK(cublasLtMatmulPreferenceCreate(&preference_));
}

MatmulPreference::~MatmulPreference() {
  if (preference_ != nullptr) (void)cublasLtMatmulPreferenceDestroy(preference_);
}

}  // namespace mybackend::cublaslt
