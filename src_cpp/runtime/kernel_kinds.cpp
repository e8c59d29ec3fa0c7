#include "runtime/kernel_kinds.h"

#include <exception>
#include <memory>

#include "common/error.h"
#include "runtime/libraries/attention_group.h"
#include "runtime/libraries/conv_group.h"
#include "runtime/libraries/matmul_group.h"

#ifdef MYBACKEND_WITH_CUDA
#include "codegen/emit.h"
#include "runtime/generated/kernel_launch.h"
#endif

namespace mybackend {
namespace {

// The payload of a group of Spec's kind: a row's hooks are called only for
// groups of the row's kind (Note [One payload per group]).
template <class Spec>
std::shared_ptr<const Spec> payload(const KernelGroup& group) {
  std::shared_ptr<const Spec> held = group.shared<Spec>();
  MB_ASSERT(held != nullptr, "a ", kernel_kind_name(group.kind()),
            " group reached a row for another kind's payload");
  return held;
}

template <class Spec, auto Make>
RunnerResult make_with(const Graph& graph, const KernelGroup& group) {
  return Make(graph, payload<Spec>(group));
}

#ifdef MYBACKEND_WITH_CUDA
template <class Spec, auto Build>
KernelBuild build_with(const Graph& graph, const KernelGroup& group) {
  return Build(graph, payload<Spec>(group));
}
template <class Spec, auto Emit>
std::string source_with(const KernelGroup& group) {
  return Emit(payload<Spec>(group)->spec).source;
}
#define MB_BUILD(Spec, build) (&build_with<Spec, &build>)
#define MB_SOURCE(Spec, emit) (&source_with<Spec, &emit>)
#else
#define MB_BUILD(Spec, build) nullptr  // no generated kernels without CUDA
#define MB_SOURCE(Spec, emit) nullptr
#endif

// The pointwise, reduction and cast groups write their `outputs`.
template <class Spec>
std::vector<ValueId> outputs_of(const KernelGroup& g) {
  return payload<Spec>(g)->outputs;
}

// Note [Row epilogues]: a reduction also writes its row epilogue's outputs.
std::vector<ValueId> reduction_outputs(const KernelGroup& g) {
  const std::shared_ptr<const ReductionGroup> r = payload<ReductionGroup>(g);
  std::vector<ValueId> out = r->outputs;
  out.insert(out.end(), r->row_outputs.begin(), r->row_outputs.end());
  return out;
}

std::vector<ValueId> norm_outputs(const KernelGroup& g) {
  std::vector<ValueId> out;
  for (const auto& [name, value] : payload<NormGroup>(g)->outputs)
    if (value >= 0) out.push_back(value);
  return out;
}

std::vector<ValueId> pool_outputs(const KernelGroup& g) {
  const std::shared_ptr<const PoolGroup> pool = payload<PoolGroup>(g);
  std::vector<ValueId> out{pool->output};
  if (pool->spec.store_indices) out.push_back(pool->indices);
  return out;
}

std::vector<ValueId> transpose_outputs(const KernelGroup& g) {
  return {payload<TransposeGroup>(g)->output};
}

std::vector<ValueId> matmul_outputs(const KernelGroup& g) {
  const std::shared_ptr<const MatmulSpec> matmul = payload<MatmulSpec>(g);
  std::vector<ValueId> out{matmul->output};
  if (matmul->bias_grad >= 0) out.push_back(matmul->bias_grad);
  return out;
}

// cuDNN allocates its outputs per call with layouts chosen at run time
// (Note [Conv layout]): no planned buffers.
std::vector<ValueId> no_values(const KernelGroup&) { return {}; }

// The library kinds read their spec's inputs().
template <class Spec>
std::vector<ValueId> inputs_of(const KernelGroup& g) {
  return payload<Spec>(g)->inputs();
}

constexpr const char* kGeneratedFallbacks = "generated_kernel_fallbacks";

using K = KernelKind;
using E = Engine;

// Note [One row per kernel kind]: in KernelKind order (checked below).
constexpr KernelKindTraits kTable[] = {
    {K::AtenSequence, E::Aten, "mybackend::aten_sequence", nullptr, nullptr, nullptr, false,
     nullptr, nullptr, nullptr, nullptr},
    {K::Pointwise, E::Generated, "mybackend::pointwise", "generated_pointwise_run",
     kGeneratedFallbacks, &outputs_of<PointwiseGroup>, false, &no_values, nullptr,
     MB_BUILD(PointwiseGroup, pointwise_build), MB_SOURCE(PointwiseGroup, emit_pointwise)},
    {K::Reduction, E::Generated, "mybackend::reduction", "generated_reductions_run",
     kGeneratedFallbacks, &reduction_outputs, false, &no_values, nullptr,
     MB_BUILD(ReductionGroup, reduction_build), MB_SOURCE(ReductionGroup, emit_reduction)},
    {K::Norm, E::Generated, "mybackend::norm", "generated_norms_run", kGeneratedFallbacks,
     &norm_outputs, false, &no_values, nullptr, MB_BUILD(NormGroup, norm_build),
     MB_SOURCE(NormGroup, emit_norm)},
    {K::Matmul, E::Library, "mybackend::matmul", "matmul_groups_run", "matmul_fallbacks",
     &matmul_outputs, true, &inputs_of<MatmulSpec>, &make_with<MatmulSpec, &make_matmul_runner>,
     nullptr, nullptr},
    {K::Attention, E::Library, "mybackend::attention", "attention_groups_run",
     "attention_fallbacks", &no_values, false, &inputs_of<AttentionSpec>,
     &make_with<AttentionSpec, &make_attention_runner>, nullptr, nullptr},
    {K::Conv, E::Library, "mybackend::conv", "conv_groups_run", "conv_fallbacks", &no_values, false,
     &inputs_of<ConvSpec>, &make_with<ConvSpec, &make_conv_runner>, nullptr, nullptr,
     /*timed_against_aten=*/true},
    {K::CastGroup, E::Generated, "mybackend::cast_group", "generated_cast_groups_run",
     kGeneratedFallbacks, &outputs_of<CastGroup>, false, &no_values, nullptr,
     MB_BUILD(CastGroup, cast_group_build), MB_SOURCE(CastGroup, emit_cast_group),
     /*timed_against_aten=*/true},
    {K::Pool, E::Generated, "mybackend::pool", "generated_pools_run", kGeneratedFallbacks,
     &pool_outputs, false, &no_values, nullptr, MB_BUILD(PoolGroup, pool_build),
     MB_SOURCE(PoolGroup, emit_pool)},
    {K::Transpose, E::Generated, "mybackend::transpose", "generated_transposes_run",
     kGeneratedFallbacks, &transpose_outputs, false, &no_values, nullptr,
     MB_BUILD(TransposeGroup, transpose_build), MB_SOURCE(TransposeGroup, emit_transpose),
     /*timed_against_aten=*/true},
};
static_assert(sizeof(kTable) / sizeof(kTable[0]) == kKernelKindCount,
              "every kernel kind needs a row");

constexpr bool rows_in_kind_order() {
  for (std::size_t k = 0; k < kKernelKindCount; ++k)
    if (kind_index(kTable[k].kind) != k) return false;
  return true;
}
static_assert(rows_in_kind_order(), "the rows must follow KernelKind's order");

#undef MB_BUILD
#undef MB_SOURCE

}  // namespace

const KernelKindTraits& kernel_kind_traits(KernelKind kind) {
  const std::size_t index = kind_index(kind);
  MB_ASSERT(index < kKernelKindCount, "kernel kind ", index, " is not in the kernel-kind table");
  return kTable[index];
}

// A group of an engine kind always has its payload (Note [One payload per
// group]): its kind alone says whether an engine runs it.
bool runs_on_engine(const KernelGroup& group) {
  return kernel_kind_traits(group.kind()).engine != Engine::Aten;
}

std::string generated_source(const KernelGroup& group) {
  const KernelKindTraits& traits = kernel_kind_traits(group.kind());
  if (traits.source == nullptr) return {};
  try {
    return traits.source(group);
  } catch (const std::exception& e) {
    return std::string("(source unavailable: ") + e.what() + ")";
  }
}

std::vector<GeneratedGroup> generated_groups(const FusionPlan& fusion) {
  std::vector<GeneratedGroup> out;
  for (const PartitionPlan& plan : fusion.partitions) {
    for (std::size_t g = 0; g < plan.groups.size(); ++g) {
      const KernelGroup& group = plan.groups[g];
      const KernelKindTraits& traits = kernel_kind_traits(group.kind());
      if (traits.engine != Engine::Generated) continue;
      out.push_back(GeneratedGroup{group, traits.build, plan.partition, static_cast<int>(g)});
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::int64_t>> engine_counters(const KindCounts& runs,
                                                                  const KindCounts& fallbacks) {
  std::vector<std::pair<std::string, std::int64_t>> out{{"generated_kernels_run", 0}};
  auto add = [&out](const char* key, std::int64_t count) {
    for (auto& [name, value] : out) {
      if (name == key) {
        value += count;
        return;
      }
    }
    out.emplace_back(key, count);
  };
  for (const KernelKindTraits& row : kTable) {
    if (row.engine == Engine::Aten) continue;
    const std::size_t k = kind_index(row.kind);
    if (row.engine == Engine::Generated) out[0].second += runs[k];
    add(row.run_counter, runs[k]);
    add(row.fallback_counter, fallbacks[k]);
  }
  return out;
}

}  // namespace mybackend
