// Binds dynamo's size symbols (s0, s1, ...) from the actual inputs of a
// call and checks the inputs against the sizes the graph was compiled for.
// A call whose inputs disagree gets an error naming the input and dimension
// instead of a wrong result or a crash deep inside a kernel.
#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

#include "ir/graph.h"

namespace mybackend {

class SymbolBinder {
 public:
  explicit SymbolBinder(const Graph& graph);
  SymbolBindings bind(const std::vector<c10::IValue>& inputs) const;

 private:
  struct DimCheck {
    int input = 0;
    int dim = 0;  // -1: the input is an Int value itself
    Dim expected;
  };
  std::vector<DimCheck> plain_symbols_;  // bind first
  std::vector<DimCheck> derived_;        // static sizes and expressions: check after binding
};

}  // namespace mybackend
