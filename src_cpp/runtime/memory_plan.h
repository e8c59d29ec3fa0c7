// The runtime's memory plan, computed once per compiled graph (torch-free,
// so it is unit-tested on its own: tests/cpp/test_memory_plan.cpp).
//
// Note [Memory plan]
// The executor runs a graph as a list of points: one ATen call, one engine
// group (generated kernel, cuBLASLt call), one builtin or Python node. Two
// decisions follow from when each value is last read:
//  * Releases. A value's slot is dropped right after the last point that
//    reads it (per ATen call, also inside a multi-node ATen sequence), unused
//    outputs right after the point that makes them, unread graph inputs
//    before the first point; graph outputs never. This is the executor's
//    only reference to the value, so a tensor nobody else holds goes back to
//    PyTorch's caching allocator there, as in eager.
//  * Buffers. Outputs of engine groups whose byte size is static (the
//    "candidates") get a buffer: a candidate takes the buffer of a dead
//    candidate of the same byte size and device when no point that may
//    allocate lies between that death and this definition; otherwise a new
//    buffer. A value is dead after its last read and after the last read of
//    every value that may alias it (views, in-place results, Python results),
//    so a buffer is never handed on while a view of it lives. Graph outputs
//    and whatever aliases them are never dead, so their buffers are never
//    handed on; graph outputs themselves are no candidates (they leave the
//    call and must own fresh memory). Values read by a point that may work
//    on another stream (Python nodes, non-aten operators) hand nothing on:
//    the caching allocator's record_stream protects them, a hand-over would
//    not.
// At run time (Executor, PlannedOutputs) a dead candidate's storage waits
// for its buffer's next owner, which takes it instead of asking the caching
// allocator; it never waits across an allocating point, so the plan never
// holds memory the caching allocator could have handed to someone else, and
// the peak is the caching allocator's own (the plan saves the allocator
// calls and makes the reuse explicit and reportable). The memory itself
// always comes from the caching allocator: stats and limits stay true.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace mybackend {

// One place in the run order.
struct PlanPoint {
  std::vector<ValueId> reads;
  std::vector<ValueId> defines;
  // (alias, base) pairs: the point's output `alias` may share memory with
  // `base` (a view, an in-place result, a Python node's result).
  std::vector<std::pair<ValueId, ValueId>> aliases;
  // False for points that allocate no device memory (views, size arithmetic).
  bool allocates = true;
  // False where the point may use the memory it reads on another stream
  // (Python nodes, operators outside aten::): nothing it reads is handed on.
  bool same_stream = true;
};

// An engine-group output the plan may place: its byte size and device.
struct BufferCandidate {
  ValueId value = 0;
  std::int64_t bytes = 0;
  std::string device;
};

struct MemoryPlanInput {
  std::size_t value_count = 0;
  std::vector<ValueId> graph_inputs;
  std::vector<PlanPoint> points;
  std::vector<ValueId> graph_outputs;
  std::vector<BufferCandidate> candidates;
};

struct PlannedBuffer {
  std::int64_t bytes = 0;
  std::string device;
  std::vector<ValueId> owners;  // in definition order
};

// A dead owner's storage waiting for the buffer's next owner.
struct BufferHandOver {
  ValueId from = 0;  // the owner whose storage is kept
  int buffer = 0;
};

struct MemoryPlan {
  std::vector<ValueId> release_at_start;            // unread graph inputs
  std::vector<std::vector<ValueId>> release_after;  // per point
  std::vector<int> buffer_of;                       // per value: its buffer, or -1
  std::vector<PlannedBuffer> buffers;
  // Per point: owners whose slot is released there (release_after) and
  // whose buffer has a next owner; their storage is kept for it.
  std::vector<std::vector<BufferHandOver>> hand_over_after;
  // Per point: buffers whose next owner is defined there; what that owner
  // did not take is dropped after the point (its runner declined, say).
  std::vector<std::vector<int>> drop_after;

  // Figures for reports (Note [Memory plan]).
  std::int64_t planned_values = 0;       // candidates
  std::int64_t bytes_without_reuse = 0;  // sum of the candidates' bytes
  std::int64_t bytes_with_reuse = 0;     // sum of the buffers' bytes
  std::int64_t peak_bytes = 0;           // the most bytes of candidates alive at once
};

MemoryPlan plan_memory(const MemoryPlanInput& input);

}  // namespace mybackend
