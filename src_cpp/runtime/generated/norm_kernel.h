// Generated norm groups at run time (CUDA builds only): softmax and
// log_softmax, layer norm and RMS norm (norm_kernel.cpp), and cross-entropy
// (cross_entropy_kernel.cpp), whose logits keep their row stride, and
// training batch norm's per-channel reductions and group norm's statistics
// (batch_norm_kernel.cpp).
#pragma once

#ifdef MYBACKEND_WITH_CUDA

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/generated/kernel_launch.h"

namespace mybackend {

class NormKernel final : public GroupKernel<NormGroup> {
 public:
  using GroupKernel::GroupKernel;

 private:
  bool launch(ValueSlots& slots, const SymbolBindings& bindings,
              PlannedOutputs& planned) const override;
  bool launch_cross_entropy(ValueSlots& slots, const SymbolBindings& bindings,
                            PlannedOutputs& planned) const;
  bool launch_batch_norm(ValueSlots& slots, const SymbolBindings& bindings,
                         PlannedOutputs& planned) const;
  bool launch_group_norm(ValueSlots& slots, const SymbolBindings& bindings,
                         PlannedOutputs& planned) const;
  // The group's input tensors by kernel name, each a CUDA tensor of the
  // dtype the kernel reads; std::nullopt (after fail()) when one is not.
  std::optional<std::map<std::string, at::Tensor>> input_tensors(const ValueSlots& slots) const;
  // Output `name` (graph value `value`) in the memory plan, with its
  // compiled sizes and strides and the dtype the kernel writes;
  // std::nullopt (after fail()) when a size depends on an unbound symbol.
  std::optional<at::Tensor> planned_output(const std::string& name, ValueId value,
                                           const at::TensorOptions& options,
                                           const SymbolBindings& bindings,
                                           PlannedOutputs& planned) const;
};

// k for a prologue input's parameter "in<k>" (Note [Norm prologues]), else -1.
int norm_prologue_input(const std::string& name);

// k for a kernel parameter "<prefix><k>": an epilogue's inputs "ein<k>" and
// what it stores "eout<k>" (Note [Norm epilogues]), else -1.
int norm_indexed_tensor(const std::string& name, std::string_view prefix);

// Tensors read as whole [rows, cols] rows: x, grad_out, out, the prologue's
// inputs in x's (or grad_out's) place, or the epilogue's inputs.
bool norm_reads_rows(const std::string& name);

// The dtype of the kernel tensor a norm group names `name` ("x", "weight",
// "mean", "target", ...).
DType norm_tensor_dtype(const NormSpec& spec, const std::string& name);

// Arguments of a norm entry point by parameter name: pointers from
// `tensors`, integers from `ints`, floating parameters (eps, momentum) from
// `floats`, shapes and strides from `dims`.
KernelArgs norm_kernel_args(const KernelEntry& entry,
                            const std::map<std::string, at::Tensor>& tensors,
                            const std::map<std::string, std::int64_t>& ints,
                            const std::map<std::string, double>& floats,
                            const std::map<std::string, std::vector<std::int64_t>>& dims = {});

// True for a softmax prologue's input read with strides (Note [Softmax
// prologues with broadcast inputs] in fusion/norm_prologue.h).
bool norm_strided_input(const NormSpec& spec, const std::string& name);

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
