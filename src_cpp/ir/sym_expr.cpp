#include "ir/sym_expr.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "common/error.h"

namespace mybackend {
namespace {

struct OperatorName {
  SymExpr::Kind kind;
  std::string_view name;
  std::string_view infix;  // empty: printed as a call
};

constexpr OperatorName kOperators[] = {
    {SymExpr::Kind::Add, "add", " + "},
    {SymExpr::Kind::Mul, "mul", "*"},
    {SymExpr::Kind::FloorDiv, "floordiv", "//"},
    {SymExpr::Kind::Mod, "mod", " % "},
    {SymExpr::Kind::Max, "max", ""},
    {SymExpr::Kind::Min, "min", ""},
    {SymExpr::Kind::Pow, "pow", "**"},
};

const OperatorName& operator_name(SymExpr::Kind kind) {
  for (const auto& op : kOperators) {
    if (op.kind == kind) return op;
  }
  MB_ASSERT(false, "no operator name for kind ", static_cast<int>(kind));
  return kOperators[0];
}

class PrefixParser {
 public:
  explicit PrefixParser(std::string_view text) : text_(text) {}

  SymExprPtr parse_all() {
    SymExprPtr expr = parse_one();
    skip_space();
    MB_CHECK(pos_ == text_.size(), "trailing characters in symbolic expression '", text_, "'");
    return expr;
  }

 private:
  SymExprPtr parse_one() {
    skip_space();
    MB_CHECK(pos_ < text_.size(), "truncated symbolic expression '", text_, "'");
    if (text_[pos_] == '(') {
      ++pos_;
      std::string_view name = read_token();
      const OperatorName* op = nullptr;
      for (const auto& candidate : kOperators) {
        if (candidate.name == name) op = &candidate;
      }
      MB_CHECK(op != nullptr, "unknown operator '", name, "' in symbolic expression '", text_, "'");
      std::vector<SymExprPtr> operands;
      for (skip_space(); pos_ < text_.size() && text_[pos_] != ')'; skip_space()) {
        operands.push_back(parse_one());
      }
      MB_CHECK(pos_ < text_.size(), "missing ')' in symbolic expression '", text_, "'");
      ++pos_;
      bool n_ary = op->kind == SymExpr::Kind::Add || op->kind == SymExpr::Kind::Mul ||
                   op->kind == SymExpr::Kind::Max || op->kind == SymExpr::Kind::Min;
      MB_CHECK(n_ary ? operands.size() >= 2 : operands.size() == 2, "operator '", name,
               "' has the wrong number of operands in '", text_, "'");
      return std::make_shared<const SymExpr>(op->kind, 0, "", std::move(operands));
    }
    std::string_view token = read_token();
    MB_CHECK(!token.empty(), "empty token in symbolic expression '", text_, "'");
    if (std::isdigit(static_cast<unsigned char>(token[0])) || token[0] == '-') {
      std::int64_t value = 0;
      auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
      MB_CHECK(ec == std::errc() && end == token.data() + token.size(), "bad integer '", token,
               "' in symbolic expression '", text_, "'");
      return SymExpr::constant(value);
    }
    return SymExpr::symbol(std::string(token));
  }

  std::string_view read_token() {
    skip_space();
    std::size_t start = pos_;
    while (pos_ < text_.size() && !std::isspace(static_cast<unsigned char>(text_[pos_])) &&
           text_[pos_] != '(' && text_[pos_] != ')') {
      ++pos_;
    }
    return text_.substr(start, pos_ - start);
  }

  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  std::string_view text_;
  std::size_t pos_ = 0;
};

std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  MB_CHECK(b != 0, "division by zero in a symbolic size");
  std::int64_t quotient = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --quotient;
  return quotient;
}

std::int64_t integer_pow(std::int64_t base, std::int64_t exponent) {
  MB_CHECK(exponent >= 0, "negative exponent in a symbolic size");
  std::int64_t result = 1;
  for (std::int64_t i = 0; i < exponent; ++i) result *= base;
  return result;
}

}  // namespace

SymExpr::SymExpr(Kind kind, std::int64_t constant, std::string symbol,
                 std::vector<SymExprPtr> operands)
    : kind_(kind),
      constant_(constant),
      symbol_(std::move(symbol)),
      operands_(std::move(operands)) {}

SymExprPtr SymExpr::parse(std::string_view prefix_text) {
  return PrefixParser(prefix_text).parse_all();
}

SymExprPtr SymExpr::constant(std::int64_t value) {
  return std::make_shared<const SymExpr>(Kind::Constant, value, "", std::vector<SymExprPtr>{});
}

SymExprPtr SymExpr::symbol(std::string name) {
  return std::make_shared<const SymExpr>(Kind::Symbol, 0, std::move(name),
                                         std::vector<SymExprPtr>{});
}

std::optional<std::int64_t> SymExpr::evaluate(const SymbolBindings& bindings) const {
  if (kind_ == Kind::Constant) return constant_;
  if (kind_ == Kind::Symbol) {
    auto it = bindings.find(symbol_);
    if (it == bindings.end()) return std::nullopt;
    return it->second;
  }
  std::vector<std::int64_t> values;
  values.reserve(operands_.size());
  for (const auto& operand : operands_) {
    auto value = operand->evaluate(bindings);
    if (!value) return std::nullopt;
    values.push_back(*value);
  }
  std::int64_t result = values[0];
  for (std::size_t i = 1; i < values.size(); ++i) {
    switch (kind_) {
      case Kind::Add: result += values[i]; break;
      case Kind::Mul: result *= values[i]; break;
      case Kind::Max: result = std::max(result, values[i]); break;
      case Kind::Min: result = std::min(result, values[i]); break;
      case Kind::FloorDiv: result = floor_div(result, values[i]); break;
      case Kind::Mod: result = result - floor_div(result, values[i]) * values[i]; break;
      case Kind::Pow: result = integer_pow(result, values[i]); break;
      default: MB_ASSERT(false, "unexpected kind in evaluate");
    }
  }
  return result;
}

std::string SymExpr::str() const {
  if (kind_ == Kind::Constant) return std::to_string(constant_);
  if (kind_ == Kind::Symbol) return symbol_;
  const OperatorName& op = operator_name(kind_);
  std::string text = op.infix.empty() ? std::string(op.name) + "(" : "(";
  for (std::size_t i = 0; i < operands_.size(); ++i) {
    if (i > 0) text += op.infix.empty() ? std::string(", ") : std::string(op.infix);
    text += operands_[i]->str();
  }
  return text + ")";
}

std::string SymExpr::prefix() const {
  if (kind_ == Kind::Constant) return std::to_string(constant_);
  if (kind_ == Kind::Symbol) return symbol_;
  std::string text = "(" + std::string(operator_name(kind_).name);
  for (const auto& operand : operands_) text += " " + operand->prefix();
  return text + ")";
}

void SymExpr::collect_symbols(std::vector<std::string>& out) const {
  if (kind_ == Kind::Symbol && std::find(out.begin(), out.end(), symbol_) == out.end()) {
    out.push_back(symbol_);
  }
  for (const auto& operand : operands_) operand->collect_symbols(out);
}

Dim::Dim(SymExprPtr expr) : expr_(std::move(expr)) {
  MB_ASSERT(expr_ != nullptr);
  if (expr_->kind() == SymExpr::Kind::Constant) {
    value_ = expr_->constant_value();
    expr_ = nullptr;
  }
}

std::int64_t Dim::static_value() const {
  MB_ASSERT(is_static(), "dimension ", expr_->str(), " is symbolic");
  return value_;
}

std::optional<std::int64_t> Dim::evaluate(const SymbolBindings& bindings) const {
  if (is_static()) return value_;
  return expr_->evaluate(bindings);
}

std::string Dim::str() const { return is_static() ? std::to_string(value_) : expr_->str(); }

}  // namespace mybackend
