// Fused attention: CUDA engine II maps these to cuDNN SDPA graphs.
#include "capability/predicates.h"

namespace mybackend {

void register_attention_ops(CapabilityRegistry& registry) {
  auto floating = predicates::floating_tensors();
  for (const char* op : {"aten::_scaled_dot_product_flash_attention.default",
                         "aten::_scaled_dot_product_flash_attention_backward.default",
                         "aten::_scaled_dot_product_efficient_attention.default",
                         "aten::_scaled_dot_product_efficient_attention_backward.default",
                         "aten::_scaled_dot_product_cudnn_attention.default",
                         "aten::_scaled_dot_product_cudnn_attention_backward.default",
                         "aten::_scaled_dot_product_flash_attention_for_cpu.default",
                         "aten::_scaled_dot_product_flash_attention_for_cpu_backward.default"}) {
    registry.add(op, OpClass::Attention, floating);
  }
}

}  // namespace mybackend
