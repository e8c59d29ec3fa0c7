// RAII owners for cuBLASLt's objects, and the per-device handle registry.
// CUDA builds only.
//
// Note [cuBLASLt handle lifetime]
// One cublasLtHandle_t per device, created the first time a matmul runs on
// that device (under a guard that makes it current) and owned by a
// process-wide registry: a function-local static, so it is destroyed at
// exit, after every compiled graph that could use it (graphs hold no handle,
// they ask the registry per call). cuBLASLt takes the stream per call and
// keeps no per-call state in the handle, so threads share it. Destruction
// ignores errors: at exit the driver may already be gone.
#pragma once

#include <cublasLt.h>

#include <cstdint>

#include "libs/cublaslt_check.h"

namespace mybackend::cublaslt {

class Handle {
 public:
  Handle();  // for the current device
  ~Handle();
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  cublasLtHandle_t get() const { return handle_; }

 private:
  cublasLtHandle_t handle_ = nullptr;
};

// The handle of CUDA device `device` (Note [cuBLASLt handle lifetime]).
cublasLtHandle_t handle_for_device(int device);

class MatmulDesc {
 public:
  MatmulDesc(cublasComputeType_t compute, cudaDataType_t scale);
  ~MatmulDesc();
  MatmulDesc(const MatmulDesc&) = delete;
  MatmulDesc& operator=(const MatmulDesc&) = delete;
  template <typename T>
  void set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
    MB_CUBLASLT_CHECK(cublasLtMatmulDescSetAttribute(desc_, attribute, &value, sizeof(T)));
  }
  cublasLtMatmulDesc_t get() const { return desc_; }

 private:
  cublasLtMatmulDesc_t desc_ = nullptr;
};

// A column-major matrix (cuBLASLt's default order), optionally batched.
class MatrixLayout {
 public:
  MatrixLayout(cudaDataType_t type, std::uint64_t rows, std::uint64_t cols, std::int64_t ld);
  ~MatrixLayout();
  MatrixLayout(const MatrixLayout&) = delete;
  MatrixLayout& operator=(const MatrixLayout&) = delete;
  template <typename T>
  void set(cublasLtMatrixLayoutAttribute_t attribute, const T& value) {
    MB_CUBLASLT_CHECK(cublasLtMatrixLayoutSetAttribute(layout_, attribute, &value, sizeof(T)));
  }
  void set_batch(std::int32_t count, std::int64_t stride);
  cublasLtMatrixLayout_t get() const { return layout_; }

 private:
  cublasLtMatrixLayout_t layout_ = nullptr;
};

class MatmulPreference {
 public:
  MatmulPreference();
  ~MatmulPreference();
  MatmulPreference(const MatmulPreference&) = delete;
  MatmulPreference& operator=(const MatmulPreference&) = delete;
  template <typename T>
  void set(cublasLtMatmulPreferenceAttributes_t attribute, const T& value) {
    MB_CUBLASLT_CHECK(
        cublasLtMatmulPreferenceSetAttribute(preference_, attribute, &value, sizeof(T)));
  }
  cublasLtMatmulPreference_t get() const { return preference_; }

 private:
  cublasLtMatmulPreference_t preference_ = nullptr;
};

}  // namespace mybackend::cublaslt
