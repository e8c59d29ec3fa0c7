// Where an engine group's outputs get their memory during one call
// (Note [Memory plan] in memory_plan.h): on the storage a dead owner of the
// same planned buffer left, or else from PyTorch's caching allocator.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Storage.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "runtime/memory_plan.h"

namespace mybackend {

struct PlannedOutputCounters {
  std::atomic<std::int64_t> taken{0};   // outputs placed on a dead owner's storage
  std::atomic<std::int64_t> missed{0};  // a waiting storage that could not be taken
};

class PlannedOutputs {
 public:
  // `waiting` holds one storage per planned buffer, owned by the call.
  PlannedOutputs(const MemoryPlan& plan, std::vector<c10::Storage>& waiting,
                 PlannedOutputCounters& counters)
      : plan_(plan), waiting_(waiting), counters_(counters) {}

  // A tensor for `value`: on its buffer's waiting storage when that is of
  // the planned size, on the same device and held by nobody else; else
  // at::empty_strided. Never synchronises with the device.
  at::Tensor empty_strided(ValueId value, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                           const c10::TensorOptions& options);
  // Drops the storage waiting for `value`, for runners whose library
  // allocates the output itself (cuBLASLt): the caching allocator gets the
  // block back just before it is asked for one of the same size.
  void hand_back(ValueId value);

  // Executor side: keep the storage of the tensor in `slot` for `buffer`
  // (the slot's value is dead, Note [Memory plan]), then clear the slot.
  void keep(c10::IValue& slot, int buffer);
  // Executor side: drop what `buffer`'s new owner did not take.
  void drop(int buffer) { waiting_[static_cast<std::size_t>(buffer)] = c10::Storage(); }

 private:
  c10::Storage* waiting_for(ValueId value);

  const MemoryPlan& plan_;
  std::vector<c10::Storage>& waiting_;
  PlannedOutputCounters& counters_;
};

}  // namespace mybackend
