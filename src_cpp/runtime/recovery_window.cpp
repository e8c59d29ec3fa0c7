#include "runtime/recovery_window.h"

#include "common/hash.h"

namespace mybackend {

std::uint64_t input_signature(const std::vector<c10::IValue>& inputs) {
  std::uint64_t hash = kFnvOffsetBasis;
  auto add = [&hash](std::int64_t word) {
    hash = fnv1a64(std::string_view(reinterpret_cast<const char*>(&word), sizeof word), hash);
  };
  add(static_cast<std::int64_t>(inputs.size()));
  for (const c10::IValue& v : inputs) {
    if (v.isTensor()) {
      add(1);
      const at::Tensor& t = v.toTensor();
      if (!t.defined()) {
        add(-1);
        continue;
      }
      add(static_cast<std::int64_t>(t.scalar_type()));
      add(static_cast<std::int64_t>(t.device().type()));
      add(t.device().index());
      add(t.dim());
      for (std::int64_t s : t.sizes()) add(s);
      for (std::int64_t s : t.strides()) add(s);
      add(t.storage_offset());
    } else if (v.isInt()) {
      add(2);
      add(v.toInt());
    } else {
      hash = fnv1a64(v.tagKind(), hash);
    }
  }
  return hash;
}

bool RecoveryWindow::is_trial(std::uint64_t signature) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return proven_.count(signature) == 0;
}

void RecoveryWindow::prove(std::uint64_t signature) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (proven_.size() < kMaxProven) proven_.insert(signature);
}

}  // namespace mybackend
