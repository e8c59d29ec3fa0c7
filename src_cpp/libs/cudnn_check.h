// Every cuDNN call goes through MB_CUDNN_CHECK (backend API status codes) or
// MB_CUDNN_FE_CHECK (the frontend's error objects); both name the call, the
// library's error and the place (docs/contributing.md, "Errors").
#pragma once

#include <cudnn.h>

#include <string>
#include <utility>

namespace mybackend::detail {

[[noreturn]] void throw_cudnn_failure(const char* call, cudnnStatus_t status, const char* file,
                                      int line);
[[noreturn]] void throw_cudnn_frontend_failure(const char* call, int code,
                                               const std::string& message, const char* file,
                                               int line);

// Takes the frontend's error_t by template so this header needs no frontend
// include: translation units that only create handles stay light.
template <typename FrontendError>
void check_cudnn_frontend(FrontendError&& error, const char* call, const char* file, int line) {
  if (error.is_bad()) {
    throw_cudnn_frontend_failure(call, static_cast<int>(error.get_code()), error.get_message(),
                                 file, line);
  }
}

}  // namespace mybackend::detail

#define MB_CUDNN_CHECK(call)                                                                 \
  do {                                                                                       \
    const cudnnStatus_t mb_cudnn_status_ = (call);                                           \
    if (mb_cudnn_status_ != CUDNN_STATUS_SUCCESS) {                                          \
      ::mybackend::detail::throw_cudnn_failure(#call, mb_cudnn_status_, __FILE__, __LINE__); \
    }                                                                                        \
  } while (0)

#define MB_CUDNN_FE_CHECK(call) \
  ::mybackend::detail::check_cudnn_frontend((call), #call, __FILE__, __LINE__)
