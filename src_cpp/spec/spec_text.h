// How the engine specs (matmul, conv, attention) print numbers in their
// one-line text (explain(), tests).
#pragma once

#include <cstdio>
#include <string>

namespace mybackend {

// Nine significant digits (a float round-trips), through snprintf rather
// than an ostream: streaming numbers inside _C crashed on the GPU image's
// toolchain (Note [Private libstdc++]).
inline std::string spec_number(double value) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.9g", value);
  return buffer;
}

}  // namespace mybackend
