// Every cuBLASLt call goes through MB_CUBLASLT_CHECK, which names the call,
// cuBLASLt's status name and string, file and line (docs/contributing.md,
// "Errors": the wrapper for a library's status codes).
#pragma once

#include <cublasLt.h>

namespace mybackend::detail {

[[noreturn]] void throw_cublaslt_failure(const char* call, cublasStatus_t status, const char* file,
                                         int line);

}  // namespace mybackend::detail

#define MB_CUBLASLT_CHECK(call)                                                                    \
  do {                                                                                             \
    const cublasStatus_t mb_cublaslt_status_ = (call);                                             \
    if (mb_cublaslt_status_ != CUBLAS_STATUS_SUCCESS) {                                            \
      ::mybackend::detail::throw_cublaslt_failure(#call, mb_cublaslt_status_, __FILE__, __LINE__); \
    }                                                                                              \
  } while (0)
