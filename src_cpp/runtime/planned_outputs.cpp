#include "runtime/planned_outputs.h"

#include <ATen/EmptyTensor.h>
#include <ATen/core/ivalue.h>
#include <ATen/ops/empty_strided.h>
#include <c10/core/TensorImpl.h>

#ifdef MYBACKEND_WITH_CUDA
#include <ATen/cuda/EmptyTensor.h>
#endif

namespace mybackend {

c10::Storage* PlannedOutputs::waiting_for(ValueId value) {
  const auto v = static_cast<std::size_t>(value);
  if (value < 0 || v >= plan_.buffer_of.size()) return nullptr;
  const int buffer = plan_.buffer_of[v];
  if (buffer < 0) return nullptr;
  c10::Storage& storage = waiting_[static_cast<std::size_t>(buffer)];
  return storage ? &storage : nullptr;
}

at::Tensor PlannedOutputs::empty_strided(ValueId value, c10::IntArrayRef sizes,
                                         c10::IntArrayRef strides,
                                         const c10::TensorOptions& options) {
  if (c10::Storage* waiting = waiting_for(value)) {
    c10::Storage storage = std::move(*waiting);
    *waiting = c10::Storage();
    const auto& buffer = plan_.buffers[static_cast<std::size_t>(plan_.buffer_of[value])];
    const caffe2::TypeMeta dtype = options.dtype();
    const std::size_t needed = at::detail::computeStorageNbytes(sizes, strides, dtype.itemsize());
    // Held by nobody else (no view survived), the planned size, the device
    // asked for: the same checks make a wrong plan cost a miss, never data.
    if (storage.use_count() == 1 && static_cast<std::int64_t>(storage.nbytes()) == buffer.bytes &&
        needed <= storage.nbytes() && storage.device() == options.device()) {
      at::Tensor out = at::detail::make_tensor<c10::TensorImpl>(
          std::move(storage), c10::DispatchKeySet(options.computeDispatchKey()), dtype);
      out.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
      counters_.taken.fetch_add(1, std::memory_order_relaxed);
      return out;
    }
    counters_.missed.fetch_add(1, std::memory_order_relaxed);
  }
#ifdef MYBACKEND_WITH_CUDA
  // What at::empty_strided does for CUDA, without the dispatcher's cost on
  // each of a graph's hundreds of engine outputs (Note [Profiler ranges]).
  if (options.device().is_cuda())
    return at::detail::empty_strided_cuda(sizes, strides, options.dtype().toScalarType(),
                                          options.device());
#endif
  return at::empty_strided(sizes, strides, options);
}

void PlannedOutputs::hand_back(ValueId value) {
  if (c10::Storage* waiting = waiting_for(value)) *waiting = c10::Storage();
}

void PlannedOutputs::keep(c10::IValue& slot, int buffer) {
  if (slot.isTensor() && slot.toTensor().defined() && slot.toTensor().has_storage())
    waiting_[static_cast<std::size_t>(buffer)] = slot.toTensor().storage();
  slot = c10::IValue();
}

}  // namespace mybackend
