// Every NVRTC call goes through MB_NVRTC_CHECK, which names the call, the
// NVRTC error string, file and line (practice "two kinds of error": this is
// the wrapper for a library's status codes).
#pragma once

#include <nvrtc.h>

#include <string>

namespace mybackend::detail {

[[noreturn]] void throw_nvrtc_failure(const char* call, nvrtcResult result, const char* file,
                                      int line, const std::string& detail);

}  // namespace mybackend::detail

#define MB_NVRTC_CHECK(call) MB_NVRTC_CHECK_DETAIL(call, std::string())

// `message` (e.g. the compile log) is evaluated only when the call failed.
#define MB_NVRTC_CHECK_DETAIL(call, message)                                                \
  do {                                                                                      \
    const nvrtcResult mb_nvrtc_result_ = (call);                                            \
    if (mb_nvrtc_result_ != NVRTC_SUCCESS) {                                                \
      ::mybackend::detail::throw_nvrtc_failure(#call, mb_nvrtc_result_, __FILE__, __LINE__, \
                                               (message));                                  \
    }                                                                                       \
  } while (0)
