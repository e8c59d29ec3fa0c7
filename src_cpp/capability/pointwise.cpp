// Elementwise ops: one output element from the same-index elements of the
// inputs (after broadcasting). CUDA engine I fuses any DAG of these.
#include "capability/predicates.h"

namespace mybackend {
namespace {

constexpr int kMaxKernelRank = 8;  // the generated kernels index up to 8 dimensions

constexpr const char* kFloatingOps[] = {
    "aten::exp.default",
    "aten::exp2.default",
    "aten::expm1.default",
    "aten::log.default",
    "aten::log1p.default",
    "aten::log2.default",
    "aten::sqrt.default",
    "aten::rsqrt.default",
    "aten::reciprocal.default",
    "aten::sin.default",
    "aten::cos.default",
    "aten::tan.default",
    "aten::tanh.default",
    "aten::sigmoid.default",
    "aten::erf.default",
    "aten::gelu.default",
    "aten::silu.default",
    "aten::gelu_backward.default",
    "aten::silu_backward.default",
    "aten::sigmoid_backward.default",
    "aten::tanh_backward.default",
    "aten::div.Tensor",
    "aten::div.Scalar",
    "aten::div.Tensor_mode",
    "aten::pow.Tensor_Scalar",
    "aten::pow.Tensor_Tensor",
    "aten::pow.Scalar",
    "aten::lerp.Scalar",
    "aten::lerp.Tensor",
    "aten::isnan.default",
    "aten::isinf.default",
    "aten::floor.default",
    "aten::ceil.default",
    "aten::round.default",
    "aten::trunc.default",
    "aten::elu.default",
    "aten::leaky_relu.default",
    "aten::hardtanh.default",
    "aten::softplus.default",
    "aten::atan2.default",
    "aten::asin.default",
    "aten::acos.default",
    "aten::atan.default",
    "aten::sinh.default",
    "aten::cosh.default",
    "aten::erfinv.default",
    "aten::hardsigmoid.default",
    "aten::hardswish.default",
    "aten::mish.default",
    "aten::logit.default",
    "aten::nan_to_num.default",
};

constexpr const char* kNumericOps[] = {
    "aten::add.Tensor",          "aten::add.Scalar",
    "aten::sub.Tensor",          "aten::sub.Scalar",
    "aten::mul.Tensor",          "aten::mul.Scalar",
    "aten::rsub.Scalar",         "aten::rsub.Tensor",
    "aten::neg.default",         "aten::abs.default",
    "aten::sign.default",        "aten::relu.default",
    "aten::maximum.default",     "aten::minimum.default",
    "aten::clamp.default",       "aten::clamp.Tensor",
    "aten::clamp_min.default",   "aten::clamp_max.default",
    "aten::where.self",          "aten::eq.Tensor",
    "aten::eq.Scalar",           "aten::ne.Tensor",
    "aten::ne.Scalar",           "aten::lt.Tensor",
    "aten::lt.Scalar",           "aten::le.Tensor",
    "aten::le.Scalar",           "aten::gt.Tensor",
    "aten::gt.Scalar",           "aten::ge.Tensor",
    "aten::ge.Scalar",           "aten::logical_and.default",
    "aten::logical_or.default",  "aten::logical_not.default",
    "aten::logical_xor.default", "aten::bitwise_and.Tensor",
    "aten::bitwise_or.Tensor",   "aten::bitwise_xor.Tensor",
    "aten::bitwise_not.default", "aten::fmod.Tensor",
    "aten::fmod.Scalar",         "aten::remainder.Tensor",
    "aten::remainder.Scalar",    "aten::threshold_backward.default",
    "aten::masked_fill.Scalar",  "aten::masked_fill.Tensor",
    "aten::addcmul.default",     "aten::addcdiv.default",
    "aten::_to_copy.default",    "aten::clone.default",
    "aten::copy.default",        "aten::fill.Scalar",
    "aten::full_like.default",   "aten::zeros_like.default",
    "aten::ones_like.default",   "aten::scalar_tensor.default",
    "aten::full.default",        "prims::convert_element_type.default",
};

}  // namespace

void register_pointwise_ops(CapabilityRegistry& registry) {
  auto floating = predicates::all_of(
      {predicates::tensors_with_dtypes(
           {DType::Float16, DType::BFloat16, DType::Float32, DType::Float64, DType::Bool}),
       predicates::max_rank(kMaxKernelRank)});
  auto numeric =
      predicates::all_of({predicates::numeric_tensors(), predicates::max_rank(kMaxKernelRank)});
  for (const char* op : kFloatingOps) registry.add(op, OpClass::Pointwise, floating);
  for (const char* op : kNumericOps) registry.add(op, OpClass::Pointwise, numeric);
}

}  // namespace mybackend
