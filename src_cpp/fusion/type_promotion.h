// Torch's type promotion, over the IR's dtypes (no ATen): what dtype an
// elementwise op computes in, given its operands. Mirrors
// c10::promoteTypes and at::native::result_type (ResultTypeState): tensors
// with dimensions outrank zero-dim tensors, which outrank Python scalars,
// and a lower-ranked operand only matters when its category (bool < integer
// < floating) is higher.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "ir/dtype.h"

namespace mybackend {

// c10::promoteTypes for the dtypes generated kernels handle; nullopt where
// torch has no promotion (or one we do not model, e.g. uint16 with int8).
std::optional<DType> promote_types(DType a, DType b);

// The dtype eager's kernels compute in: fp32 for fp16/bf16 (opmath).
DType opmath_dtype(DType dtype);

struct PromotionOperand {
  enum class Kind : std::int8_t { DimTensor, ZeroDimTensor, Scalar };
  Kind kind = Kind::DimTensor;
  DType dtype = DType::Float32;  // Scalar: Float64 for float, Int64 for int, Bool for bool
};

// at::result_type over the operands; nullopt when promote_types has none.
std::optional<DType> result_type(const std::vector<PromotionOperand>& operands);

}  // namespace mybackend
