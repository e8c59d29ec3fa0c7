// The pointwise op table: each op's printed name, arity and dtype rule, in
// one place so that the validator, the printer, the tests and docs agree.
#pragma once

#include <string_view>

#include "spec/kernel_spec.h"

namespace mybackend {

// Which dtypes an op's operands and result may have.
enum class PwRule : std::int8_t {
  Leaf,           // Load, Scalar: no operands
  SameNumeric,    // operands and result share one dtype; not bool
  SameFloat,      // operands and result share one floating dtype
  SameInteger,    // operands and result share one integer dtype; not bool
  SameIntOrBool,  // operands and result share one integer or bool dtype
  Compare,        // operands share one dtype; result bool
  Predicate,      // one operand of any dtype; result bool
  Logical,        // operands of any dtypes; result bool
  Where,          // (bool, T, T) -> T
  Cast,           // one operand of any dtype; result any dtype
};

struct PwOpInfo {
  PwOp op;
  std::string_view name;
  int arity;
  PwRule rule;
};

const PwOpInfo& pw_op_info(PwOp op);

}  // namespace mybackend
