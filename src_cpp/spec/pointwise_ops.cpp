#include "spec/pointwise_ops.h"

#include <array>

#include "common/error.h"

namespace mybackend {
namespace {

// Indexed by PwOp; the static_assert below keeps the order honest.
constexpr std::array<PwOpInfo, static_cast<std::size_t>(PwOp::Cast) + 1> kOps = {{
    {PwOp::Load, "load", 0, PwRule::Leaf},
    {PwOp::Scalar, "scalar", 0, PwRule::Leaf},
    {PwOp::Coord, "coord", 0, PwRule::Leaf},
    {PwOp::Add, "add", 2, PwRule::SameNumeric},
    {PwOp::Sub, "sub", 2, PwRule::SameNumeric},
    {PwOp::Mul, "mul", 2, PwRule::SameNumeric},
    {PwOp::Div, "div", 2, PwRule::SameFloat},
    {PwOp::DivTrunc, "div_trunc", 2, PwRule::SameNumeric},
    {PwOp::DivFloor, "div_floor", 2, PwRule::SameNumeric},
    {PwOp::Neg, "neg", 1, PwRule::SameNumeric},
    {PwOp::Abs, "abs", 1, PwRule::SameNumeric},
    {PwOp::Reciprocal, "reciprocal", 1, PwRule::SameFloat},
    {PwOp::Pow, "pow", 2, PwRule::SameNumeric},
    {PwOp::Fmod, "fmod", 2, PwRule::SameNumeric},
    {PwOp::Remainder, "remainder", 2, PwRule::SameNumeric},
    {PwOp::Maximum, "maximum", 2, PwRule::SameNumeric},
    {PwOp::Minimum, "minimum", 2, PwRule::SameNumeric},
    {PwOp::Clamp, "clamp", 3, PwRule::SameNumeric},
    {PwOp::Sign, "sign", 1, PwRule::SameNumeric},
    {PwOp::Lerp, "lerp", 3, PwRule::SameFloat},
    {PwOp::Exp, "exp", 1, PwRule::SameFloat},
    {PwOp::Exp2, "exp2", 1, PwRule::SameFloat},
    {PwOp::Expm1, "expm1", 1, PwRule::SameFloat},
    {PwOp::Log, "log", 1, PwRule::SameFloat},
    {PwOp::Log1p, "log1p", 1, PwRule::SameFloat},
    {PwOp::Log2, "log2", 1, PwRule::SameFloat},
    {PwOp::Sqrt, "sqrt", 1, PwRule::SameFloat},
    {PwOp::Rsqrt, "rsqrt", 1, PwRule::SameFloat},
    {PwOp::Sin, "sin", 1, PwRule::SameFloat},
    {PwOp::Cos, "cos", 1, PwRule::SameFloat},
    {PwOp::Tan, "tan", 1, PwRule::SameFloat},
    {PwOp::Tanh, "tanh", 1, PwRule::SameFloat},
    {PwOp::Erf, "erf", 1, PwRule::SameFloat},
    {PwOp::Sigmoid, "sigmoid", 1, PwRule::SameFloat},
    {PwOp::Relu, "relu", 1, PwRule::SameNumeric},
    {PwOp::GeluErf, "gelu_erf", 1, PwRule::SameFloat},
    {PwOp::GeluTanh, "gelu_tanh", 1, PwRule::SameFloat},
    {PwOp::Silu, "silu", 1, PwRule::SameFloat},
    {PwOp::ThresholdBackward, "threshold_backward", 3, PwRule::SameNumeric},
    {PwOp::ReluBackward, "relu_backward", 2, PwRule::SameNumeric},
    {PwOp::SigmoidBackward, "sigmoid_backward", 2, PwRule::SameFloat},
    {PwOp::TanhBackward, "tanh_backward", 2, PwRule::SameFloat},
    {PwOp::SiluBackward, "silu_backward", 2, PwRule::SameFloat},
    {PwOp::GeluErfBackward, "gelu_erf_backward", 2, PwRule::SameFloat},
    {PwOp::GeluTanhBackward, "gelu_tanh_backward", 2, PwRule::SameFloat},
    {PwOp::Floor, "floor", 1, PwRule::SameNumeric},
    {PwOp::Ceil, "ceil", 1, PwRule::SameNumeric},
    {PwOp::Round, "round", 1, PwRule::SameNumeric},
    {PwOp::Trunc, "trunc", 1, PwRule::SameNumeric},
    {PwOp::Eq, "eq", 2, PwRule::Compare},
    {PwOp::Ne, "ne", 2, PwRule::Compare},
    {PwOp::Lt, "lt", 2, PwRule::Compare},
    {PwOp::Le, "le", 2, PwRule::Compare},
    {PwOp::Gt, "gt", 2, PwRule::Compare},
    {PwOp::Ge, "ge", 2, PwRule::Compare},
    {PwOp::IsNan, "isnan", 1, PwRule::Predicate},
    {PwOp::IsInf, "isinf", 1, PwRule::Predicate},
    {PwOp::LogicalAnd, "logical_and", 2, PwRule::Logical},
    {PwOp::LogicalOr, "logical_or", 2, PwRule::Logical},
    {PwOp::LogicalXor, "logical_xor", 2, PwRule::Logical},
    {PwOp::LogicalNot, "logical_not", 1, PwRule::Logical},
    {PwOp::BitAnd, "bitwise_and", 2, PwRule::SameIntOrBool},
    {PwOp::BitOr, "bitwise_or", 2, PwRule::SameIntOrBool},
    {PwOp::BitXor, "bitwise_xor", 2, PwRule::SameIntOrBool},
    {PwOp::BitNot, "bitwise_not", 1, PwRule::SameIntOrBool},
    {PwOp::Shl, "shl", 2, PwRule::SameInteger},
    {PwOp::Shr, "shr", 2, PwRule::SameInteger},
    {PwOp::Where, "where", 3, PwRule::Where},
    {PwOp::Cast, "cast", 1, PwRule::Cast},
}};

constexpr bool table_in_enum_order() {
  for (std::size_t i = 0; i < kOps.size(); ++i) {
    if (static_cast<std::size_t>(kOps[i].op) != i) return false;
  }
  return true;
}
static_assert(table_in_enum_order(), "kOps must list every PwOp in declaration order");

}  // namespace

const PwOpInfo& pw_op_info(PwOp op) {
  const auto position = static_cast<std::size_t>(op);
  MB_ASSERT(position < kOps.size(), "PwOp value ", position, " is outside the op table");
  return kOps[position];
}

std::string_view pw_op_name(PwOp op) { return pw_op_info(op).name; }

std::optional<PwOp> pw_op_from_name(std::string_view name) {
  for (const auto& info : kOps) {
    if (info.name == name) return info.op;
  }
  return std::nullopt;
}

const std::vector<PwOp>& all_pw_ops() {
  static const std::vector<PwOp> ops = [] {
    std::vector<PwOp> result;
    for (const auto& info : kOps) {
      if (info.rule != PwRule::Leaf) result.push_back(info.op);
    }
    return result;
  }();
  return ops;
}

}  // namespace mybackend
