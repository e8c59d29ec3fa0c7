#include "libs/cudnn_check.h"

#include "common/error.h"

namespace mybackend::detail {

void throw_cudnn_failure(const char* call, cudnnStatus_t status, const char* file, int line) {
  const char* text = cudnnGetErrorString(status);
  throw Error(std::string("cuDNN call ") + call + " failed with status " +
              std::to_string(static_cast<int>(status)) + " (" +
              (text != nullptr ? text : "unknown status") + ") [" + file + ":" +
              std::to_string(line) + "]");
}

void throw_cudnn_frontend_failure(const char* call, int code, const std::string& message,
                                  const char* file, int line) {
  throw Error(std::string("cuDNN frontend call ") + call + " failed with error code " +
              std::to_string(code) + " (" + message + ") [" + file + ":" + std::to_string(line) +
              "]");
}

}  // namespace mybackend::detail
