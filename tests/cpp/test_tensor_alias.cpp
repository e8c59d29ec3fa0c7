// Stage 9 (runtime): aliases made without the dispatcher (Note [Aliases
// without the dispatcher] in runtime/tensor_alias.h), on CPU tensors. Needs
// torch (the runtime library), so it builds as one skipped test where the
// runtime is not part of the build.
#include <gtest/gtest.h>

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "runtime/tensor_alias.h"

namespace mybackend {
namespace {

TEST(TensorAlias, ATransposeSharesStorageAndVersionCounter) {
  const at::Tensor x = at::randn({2, 3, 4});
  const at::Tensor t = transposed_alias(x);
  EXPECT_TRUE(at::equal(t, x.transpose(-2, -1)));
  EXPECT_EQ(t.strides(), x.transpose(-2, -1).strides());
  EXPECT_TRUE(t.is_alias_of(x));
  const auto before = x._version();
  t.add_(1);  // a write through the alias counts against the base
  EXPECT_GT(x._version(), before);
  EXPECT_TRUE(at::equal(t, x.transpose(-2, -1)));
}

TEST(TensorAlias, AnOffsetBaseKeepsItsOffset) {
  const at::Tensor base = at::arange(60, at::kFloat).view({5, 12});
  const at::Tensor x = base.narrow(1, 2, 8).narrow(0, 1, 3);  // offset 14, strides (12, 1)
  const at::Tensor t = transposed_alias(x);
  EXPECT_EQ(t.storage_offset(), x.storage_offset());
  EXPECT_TRUE(at::equal(t, x.t()));
}

TEST(TensorAlias, AContiguousViewGetsContiguousStrides) {
  const at::Tensor x = at::randn({6, 4});
  const at::Tensor v = viewed_alias(x, {2, 3, 4});
  EXPECT_TRUE(at::equal(v, x.view({2, 3, 4})));
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_TRUE(v.is_alias_of(x));
  EXPECT_TRUE(viewed_alias(x, {6, 4}).is_same(x));          // its own sizes: the tensor itself
  EXPECT_THROW(viewed_alias(x, {5, 5}), std::exception);    // other element count
  EXPECT_THROW(viewed_alias(x.t(), {24}), std::exception);  // not contiguous
}

TEST(TensorAlias, AnExpansionHasZeroStridesOnBroadcastDims) {
  const at::Tensor x = at::randn({3, 1});
  const at::Tensor e = expanded_alias(x, {2, 3, 4});
  EXPECT_TRUE(at::equal(e, x.expand({2, 3, 4})));
  EXPECT_EQ(e.strides(), x.expand({2, 3, 4}).strides());
  EXPECT_TRUE(e.is_alias_of(x));
  EXPECT_TRUE(expanded_alias(x, {3, 1}).is_same(x));
  EXPECT_THROW(expanded_alias(x, {2, 4}), std::exception);  // 3 does not expand to 2
}

// With grad mode on, a base that requires grad takes as_strided through the
// dispatcher: its alias records history.
TEST(TensorAlias, ABaseThatRequiresGradUnderGradModeGoesThroughTheDispatcher) {
  const at::Tensor w = at::randn({3, 4}).set_requires_grad(true);
  {
    c10::AutoGradMode on(true);
    EXPECT_FALSE(plain_alias_base(w));
    const at::Tensor t = transposed_alias(w);
    EXPECT_TRUE(t.requires_grad());
    EXPECT_TRUE(at::equal(t, w.t()));
  }
  c10::AutoGradMode off(false);
  EXPECT_TRUE(plain_alias_base(w));
  EXPECT_FALSE(transposed_alias(w).requires_grad());
}

}  // namespace
}  // namespace mybackend

#else

TEST(TensorAlias, NeedsTheRuntimeLibrary) { GTEST_SKIP() << "built without the runtime"; }

#endif
