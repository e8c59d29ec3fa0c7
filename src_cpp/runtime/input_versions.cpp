#include "runtime/input_versions.h"

#include <utility>

namespace mybackend {

InputVersions::InputVersions(std::vector<std::int64_t> positions)
    : positions_(std::move(positions)) {}

InputVersions::Seen::Seen(const at::Tensor& t)
    : impl(t.unsafeGetTensorImpl()),
      alive(t.getIntrusivePtr()),
      data(t.has_storage() ? t.const_data_ptr() : nullptr),
      version(t.is_inference() ? 0 : t.unsafeGetTensorImpl()->version_counter().current_version()),
      device(t.device()) {}

bool InputVersions::same(const Seen& seen, const at::Tensor& t) {
  if (t.is_inference()) return false;  // no version counter: assume it changed
  return seen.impl == t.unsafeGetTensorImpl() && !seen.alive.expired() &&
         seen.data == (t.has_storage() ? t.const_data_ptr() : nullptr) &&
         seen.version == t.unsafeGetTensorImpl()->version_counter().current_version() &&
         seen.device == t.device();
}

bool InputVersions::changed(const std::vector<const at::Tensor*>& tensors) {
  bool unchanged = remembered_ && seen_.size() == tensors.size();
  for (std::size_t k = 0; unchanged && k < tensors.size(); ++k) {
    unchanged = tensors[k] != nullptr && tensors[k]->defined() && same(seen_[k], *tensors[k]);
  }
  if (unchanged) return false;
  forget();
  for (const at::Tensor* t : tensors) {
    if (t == nullptr || !t->defined()) {
      forget();  // not all tensors: the next call is a change again
      return true;
    }
    seen_.emplace_back(*t);
  }
  remembered_ = true;
  return true;
}

}  // namespace mybackend
