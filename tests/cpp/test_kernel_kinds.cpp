// Stage 9 (runtime): the kernel-kind table (Note [One row per kernel kind]
// in runtime/kernel_kinds.h). Every kind has a name, its engine's hooks and
// its counters, and the counters keep the stats() keys Python reads.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "common/error.h"
#include "runtime/kernel_kinds.h"

namespace mybackend {
namespace {

std::vector<KernelKind> all_kinds() {
  std::vector<KernelKind> kinds;
  for (std::size_t k = 0; k < kKernelKindCount; ++k) kinds.push_back(static_cast<KernelKind>(k));
  return kinds;
}

TEST(KernelKinds, EveryKindHasAUniqueName) {
  std::set<std::string> names;
  for (KernelKind kind : all_kinds()) {
    const std::string name(kernel_kind_name(kind));
    EXPECT_FALSE(name.empty());
    EXPECT_NE(name, "unknown");
    EXPECT_TRUE(names.insert(name).second) << "two kinds named " << name;
  }
}

TEST(KernelKinds, EveryRowIsItsKinds) {
  for (KernelKind kind : all_kinds()) {
    EXPECT_EQ(kernel_kind_traits(kind).kind, kind) << kernel_kind_name(kind);
  }
}

TEST(KernelKinds, EveryEngineKindHasCountersHooksAndARunner) {
  for (KernelKind kind : all_kinds()) {
    const KernelKindTraits& t = kernel_kind_traits(kind);
    SCOPED_TRACE(std::string(kernel_kind_name(kind)));
    ASSERT_NE(t.profiler_range, nullptr);
    EXPECT_EQ(std::string(t.profiler_range).rfind("mybackend::", 0), 0u);
    if (t.engine == Engine::Aten) {
      EXPECT_EQ(kind, KernelKind::AtenSequence);
      continue;
    }
    EXPECT_NE(t.run_counter, nullptr);
    EXPECT_NE(t.fallback_counter, nullptr);
    EXPECT_NE(t.outputs, nullptr);
    EXPECT_NE(t.reads, nullptr);
    if (t.engine == Engine::Library) {
      EXPECT_NE(t.make_runner, nullptr) << "a library kind needs its runner factory";
      EXPECT_EQ(t.build, nullptr);
    } else {
      EXPECT_EQ(t.make_runner, nullptr);
#ifdef MYBACKEND_WITH_CUDA
      EXPECT_NE(t.build, nullptr) << "a generated kind needs its kernel build";
      EXPECT_NE(t.source, nullptr);
#endif
    }
  }
}

// A group holding payload alternative `index` (a default-constructed one)
// is of kind `index`, and that kind's row reads it.
template <std::size_t index>
void check_payload() {
  using Spec =
      std::remove_const_t<typename std::variant_alternative_t<index, KernelPayload>::element_type>;
  const KernelKind kind = static_cast<KernelKind>(index);
  SCOPED_TRACE(std::string(kernel_kind_name(kind)));
  KernelGroup group;
  group.set(std::make_shared<Spec>());
  EXPECT_EQ(group.kind(), kind);
  EXPECT_NE(group.get<Spec>(), nullptr);
  EXPECT_NE(group.shared<Spec>(), nullptr);
  EXPECT_EQ(group.get<PointwiseGroup>() != nullptr, kind == KernelKind::Pointwise);
  EXPECT_TRUE(runs_on_engine(group));
  const KernelKindTraits& t = kernel_kind_traits(kind);
  EXPECT_NO_THROW(t.outputs(group));
  EXPECT_NO_THROW(t.reads(group));
}

template <std::size_t... index>
void check_payloads(std::index_sequence<index...>) {
  (check_payload<index + 1>(), ...);  // every alternative after std::monostate
}

// Note [One payload per group]: a group without a payload is an ATen
// sequence; one with a payload is of its payload's kind.
TEST(KernelKinds, AGroupsKindIsItsPayloads) {
  const KernelGroup aten;
  EXPECT_EQ(aten.kind(), KernelKind::AtenSequence);
  EXPECT_EQ(aten.get<PointwiseGroup>(), nullptr);
  EXPECT_FALSE(runs_on_engine(aten));
  EXPECT_EQ(generated_source(aten), "");
  check_payloads(std::make_index_sequence<kKernelKindCount - 1>());
}

TEST(KernelKinds, APayloadIsNeverNull) {
  KernelGroup group;
  EXPECT_THROW(group.set(std::shared_ptr<const PointwiseGroup>()), InternalError);
  EXPECT_EQ(group.kind(), KernelKind::AtenSequence);
}

// The stats() keys of the engines, as tests and benchmarks read them.
TEST(KernelKinds, CountersKeepTheirStatsKeys) {
  KindCounts runs{}, fallbacks{};
  for (std::size_t k = 0; k < kKernelKindCount; ++k) {
    runs[k] = static_cast<std::int64_t>(10 + k);
    fallbacks[k] = 1;
  }
  std::map<std::string, std::int64_t> named;
  for (const auto& [key, value] : engine_counters(runs, fallbacks)) {
    EXPECT_TRUE(named.emplace(key, value).second) << "key " << key << " twice";
  }
  auto runs_of = [&](KernelKind kind) { return runs[kind_index(kind)]; };
  const std::int64_t generated = runs_of(KernelKind::Pointwise) + runs_of(KernelKind::Reduction) +
                                 runs_of(KernelKind::Norm) + runs_of(KernelKind::CastGroup) +
                                 runs_of(KernelKind::Pool) + runs_of(KernelKind::Transpose);
  const std::map<std::string, std::int64_t> expected = {
      {"generated_kernels_run", generated},
      {"generated_pointwise_run", runs_of(KernelKind::Pointwise)},
      {"generated_reductions_run", runs_of(KernelKind::Reduction)},
      {"generated_norms_run", runs_of(KernelKind::Norm)},
      {"generated_cast_groups_run", runs_of(KernelKind::CastGroup)},
      {"generated_pools_run", runs_of(KernelKind::Pool)},
      {"generated_transposes_run", runs_of(KernelKind::Transpose)},
      {"generated_kernel_fallbacks", 6},
      {"matmul_groups_run", runs_of(KernelKind::Matmul)},
      {"matmul_fallbacks", 1},
      {"attention_groups_run", runs_of(KernelKind::Attention)},
      {"attention_fallbacks", 1},
      {"conv_groups_run", runs_of(KernelKind::Conv)},
      {"conv_fallbacks", 1},
  };
  EXPECT_EQ(named, expected);
}

}  // namespace
}  // namespace mybackend
