#include "runtime/builtin_ops.h"

#include <cmath>
#include <functional>
#include <map>

#include "common/error.h"

namespace mybackend {
namespace {

using Operands = std::vector<c10::IValue>;
using Builtin = std::function<c10::IValue(const Operands&)>;

bool all_ints(const Operands& operands) {
  for (const auto& v : operands) {
    if (!v.isInt() && !v.isBool()) return false;
  }
  return true;
}
std::int64_t as_int(const c10::IValue& v) { return v.isBool() ? v.toBool() : v.toInt(); }
double as_double(const c10::IValue& v) {
  if (v.isDouble()) return v.toDouble();
  return static_cast<double>(as_int(v));
}

std::int64_t python_floordiv(std::int64_t a, std::int64_t b) {
  MB_CHECK(b != 0, "integer division by zero in a symbolic size expression");
  std::int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

// An arithmetic builtin: integer result when every operand is an integer.
Builtin arithmetic(std::function<std::int64_t(std::int64_t, std::int64_t)> on_ints,
                   std::function<double(double, double)> on_doubles) {
  return [on_ints, on_doubles](const Operands& x) -> c10::IValue {
    MB_CHECK(x.size() == 2, "binary builtin given ", x.size(), " operands");
    if (all_ints(x)) return on_ints(as_int(x[0]), as_int(x[1]));
    return on_doubles(as_double(x[0]), as_double(x[1]));
  };
}

Builtin comparison(std::function<bool(double, double)> compare) {
  return [compare](const Operands& x) -> c10::IValue {
    MB_CHECK(x.size() == 2, "comparison given ", x.size(), " operands");
    if (all_ints(x))
      return compare(static_cast<double>(as_int(x[0])), static_cast<double>(as_int(x[1])));
    return compare(as_double(x[0]), as_double(x[1]));
  };
}

Builtin unary_double(std::function<double(double)> f) {
  return [f](const Operands& x) -> c10::IValue { return f(as_double(x.at(0))); };
}

const std::map<std::string, Builtin>& table() {
  static const std::map<std::string, Builtin> builtins = {
      {"builtin::add", arithmetic(std::plus<>(), std::plus<>())},
      {"builtin::sub", arithmetic(std::minus<>(), std::minus<>())},
      {"builtin::mul", arithmetic(std::multiplies<>(), std::multiplies<>())},
      {"builtin::floordiv",
       arithmetic(python_floordiv, [](double a, double b) { return std::floor(a / b); })},
      {"builtin::mod",
       arithmetic([](std::int64_t a, std::int64_t b) { return a - python_floordiv(a, b) * b; },
                  [](double a, double b) { return a - std::floor(a / b) * b; })},
      {"builtin::truediv",
       [](const Operands& x) -> c10::IValue { return as_double(x.at(0)) / as_double(x.at(1)); }},
      {"builtin::pow", arithmetic(
                           [](std::int64_t a, std::int64_t b) {
                             return static_cast<std::int64_t>(std::llround(std::pow(a, b)));
                           },
                           [](double a, double b) { return std::pow(a, b); })},
      {"builtin::max", arithmetic([](std::int64_t a, std::int64_t b) { return std::max(a, b); },
                                  [](double a, double b) { return std::max(a, b); })},
      {"builtin::min", arithmetic([](std::int64_t a, std::int64_t b) { return std::min(a, b); },
                                  [](double a, double b) { return std::min(a, b); })},
      {"builtin::neg",
       [](const Operands& x) -> c10::IValue {
         if (all_ints(x)) return -as_int(x.at(0));
         return -as_double(x.at(0));
       }},
      {"builtin::eq", comparison(std::equal_to<>())},
      {"builtin::ne", comparison(std::not_equal_to<>())},
      {"builtin::lt", comparison(std::less<>())},
      {"builtin::le", comparison(std::less_equal<>())},
      {"builtin::gt", comparison(std::greater<>())},
      {"builtin::ge", comparison(std::greater_equal<>())},
      {"builtin::not", [](const Operands& x) -> c10::IValue { return !as_int(x.at(0)); }},
      {"builtin::and",
       [](const Operands& x) -> c10::IValue {
         return as_int(x.at(0)) != 0 && as_int(x.at(1)) != 0;
       }},
      {"builtin::or",
       [](const Operands& x) -> c10::IValue {
         return as_int(x.at(0)) != 0 || as_int(x.at(1)) != 0;
       }},
      {"builtin::float", unary_double([](double a) { return a; })},
      {"builtin::int",
       [](const Operands& x) -> c10::IValue {
         return static_cast<std::int64_t>(as_double(x.at(0)));
       }},
      {"builtin::ceil",
       [](const Operands& x) -> c10::IValue {
         return static_cast<std::int64_t>(std::ceil(as_double(x.at(0))));
       }},
      {"builtin::floor",
       [](const Operands& x) -> c10::IValue {
         return static_cast<std::int64_t>(std::floor(as_double(x.at(0))));
       }},
      {"builtin::sqrt", unary_double([](double a) { return std::sqrt(a); })},
  };
  return builtins;
}

}  // namespace

bool is_known_builtin(const std::string& op) { return table().count(op) != 0; }

std::vector<std::string> known_builtins() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : table()) names.push_back(name);
  return names;
}

c10::IValue evaluate_builtin(const std::string& op, const Operands& operands) {
  auto it = table().find(op);
  MB_CHECK(it != table().end(), "unknown builtin ", op);
  return it->second(operands);
}

}  // namespace mybackend
