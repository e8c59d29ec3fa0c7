// Stage 8a: cast-group kernels (Note [Grouped casts] in fusion/cast_groups.h).
// Every emitted kernel is compiled with NVRTC to PTX for compute_90 through
// the compile pool; the PTX shows 16-byte accesses and a table read in place.
#include <gtest/gtest.h>

#if MYBACKEND_WITH_CODEGEN

#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "codegen/compile_pool.h"
#include "codegen/device/mb_cast_table.cuh"
#include "codegen/device_sources.h"
#include "codegen/emit.h"
#include "common/error.h"
#include "ptx_testing.h"
#include "spec/kernel_spec.h"

namespace mybackend {
namespace {

const std::vector<DType> kFloats = {DType::Float32, DType::BFloat16, DType::Float16,
                                    DType::Float64};

std::vector<CompileOutcome> compile_all(const std::vector<CastGroupSpec>& specs) {
  return compile_to_ptx(specs, emit_cast_group);
}

TEST(CodegenCastGroup, EveryFloatPairCompiles) {
  CastGroupSpec all;
  std::vector<CastGroupSpec> specs;
  for (DType from : kFloats) {
    for (DType to : kFloats) {
      if (from == to) continue;
      all.pairs.push_back({from, to});
      CastGroupSpec one;
      one.pairs = {{from, to}};
      specs.push_back(one);
    }
  }
  ASSERT_EQ(all.pairs.size(), 12u);
  specs.push_back(all);
  const auto outcomes = compile_all(specs);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(outcomes[i].ok());
    const std::string& ptx = outcomes[i].kernel->image;
    EXPECT_TRUE(has(ptx, k16ByteLoad)) << specs[i].to_string() << ptx;
    EXPECT_TRUE(has(ptx, k16ByteStore)) << specs[i].to_string() << ptx;
    // The table is read in place (ld.param at computed addresses), not
    // copied per thread into local memory: 3.7 KiB a thread would cost
    // more than the cast.
    EXPECT_FALSE(has(ptx, kLocalMemory)) << specs[i].to_string() << ptx;
  }
  // f32 -> bf16 rounds with the sm_80+ instruction, as the pointwise casts do.
  EXPECT_TRUE(has(outcomes[0].kernel->image, R"(cvt\.rn\.bf16\.f32)"));
}

TEST(CodegenCastGroup, EntryTakesTheTableByValue) {
  CastGroupSpec spec;
  spec.pairs = {{DType::Float32, DType::BFloat16}, {DType::BFloat16, DType::Float32}};
  const EmittedKernel kernel = emit_cast_group(spec);
  ASSERT_EQ(kernel.entries.size(), 1u);
  const KernelEntry& entry = kernel.entries[0];
  ASSERT_EQ(entry.params.size(), 1u);
  EXPECT_EQ(entry.params[0].kind, KernelParam::Kind::Bytes);
  EXPECT_EQ(entry.params[0].name, "table");
  EXPECT_EQ(entry.params[0].size_bytes(), sizeof(mb::CastTable));
  // Every driver takes 4 KiB of launch parameters.
  EXPECT_LE(sizeof(mb::CastTable), 4096u);
  EXPECT_EQ(entry.block_x, 256);
  EXPECT_EQ(entry.elements_per_thread, kCastElementsPerThread);
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx", static_cast<unsigned long long>(spec.hash()));
  EXPECT_EQ(entry.name, std::string("mb_cast_group_") + hash);
  EXPECT_EQ(spec.to_string(), "cast_group pairs=f32->bf16,bf16->f32 threads=256\n");
  EXPECT_EQ(kernel.source.find("// cast_group pairs=f32->bf16,bf16->f32"), 0u) << kernel.source;
  EXPECT_EQ(emit_cast_group(spec).source, kernel.source);
  // The order of the pairs is the table's numbering: another order is
  // another kernel.
  CastGroupSpec swapped = spec;
  std::swap(swapped.pairs[0], swapped.pairs[1]);
  EXPECT_NE(swapped.hash(), spec.hash());
}

TEST(CodegenCastGroup, ValidateExplainsRejections) {
  CastGroupSpec spec;
  EXPECT_NE(validate(spec).find("at least one"), std::string::npos);
  spec.pairs = {{DType::Float32, DType::Float32}};  // a copy (Note [Grouped layout copies])
  EXPECT_EQ(validate(spec), "");
  spec.pairs = {{DType::Int32, DType::Float32}};
  EXPECT_NE(validate(spec).find("floating"), std::string::npos);
  spec.pairs = {{DType::Float32, DType::Float16}, {DType::Float32, DType::Float16}};
  EXPECT_NE(validate(spec).find("twice"), std::string::npos);
  spec.pairs = {{DType::Float32, DType::Float16}};
  spec.threads = 100;
  EXPECT_NE(validate(spec).find("threads"), std::string::npos);
  spec.threads = 256;
  EXPECT_EQ(validate(spec), "");
  spec.pairs.clear();
  EXPECT_THROW(emit_cast_group(spec), InternalError);
}

// Note [Grouped layout copies]: a group with layout copies emits their path
// for every pair, copies that keep the dtype included; the others do not.
TEST(CodegenCastGroup, LayoutCopiesHaveTheirOwnPath) {
  CastGroupSpec spec;
  spec.pairs = {{DType::BFloat16, DType::BFloat16}, {DType::Float32, DType::BFloat16}};
  const std::string plain = emit_cast_group(spec).source;
  EXPECT_EQ(plain.find("layout_copy_entry"), std::string::npos) << plain;
  spec.layout_copies = true;
  EXPECT_EQ(spec.to_string(), "cast_group pairs=bf16->bf16,f32->bf16 threads=256 layout_copies\n");
  const EmittedKernel kernel = emit_cast_group(spec);
  EXPECT_NE(kernel.source.find("mb::layout_copy_entry<mb::bf16, mb::bf16"), std::string::npos)
      << kernel.source;
  const auto outcomes = compile_all({spec});
  ASSERT_TRUE(outcomes[0].ok());
  const std::string& ptx = outcomes[0].kernel->image;
  // Stores stay 16-byte vectors; the reads are strided elements.
  EXPECT_TRUE(has(ptx, k16ByteStore)) << ptx;
  EXPECT_FALSE(has(ptx, kLocalMemory)) << ptx;
}

}  // namespace
}  // namespace mybackend

#else  // !MYBACKEND_WITH_CODEGEN

TEST(CodegenCastGroup, SkippedWithoutCuda) {
  GTEST_SKIP() << "mybackend_codegen is built only when CUDA is enabled";
}

#endif
