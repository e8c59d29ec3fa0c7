// Whole-graph CUDA-graph capture and replay (mode="reduce-overhead", or
// options={"cuda_graphs": True}).
//
// Note [CUDA-graph rules]
//  * Capture happens per input signature (sizes, strides, dtypes, devices of
//    tensor inputs, values of int inputs, addresses of static inputs), on
//    the second call with that signature (the first warms up handles and
//    caches), up to max_graphs signatures; later signatures run uncaptured.
//  * Static inputs (parameters and buffers, and inputs the graph mutates) are
//    captured at their own addresses and never copied. So are inputs over
//    another captured graph's output memory, which key the signature by
//    address (Note [Borrowed graph memory] in graph_memory.h: the backward
//    reads the forward's saved activations in place). Every other tensor
//    input is copied into a buffer the runner owns, skipped when the caller
//    passes that buffer itself; the copies of one replay are one batch
//    (Note [Batched input copies] in cuda_graph_runner.cpp).
//  * Outputs never change under the caller: each replay hands out fresh
//    tensors over the graph's output memory, and before the next replay any
//    of them the caller still holds is moved to memory of its own (one
//    device-to-device copy, only for outputs still alive).
//  * A graph that cannot be captured (CPU tensors, host-synchronising ops,
//    Python nodes, a capture error) runs uncaptured; status() says why.
#pragma once

#include <ATen/core/ivalue.h>

#include <memory>
#include <string>
#include <vector>

#include "runtime/executor.h"

namespace mybackend {

struct CudaGraphPolicy {
  bool enabled = false;
  std::vector<int> static_inputs;  // input positions captured at their own address
  int max_graphs = 8;
};

// The reason the graph can never be captured, or "" when it can be tried.
std::string capture_blocker(const Graph& graph);

class CudaGraphRunner {
 public:
  CudaGraphRunner(const Executor& executor, CudaGraphPolicy policy);
  ~CudaGraphRunner();
  CudaGraphRunner(const CudaGraphRunner&) = delete;
  CudaGraphRunner& operator=(const CudaGraphRunner&) = delete;

  std::vector<c10::IValue> run(std::vector<c10::IValue> inputs);
  std::string status() const;
  std::int64_t captures() const;
  std::int64_t replays() const;
  // Bytes of inputs copied into the graphs' buffers, and of held outputs
  // moved to memory of their own, by replays so far.
  std::int64_t input_bytes_copied() const;
  std::int64_t output_bytes_moved() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mybackend
