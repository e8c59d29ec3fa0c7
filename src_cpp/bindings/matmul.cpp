// The matmul engine's Python surface: its algorithm-cache counters, and one
// bare cuBLASLt call for the micro-benchmark (benchmarks/micro/matmul.py),
// through the same wrapper the matmul groups use.
#include <ATen/core/Tensor.h>

#include "bindings/bindings.h"
#include "common/error.h"
#include "runtime/libraries/attention_group.h"
#include "runtime/libraries/matmul_group.h"
#ifdef MYBACKEND_WITH_CUDA
#include "libs/cublaslt_gemm.h"
#endif

namespace mybackend::bindings {
namespace {

MatmulEpilogue epilogue_from_name(const std::string& name) {
  for (MatmulEpilogue e :
       {MatmulEpilogue::None, MatmulEpilogue::Bias, MatmulEpilogue::Relu, MatmulEpilogue::ReluBias,
        MatmulEpilogue::GeluTanh, MatmulEpilogue::GeluTanhBias}) {
    if (matmul_epilogue_name(e) == name) return e;
  }
  MB_CHECK(false, "unknown forward epilogue '", name,
           "': one of none, bias, relu, relu_bias, gelu_tanh, gelu_tanh_bias");
  return MatmulEpilogue::None;
}

// x [M, K] · weight [N, K]ᵀ (+ bias, activation), as F.linear: weight is
// read transposed in place.
at::Tensor cublaslt_linear(const at::Tensor& x, const at::Tensor& weight,
                           const std::optional<at::Tensor>& bias, const std::string& epilogue) {
#ifdef MYBACKEND_WITH_CUDA
  cublaslt::GemmArgs args;
  args.mat1 = x;
  args.mat2 = weight.t();
  args.epilogue = epilogue_from_name(epilogue);
  if (bias) args.bias = *bias;
  MB_CHECK(epilogue_has_bias(args.epilogue) == bias.has_value(), "epilogue '", epilogue,
           "' and the bias argument disagree");
  cublaslt::GemmResult result;
  {
    py::gil_scoped_release release;
    result = cublaslt::gemm(args);
  }
  MB_CHECK(result.ok(), "cuBLASLt cannot run this product: ", result.problem);
  return result.out;
#else
  (void)x, (void)weight, (void)bias, (void)epilogue;
  MB_CHECK(false, "this build of mybackend has no CUDA support");
  return {};
#endif
}

}  // namespace

void bind_matmul(py::module_& m) {
  m.def(
      "cublaslt_cache_stats",
      [] {
        py::dict out;
        for (const auto& [name, count] : matmul_algo_cache_counters()) out[name.c_str()] = count;
        return out;
      },
      "Counters of the process's cuBLASLt algorithm cache: hits, misses, entries.");
  m.def(
      "cublaslt_timed_choices",
      [] {
        py::list out;
        for (const MatmulTimedChoice& choice : matmul_timed_choices()) {
          py::dict entry;
          entry["signature"] = choice.signature;
          py::list candidates;
          for (const auto& [config, ms] : choice.candidates)
            candidates.append(py::make_tuple(config, ms));
          entry["candidates"] = candidates;
          entry["chosen"] = choice.chosen;
          out.append(entry);
        }
        return out;
      },
      "The last timed cuBLASLt algorithm choices (mode max-autotune), oldest first: "
      "signature, candidates as (configuration, mean ms; negative: failed to launch), chosen "
      "index.");
  m.def(
      "cudnn_sdpa_cache_stats",
      [] {
        py::dict out;
        for (const auto& [name, count] : attention_plan_cache_counters()) out[name.c_str()] = count;
        return out;
      },
      "Counters of the cuDNN SDPA plan cache (attention groups): hits, misses, entries, "
      "unsupported (signatures cuDNN refused; they run the aten op).");
  m.def("_cublaslt_linear", &cublaslt_linear, py::arg("x"), py::arg("weight"),
        py::arg("bias") = py::none(), py::arg("epilogue") = "none",
        "Benchmark helper: F.linear (+ fused activation) as one bare cuBLASLt call.");
}

}  // namespace mybackend::bindings
