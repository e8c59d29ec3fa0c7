#include "runtime/rng_state.h"

#include <algorithm>
#include <iterator>
#include <string>

#ifdef MYBACKEND_WITH_CUDA
#include <c10/cuda/CUDAGraphsC10Utils.h>
#endif

namespace mybackend {
namespace {

// The backwards whose kernels pick host or device state by the capture
// status of the current stream (Note [RNG state follows the capture]).
// Flash attention is not one: it packs seed and offset into one device
// tensor (its philox_seed argument) that its kernel reads on the device
// whatever the capture status; moved to the host, the kernel read a host
// address (an illegal memory access on an H200, 2026-11-27).
constexpr const char* kCaptureDependentRngOps[] = {
    "aten::_scaled_dot_product_efficient_attention_backward.default",
    "aten::_efficient_attention_backward.default",
};

bool reads_rng_state_by_capture(const std::string& op) {
  return std::any_of(std::begin(kCaptureDependentRngOps), std::end(kCaptureDependentRngOps),
                     [&op](const char* name) { return op == name; });
}

}  // namespace

RngStateArguments::RngStateArguments(const Node& node, const c10::FunctionSchema& schema) {
  if (!reads_rng_state_by_capture(node.op)) return;
  const auto& arguments = schema.arguments();
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].name() == "philox_seed" || arguments[i].name() == "philox_offset") {
      positions_.push_back(i);
    }
  }
}

void RngStateArguments::place_for_this_call(torch::jit::Stack& stack) const {
#ifdef MYBACKEND_WITH_CUDA
  if (positions_.empty()) return;
  if (c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None) return;
  for (std::size_t position : positions_) {
    c10::IValue& value = stack[position];
    if (value.isTensor() && value.toTensor().is_cuda()) value = value.toTensor().cpu();
  }
#else
  (void)stack;  // CPU builds run no CUDA attention
#endif
}

}  // namespace mybackend
