// Exact floating-point text: hex floats print every bit of a double, so a
// spec's text (its identity, Note [Spec text is the identity]) and the
// literals emitted from it are bit-for-bit the value the planner chose.
#pragma once

#include <string>

namespace mybackend {

// "0x1.8p+1" for 3.0; the value must be finite.
std::string hexfloat(double value);

}  // namespace mybackend
