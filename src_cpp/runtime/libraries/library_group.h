// The part every library-backed group runner shares (cuBLASLt products,
// cuDNN convolutions and attention): a failure inside the library becomes a
// fallback to the group's ATen form with its reason kept for reports
// (Note [Matmul fallback] in matmul_group.h), never an error to the user.
// The libraries allocate their outputs themselves, so a planned buffer
// waiting for one of them goes back to the caching allocator just before the
// call (Note [Memory plan] in memory_plan.h).
#pragma once

#include <ATen/core/Tensor.h>

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/group_runner.h"

namespace mybackend {

// What make_matmul_runner / make_conv_runner / make_attention_runner return.
struct RunnerResult {
  std::unique_ptr<GroupRunner> runner;  // null: the group runs as ATen calls
  std::string problem;                  // why it is null
};

class LibraryGroup : public GroupRunner {
 public:
  bool run(ValueSlots& slots, const SymbolBindings& bindings, PlannedOutputs& outputs) const final {
    for (ValueId value : written_) outputs.hand_back(value);
    try {
      return launch(slots, bindings);
    } catch (const std::exception& e) {
      return fail(library_ + " failed: " + e.what());
    }
  }

  std::string problem() const final {
    std::lock_guard<std::mutex> lock(mutex_);
    return problem_;
  }

 protected:
  // `written`: the values the library call writes (-1 entries are skipped).
  LibraryGroup(const Graph& graph, std::string library, const std::vector<ValueId>& written)
      : graph_(graph), library_(std::move(library)) {
    for (ValueId value : written)
      if (value >= 0) written_.push_back(value);
  }

  // Runs the group through the library; false (through fail) when this call
  // must take the ATen form.
  virtual bool launch(ValueSlots& slots, const SymbolBindings& bindings) const = 0;

  bool fail(const std::string& why) const {
    std::lock_guard<std::mutex> lock(mutex_);
    problem_ = why;
    return false;
  }

  // The defined tensor in `value`'s slot, or null (no value, not a tensor, undefined).
  static const at::Tensor* tensor(const ValueSlots& slots, ValueId value) {
    if (value < 0) return nullptr;
    const c10::IValue& v = slots[static_cast<std::size_t>(value)];
    if (!v.isTensor() || !v.toTensor().defined()) return nullptr;
    return &v.toTensor();
  }

  const Graph& graph_;

 private:
  std::string library_;
  std::vector<ValueId> written_;
  mutable std::mutex mutex_;
  mutable std::string problem_;
};

}  // namespace mybackend
