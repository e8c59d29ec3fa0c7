// Which hoisted-parameter inputs changed since the last call (Note
// [Watching hoisted inputs]).
//
// Note [Watching hoisted inputs]
// An inference graph's parameter work (weight layout copies, batch norm's
// scale and shift) runs in a `prepare` graph once per parameter version
// (Note [Hoisted parameter work] in mybackend/passes/hoist.py). Every
// call must still tell whether a parameter or buffer it reads changed: a new
// tensor behind the parameter (`p.data = ...`), a new address, an in-place
// update (a new version). ResNet-50 has about 265 such inputs, and building
// a tuple of (data_ptr, _version, device) per input in Python took about
// 67 us a call on the development machine, at batch 1 a sixth of a
// CUDA-graph replay's host time. Here it is a pass over the tensors in C++.
// The watcher keeps weak references to the tensors it saw, so a tensor that
// died cannot be mistaken for a new one allocated at the same address, and
// it keeps no parameter alive. Inference tensors have no version counter:
// they count as changed on every call.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <vector>

namespace mybackend {

class InputVersions {
 public:
  // Watches the inputs at `positions` of each call's input list.
  explicit InputVersions(std::vector<std::int64_t> positions);

  const std::vector<std::int64_t>& positions() const { return positions_; }

  // `tensors[k]` is the input at positions()[k] (nullptr when it is not a
  // tensor). True on the first call, and when any of them is another
  // tensor, at another address, device or version than at the last call
  // that returned true; then this call's tensors are the ones remembered.
  bool changed(const std::vector<const at::Tensor*>& tensors);

  // The next changed() is true (the work that followed the last one failed).
  void forget() {
    seen_.clear();
    remembered_ = false;
  }

 private:
  struct Seen {
    explicit Seen(const at::Tensor& t);
    const c10::TensorImpl* impl;
    c10::weak_intrusive_ptr<c10::TensorImpl> alive;  // the address stays this tensor's
    const void* data;
    std::uint32_t version;
    c10::Device device;
  };
  static bool same(const Seen& seen, const at::Tensor& t);

  std::vector<std::int64_t> positions_;
  std::vector<Seen> seen_;
  // Whether seen_ holds a call's tensors: with no positions to watch (a
  // hoisted constant reads no input) an empty seen_ alone would make the
  // first call look unchanged, and its values would never be computed.
  bool remembered_ = false;
};

}  // namespace mybackend
