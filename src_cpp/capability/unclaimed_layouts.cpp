// Ops the core does not claim (they always run as ATen calls) whose ATen
// kernels take tensors in any strides: the layout plan may hand them
// channels-last activations (Note [Layout contracts] in registry.h). Each is
// a TensorIterator kernel or makes its input contiguous in the suggested
// memory format itself; tests/gpu/test_layout_sweep.py runs every one of
// them on channels-last and permuted inputs.
#include "capability/registry.h"

namespace mybackend {

void register_unclaimed_layout_contracts(CapabilityRegistry& registry) {
  for (const char* op : {
           "aten::upsample_nearest2d.vec",
           "aten::upsample_nearest2d.default",
           "aten::upsample_nearest2d_backward.default",
           "aten::upsample_bilinear2d.vec",
           "aten::upsample_bilinear2d.default",
           "aten::upsample_bilinear2d_backward.default",
           "aten::_unsafe_index.Tensor",
           // F.interpolate kept whole (Note [Resampling kept whole] in
           // mybackend/ops/interpolate.py): ATen's upsampling kernels.
           "mybackend::interpolate.default",
           "mybackend::interpolate_backward.default",
           "aten::native_dropout.default",
           "aten::native_dropout_backward.default",
           "aten::hardswish_backward.default",
           "aten::hardsigmoid_backward.default",
           "aten::leaky_relu_backward.default",
           "aten::elu_backward.default",
           "aten::softplus_backward.default",
           "aten::reflection_pad2d.default",
           "aten::replication_pad2d.default",
           // Read sizes only.
           "aten::sym_size.int",
           "aten::sym_numel.default",
       }) {
    registry.add_layout_contract(op, LayoutContract::AnyStrides);
  }
}

}  // namespace mybackend
