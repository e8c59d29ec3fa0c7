// Views made again without the dispatcher.
//
// Note [Views replayed without the dispatcher]
// A default-mode step runs every view of its graphs (view, permute, slice,
// transpose, expand, split, detach ...) as a boxed dispatcher call: an IValue
// stack, the autograd and ADInplaceOrView kernels, the op's own meta logic,
// and as_strided through the dispatcher once more. A decoder's training step
// runs about a thousand of them (pythia_160m: 267 slices, 281 permutes, 302
// views, 730 nested as_strided calls, 2026-11-29 host table on an H200),
// several microseconds each, while its GPU idles behind a host-bound step. Yet
// a view's result is a function of its base's sizes, strides, storage offset
// and dtype and of its other arguments only. So a boxed call of a view node is
// remembered: the base's layout, the integer arguments it read from its slots,
// and each result's layout; a later call that matches one remembered makes the
// results directly: a TensorImpl over the base's storage with the remembered
// sizes, strides and offset, the base's dispatch keys and its version counter
// (in-place writes through the view still count against the base, as
// ADInplaceOrView arranges for a real view). A call that matches none takes
// the boxed call and is remembered in turn; a node keeps its last kMaxRecipes
// (a graph with dynamic shapes meets a few sizes again and again).
//
// Which nodes: ops whose schema says every result aliases the first
// argument without writing it (`Tensor(a) self -> Tensor(a)`), plus
// `_unsafe_view` (a view whose schema hides it from autograd), whose
// arguments other than the base are constants or integers (a symbolic size
// of a dynamic-shape graph, alone or in a size list), and no result a graph
// output (what the caller receives keeps ATen's view metadata). What a
// boxed call shows must hold too: every result shares the base's storage
// (reshape and contiguous may copy; a node that copied once is never
// replayed), with its dtype and dispatch keys (view.dtype and _conj are
// boxed), and the base is a plain strided tensor (no subclass, no Python
// dispatch, no nested, sparse or quantized impl). A base that requires
// grad while grad mode is on takes the boxed call: its view must record
// autograd history.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ir/graph.h"

namespace mybackend {

using ValueSlots = std::vector<c10::IValue>;  // indexed by ValueId

class ViewReplay {
 public:
  static constexpr std::size_t kMaxRecipes = 4;

  // A replay for `node`, or null when the node is not a view this can make
  // again (see the Note). `variable_args`: per schema argument, the graph
  // argument a call reads from its slots, null for a constant.
  static std::unique_ptr<ViewReplay> for_node(const Graph& graph, const Node& node,
                                              const c10::OperatorHandle& op,
                                              const std::vector<const Argument*>& variable_args);

  // Makes the node's results into its output slots when a remembered call
  // matches this one; false when the boxed call must run.
  bool replay(ValueSlots& slots) const;
  // After a boxed call of the node: remembers its layouts when the call
  // showed a view.
  void remember(const ValueSlots& slots);

 private:
  struct Layout {
    std::vector<std::int64_t> sizes, strides;
    std::int64_t offset = 0;
  };
  // One call's base and integer arguments, and the results it made.
  struct Recipe {
    Layout base;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    std::vector<std::int64_t> integers;
    std::vector<Layout> results;
  };
  ViewReplay(const Node& node, ValueId base, std::vector<const Argument*> integer_args)
      : node_(&node), base_(base), integer_args_(std::move(integer_args)) {}

  // The call's integer arguments, flattened (a list's length first); false
  // when one is not an integer this call.
  bool integers_of(const ValueSlots& slots, std::vector<std::int64_t>& out) const;
  const Recipe* find(const at::Tensor& base, const std::vector<std::int64_t>& integers) const;

  const Node* node_;
  ValueId base_;
  std::vector<const Argument*> integer_args_;  // the variable arguments but the base
  mutable std::mutex mutex_;
  bool never_ = false;  // a call made no view: the node always takes the boxed call
  std::vector<Recipe> recipes_;
  std::size_t next_ = 0;  // the recipe replaced next once kMaxRecipes are kept
};

}  // namespace mybackend
