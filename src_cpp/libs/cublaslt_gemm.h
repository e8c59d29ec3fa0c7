// One matrix product through cuBLASLt, on torch tensors: what a matmul
// group (runtime/libraries/matmul_group.h) and the benchmark binding call. CUDA
// builds only.
//
// Note [Row-major products on a column-major library]
// cuBLASLt multiplies column-major matrices. Our row-major D = mat1 · mat2
// (M x N) is, read column-major, Dᵀ = mat2ᵀ · mat1ᵀ (N x M): cuBLASLt's A is
// mat2, its B is mat1, m = N, n = M, k = K. A logical operand whose last dim
// has stride 1 is a column-major matrix of its transpose (operation N, ld =
// stride of the row dim); one whose row dim has stride 1 is a column-major
// matrix as it is (operation T, ld = stride of the last dim). Anything else
// (both strides > 1, zero-stride broadcasts) is not expressible: the caller
// runs ATen. So transposed views and column slices cost no copy.
//
// Note [Timed algorithm choice]
// With autotune (option autotune, mode max-autotune) the first run of a
// signature asks the heuristic for its top kTimedCandidates algorithms,
// runs each a few times on the real operands between two CUDA events, and
// keeps the fastest in the algorithm cache under its own key (a timed
// choice never answers a heuristic lookup). Timing writes only buffers the
// real run overwrites (D, the bias gradient); when C was copied into D it
// is copied again afterwards. It synchronises the host once per signature,
// so it never runs while the stream is being captured into a CUDA graph:
// such a run takes the heuristic's answer and times later. A candidate that
// fails to launch is skipped. The last comparisons are kept with each
// candidate's configuration, workspace and time (_C.cublaslt_timed_choices(),
// printed by benchmarks.micro.matmul). On the MLP up-projection (H100,
// 2026-11-26) the record showed the choice right: the heuristic's eighth
// candidate, 128x128 tiles, 0.061 ms against its first's 0.069.
//
// The candidates are asked for twice: with the workspace the untimed choice
// allows, and with none. Hopper's nvjet kernels ask for a few bytes of
// workspace (a tile-scheduler counter) and cuBLASLt clears it with a memset
// before every launch; the same configurations without workspace launch
// alone and ran 3% faster in a back-to-back loop (the eighth: 0.0593 ms
// against 0.0611). Configurations that need a real workspace (split-K
// partials) stay candidates beside them, so timing decides; one the first
// answer already ran without workspace is timed once.
//
// Precision: f16 and bf16 operands compute in f32 (CUBLAS_COMPUTE_32F);
// f32 uses CUBLAS_COMPUTE_32F_FAST_TF32 when torch allows TF32 for cuBLAS
// (torch.backends.cuda.matmul.allow_tf32 / set_float32_matmul_precision),
// else CUBLAS_COMPUTE_32F. The output comes from at::empty (the caching
// allocator), the workspace from the caching allocator on the current
// stream, and the call runs on at::cuda::getCurrentCUDAStream().
//
// Note [Prepared products]
// Creating a matmul descriptor and four layouts and spelling the signature
// as the algorithm cache's key took about half of a product's host time
// (GPT-2's training step makes 147 products; under the profiler each cost
// 20 us of host time besides its launch). A caller that runs the same
// product again (a matmul group) passes its ProductPlans: the descriptors
// and the algorithm of the last kMaxPreparedProducts signatures it ran are
// kept there, and a call whose signature equals one of them reuses them,
// setting only the bias pointer. A call under autotune whose plan was
// chosen by the heuristic during a capture (Note [Timed algorithm choice])
// times it on its next uncaptured run. ProductPlans locks per call, so
// threads may share a compiled graph.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "libs/cublaslt_algo_cache.h"
#include "spec/matmul_spec.h"

namespace mybackend::cublaslt {

struct PreparedProduct;

class ProductPlans {
 public:
  static constexpr std::size_t kMaxPreparedProducts = 4;
  ProductPlans();
  ~ProductPlans();
  ProductPlans(const ProductPlans&) = delete;
  ProductPlans& operator=(const ProductPlans&) = delete;

 private:
  friend struct GemmCall;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<PreparedProduct>> plans_;  // oldest first
};

struct GemmArgs {
  at::Tensor mat1;  // [B,] M x K, any strides
  at::Tensor mat2;  // [B,] K x N, any strides
  at::Tensor c;     // undefined, or broadcastable to the output (scaled by beta)
  double alpha = 1.0;
  double beta = 0.0;
  MatmulEpilogue epilogue = MatmulEpilogue::None;
  at::Tensor bias;        // epilogues with a bias: 1-D, N elements, stride 1
  bool autotune = false;  // Note [Timed algorithm choice]
  // D's dtype: Undefined for the operands' own; Float for 16-bit operands
  // without C or epilogue (Note [Products written in f32]).
  c10::ScalarType out_dtype = c10::ScalarType::Undefined;
  // Where this caller's descriptors are kept between calls (Note [Prepared
  // products]); null: built for this call alone.
  ProductPlans* plans = nullptr;
};

struct GemmResult {
  at::Tensor out;        // [B,] M x N, contiguous, of GemmArgs::out_dtype
  at::Tensor bias_grad;  // bias-gradient epilogues: 1-D, M (mat1) or N (mat2) elements
  std::string problem;   // why nothing ran (the caller runs ATen); empty when it ran
  bool ok() const { return problem.empty(); }
};

// Runs the product, or says why it cannot in `problem` (inexpressible
// layout, unsupported dtype, no algorithm). cuBLASLt failures throw Error
// from MB_CUBLASLT_CHECK; the caller falls back to ATen and records it.
GemmResult gemm(const GemmArgs& args);

// Fills sig.batch, sig.a (cuBLASLt's A: mat2), sig.b (its B: mat1), sig.d
// and sig.c (our contiguous output) from the operands' sizes, strides and
// dtype; returns why cuBLASLt cannot take them as they are (empty: it can).
// Reads no data and needs no GPU.
std::string describe_operands(const at::Tensor& mat1, const at::Tensor& mat2, Signature& sig);

// The signature's operand for a logical rows x cols matrix with these row
// and column strides (Note [Row-major products on a column-major library]);
// false when cuBLASLt cannot read it in place.
bool column_major_operand(std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
                          std::int64_t col_stride, Operand& out);

}  // namespace mybackend::cublaslt
