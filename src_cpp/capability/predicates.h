// Building blocks for support predicates, shared by the op-class files.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>

#include "capability/registry.h"

namespace mybackend::predicates {

// Every tensor the node reads or writes is on a device the core runs
// (CPU or CUDA), strided, and of one of the given dtypes.
SupportPredicate tensors_with_dtypes(std::initializer_list<DType> dtypes);
SupportPredicate floating_tensors();  // f16, bf16, f32, f64
SupportPredicate numeric_tensors();   // floating, integral and bool
SupportPredicate max_rank(int rank);
// All predicates must accept.
SupportPredicate all_of(std::initializer_list<SupportPredicate> predicates);

}  // namespace mybackend::predicates
