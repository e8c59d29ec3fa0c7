// Dropout RNG state of memory-efficient attention, handed to its backward
// where its kernel reads it (Note [RNG state follows the capture]).
#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/stack.h>

#include <cstddef>
#include <vector>

#include "ir/graph.h"

namespace mybackend {

// Note [RNG state follows the capture]
// The memory-efficient attention forward with dropout returns its philox
// seed and offset on the host when the stream is not capturing, and on the
// device under a CUDA-graph capture; its backward reads them by the same
// rule, on the host (dereferencing the pointer) unless the stream is
// capturing. Under mybackend the two may disagree: a forward
// replayed from a captured graph hands a device seed to a backward that runs
// uncaptured (its first call of that signature, or a graph that cannot be
// captured), and ATen then read a device pointer on the host: a segfault
// in autograd's thread (a T5 trained with mode="reduce-overhead"). So the
// state moves to the host before an uncaptured call of these backwards. The
// other way round, a host seed in a capture, cannot arise: a call with a
// host tensor among its inputs is never captured (Note [No capture over
// host tensors] in cuda_graph_runner.cpp). Flash and cuDNN attention keep
// their state on the device either way and are not listed.
class RngStateArguments {
 public:
  // The node's arguments that hold such state; none for other ops.
  RngStateArguments(const Node& node, const c10::FunctionSchema& schema);
  bool empty() const { return positions_.empty(); }
  // Moves device-resident state in the call's stack to the host when the
  // current stream is not capturing.
  void place_for_this_call(torch::jit::Stack& stack) const;

 private:
  std::vector<std::size_t> positions_;
};

}  // namespace mybackend
