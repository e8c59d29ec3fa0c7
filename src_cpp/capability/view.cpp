// View, shape and data-movement ops. The pure views compute nothing: a
// partition of only these is not kept (Note [Partition contract]).
#include "capability/predicates.h"

namespace mybackend {

void register_view_ops(CapabilityRegistry& registry) {
  for (const char* op : {"aten::view.default",         "aten::_unsafe_view.default",
                         "aten::reshape.default",      "aten::permute.default",
                         "aten::transpose.int",        "aten::t.default",
                         "aten::expand.default",       "aten::squeeze.dim",
                         "aten::squeeze.dims",         "aten::squeeze.default",
                         "aten::unsqueeze.default",    "aten::slice.Tensor",
                         "aten::select.int",           "aten::alias.default",
                         "aten::split.Tensor",         "aten::split_with_sizes.default",
                         "aten::unbind.int",           "aten::detach.default",
                         "aten::view_as_real.default", "aten::unfold.default",
                         "aten::diagonal.default"}) {
    registry.add(op, OpClass::View);
  }
  // as_strided addresses storage, not the logical tensor: on other strides
  // it reads other elements (Note [Layout contracts] in registry.h).
  registry.add("aten::as_strided.default", OpClass::View, {}, LayoutContract::TracedStorage);
  // Data movement that copies: runs as a kernel, so not a view.
  auto numeric = predicates::all_of({predicates::numeric_tensors(), predicates::max_rank(8)});
  for (const char* op : {"aten::cat.default",
                         "aten::constant_pad_nd.default",
                         "aten::index.Tensor",
                         "aten::gather.default",
                         "aten::slice_scatter.default",
                         "aten::select_scatter.default",
                         "aten::index_select.default",
                         "aten::embedding.default",
                         "aten::embedding_dense_backward.default",
                         "aten::repeat.default",
                         "aten::flip.default",
                         "aten::roll.default",
                         "prims::iota.default",
                         "aten::arange.start_step",
                         "aten::arange.default",
                         "aten::arange.start",
                         "aten::empty.memory_format",
                         "aten::empty_strided.default",
                         "aten::new_zeros.default",
                         "aten::new_empty.default",
                         "aten::new_full.default",
                         "aten::new_ones.default",
                         "aten::zeros.default",
                         "aten::ones.default",
                         "aten::tril.default",
                         "aten::triu.default",
                         "aten::scatter_add.default",
                         "aten::index_put.default",
                         "aten::stack.default",
                         "aten::_adaptive_avg_pool2d.default",
                         "aten::_adaptive_avg_pool2d_backward.default",
                         "aten::avg_pool2d.default"}) {
    registry.add(op, OpClass::Other, numeric);
  }
  // The layout sweep (tests/gpu/test_layout_sweep.py, H200, 2026-11-27) found
  // an average pool's input gradient wrong when the plan handed its
  // backward channels-last tensors: they get their traced strides (Note
  // [Layout contracts] in registry.h). The forward pool takes channels-last
  // (a DenseNet's transitions: a contiguous copy before each pool kept the
  // concatenations after it, and every convolution reading them, in NCHW).
  registry.add("aten::avg_pool2d_backward.default", OpClass::Other, numeric,
               LayoutContract::TracedStrides);
}

}  // namespace mybackend
