// Normalizations: a reduction and an elementwise pass over the same rows,
// which CUDA engine I runs as one kernel.
#include "capability/predicates.h"

namespace mybackend {

void register_normalization_ops(CapabilityRegistry& registry) {
  auto floating = predicates::all_of({predicates::floating_tensors(), predicates::max_rank(8)});
  for (const char* op :
       {"aten::_softmax.default", "aten::_log_softmax.default",
        "aten::_softmax_backward_data.default", "aten::_log_softmax_backward_data.default",
        "aten::native_layer_norm.default", "aten::native_layer_norm_backward.default",
        "aten::_fused_rms_norm.default", "aten::_fused_rms_norm_backward.default",
        "aten::native_batch_norm.default", "aten::native_batch_norm_backward.default",
        "aten::_native_batch_norm_legit_functional.default",
        "aten::_native_batch_norm_legit_no_training.default",
        "aten::_native_batch_norm_legit.no_stats"}) {
    registry.add(op, OpClass::Normalization, floating);
  }
  // CUDA's group-norm kernels refuse any input that is not contiguous
  // (Note [Layout contracts] in registry.h); torch's composite group_norm
  // makes it contiguous before calling them, a traced graph calls them directly.
  for (const char* op :
       {"aten::native_group_norm.default", "aten::native_group_norm_backward.default"}) {
    registry.add(op, OpClass::Normalization, floating, LayoutContract::TracedStrides);
  }
  // mybackend/ops/cross_entropy.py: class logits, int64 targets, fp32 rows.
  auto cross_entropy =
      predicates::all_of({predicates::tensors_with_dtypes(
                              {DType::Float16, DType::BFloat16, DType::Float32, DType::Int64}),
                          predicates::max_rank(2)});
  for (const char* op :
       {"mybackend::cross_entropy_forward.default", "mybackend::cross_entropy_backward.default"}) {
    registry.add(op, OpClass::Normalization, cross_entropy);
  }
  // mybackend/ops/group_norm.py: either layout, statistics in x's dtype and fp32.
  registry.add("mybackend::group_norm_stats.default", OpClass::Normalization, floating);
  // mybackend/ops/batch_norm.py: channels-last activations, fp32 per-channel results.
  auto batch_norm = predicates::all_of(
      {predicates::tensors_with_dtypes({DType::Float16, DType::BFloat16, DType::Float32}),
       predicates::max_rank(8)});
  for (const char* op :
       {"mybackend::batch_norm_stats.default", "mybackend::batch_norm_backward_reduce.default"}) {
    registry.add(op, OpClass::Normalization, batch_norm);
  }
}

}  // namespace mybackend
