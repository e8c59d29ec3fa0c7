// Convolutions: CUDA engine II builds cuDNN frontend graphs for them.
#include "capability/predicates.h"

namespace mybackend {

void register_convolution_ops(CapabilityRegistry& registry) {
  auto floating = predicates::all_of({predicates::floating_tensors(), predicates::max_rank(5)});
  registry.add("aten::convolution.default", OpClass::Convolution, floating);
  registry.add("aten::convolution_backward.default", OpClass::Convolution, floating);
}

}  // namespace mybackend
