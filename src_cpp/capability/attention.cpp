// Fused attention: CUDA engine II maps these to cuDNN SDPA graphs
// (fusion/attention_planner.h, docs/design/0009-attention.md).
#include "capability/predicates.h"

namespace mybackend {
namespace {

// Floating q, k, v, bias, output and gradients. The ops also carry RNG
// state (flash: uint64 seed/offset, efficient: int64 ones) and the
// efficient backward's optional bias gradient: integer tensors of rank at
// most 1 pass, since they are no data the op computes on.
SupportPredicate attention_tensors() {
  return [](const Graph& graph, const Node& node) -> std::optional<std::string> {
    std::vector<ValueId> values = node.input_values();
    values.insert(values.end(), node.outputs.begin(), node.outputs.end());
    for (ValueId id : values) {
      const Value& value = graph.value(id);
      if (value.kind != ValueKind::Tensor) continue;
      const DType dtype = value.tensor.dtype;
      const bool floating = dtype == DType::Float16 || dtype == DType::BFloat16 ||
                            dtype == DType::Float32 || dtype == DType::Float64;
      const bool rng_state =
          (dtype == DType::Int64 || dtype == DType::UInt64) && value.tensor.rank() <= 1;
      if (!floating && !rng_state) {
        return "dtype " + std::string(dtype_name(dtype)) + " of %" + std::to_string(id) +
               " is not supported by " + node.op;
      }
    }
    return std::nullopt;
  };
}

}  // namespace

void register_attention_ops(CapabilityRegistry& registry) {
  for (const char* op : {"aten::_scaled_dot_product_flash_attention.default",
                         "aten::_scaled_dot_product_flash_attention_backward.default",
                         "aten::_scaled_dot_product_efficient_attention.default",
                         "aten::_scaled_dot_product_efficient_attention_backward.default",
                         "aten::_scaled_dot_product_cudnn_attention.default",
                         "aten::_scaled_dot_product_cudnn_attention_backward.default",
                         "aten::_scaled_dot_product_flash_attention_for_cpu.default",
                         "aten::_scaled_dot_product_flash_attention_for_cpu_backward.default"}) {
    // Their kernels want the head dimension contiguous and check it, rather
    // than copy (Note [Layout contracts] in registry.h).
    registry.add(op, OpClass::Attention, attention_tensors(), LayoutContract::TracedStrides);
  }
}

}  // namespace mybackend
