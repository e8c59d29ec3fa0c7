#include "runtime/kernel_kinds.h"

#include <exception>

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

template <auto Field>
bool has(const KernelGroup& group) {
  return static_cast<bool>(group.*Field);
}

template <auto Field, auto Make>
RunnerResult make_with(const Graph& graph, const KernelGroup& group) {
  return Make(graph, group.*Field);
}

#ifdef MYBACKEND_WITH_CUDA
template <auto Field, auto Build>
KernelBuild build_with(const Graph& graph, const KernelGroup& group) {
  return Build(graph, group.*Field);
}
template <auto Field, auto Emit>
std::string source_with(const KernelGroup& group) {
  return Emit((group.*Field)->spec).source;
}
#define MB_BUILD(field, build) (&build_with<&KernelGroup::field, &build>)
#define MB_SOURCE(field, emit) (&source_with<&KernelGroup::field, &emit>)
#else
#define MB_BUILD(field, build) nullptr  // no generated kernels without CUDA
#define MB_SOURCE(field, emit) nullptr
#endif

std::vector<ValueId> pointwise_outputs(const KernelGroup& g) { return g.pointwise->outputs; }
std::vector<ValueId> reduction_outputs(const KernelGroup& g) { return g.reduction->outputs; }
std::vector<ValueId> cast_group_outputs(const KernelGroup& g) { return g.casts->outputs; }

std::vector<ValueId> norm_outputs(const KernelGroup& g) {
  std::vector<ValueId> out;
  for (const auto& [name, value] : g.norm->outputs)
    if (value >= 0) out.push_back(value);
  return out;
}

std::vector<ValueId> pool_outputs(const KernelGroup& g) {
  std::vector<ValueId> out{g.pool->output};
  if (g.pool->spec.store_indices) out.push_back(g.pool->indices);
  return out;
}

std::vector<ValueId> matmul_outputs(const KernelGroup& g) {
  std::vector<ValueId> out{g.matmul->output};
  if (g.matmul->bias_grad >= 0) out.push_back(g.matmul->bias_grad);
  return out;
}

// cuDNN allocates its outputs per call with layouts chosen at run time
// (Note [Conv layout]): no planned buffers.
std::vector<ValueId> no_values(const KernelGroup&) { return {}; }

std::vector<ValueId> matmul_reads(const KernelGroup& g) { return g.matmul->inputs(); }
std::vector<ValueId> attention_reads(const KernelGroup& g) { return g.attention->inputs(); }
std::vector<ValueId> conv_reads(const KernelGroup& g) { return g.conv->inputs(); }

constexpr const char* kGeneratedFallbacks = "generated_kernel_fallbacks";

using K = KernelKind;
using E = Engine;

// Note [One row per kernel kind]: in KernelKind order (checked below).
constexpr KernelKindTraits kTable[] = {
    {K::AtenSequence, E::Aten, "mybackend::aten_sequence", nullptr, nullptr, nullptr, nullptr,
     false, nullptr, nullptr, nullptr, nullptr},
    {K::Pointwise, E::Generated, "mybackend::pointwise", "generated_pointwise_run",
     kGeneratedFallbacks, &has<&KernelGroup::pointwise>, &pointwise_outputs, false, &no_values,
     nullptr, MB_BUILD(pointwise, pointwise_build), MB_SOURCE(pointwise, emit_pointwise)},
    {K::Reduction, E::Generated, "mybackend::reduction", "generated_reductions_run",
     kGeneratedFallbacks, &has<&KernelGroup::reduction>, &reduction_outputs, false, &no_values,
     nullptr, MB_BUILD(reduction, reduction_build), MB_SOURCE(reduction, emit_reduction)},
    {K::Norm, E::Generated, "mybackend::norm", "generated_norms_run", kGeneratedFallbacks,
     &has<&KernelGroup::norm>, &norm_outputs, false, &no_values, nullptr,
     MB_BUILD(norm, norm_build), MB_SOURCE(norm, emit_norm)},
    {K::Matmul, E::Library, "mybackend::matmul", "matmul_groups_run", "matmul_fallbacks",
     &has<&KernelGroup::matmul>, &matmul_outputs, true, &matmul_reads,
     &make_with<&KernelGroup::matmul, &make_matmul_runner>, nullptr, nullptr},
    {K::Attention, E::Library, "mybackend::attention", "attention_groups_run",
     "attention_fallbacks", &has<&KernelGroup::attention>, &no_values, false, &attention_reads,
     &make_with<&KernelGroup::attention, &make_attention_runner>, nullptr, nullptr},
    {K::Conv, E::Library, "mybackend::conv", "conv_groups_run", "conv_fallbacks",
     &has<&KernelGroup::conv>, &no_values, false, &conv_reads,
     &make_with<&KernelGroup::conv, &make_conv_runner>, nullptr, nullptr},
    {K::CastGroup, E::Generated, "mybackend::cast_group", "generated_cast_groups_run",
     kGeneratedFallbacks, &has<&KernelGroup::casts>, &cast_group_outputs, false, &no_values,
     nullptr, MB_BUILD(casts, cast_group_build), MB_SOURCE(casts, emit_cast_group)},
    {K::Pool, E::Generated, "mybackend::pool", "generated_pools_run", kGeneratedFallbacks,
     &has<&KernelGroup::pool>, &pool_outputs, false, &no_values, nullptr,
     MB_BUILD(pool, pool_build), MB_SOURCE(pool, emit_pool)},
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

bool runs_on_engine(const KernelGroup& group) {
  const KernelKindTraits& traits = kernel_kind_traits(group.kind);
  return traits.engine != Engine::Aten && traits.has_engine_spec(group);
}

std::string generated_source(const KernelGroup& group) {
  const KernelKindTraits& traits = kernel_kind_traits(group.kind);
  if (traits.source == nullptr || !traits.has_engine_spec(group)) return {};
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
      const KernelKindTraits& traits = kernel_kind_traits(group.kind);
      if (traits.engine != Engine::Generated || !traits.has_engine_spec(group)) continue;
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
