#include "fusion/type_promotion.h"

namespace mybackend {
namespace {

bool is_unsigned_wide(DType d) {
  return d == DType::UInt16 || d == DType::UInt32 || d == DType::UInt64;
}

int float_rank(DType d) {
  switch (d) {
    case DType::Float16:
    case DType::BFloat16: return 1;
    case DType::Float32: return 2;
    case DType::Float64: return 3;
    default: return 0;
  }
}

// Signed integers and uint8, by promotion order.
int int_rank(DType d) {
  switch (d) {
    case DType::Int8: return 1;
    case DType::Int16: return 2;
    case DType::Int32: return 3;
    case DType::Int64: return 4;
    default: return 0;
  }
}

std::optional<DType> promote_opt(std::optional<DType> a, std::optional<DType> b) {
  if (!a) return b;
  if (!b) return a;
  return promote_types(*a, *b);
}

// c10's combine_categories (no complex).
std::optional<DType> combine_categories(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower) return higher;
  if (is_floating(*higher)) return higher;
  if (*higher == DType::Bool || is_floating(*lower)) return promote_types(*higher, *lower);
  return higher;
}

}  // namespace

std::optional<DType> promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_complex(a) || is_complex(b)) return std::nullopt;
  if (a == DType::Bool) return b;
  if (b == DType::Bool) return a;
  const int fa = float_rank(a), fb = float_rank(b);
  if (fa > 0 && fb > 0) {
    if (fa == fb) return DType::Float32;  // fp16 with bf16
    return fa > fb ? a : b;
  }
  if (fa > 0) return a;
  if (fb > 0) return b;
  if (is_unsigned_wide(a) || is_unsigned_wide(b)) return std::nullopt;
  // uint8 with a signed integer: at least int16.
  if (a == DType::UInt8 || b == DType::UInt8) {
    const DType other = a == DType::UInt8 ? b : a;
    return int_rank(other) <= 1 ? DType::Int16 : other;
  }
  const int ia = int_rank(a), ib = int_rank(b);
  if (ia == 0 || ib == 0) return std::nullopt;
  return ia > ib ? a : b;
}

DType opmath_dtype(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 ? DType::Float32 : dtype;
}

std::optional<DType> result_type(const std::vector<PromotionOperand>& operands) {
  using K = PromotionOperand::Kind;
  std::optional<DType> dim, zero, wrapped;
  for (const auto& operand : operands) {
    switch (operand.kind) {
      case K::DimTensor: dim = promote_opt(dim, operand.dtype); break;
      case K::ZeroDimTensor: zero = promote_opt(zero, operand.dtype); break;
      case K::Scalar: {
        // A Python float counts as the default dtype (float32).
        DType d = is_floating(operand.dtype) ? DType::Float32 : operand.dtype;
        wrapped = promote_opt(wrapped, d);
        break;
      }
    }
    if ((operand.kind == K::DimTensor && !dim) || (operand.kind == K::ZeroDimTensor && !zero))
      return std::nullopt;
  }
  return combine_categories(dim, combine_categories(zero, wrapped));
}

}  // namespace mybackend
