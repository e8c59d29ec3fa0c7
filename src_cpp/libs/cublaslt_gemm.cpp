#include "libs/cublaslt_gemm.h"

#include <ATen/Context.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <cstring>

#include "libs/cublaslt_handles.h"

namespace mybackend::cublaslt {
namespace {

// Enough for every Hopper kernel cuBLASLt's heuristic offers (PyTorch gives
// cuBLASLt 32 MiB on sm_90 too); taken from the caching allocator per call.
constexpr std::size_t kMaxWorkspaceBytes = std::size_t{32} << 20;

bool data_type(c10::ScalarType type, cudaDataType_t& out) {
  switch (type) {
    case c10::ScalarType::Half: out = CUDA_R_16F; return true;
    case c10::ScalarType::BFloat16: out = CUDA_R_16BF; return true;
    case c10::ScalarType::Float: out = CUDA_R_32F; return true;
    default: return false;
  }
}

cublasLtEpilogue_t lt_epilogue(MatmulEpilogue epilogue) {
  switch (epilogue) {
    case MatmulEpilogue::None: return CUBLASLT_EPILOGUE_DEFAULT;
    case MatmulEpilogue::Bias: return CUBLASLT_EPILOGUE_BIAS;
    case MatmulEpilogue::Relu: return CUBLASLT_EPILOGUE_RELU;
    case MatmulEpilogue::ReluBias: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case MatmulEpilogue::GeluTanh: return CUBLASLT_EPILOGUE_GELU;
    case MatmulEpilogue::GeluTanhBias: return CUBLASLT_EPILOGUE_GELU_BIAS;
    // Note [Row-major products on a column-major library]: mat1 is its B.
    case MatmulEpilogue::BiasGradMat1: return CUBLASLT_EPILOGUE_BGRADB;
    case MatmulEpilogue::BiasGradMat2: return CUBLASLT_EPILOGUE_BGRADA;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

std::unique_ptr<MatrixLayout> layout_of(const Operand& m, std::int32_t batch) {
  auto layout = std::make_unique<MatrixLayout>(m.type, m.rows, m.cols, m.ld);
  if (batch > 1) layout->set_batch(batch, m.batch_stride);
  return layout;
}

// Candidates a timed choice compares, and launches timed per candidate.
constexpr int kTimedCandidates = 8;
constexpr int kTimedLaunches = 5;

// One product's descriptors and buffers: what a launch needs besides the algorithm.
struct Launch {
  cublasLtHandle_t handle;
  const MatmulDesc& desc;
  const MatrixLayout &a, &b, &c, &d;
  const void *a_data, *b_data, *c_data;
  void* d_data;
  float alpha, beta;
  cudaStream_t stream;

  cublasStatus_t run(const AlgoChoice& choice, void* workspace) const {
    return cublasLtMatmul(handle, desc.get(), &alpha, a_data, a.get(), b_data, b.get(), &beta,
                          c_data, c.get(), d_data, d.get(), &choice.algo,
                          choice.workspace_bytes > 0 ? workspace : nullptr, choice.workspace_bytes,
                          stream);
  }
};

// Up to `count` of the heuristic's algorithms for `signature` that need at
// most `max_workspace` bytes, best first.
std::vector<AlgoChoice> heuristic_candidates(const Signature& signature, const Launch& l, int count,
                                             std::size_t max_workspace = kMaxWorkspaceBytes) {
  MatmulPreference preference;
  preference.set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, std::uint64_t{max_workspace});
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, signature.a.alignment);
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, signature.b.alignment);
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, signature.c.alignment);
  preference.set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, signature.d.alignment);
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<std::size_t>(count));
  int found = 0;
  const cublasStatus_t status =
      cublasLtMatmulAlgoGetHeuristic(l.handle, l.desc.get(), l.a.get(), l.b.get(), l.c.get(),
                                     l.d.get(), preference.get(), count, results.data(), &found);
  // NOT_SUPPORTED is the heuristic's way of saying "no algorithm".
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) MB_CUBLASLT_CHECK(status);
  std::vector<AlgoChoice> out;
  if (status != CUBLAS_STATUS_SUCCESS) return out;
  for (int i = 0; i < found; ++i) {
    const auto& r = results[static_cast<std::size_t>(i)];
    if (r.state == CUBLAS_STATUS_SUCCESS) out.push_back(AlgoChoice{r.algo, r.workspaceSize});
  }
  return out;
}

// The heuristic's best algorithm for `signature`, through the cache.
std::optional<AlgoChoice> choose_algorithm(const Signature& signature, const Launch& l) {
  const std::string key = signature.key();
  if (auto cached = algo_cache().find(key)) return *cached;
  std::vector<AlgoChoice> candidates = heuristic_candidates(signature, l, 1);
  std::optional<AlgoChoice> choice;
  if (!candidates.empty()) choice = candidates.front();
  algo_cache().insert(key, choice);
  return choice;
}

bool stream_is_capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  const cudaError_t error = cudaStreamIsCapturing(stream, &status);
  // An error here means "cannot tell": behave as under capture (no timing).
  return error != cudaSuccess || status != cudaStreamCaptureStatusNone;
}

// "algo 66 tile 24 stages 35 cluster 0 splitk 1 swizzle 0": the
// configuration of a candidate, for TimedChoiceRecord.
std::string describe_algo(const cublasLtMatmulAlgo_t& algo) {
  std::string text;
  const std::pair<cublasLtMatmulAlgoConfigAttributes_t, const char*> fields[] = {
      {CUBLASLT_ALGO_CONFIG_ID, "algo"},
      {CUBLASLT_ALGO_CONFIG_TILE_ID, "tile"},
      {CUBLASLT_ALGO_CONFIG_STAGES_ID, "stages"},
      {CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, "cluster"},
      {CUBLASLT_ALGO_CONFIG_SPLITK_NUM, "splitk"},
      {CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, "swizzle"}};
  for (const auto& [attribute, name] : fields) {
    std::uint32_t value = 0;
    std::size_t written = 0;
    // An attribute this cuBLASLt lacks is left out, not an error.
    if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof value, &written) !=
        CUBLAS_STATUS_SUCCESS)
      continue;
    text += (text.empty() ? "" : " ") + std::string(name) + " " + std::to_string(value);
  }
  return text;
}

// The fastest of the heuristic's top candidates (Note [Timed algorithm choice]).
std::optional<AlgoChoice> choose_timed_algorithm(const Signature& signature, const Launch& l) {
  const std::string key = "timed:" + signature.key();
  if (auto cached = algo_cache().find(key)) return *cached;
  std::vector<AlgoChoice> candidates = heuristic_candidates(signature, l, kTimedCandidates);
  // The same configurations without workspace: no memset before each launch.
  // One that already needed none is in the list: timed once.
  const std::size_t with_workspace = candidates.size();
  for (const AlgoChoice& c : heuristic_candidates(signature, l, kTimedCandidates, 0)) {
    const auto same = [&c](const AlgoChoice& o) {
      return o.workspace_bytes == 0 && std::memcmp(&o.algo, &c.algo, sizeof c.algo) == 0;
    };
    if (std::none_of(candidates.begin(), candidates.begin() + with_workspace, same))
      candidates.push_back(c);
  }
  std::optional<AlgoChoice> best;
  TimedChoiceRecord record;
  record.signature = signature.key();
  if (candidates.size() == 1) best = candidates.front();
  if (candidates.size() > 1) {
    std::size_t workspace_bytes = 0;
    for (const AlgoChoice& c : candidates)
      workspace_bytes = std::max(workspace_bytes, c.workspace_bytes);
    c10::DataPtr workspace;
    if (workspace_bytes > 0)
      workspace = c10::cuda::CUDACachingAllocator::get()->allocate(workspace_bytes);
    float best_ms = 0.0f;
    for (const AlgoChoice& candidate : candidates) {
      record.candidates.push_back(describe_algo(candidate.algo) + " workspace " +
                                  std::to_string(candidate.workspace_bytes));
      record.ms.push_back(-1.0f);
      if (l.run(candidate, workspace.get()) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up
      at::cuda::CUDAEvent start(cudaEventDefault), end(cudaEventDefault);
      start.record(at::cuda::getCurrentCUDAStream());
      bool launched = true;
      for (int i = 0; i < kTimedLaunches && launched; ++i)
        launched = l.run(candidate, workspace.get()) == CUBLAS_STATUS_SUCCESS;
      end.record(at::cuda::getCurrentCUDAStream());
      end.synchronize();
      const float ms = start.elapsed_time(end);
      if (!launched) continue;
      record.ms.back() = ms / kTimedLaunches;
      if (!best || ms < best_ms) {
        best = candidate;
        best_ms = ms;
        record.chosen = static_cast<int>(record.candidates.size()) - 1;
      }
    }
    algo_cache().count_timed();
    algo_cache().record_timed(std::move(record));
  }
  algo_cache().insert(key, best);
  return best;
}

std::string shape_problem(const at::Tensor& mat1, const at::Tensor& mat2) {
  if (!mat1.defined() || !mat2.defined()) return "an operand is missing";
  if (mat1.dim() != mat2.dim() || (mat1.dim() != 2 && mat1.dim() != 3))
    return "operands are not both 2-D or both 3-D";
  if (mat1.scalar_type() != mat2.scalar_type()) return "operands of different dtypes";
  if (mat1.size(-1) != mat2.size(-2)) return "inner dimensions differ";
  if (mat1.dim() == 3 && mat1.size(0) != mat2.size(0)) return "batch sizes differ";
  if (mat1.numel() == 0 || mat2.numel() == 0) return "an empty product (ATen handles it)";
  return {};
}

}  // namespace

// The descriptors of one signature and its algorithm (Note [Prepared products]).
struct PreparedProduct {
  explicit PreparedProduct(const Signature& s)
      : sig(s),
        desc(s.compute, s.scale),
        a(layout_of(s.a, s.batch)),
        b(layout_of(s.b, s.batch)),
        c(layout_of(s.c, s.batch)),
        d(layout_of(s.d, s.batch)) {
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, s.a.op);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, s.b.op);
    desc.set(CUBLASLT_MATMUL_DESC_EPILOGUE, s.epilogue);
    if (s.bias_alignment != 0)  // one bias for all batches
      desc.set(CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, std::int64_t{0});
  }
  Signature sig;
  MatmulDesc desc;
  std::unique_ptr<MatrixLayout> a, b, c, d;
  bool chosen = false;  // `choice` holds the answer (which may be "none")
  bool timed = false;   // ... of a timed choice
  std::optional<AlgoChoice> choice;
};

ProductPlans::ProductPlans() = default;
ProductPlans::~ProductPlans() = default;

// ProductPlans' private side, for gemm() alone.
struct GemmCall {
  static std::unique_lock<std::mutex> lock(ProductPlans& plans) {
    return std::unique_lock<std::mutex>(plans.mutex_);
  }
  static PreparedProduct* find(ProductPlans& plans, const Signature& sig) {
    for (auto& p : plans.plans_)
      if (p->sig == sig) return p.get();
    return nullptr;
  }
  static void keep(ProductPlans& plans, std::unique_ptr<PreparedProduct> product) {
    if (plans.plans_.size() >= ProductPlans::kMaxPreparedProducts)
      plans.plans_.erase(plans.plans_.begin());
    plans.plans_.push_back(std::move(product));
  }
};

bool column_major_operand(std::int64_t rows, std::int64_t cols, std::int64_t row_stride,
                          std::int64_t col_stride, Operand& out) {
  // Row-major (unit column stride): the column-major matrix of the
  // transpose, operation N. A single column or row needs only a valid ld.
  if (cols == 1 || col_stride == 1) {
    const std::int64_t ld = rows == 1 ? std::max<std::int64_t>(cols, 1) : row_stride;
    if (ld >= std::max<std::int64_t>(cols, 1)) {
      out.op = CUBLAS_OP_N;
      out.rows = static_cast<std::uint64_t>(cols);
      out.cols = static_cast<std::uint64_t>(rows);
      out.ld = ld;
      return true;
    }
  }
  // Column-major (unit row stride): as it is, operation T.
  if (rows == 1 || row_stride == 1) {
    const std::int64_t ld = cols == 1 ? std::max<std::int64_t>(rows, 1) : col_stride;
    if (ld >= std::max<std::int64_t>(rows, 1)) {
      out.op = CUBLAS_OP_T;
      out.rows = static_cast<std::uint64_t>(rows);
      out.cols = static_cast<std::uint64_t>(cols);
      out.ld = ld;
      return true;
    }
  }
  return false;
}

std::string describe_operands(const at::Tensor& mat1, const at::Tensor& mat2, Signature& sig) {
  if (std::string p = shape_problem(mat1, mat2); !p.empty()) return p;
  if (!data_type(mat1.scalar_type(), sig.d.type)) return "dtype not in f16, bf16, f32";
  const bool batched = mat1.dim() == 3;
  const std::int64_t batch = batched ? mat1.size(0) : 1;
  const std::int64_t m = mat1.size(-2), k = mat1.size(-1), n = mat2.size(-1);
  if (batch > INT32_MAX) return "batch count above 2^31";
  sig.batch = static_cast<std::int32_t>(batch);
  sig.a.type = sig.b.type = sig.c.type = sig.d.type;
  // cuBLASLt's A is mat2, its B is mat1 (Note [Row-major products ...]).
  if (!column_major_operand(k, n, mat2.stride(-2), mat2.stride(-1), sig.a) ||
      !column_major_operand(m, k, mat1.stride(-2), mat1.stride(-1), sig.b))
    return "an operand's strides are not a (transposed) matrix cuBLASLt can read";
  if (batched) {
    sig.a.batch_stride = mat2.stride(0);
    sig.b.batch_stride = mat1.stride(0);
  }
  // D: our contiguous row-major M x N, i.e. column-major N x M with ld N.
  sig.d.op = CUBLAS_OP_N;
  sig.d.rows = static_cast<std::uint64_t>(n);
  sig.d.cols = static_cast<std::uint64_t>(m);
  sig.d.ld = n;
  sig.d.batch_stride = batched ? m * n : 0;
  sig.c = sig.d;
  return {};
}

GemmResult gemm(const GemmArgs& args) {
  GemmResult result;
  const at::Tensor& mat1 = args.mat1;
  const at::Tensor& mat2 = args.mat2;
  Signature sig;
  if (std::string p = describe_operands(mat1, mat2, sig); !p.empty()) {
    result.problem = p;
    return result;
  }
  if (!mat1.is_cuda() || !mat2.is_cuda() || mat1.device() != mat2.device()) {
    result.problem = "operands are not on one CUDA device";
    return result;
  }
  const bool batched = mat1.dim() == 3;
  const std::int64_t batch = sig.batch;
  const std::int64_t m = mat1.size(-2), n = mat2.size(-1);
  const bool bias_grad = epilogue_is_bias_grad(args.epilogue);
  if (bias_grad && batched) {
    result.problem = "bias-gradient epilogues take 2-D products only";
    return result;
  }
  if (epilogue_has_bias(args.epilogue)) {
    const at::Tensor& bias = args.bias;
    if (!bias.defined() || bias.dim() != 1 || bias.size(0) != n || bias.stride(0) != 1 ||
        bias.scalar_type() != mat1.scalar_type() || bias.device() != mat1.device()) {
      result.problem = "the bias is not a packed vector of N elements of the product's dtype";
      return result;
    }
  }
  const c10::ScalarType out_dtype =
      args.out_dtype == c10::ScalarType::Undefined ? mat1.scalar_type() : args.out_dtype;
  if (out_dtype != mat1.scalar_type()) {
    const bool widened = out_dtype == c10::ScalarType::Float && mat1.scalar_type() != out_dtype;
    if (!widened || args.epilogue != MatmulEpilogue::None || args.c.defined()) {
      result.problem = "an output dtype other than the operands' is f32, without C or epilogue";
      return result;
    }
    sig.c.type = sig.d.type = CUDA_R_32F;
  }
  const c10::cuda::CUDAGuard guard(mat1.device());
  const int device = mat1.get_device();
  std::vector<std::int64_t> out_shape{m, n};
  if (batched) out_shape.insert(out_shape.begin(), batch);
  // at::empty without the dispatcher: one of every step's hundreds of outputs.
  result.out = at::detail::empty_cuda(out_shape, mat1.options().dtype(out_dtype));
  const bool use_c = args.c.defined() && args.beta != 0.0;
  const void* c_data = result.out.data_ptr();
  if (use_c) {
    if (args.c.sizes() == result.out.sizes() && args.c.is_contiguous() &&
        args.c.scalar_type() == mat1.scalar_type() && args.c.device() == mat1.device()) {
      c_data = args.c.data_ptr();  // read in place: same layout as D
      sig.c_is_d = false;
    } else {
      result.out.copy_(args.c.expand(out_shape));  // broadcast into D, then D = .. + beta·D
    }
  }
  sig.a.alignment = pointer_alignment(mat2.data_ptr());
  sig.b.alignment = pointer_alignment(mat1.data_ptr());
  sig.c.alignment = pointer_alignment(c_data);
  sig.d.alignment = pointer_alignment(result.out.data_ptr());
  sig.device = device;
  sig.epilogue = lt_epilogue(args.epilogue);
  const bool fp32 = mat1.scalar_type() == c10::ScalarType::Float;
  sig.compute = fp32 && at::globalContext().allowTF32CuBLAS() ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                              : CUBLAS_COMPUTE_32F;
  sig.scale = CUDA_R_32F;

  const void* bias_data = nullptr;
  if (epilogue_has_bias(args.epilogue)) bias_data = args.bias.data_ptr();
  if (bias_grad) {
    result.bias_grad = at::detail::empty_cuda(
        {args.epilogue == MatmulEpilogue::BiasGradMat1 ? m : n}, mat1.options());
    bias_data = result.bias_grad.data_ptr();
  }
  sig.bias_alignment = bias_data != nullptr ? pointer_alignment(bias_data) : 0;

  const float alpha = static_cast<float>(args.alpha);
  const float beta = use_c ? static_cast<float>(args.beta) : 0.0f;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream(device).stream();
  const bool timed = args.autotune && !stream_is_capturing(stream);

  std::unique_lock<std::mutex> lock;
  std::unique_ptr<PreparedProduct> unkept;
  PreparedProduct* prepared = nullptr;
  if (args.plans != nullptr) {
    lock = GemmCall::lock(*args.plans);
    prepared = GemmCall::find(*args.plans, sig);
  }
  if (prepared == nullptr) {
    auto fresh = std::make_unique<PreparedProduct>(sig);
    prepared = fresh.get();
    if (args.plans != nullptr) {
      GemmCall::keep(*args.plans, std::move(fresh));
    } else {
      unkept = std::move(fresh);
    }
  }
  if (bias_data != nullptr) prepared->desc.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_data);
  const Launch launch{handle_for_device(device),
                      prepared->desc,
                      *prepared->a,
                      *prepared->b,
                      *prepared->c,
                      *prepared->d,
                      mat2.data_ptr(),
                      mat1.data_ptr(),
                      c_data,
                      result.out.data_ptr(),
                      alpha,
                      beta,
                      stream};
  const bool choose_now = !prepared->chosen || (timed && !prepared->timed);
  if (choose_now) {
    prepared->choice = timed ? choose_timed_algorithm(sig, launch) : choose_algorithm(sig, launch);
    prepared->chosen = true;
    prepared->timed = timed;
  } else {
    algo_cache().count_reused();
  }
  const std::optional<AlgoChoice> choice = prepared->choice;
  if (choose_now && timed && use_c && sig.c_is_d)
    result.out.copy_(args.c.expand(out_shape));  // timing wrote D
  if (!choice) {
    result = GemmResult{};
    result.problem = "cuBLASLt's heuristic has no algorithm for this problem (epilogue " +
                     std::string(cublaslt_epilogue_name(args.epilogue)) + ")";
    return result;
  }
  c10::DataPtr workspace;
  if (choice->workspace_bytes > 0)
    workspace = c10::cuda::CUDACachingAllocator::get()->allocate(choice->workspace_bytes);
  MB_CUBLASLT_CHECK(launch.run(*choice, workspace.get()));
  return result;
}

}  // namespace mybackend::cublaslt
