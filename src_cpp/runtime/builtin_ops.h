// The symbolic-size arithmetic that dynamic-shape graphs carry between ATen
// ops (operator.mul on SymInts, sym_max, ...). The lowering names them
// "builtin::<name>"; the executor evaluates them on plain numbers.
#pragma once

#include <ATen/core/ivalue.h>

#include <string>
#include <vector>

namespace mybackend {

// True for the builtin names evaluate_builtin() accepts.
bool is_known_builtin(const std::string& op);
std::vector<std::string> known_builtins();

// Applies "builtin::<name>" to its operands; Python's semantics for
// floordiv, mod and truediv on ints.
c10::IValue evaluate_builtin(const std::string& op, const std::vector<c10::IValue>& operands);

}  // namespace mybackend
