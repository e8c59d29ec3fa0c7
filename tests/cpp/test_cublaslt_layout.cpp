// Stage 8b: how the cuBLASLt wrapper describes row-major torch operands to a
// column-major library (Note [Row-major products on a column-major library]
// in libs/cublaslt_gemm.h), checked without a GPU: a plain C++ GEMM with
// cuBLAS's semantics (column-major, op, ld, batch stride) runs on the
// described CPU tensors and must equal at::matmul.
#include <gtest/gtest.h>

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/ATen.h>

#include "libs/cublaslt_gemm.h"

namespace mybackend::cublaslt {
namespace {

// Element (i, j) of op(X), X stored column-major as `o` says.
float element(const float* x, const Operand& o, std::int64_t i, std::int64_t j) {
  return o.op == CUBLAS_OP_N ? x[i + j * o.ld] : x[j + i * o.ld];
}

// D = op(A) · op(B), cuBLAS-style, with A = mat2 and B = mat1 as described.
at::Tensor emulate(const at::Tensor& mat1, const at::Tensor& mat2, const Signature& sig) {
  const auto m = static_cast<std::int64_t>(sig.d.rows), n = static_cast<std::int64_t>(sig.d.cols);
  const auto k = static_cast<std::int64_t>(sig.a.op == CUBLAS_OP_N ? sig.a.cols : sig.a.rows);
  // op(A) is m x k and op(B) is k x n, whatever the operations.
  EXPECT_EQ(sig.a.op == CUBLAS_OP_N ? sig.a.rows : sig.a.cols, static_cast<std::uint64_t>(m));
  EXPECT_EQ(sig.b.op == CUBLAS_OP_N ? sig.b.rows : sig.b.cols, static_cast<std::uint64_t>(k));
  EXPECT_EQ(sig.b.op == CUBLAS_OP_N ? sig.b.cols : sig.b.rows, static_cast<std::uint64_t>(n));
  std::vector<std::int64_t> shape{n, m};  // our M x N
  if (mat1.dim() == 3) shape.insert(shape.begin(), sig.batch);
  at::Tensor d = at::empty(shape, mat1.options());
  const float* a = mat2.data_ptr<float>();
  const float* b = mat1.data_ptr<float>();
  float* out = d.data_ptr<float>();
  for (std::int64_t batch = 0; batch < sig.batch; ++batch) {
    for (std::int64_t i = 0; i < m; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        float sum = 0;
        for (std::int64_t l = 0; l < k; ++l) {
          sum += element(a + batch * sig.a.batch_stride, sig.a, i, l) *
                 element(b + batch * sig.b.batch_stride, sig.b, l, j);
        }
        out[batch * sig.d.batch_stride + i + j * sig.d.ld] = sum;
      }
    }
  }
  return d;
}

void expect_product(const at::Tensor& mat1, const at::Tensor& mat2) {
  Signature sig;
  ASSERT_EQ(describe_operands(mat1, mat2, sig), "");
  at::Tensor got = emulate(mat1, mat2, sig);
  EXPECT_TRUE(at::allclose(got, at::matmul(mat1, mat2), 1e-5, 1e-5))
      << "mat1 strides " << mat1.strides() << ", mat2 strides " << mat2.strides();
}

TEST(CublasLtLayout, ContiguousAndTransposedOperands) {
  at::manual_seed(0);
  const at::Tensor x = at::randn({5, 7}), w = at::randn({7, 3});
  expect_product(x, w);
  expect_product(at::randn({7, 5}).t(), w);  // mat1 column-major
  expect_product(x, at::randn({3, 7}).t());  // mat2 = weightᵀ, as Linear has it
  expect_product(at::randn({7, 5}).t(), at::randn({3, 7}).t());
}

TEST(CublasLtLayout, StridedRowsAndNarrowedColumnsNeedNoCopy) {
  const at::Tensor base = at::randn({10, 12});
  const at::Tensor rows = base.slice(0, 0, 10, 2).slice(1, 0, 7);  // ld 24 > 7
  Signature sig;
  ASSERT_EQ(describe_operands(rows, at::randn({7, 4}), sig), "");
  EXPECT_EQ(sig.b.ld, 24);
  EXPECT_EQ(sig.b.op, CUBLAS_OP_N);
  expect_product(rows, at::randn({7, 4}));
  expect_product(at::randn({5, 7}), base.slice(1, 2, 6).slice(0, 0, 7));
}

TEST(CublasLtLayout, SingleRowsColumnsAndInnerDims) {
  expect_product(at::randn({1, 7}), at::randn({7, 3}));
  expect_product(at::randn({5, 7}), at::randn({7, 1}));
  expect_product(at::randn({5, 1}), at::randn({1, 3}));
  expect_product(at::randn({1, 5}).t(), at::randn({1, 3}));  // a column view of a row
}

TEST(CublasLtLayout, BatchedWithBatchStrides) {
  expect_product(at::randn({3, 4, 6}), at::randn({3, 6, 5}));
  expect_product(at::randn({3, 6, 4}).transpose(1, 2), at::randn({3, 5, 6}).transpose(1, 2));
  expect_product(at::randn({4, 3, 6}).transpose(0, 1),
                 at::randn({3, 6, 5}));  // batch not outermost
}

TEST(CublasLtLayout, OperandsWithoutAUnitStrideAreRefused) {
  Signature sig;
  const at::Tensor every_other = at::randn({5, 14}).slice(1, 0, 14, 2);
  EXPECT_NE(describe_operands(every_other, at::randn({7, 3}), sig).find("strides"),
            std::string::npos);
  EXPECT_NE(
      describe_operands(at::randn({5, 7}).to(at::kDouble), at::randn({7, 3}).to(at::kDouble), sig)
          .find("dtype"),
      std::string::npos);
  EXPECT_NE(describe_operands(at::randn({5, 0}), at::randn({0, 3}), sig).find("empty"),
            std::string::npos);
}

TEST(CublasLtLayout, AlignmentAndCacheKey) {
  EXPECT_EQ(pointer_alignment(reinterpret_cast<const void*>(0x1000)), 256u);
  EXPECT_EQ(pointer_alignment(reinterpret_cast<const void*>(0x1006)), 2u);
  Signature a, b;
  describe_operands(at::randn({5, 7}), at::randn({7, 3}), a);
  describe_operands(at::randn({5, 7}), at::randn({3, 7}).t(), b);
  EXPECT_NE(a.key(), b.key());  // a transposed operand is another problem
  AlgoCache cache;
  EXPECT_FALSE(cache.find(a.key()).has_value());
  cache.insert(a.key(), std::nullopt);  // "no algorithm" is remembered too
  ASSERT_TRUE(cache.find(a.key()).has_value());
  EXPECT_FALSE(cache.find(a.key())->has_value());
  EXPECT_EQ(cache.stats().entries, 1u);
  EXPECT_EQ(cache.stats().hits, 2u);
  EXPECT_EQ(cache.stats().misses, 1u);
}

TEST(CublasLtLayout, TimedChoicesKeepTheLastOnes) {
  AlgoCache cache;
  const std::size_t made = AlgoCache::kKeptTimedChoices + 3;
  for (std::size_t k = 0; k < made; ++k)
    cache.record_timed(TimedChoiceRecord{"sig" + std::to_string(k), {"algo 1"}, {0.5f}, 0});
  const std::vector<TimedChoiceRecord> kept = cache.timed_choices();
  ASSERT_EQ(kept.size(), AlgoCache::kKeptTimedChoices);
  EXPECT_EQ(kept.front().signature, "sig3");  // oldest first, the first three dropped
  EXPECT_EQ(kept.back().signature, "sig" + std::to_string(made - 1));
}

}  // namespace
}  // namespace mybackend::cublaslt

#else

TEST(CublasLtLayout, NeedsACudaBuild) { GTEST_SKIP() << "built without CUDA"; }

#endif  // MYBACKEND_WITH_CUDA
