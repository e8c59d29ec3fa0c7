// Reductions over one or more dimensions; CUDA engine I fuses their
// elementwise producers (prologue) and consumers (epilogue). A 2-d max pool
// is a reduction over windows, and its backward a sum over the windows that
// chose each element: engine I generates both with their prologue (Note
// [Pool groups] in fusion/pool_planner.h).
#include "capability/predicates.h"

namespace mybackend {

void register_reduction_ops(CapabilityRegistry& registry) {
  auto numeric = predicates::all_of({predicates::numeric_tensors(), predicates::max_rank(8)});
  auto floating = predicates::all_of({predicates::floating_tensors(), predicates::max_rank(8)});
  for (const char* op :
       {"aten::sum.dim_IntList", "aten::sum.default", "aten::amax.default", "aten::amin.default",
        "aten::argmax.default", "aten::argmin.default", "aten::prod.default", "aten::prod.dim_int",
        "aten::any.default", "aten::any.dim", "aten::any.dims", "aten::all.default",
        "aten::all.dim", "aten::max.dim", "aten::min.dim", "aten::max.default", "aten::min.default",
        "aten::max_pool2d_with_indices.default",
        "aten::max_pool2d_with_indices_backward.default"}) {
    registry.add(op, OpClass::Reduction, numeric);
  }
  for (const char* op :
       {"aten::mean.dim", "aten::mean.default", "aten::var.correction", "aten::std.correction",
        "aten::var_mean.correction", "aten::logsumexp.default"}) {
    registry.add(op, OpClass::Reduction, floating);
  }
}

}  // namespace mybackend
