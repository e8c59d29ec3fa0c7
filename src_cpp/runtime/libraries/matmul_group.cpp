#include "runtime/libraries/matmul_group.h"

#ifdef MYBACKEND_WITH_CUDA

#include "libs/cublaslt_gemm.h"
#include "runtime/tensor_alias.h"

namespace mybackend {
namespace {

class MatmulGroup final : public LibraryGroup {
 public:
  MatmulGroup(const Graph& graph, std::shared_ptr<const MatmulSpec> spec)
      : LibraryGroup(graph, "cuBLASLt", {spec->output, spec->bias_grad}), spec_(std::move(spec)) {}

  std::string description() const override {
    return "cublaslt: " + spec_->op.substr(6) + " epilogue " +
           std::string(cublaslt_epilogue_name(spec_->epilogue));
  }

  KernelKind kind() const override { return KernelKind::Matmul; }

 private:
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

  bool launch(ValueSlots& slots, const SymbolBindings& bindings) const override {
    const MatmulSpec& spec = *spec_;
    cublaslt::GemmArgs args;
    const at::Tensor* mat1 = tensor(slots, spec.mat1.value);
    const at::Tensor* mat2 = tensor(slots, spec.mat2.value);
    if (mat1 == nullptr || mat2 == nullptr) return fail("an operand is not a tensor");
    if (static_cast<DType>(mat1->scalar_type()) != spec.dtype)
      return fail("the operands' dtype is not the one planned for");
    // Note [Matmul operands are logical]: a planned transpose is a view here,
    // made without the dispatcher (Note [Aliases without the dispatcher]).
    if ((spec.mat1.transposed && mat1->dim() < 2) || (spec.mat2.transposed && mat2->dim() < 2))
      return fail("a transposed operand has fewer than two dims");
    args.mat1 = spec.mat1.transposed ? transposed_alias(*mat1) : *mat1;
    args.mat2 = spec.mat2.transposed ? transposed_alias(*mat2) : *mat2;
    if (spec.c >= 0) {
      const at::Tensor* c = tensor(slots, spec.c);
      if (c == nullptr) return fail("addmm's self is not a tensor");
      // Note [Residual sums in the product]: the residual has the output's
      // shape, D's elements in the same order; a view when it is contiguous.
      if (spec.c_is_residual) {
        const std::int64_t shape[] = {args.mat1.size(0), args.mat2.size(1)};
        args.c = c->is_contiguous() && c->numel() == shape[0] * shape[1] ? viewed_alias(*c, shape)
                                                                         : c->reshape(shape);
      } else {
        args.c = *c;
      }
      args.beta = spec.beta;
    }
    if (spec.bias >= 0) {
      const at::Tensor* bias = tensor(slots, spec.bias);
      if (bias == nullptr) return fail("the bias is not a tensor");
      args.bias = *bias;
    }
    args.alpha = spec.alpha;
    args.epilogue = spec.epilogue;
    args.autotune = spec.autotune;
    args.out_dtype = static_cast<c10::ScalarType>(spec.out_dtype);
    args.plans = &plans_;
    std::vector<std::int64_t> out_sizes, grad_sizes;
    if (!sizes_of(spec.output, bindings, out_sizes) ||
        (spec.bias_grad >= 0 && !sizes_of(spec.bias_grad, bindings, grad_sizes)))
      return fail("an output size depends on an unbound symbol");
    cublaslt::GemmResult result = cublaslt::gemm(args);
    if (!result.ok()) return fail(result.problem);
    // Note [Views after the product]: the group's output may be a view of D.
    // Both are fresh and contiguous (Note [Aliases without the dispatcher]).
    slots[static_cast<std::size_t>(spec.output)] = viewed_alias(result.out, out_sizes);
    if (spec.bias_grad >= 0)
      slots[static_cast<std::size_t>(spec.bias_grad)] = viewed_alias(result.bias_grad, grad_sizes);
    return true;
  }

  std::shared_ptr<const MatmulSpec> spec_;
  mutable cublaslt::ProductPlans plans_;  // Note [Prepared products]
};

}  // namespace

RunnerResult make_matmul_runner(const Graph& graph, std::shared_ptr<const MatmulSpec> spec) {
  return {std::make_unique<MatmulGroup>(graph, std::move(spec)), ""};
}

std::vector<std::pair<std::string, std::uint64_t>> matmul_algo_cache_counters() {
  const cublaslt::AlgoCacheStats stats = cublaslt::algo_cache().stats();
  return {{"hits", stats.hits},
          {"misses", stats.misses},
          {"entries", stats.entries},
          {"timed", stats.timed},
          {"reused", stats.reused}};
}

std::vector<MatmulTimedChoice> matmul_timed_choices() {
  std::vector<MatmulTimedChoice> out;
  for (const cublaslt::TimedChoiceRecord& r : cublaslt::algo_cache().timed_choices()) {
    MatmulTimedChoice choice{r.signature, {}, r.chosen};
    for (std::size_t k = 0; k < r.candidates.size(); ++k)
      choice.candidates.emplace_back(r.candidates[k], r.ms[k]);
    out.push_back(std::move(choice));
  }
  return out;
}

}  // namespace mybackend

#else  // !MYBACKEND_WITH_CUDA

namespace mybackend {

RunnerResult make_matmul_runner(const Graph&, std::shared_ptr<const MatmulSpec>) {
  return {nullptr, "this build of mybackend has no CUDA support"};
}

std::vector<std::pair<std::string, std::uint64_t>> matmul_algo_cache_counters() {
  return {{"hits", 0}, {"misses", 0}, {"entries", 0}, {"timed", 0}, {"reused", 0}};
}

std::vector<MatmulTimedChoice> matmul_timed_choices() { return {}; }

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
