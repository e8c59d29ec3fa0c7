#include "common/error.h"

namespace mybackend::detail {

void throw_check_failure(const char* file, int line, const std::string& message) {
  throw Error(concat(message, " [", file, ":", line, "]"));
}

void throw_internal_failure(const char* file, int line, const char* condition,
                            const std::string& message) {
  throw InternalError(concat(
      "internal error in mybackend (this is a bug; please report it with the "
      "reproducer from MYBACKEND_DUMP_DIR): ",
      condition, " failed", message.empty() ? "" : ": ", message, " [", file, ":", line, "]"));
}

}  // namespace mybackend::detail
