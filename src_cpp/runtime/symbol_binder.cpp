#include "runtime/symbol_binder.h"

#include "common/error.h"

namespace mybackend {
namespace {

bool is_plain_symbol(const Dim& dim) {
  return !dim.is_static() && dim.expr()->kind() == SymExpr::Kind::Symbol;
}

std::int64_t actual_size(const std::vector<c10::IValue>& inputs, int input, int dim) {
  const c10::IValue& value = inputs[input];
  if (dim < 0) {
    MB_CHECK(value.isInt(), "input ", input, " should be an int (a symbolic size), got ",
             value.tagKind());
    return value.toInt();
  }
  MB_CHECK(value.isTensor(), "input ", input, " should be a tensor, got ", value.tagKind());
  const at::Tensor& tensor = value.toTensor();
  MB_CHECK(dim < tensor.dim(), "input ", input, " has ", tensor.dim(),
           " dimensions; the graph was compiled for more");
  return tensor.sizes()[dim];
}

}  // namespace

SymbolBinder::SymbolBinder(const Graph& graph) {
  const auto& inputs = graph.inputs();
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Value& v = graph.value(inputs[i]);
    int input = static_cast<int>(i);
    if (v.kind == ValueKind::Int && v.symbolic && is_plain_symbol(*v.symbolic)) {
      plain_symbols_.push_back({input, -1, *v.symbolic});
    }
    if (v.kind != ValueKind::Tensor) continue;
    for (std::size_t d = 0; d < v.tensor.sizes.size(); ++d) {
      const Dim& dim = v.tensor.sizes[d];
      DimCheck check{input, static_cast<int>(d), dim};
      (is_plain_symbol(dim) ? plain_symbols_ : derived_).push_back(check);
    }
  }
}

SymbolBindings SymbolBinder::bind(const std::vector<c10::IValue>& inputs) const {
  SymbolBindings bindings;
  for (const auto& check : plain_symbols_) {
    std::int64_t size = actual_size(inputs, check.input, check.dim);
    const std::string& symbol = check.expected.expr()->symbol_name();
    auto [it, inserted] = bindings.emplace(symbol, size);
    MB_CHECK(inserted || it->second == size, "input ", check.input, " has size ", size,
             " at dimension ", check.dim, ", but ", symbol, " = ", it->second,
             " from an earlier input: the inputs disagree on a dynamic size");
  }
  for (const auto& check : derived_) {
    std::int64_t size = actual_size(inputs, check.input, check.dim);
    auto expected = check.expected.evaluate(bindings);
    MB_CHECK(!expected || *expected == size, "input ", check.input, " has size ", size,
             " at dimension ", check.dim, "; the graph was compiled for ", check.expected.str(),
             " = ", expected.value_or(-1));
  }
  return bindings;
}

}  // namespace mybackend
