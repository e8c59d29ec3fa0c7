// A kernel group the executor hands to an engine instead of running its
// nodes as ATen calls: a generated kernel (generated/generated_kernel.h) or
// a library call (libraries/library_group.h: cuBLASLt products, cuDNN
// convolutions and attention); which one a kind gets is its row of the
// kernel-kind table (kernel_kinds.h). The executor runs every such group
// through one kind of step (Executor::Step::engine).
#pragma once

#include <string>

#include "fusion/fusion_plan.h"
#include "runtime/aten_call.h"
#include "runtime/planned_outputs.h"

namespace mybackend {

class GroupRunner {
 public:
  virtual ~GroupRunner() = default;
  // Runs the group on `slots`; false when this call must use the ATen form
  // (Note [Never an error to the user] in generated/generated_kernel.h). Outputs get
  // their memory from `outputs` (Note [Memory plan] in memory_plan.h).
  virtual bool run(ValueSlots& slots, const SymbolBindings& bindings,
                   PlannedOutputs& outputs) const = 0;
  // Why the group last fell back (empty: it never did).
  virtual std::string problem() const = 0;
  // What runs, for reports: "pointwise: mb_pointwise_<hash> ...", "cublaslt: ...".
  virtual std::string description() const = 0;
  // The group's kind (for the per-kind counters).
  virtual KernelKind kind() const = 0;
  // False when the engine will never run the group (its kernel failed to
  // compile, Note [Kernels compiled beside the caller]): reports say so.
  virtual bool usable() const { return true; }
};

}  // namespace mybackend
