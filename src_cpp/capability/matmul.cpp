// Matrix products: CUDA engine II runs them through cuBLASLt with fused
// epilogues.
#include "capability/predicates.h"

namespace mybackend {

void register_matmul_ops(CapabilityRegistry& registry) {
  auto floating = predicates::floating_tensors();
  for (const char* op :
       {"aten::mm.default", "aten::addmm.default", "aten::bmm.default", "aten::baddbmm.default"}) {
    registry.add(op, OpClass::Matmul, floating);
  }
}

}  // namespace mybackend
