// Two kinds of error (see docs/contributing.md, "Errors"):
//  * MB_CHECK: the caller handed us something wrong. The message says what.
//  * MB_ASSERT: an invariant of ours broke. The message says it is a bug.
// Both throw mybackend::Error so that the Python front can decide between
// falling back to eager (default) and re-raising (strict mode).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace mybackend {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Thrown by MB_ASSERT: never the user's fault.
class InternalError : public Error {
 public:
  using Error::Error;
};

namespace detail {

template <typename... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

[[noreturn]] void throw_check_failure(const char* file, int line, const std::string& message);
[[noreturn]] void throw_internal_failure(const char* file, int line, const char* condition,
                                         const std::string& message);

}  // namespace detail
}  // namespace mybackend

#define MB_CHECK(condition, ...)                                                          \
  do {                                                                                    \
    if (!(condition)) {                                                                   \
      ::mybackend::detail::throw_check_failure(__FILE__, __LINE__,                        \
                                               ::mybackend::detail::concat(__VA_ARGS__)); \
    }                                                                                     \
  } while (0)

#define MB_ASSERT(condition, ...)                                                                  \
  do {                                                                                             \
    if (!(condition)) {                                                                            \
      ::mybackend::detail::throw_internal_failure(__FILE__, __LINE__, #condition,                  \
                                                  ::mybackend::detail::concat("", ##__VA_ARGS__)); \
    }                                                                                              \
  } while (0)
