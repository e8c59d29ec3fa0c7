// Views made again without the dispatcher.
//
// Note [Views replayed without the dispatcher]
// A default-mode step runs every view of its graphs (view, permute, slice,
// transpose, expand, split, detach ...) as a boxed dispatcher call: an
// IValue stack, the autograd and ADInplaceOrView kernels, the op's own
// meta logic, and as_strided through the dispatcher once more. A
// two-layer-per-block decoder's training step runs about a thousand of them
// per step (pythia_160m: 267 slices, 281 permutes, 302 views, 730 nested
// as_strided calls, 2026-11-29 host table on an H200), several microseconds
// each, while its GPU idles behind a host-bound step. Yet a view's result
// is a function of its base's sizes, strides, storage offset and dtype and
// of its constant arguments only. So the first call of a view node runs
// the boxed op and remembers the base's layout and each result's; a later
// call whose base has the same layout makes the results directly: a
// TensorImpl over the base's storage with the remembered sizes, strides
// and offset, the base's dispatch keys and its version counter (in-place
// writes through the view still count against the base, as ADInplaceOrView
// arranges for a real view). A base of another layout takes the boxed call.
//
// Which nodes: ops whose schema says every result aliases the first
// argument without writing it (`Tensor(a) self -> Tensor(a)`), plus
// `_unsafe_view` (a view whose schema hides it from autograd), with every
// argument but the base constant, and no result a graph output (what the
// caller receives keeps ATen's view metadata). What the first call shows
// must hold too: every result shares the base's storage (reshape and
// contiguous may copy; a copying node is never replayed), with its dtype
// and dispatch keys (view.dtype and _conj are boxed), and the base is a
// plain strided tensor (no subclass, no Python dispatch, no nested,
// sparse or quantized impl). A base that requires grad while grad mode is
// on takes the boxed call: its view must record autograd history.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ir/graph.h"

namespace mybackend {

using ValueSlots = std::vector<c10::IValue>;  // indexed by ValueId

class ViewReplay {
 public:
  // A replay for `node`, or null when the node is not a view this can make
  // again (see the Note). `constant_args`: whether each schema argument is
  // a constant of the prepared call.
  static std::unique_ptr<ViewReplay> for_node(const Graph& graph, const Node& node,
                                              const c10::OperatorHandle& op,
                                              const std::vector<bool>& constant_args);

  // Makes the node's results into its output slots when the base has the
  // remembered layout; false when the boxed call must run.
  bool replay(ValueSlots& slots) const;
  // After a boxed call of the node: remembers the layouts when the call
  // showed a view (first call only).
  void remember(const ValueSlots& slots);

 private:
  struct Layout {
    std::vector<std::int64_t> sizes, strides;
    std::int64_t offset = 0;
  };
  ViewReplay(const Node& node, ValueId base) : node_(&node), base_(base) {}

  enum State : int { kUnknown, kReady, kNever };
  const Node* node_;
  ValueId base_;
  std::atomic<int> state_{kUnknown};
  std::mutex mutex_;  // the first call's remember()
  // Written once, before state_ becomes kReady.
  Layout base_layout_;
  c10::ScalarType dtype_ = c10::ScalarType::Undefined;
  std::vector<Layout> results_;
};

}  // namespace mybackend
