// Stage 9: the runtime's memory plan (runtime/memory_plan.h, Note [Memory
// plan]) on hand-written point lists: when slots are released, which buffer
// each engine output gets, and the rules a reuse must never break.
#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/memory_plan.h"

namespace mybackend {
namespace {

PlanPoint point(std::vector<ValueId> reads, std::vector<ValueId> defines, bool allocates = true) {
  PlanPoint p;
  p.reads = std::move(reads);
  p.defines = std::move(defines);
  p.allocates = allocates;
  return p;
}

BufferCandidate candidate(ValueId v, std::int64_t bytes, std::string device = "cuda:0") {
  return BufferCandidate{v, bytes, std::move(device)};
}

bool contains(const std::vector<ValueId>& values, ValueId v) {
  return std::find(values.begin(), values.end(), v) != values.end();
}

// x(0) -> a(1) -> b(2) -> c(3) -> d(4) -> e(5): each point reads the last value.
MemoryPlanInput chain(std::int64_t bytes = 1024) {
  MemoryPlanInput in;
  in.value_count = 6;
  in.graph_inputs = {0};
  for (ValueId v = 1; v <= 5; ++v) in.points.push_back(point({v - 1}, {v}));
  in.graph_outputs = {5};
  for (ValueId v = 1; v <= 4; ++v) in.candidates.push_back(candidate(v, bytes));
  return in;
}

TEST(MemoryPlan, ReleasesEachValueAfterItsLastRead) {
  MemoryPlanInput in = chain();
  in.points[3].reads.push_back(0);  // the input is read again by the point defining d
  const MemoryPlan plan = plan_memory(in);
  ASSERT_EQ(plan.release_after.size(), 5u);
  EXPECT_EQ(plan.release_after[0], (std::vector<ValueId>{}));
  EXPECT_EQ(plan.release_after[1], (std::vector<ValueId>{1}));
  EXPECT_EQ(plan.release_after[3], (std::vector<ValueId>{0, 3}));
  for (const auto& released : plan.release_after) EXPECT_FALSE(contains(released, 5));
}

TEST(MemoryPlan, UnreadInputsGoBeforeTheFirstPointAndUnusedOutputsAtOnce) {
  MemoryPlanInput in;
  in.value_count = 4;
  in.graph_inputs = {0, 1};
  in.points = {point({0}, {2, 3})};  // 3 is never read
  in.graph_outputs = {2};
  const MemoryPlan plan = plan_memory(in);
  EXPECT_EQ(plan.release_at_start, (std::vector<ValueId>{1}));
  EXPECT_EQ(plan.release_after[0], (std::vector<ValueId>{0, 3}));
}

TEST(MemoryPlan, ReusesOnlyAfterTheLastRead) {
  const MemoryPlan plan = plan_memory(chain());
  // a dies after the point defining b, so c (two points later) takes a's
  // buffer, d takes b's: two buffers for four values.
  EXPECT_EQ(plan.buffers.size(), 2u);
  EXPECT_EQ(plan.buffer_of[1], plan.buffer_of[3]);
  EXPECT_EQ(plan.buffer_of[2], plan.buffer_of[4]);
  EXPECT_NE(plan.buffer_of[1], plan.buffer_of[2]);  // b is defined while a is read
  EXPECT_EQ(plan.planned_values, 4);
  EXPECT_EQ(plan.bytes_without_reuse, 4 * 1024);
  EXPECT_EQ(plan.bytes_with_reuse, 2 * 1024);
  EXPECT_EQ(plan.peak_bytes, 2 * 1024);
  // a's slot (released after point 1) carries the storage to c (point 2).
  ASSERT_EQ(plan.hand_over_after[1].size(), 1u);
  EXPECT_EQ(plan.hand_over_after[1][0].from, 1);
  EXPECT_EQ(plan.hand_over_after[1][0].buffer, plan.buffer_of[3]);
  EXPECT_EQ(plan.drop_after[2], (std::vector<int>{plan.buffer_of[3]}));
}

TEST(MemoryPlan, NeverReusesAcrossSizesOrDevices) {
  MemoryPlanInput sizes = chain();
  sizes.candidates[2].bytes = 2048;  // c
  const MemoryPlan by_size = plan_memory(sizes);
  EXPECT_NE(by_size.buffer_of[3], by_size.buffer_of[1]);
  EXPECT_EQ(by_size.buffers[static_cast<std::size_t>(by_size.buffer_of[3])].bytes, 2048);

  MemoryPlanInput devices = chain();
  devices.candidates[2].device = "cuda:1";
  const MemoryPlan by_device = plan_memory(devices);
  EXPECT_NE(by_device.buffer_of[3], by_device.buffer_of[1]);
  for (const PlannedBuffer& b : by_device.buffers) {
    for (ValueId owner : b.owners) {
      const auto& c = devices.candidates[static_cast<std::size_t>(owner - 1)];
      EXPECT_EQ(c.device, b.device);
      EXPECT_EQ(c.bytes, b.bytes);
    }
  }
}

TEST(MemoryPlan, GraphOutputsAreNeverPlannedNorHandedOn) {
  MemoryPlanInput in = chain();
  in.graph_outputs = {1, 5};  // a leaves the call
  in.candidates.push_back(candidate(5, 1024));
  const MemoryPlan plan = plan_memory(in);
  EXPECT_EQ(plan.buffer_of[1], -1);
  EXPECT_EQ(plan.buffer_of[5], -1);
  for (const auto& over : plan.hand_over_after) {
    for (const BufferHandOver& h : over) EXPECT_NE(h.from, 1);
  }
  for (const auto& released : plan.release_after) EXPECT_FALSE(contains(released, 1));
}

TEST(MemoryPlan, AViewKeepsItsBaseAlive) {
  // a(1) = f(x); v(2) = view(a); b(3) = g(v); c(4) = h(b); d(5) = k(c)
  MemoryPlanInput in;
  in.value_count = 6;
  in.graph_inputs = {0};
  in.points = {point({0}, {1}), point({1}, {2}, false), point({2}, {3}), point({3}, {4}),
               point({4}, {5})};
  in.points[1].aliases = {{2, 1}};
  in.graph_outputs = {5};
  in.candidates = {candidate(1, 64), candidate(3, 64), candidate(4, 64)};
  const MemoryPlan plan = plan_memory(in);
  // a's slot goes after the view is made, but a lives on through v until
  // b is made: b must not take it; c, made after that, does.
  EXPECT_TRUE(contains(plan.release_after[1], 1));
  EXPECT_NE(plan.buffer_of[3], plan.buffer_of[1]);
  EXPECT_EQ(plan.buffer_of[4], plan.buffer_of[1]);
  ASSERT_EQ(plan.hand_over_after[2].size(), 1u);
  EXPECT_EQ(plan.hand_over_after[2][0].from, 2);  // the view's slot carries the storage
}

TEST(MemoryPlan, AViewOfAGraphOutputPinsItsBase) {
  MemoryPlanInput in = chain();
  in.value_count = 7;
  in.points[1].defines.push_back(6);  // b's point also makes 6 = view(a), returned
  in.points[1].aliases = {{6, 1}};
  in.graph_outputs = {5, 6};
  const MemoryPlan plan = plan_memory(in);
  ASSERT_GE(plan.buffer_of[1], 0);
  const auto& owners = plan.buffers[static_cast<std::size_t>(plan.buffer_of[1])].owners;
  EXPECT_EQ(owners, (std::vector<ValueId>{1}));
}

TEST(MemoryPlan, NoHandOverAcrossAnAllocatingPoint) {
  // a dies at point 1; point 2 allocates (no candidate), then point 3 defines 4.
  MemoryPlanInput in;
  in.value_count = 6;
  in.graph_inputs = {0};
  in.points = {point({0}, {1}), point({1}, {2}), point({2}, {3}), point({3}, {4}), point({4}, {5})};
  in.graph_outputs = {5};
  in.candidates = {candidate(1, 256), candidate(4, 256)};
  EXPECT_NE(plan_memory(in).buffer_of[4], plan_memory(in).buffer_of[1]);
  in.points[2].allocates = false;  // a view between: the storage may wait
  EXPECT_EQ(plan_memory(in).buffer_of[4], plan_memory(in).buffer_of[1]);
}

TEST(MemoryPlan, ValuesReadOffTheStreamAreNotHandedOn) {
  MemoryPlanInput in = chain();
  in.points[1].same_stream = false;  // a Python node reads a
  const MemoryPlan plan = plan_memory(in);
  EXPECT_NE(plan.buffer_of[3], plan.buffer_of[1]);
  EXPECT_EQ(plan.buffer_of[4], plan.buffer_of[2]);
}

TEST(MemoryPlan, ABufferHasOneOwnerAtATime) {
  // Random-ish diamond graph: every owner of a buffer dies before the next
  // is defined.
  MemoryPlanInput in;
  in.value_count = 12;
  in.graph_inputs = {0};
  in.points = {point({0}, {1}),    point({0, 1}, {2}), point({1, 2}, {3}), point({3}, {4}),
               point({2, 4}, {5}), point({5}, {6}),    point({5, 6}, {7}), point({7}, {8}),
               point({6, 8}, {9}), point({9}, {10}),   point({10}, {11})};
  in.graph_outputs = {11};
  for (ValueId v = 1; v <= 10; ++v) in.candidates.push_back(candidate(v, 128));
  const MemoryPlan plan = plan_memory(in);
  std::vector<int> defined(12, -1), last(12, -1);
  for (std::size_t p = 0; p < in.points.size(); ++p) {
    for (ValueId v : in.points[p].reads) last[v] = static_cast<int>(p);
    for (ValueId v : in.points[p].defines) defined[v] = static_cast<int>(p);
  }
  for (const PlannedBuffer& b : plan.buffers) {
    for (std::size_t k = 1; k < b.owners.size(); ++k)
      EXPECT_LT(last[b.owners[k - 1]], defined[b.owners[k]]) << "buffer handed on too early";
  }
  EXPECT_LT(plan.bytes_with_reuse, plan.bytes_without_reuse);
  EXPECT_LE(plan.peak_bytes, plan.bytes_with_reuse);
}

}  // namespace
}  // namespace mybackend
