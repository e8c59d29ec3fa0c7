#include "runtime/matmul_group.h"

#ifdef MYBACKEND_WITH_CUDA

#include <mutex>

#include "libs/cublaslt_gemm.h"

namespace mybackend {
namespace {

class MatmulGroup final : public GroupRunner {
 public:
  MatmulGroup(const Graph& graph, std::shared_ptr<const MatmulSpec> spec)
      : graph_(graph), spec_(std::move(spec)) {}

  bool run(ValueSlots& slots, const SymbolBindings& bindings,
           PlannedOutputs& outputs) const override {
    try {
      return launch(slots, bindings, outputs);
    } catch (const std::exception& e) {
      return fail(std::string("cuBLASLt failed: ") + e.what());
    }
  }

  std::string problem() const override {
    std::lock_guard<std::mutex> lock(mutex_);
    return problem_;
  }

  std::string description() const override {
    return "cublaslt: " + spec_->op.substr(6) + " epilogue " +
           std::string(cublaslt_epilogue_name(spec_->epilogue));
  }

  KernelKind kind() const override { return KernelKind::Matmul; }

 private:
  bool fail(const std::string& why) const {
    std::lock_guard<std::mutex> lock(mutex_);
    problem_ = why;
    return false;
  }

  // The IR sizes of `value` for this call's symbols; false when unbound.
  bool sizes_of(ValueId value, const SymbolBindings& bindings,
                std::vector<std::int64_t>& out) const {
    out.clear();
    for (const Dim& d : graph_.value(value).tensor.sizes) {
      std::optional<std::int64_t> size = d.evaluate(bindings);
      if (!size) return false;
      out.push_back(*size);
    }
    return true;
  }

  static const at::Tensor* tensor(const ValueSlots& slots, ValueId value) {
    const c10::IValue& v = slots[static_cast<std::size_t>(value)];
    if (!v.isTensor() || !v.toTensor().defined()) return nullptr;
    return &v.toTensor();
  }

  bool launch(ValueSlots& slots, const SymbolBindings& bindings, PlannedOutputs& outputs) const {
    const MatmulSpec& spec = *spec_;
    cublaslt::GemmArgs args;
    const at::Tensor* mat1 = tensor(slots, spec.mat1.value);
    const at::Tensor* mat2 = tensor(slots, spec.mat2.value);
    if (mat1 == nullptr || mat2 == nullptr) return fail("an operand is not a tensor");
    if (static_cast<DType>(mat1->scalar_type()) != spec.dtype)
      return fail("the operands' dtype is not the one planned for");
    // Note [Matmul operands are logical]: a planned transpose is a view here.
    args.mat1 = spec.mat1.transposed ? mat1->transpose(-2, -1) : *mat1;
    args.mat2 = spec.mat2.transposed ? mat2->transpose(-2, -1) : *mat2;
    if (spec.c >= 0) {
      const at::Tensor* c = tensor(slots, spec.c);
      if (c == nullptr) return fail("addmm's self is not a tensor");
      args.c = *c;
      args.beta = spec.beta;
    }
    if (spec.bias >= 0) {
      const at::Tensor* bias = tensor(slots, spec.bias);
      if (bias == nullptr) return fail("the bias is not a tensor");
      args.bias = *bias;
    }
    args.alpha = spec.alpha;
    args.epilogue = spec.epilogue;
    std::vector<std::int64_t> out_sizes, grad_sizes;
    if (!sizes_of(spec.output, bindings, out_sizes) ||
        (spec.bias_grad >= 0 && !sizes_of(spec.bias_grad, bindings, grad_sizes)))
      return fail("an output size depends on an unbound symbol");
    // cuBLASLt's wrapper allocates D itself: the planned storage goes back
    // to the caching allocator first (Note [Memory plan]).
    outputs.hand_back(spec.output);
    if (spec.bias_grad >= 0) outputs.hand_back(spec.bias_grad);
    cublaslt::GemmResult result = cublaslt::gemm(args);
    if (!result.ok()) return fail(result.problem);
    // Note [Views after the product]: the group's output may be a view of D.
    slots[static_cast<std::size_t>(spec.output)] =
        result.out.sizes() == c10::IntArrayRef(out_sizes) ? result.out : result.out.view(out_sizes);
    if (spec.bias_grad >= 0)
      slots[static_cast<std::size_t>(spec.bias_grad)] = result.bias_grad.view(grad_sizes);
    return true;
  }

  const Graph& graph_;
  std::shared_ptr<const MatmulSpec> spec_;
  mutable std::mutex mutex_;
  mutable std::string problem_;
};

}  // namespace

MatmulRunnerResult make_matmul_runner(const Graph& graph, std::shared_ptr<const MatmulSpec> spec) {
  MatmulRunnerResult result;
  result.runner = std::make_unique<MatmulGroup>(graph, std::move(spec));
  return result;
}

std::vector<std::pair<std::string, std::uint64_t>> matmul_algo_cache_counters() {
  const cublaslt::AlgoCacheStats stats = cublaslt::algo_cache().stats();
  return {{"hits", stats.hits}, {"misses", stats.misses}, {"entries", stats.entries}};
}

}  // namespace mybackend

#else  // !MYBACKEND_WITH_CUDA

namespace mybackend {

MatmulRunnerResult make_matmul_runner(const Graph&, std::shared_ptr<const MatmulSpec>) {
  return {nullptr, "this build of mybackend has no CUDA support"};
}

std::vector<std::pair<std::string, std::uint64_t>> matmul_algo_cache_counters() {
  return {{"hits", 0}, {"misses", 0}, {"entries", 0}};
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
