#include "libs/cublaslt_check.h"

#include "common/error.h"

namespace mybackend::detail {

void throw_cublaslt_failure(const char* call, cublasStatus_t status, const char* file, int line) {
  const char* text = cublasLtGetStatusString(status);
  // Integers through std::to_string: streaming them inside _C crashed on the
  // GPU image's toolchain (docs/design/0004-fusion-planner.md).
  throw Error(std::string("cuBLASLt call ") + call + " failed with status " +
              std::to_string(static_cast<int>(status)) + " (" +
              (text != nullptr ? text : "unknown status") + ") [" + file + ":" +
              std::to_string(line) + "]");
}

}  // namespace mybackend::detail
