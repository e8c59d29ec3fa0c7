// Integer expressions over the symbols dynamo introduces for dynamic sizes
// (s0, s1, ...). The lowering writes them in a prefix form that this file
// parses: "s0", "7", "(add s0 (mul 2 s1))". Operators: add, mul (n-ary),
// floordiv, mod, max, min, pow (binary). floordiv and mod follow Python's
// rounding (towards negative infinity), as sympy's FloorDiv and Mod do.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mybackend {

using SymbolBindings = std::map<std::string, std::int64_t, std::less<>>;

class SymExpr {
 public:
  enum class Kind { Constant, Symbol, Add, Mul, FloorDiv, Mod, Max, Min, Pow };

  static std::shared_ptr<const SymExpr> parse(std::string_view prefix_text);
  static std::shared_ptr<const SymExpr> constant(std::int64_t value);
  static std::shared_ptr<const SymExpr> symbol(std::string name);

  Kind kind() const { return kind_; }
  std::int64_t constant_value() const { return constant_; }
  const std::string& symbol_name() const { return symbol_; }
  const std::vector<std::shared_ptr<const SymExpr>>& operands() const { return operands_; }

  // nullopt when a symbol is unbound.
  std::optional<std::int64_t> evaluate(const SymbolBindings& bindings) const;
  // Readable infix, used in the text IR: "s0*2 + 1".
  std::string str() const;
  // The prefix form that parse() reads back.
  std::string prefix() const;
  void collect_symbols(std::vector<std::string>& out) const;

  SymExpr(Kind kind, std::int64_t constant, std::string symbol,
          std::vector<std::shared_ptr<const SymExpr>> operands);

 private:
  Kind kind_;
  std::int64_t constant_ = 0;
  std::string symbol_;
  std::vector<std::shared_ptr<const SymExpr>> operands_;
};

using SymExprPtr = std::shared_ptr<const SymExpr>;

// One tensor dimension (a size or a stride): a known integer or an
// expression over dynamo's size symbols.
class Dim {
 public:
  Dim(std::int64_t value) : value_(value) {}  // NOLINT(google-explicit-constructor)
  explicit Dim(SymExprPtr expr);

  bool is_static() const { return expr_ == nullptr; }
  std::int64_t static_value() const;
  const SymExprPtr& expr() const { return expr_; }
  std::optional<std::int64_t> evaluate(const SymbolBindings& bindings) const;
  std::string str() const;

 private:
  std::int64_t value_ = 0;
  SymExprPtr expr_;
};

}  // namespace mybackend
