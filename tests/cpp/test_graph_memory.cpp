// Stage 9 (runtime): the tag that marks tensors over a captured graph's
// output memory (Note [Borrowed graph memory]). The tag is device-agnostic,
// so CPU tensors stand in for graph memory here. Needs torch (the runtime
// library), so it builds as one skipped test where that is not built.
#include <gtest/gtest.h>

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/ATen.h>

#include "runtime/graph_memory.h"

namespace mybackend {
namespace {

struct GraphMemoryFixture : ::testing::Test {
  // Memory the "graph" wrote its output to, owned as a graph's would be.
  std::shared_ptr<GraphOutputMemory> owner = [] {
    auto memory = std::make_shared<GraphOutputMemory>();
    memory->outputs.emplace_back(at::arange(12, at::kFloat));
    return memory;
  }();
  at::Tensor written = owner->outputs[0].toTensor();

  at::Tensor handed_out() {
    return tensor_over(
        graph_memory_storage(written.data_ptr(), written.nbytes(), written.device(), owner),
        written);
  }
};

TEST_F(GraphMemoryFixture, HandedOutTensorsAndTheirViewsAreGraphMemory) {
  at::Tensor out = handed_out();
  EXPECT_EQ(graph_memory_owner(out), owner);
  EXPECT_EQ(graph_memory_owner(out.view({3, 4}).t()), owner);
  EXPECT_EQ(out.data_ptr(), written.data_ptr());
  EXPECT_TRUE(at::equal(out, written));
}

TEST_F(GraphMemoryFixture, OtherTensorsAreNot) {
  EXPECT_EQ(graph_memory_owner(written), nullptr);  // the caching allocator's own
  EXPECT_EQ(graph_memory_owner(at::empty({4})), nullptr);
  EXPECT_EQ(graph_memory_owner(at::Tensor()), nullptr);
}

TEST_F(GraphMemoryFixture, MovingAnOutputToItsOwnMemoryDropsTheTag) {
  at::Tensor out = handed_out();
  at::Tensor own = at::empty({12});
  out.storage().unsafeGetStorageImpl()->set_data_ptr_noswap(
      c10::DataPtr(own.data_ptr(), own.device()));
  EXPECT_EQ(graph_memory_owner(out), nullptr);
  EXPECT_EQ(owner.use_count(), 1);  // the moved tensor no longer keeps the memory alive
}

TEST_F(GraphMemoryFixture, TaggedTensorsKeepTheMemoryAlive) {
  std::weak_ptr<GraphOutputMemory> watch = owner;
  at::Tensor out = handed_out();
  owner.reset();
  written = at::Tensor();
  ASSERT_FALSE(watch.expired());
  EXPECT_FLOAT_EQ(out[11].item<float>(), 11.0f);
  out = at::Tensor();
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace mybackend

#else

TEST(GraphMemory, NeedsTheRuntimeLibrary) { GTEST_SKIP() << "built without the runtime"; }

#endif
