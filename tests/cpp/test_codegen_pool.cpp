// Stage 8a: max-pool kernels (Note [Pool groups] in fusion/pool_planner.h).
// Every variant (NCHW/NHWC, with and without a prologue, indices stored or
// not, forward and backward, fp32/bf16/fp16, 32- and 64-bit offsets, each
// read mode) emits and
// compiles with NVRTC to PTX for compute_90, as do the specs the planner
// makes; the PTX of the channels-last kernels shows 16-byte accesses and no
// local memory.
#include <gtest/gtest.h>

#if MYBACKEND_WITH_CODEGEN

#include <string>
#include <vector>

#include "codegen/emit.h"
#include "pool_graphs.h"
#include "ptx_testing.h"
#include "spec/kernel_spec.h"

namespace mybackend {
namespace {

std::vector<CompileOutcome> compile_all(const std::vector<PoolSpec>& specs) {
  return compile_to_ptx(specs, emit_pool);
}

// Inference batch norm + ReLU as the decomposition writes it:
// relu(round(f32(x) * scale + shift)) over [N, C, H, W] of `dtype`.
PointwiseSpec batch_norm_relu(DType dtype) {
  PointwiseSpec p;
  p.rank = 4;
  p.inputs = {TensorArg{dtype, IndexMode::Contiguous, 0},
              TensorArg{DType::Float32, IndexMode::Contiguous, 0},
              TensorArg{DType::Float32, IndexMode::Contiguous, 0}};
  p.instrs = {
      {PwOp::Load, dtype, {}, 0},          {PwOp::Cast, DType::Float32, {0}, -1},
      {PwOp::Load, DType::Float32, {}, 1}, {PwOp::Mul, DType::Float32, {1, 2}, -1},
      {PwOp::Load, DType::Float32, {}, 2}, {PwOp::Add, DType::Float32, {3, 4}, -1},
      {PwOp::Cast, dtype, {5}, -1},        {PwOp::Relu, dtype, {6}, -1},
  };
  p.outputs = {PwOutput{TensorArg{dtype, IndexMode::Contiguous, 0}, 7}};
  return p;
}

int widest_vector(DType dtype) { return 16 / dtype_size_bytes(dtype); }

// ResNet's stem pool: bf16 NHWC, 8 channels a thread, indices stored, with
// the batch norm + ReLU prologue read as `reads` says.
PoolSpec stem_spec(std::vector<PoolRead> reads) {
  PoolSpec s;
  s.dtype = DType::BFloat16;
  s.layout = PoolLayout::ChannelsLast;
  s.vector = 8;
  s.store_indices = true;
  s.prologue = batch_norm_relu(DType::BFloat16);
  s.reads = std::move(reads);
  return s;
}

TEST(CodegenPool, EveryVariantCompiles) {
  std::vector<PoolSpec> specs;
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    for (PoolLayout layout : {PoolLayout::Contiguous, PoolLayout::ChannelsLast}) {
      for (bool prologue : {false, true}) {
        for (bool indices : {false, true}) {
          for (bool index64 : {false, true}) {
            PoolSpec s;
            s.dtype = dtype;
            s.layout = layout;
            s.store_indices = indices;
            s.index64 = index64;
            // The planner's pair: vectors with 32-bit offsets, one channel with 64.
            s.vector = layout == PoolLayout::ChannelsLast && !index64 ? widest_vector(dtype) : 1;
            if (prologue) {
              s.prologue = batch_norm_relu(dtype);
              s.reads =
                  std::vector<PoolRead>{PoolRead::Window, PoolRead::Channel, PoolRead::Channel};
            } else {
              s.reads.assign(1, PoolRead::Window);
            }
            specs.push_back(s);
          }
        }
      }
    }
  }
  // Strided reads, of the input and of the per-channel operands.
  specs.push_back(stem_spec({PoolRead::Strided, PoolRead::Strided, PoolRead::Channel}));
  PoolSpec strided = stem_spec({PoolRead::Window, PoolRead::Strided, PoolRead::Strided});
  specs.push_back(strided);
  strided.vector = 1;
  strided.index64 = true;
  specs.push_back(strided);
  PoolSpec wide;  // f64, the lone input
  wide.dtype = DType::Float64;
  wide.layout = PoolLayout::ChannelsLast;
  wide.vector = 2;
  wide.store_indices = true;
  wide.reads.assign(1, PoolRead::Window);
  specs.push_back(wide);

  const auto outcomes = compile_all(specs);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(outcomes[i].ok());
    const std::string& ptx = outcomes[i].kernel->image;
    // Window values, best-so-far and indices stay in registers.
    EXPECT_FALSE(has(ptx, kLocalMemory)) << specs[i].to_string() << ptx;
    const PoolSpec& s = specs[i];
    if (s.vector * dtype_size_bytes(s.dtype) == 16 && s.reads[0] == PoolRead::Window) {
      EXPECT_TRUE(has(ptx, k16ByteLoad)) << s.to_string() << ptx;
      EXPECT_TRUE(has(ptx, k16ByteStore)) << s.to_string() << ptx;
    }
    // The window walk tests for NaN (a NaN wins), not only for greater.
    EXPECT_TRUE(has(ptx, R"(setp\.(nan|num)\.f(32|64))")) << s.to_string() << ptx;
  }
}

// The gradient sum of two branches over [N, C, OH, OW] of `dtype`, rounded
// to `dtype` as eager stores it.
PointwiseSpec gradient_sum(DType dtype) {
  PointwiseSpec p;
  p.rank = 4;
  p.inputs = {TensorArg{dtype, IndexMode::Contiguous, 0},
              TensorArg{dtype, IndexMode::Contiguous, 0}};
  p.instrs = {
      {PwOp::Load, dtype, {}, 0},
      {PwOp::Cast, DType::Float32, {0}, -1},
      {PwOp::Load, dtype, {}, 1},
      {PwOp::Cast, DType::Float32, {2}, -1},
      {PwOp::Add, DType::Float32, {1, 3}, -1},
      {PwOp::Cast, dtype, {4}, -1},
  };
  p.outputs = {PwOutput{TensorArg{dtype, IndexMode::Contiguous, 0}, 5}};
  return p;
}

TEST(CodegenPool, EveryBackwardVariantCompiles) {
  std::vector<PoolSpec> specs;
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    for (PoolLayout layout : {PoolLayout::Contiguous, PoolLayout::ChannelsLast}) {
      for (bool prologue : {false, true}) {
        for (bool index64 : {false, true}) {
          PoolSpec s;
          s.backward = true;
          s.dtype = dtype;
          s.layout = layout;
          s.index64 = index64;
          s.vector = layout == PoolLayout::ChannelsLast && !index64 ? widest_vector(dtype) : 1;
          if (prologue) {
            s.prologue = gradient_sum(dtype);
            s.reads = {PoolRead::Window, PoolRead::Strided};
          } else {
            s.reads.assign(1, PoolRead::Window);
          }
          specs.push_back(s);
        }
      }
    }
  }
  const auto outcomes = compile_all(specs);
  for (std::size_t i = 0; i < specs.size(); ++i) {
    ASSERT_TRUE(outcomes[i].ok());
    const PoolSpec& s = specs[i];
    const std::string& ptx = outcomes[i].kernel->image;
    EXPECT_FALSE(has(ptx, kLocalMemory)) << s.to_string() << ptx;
    // A gather: every thread writes its own elements, nothing atomic.
    EXPECT_FALSE(has(ptx, R"(\batom\.|\bred\.)")) << s.to_string() << ptx;
    if (s.vector * dtype_size_bytes(s.dtype) == 16) {
      // The indices are read as 16-byte vectors; the sums stored as one.
      EXPECT_TRUE(has(ptx, k16ByteLoad)) << s.to_string() << ptx;
      EXPECT_TRUE(has(ptx, k16ByteStore)) << s.to_string() << ptx;
    }
  }
}

TEST(CodegenPool, PlannedBackwardGroupsCompileToPtx) {
  std::vector<PoolSpec> specs;
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    for (bool channels_last : {false, true}) {
      for (bool sum_read : {false, true}) {
        BackwardOptions o;
        o.dtype = dtype;
        o.channels_last = o.indices_channels_last = channels_last;
        o.sum_read = sum_read;
        GraphBuilder b;
        stem_pool_backward(b, o);
        Planned p = plan(b);
        auto pools = p.groups(KernelKind::Pool);
        ASSERT_EQ(pools.size(), 1u) << p.plan.to_string();
        EXPECT_TRUE(pools[0]->get<PoolGroup>()->spec.backward);
        specs.push_back(pools[0]->get<PoolGroup>()->spec);
        specs.push_back(pools[0]->get<PoolGroup>()->general);
      }
    }
  }
  for (const CompileOutcome& outcome : compile_all(specs)) EXPECT_TRUE(outcome.ok());
}

TEST(CodegenPool, KernelTakesSizesAndWindowAsArguments) {
  const PoolSpec s = stem_spec({PoolRead::Window, PoolRead::Channel, PoolRead::Strided});
  const EmittedKernel k = emit_pool(s);
  ASSERT_EQ(k.entries.size(), 1u);
  std::vector<std::string> names;
  for (const KernelParam& p : k.entries[0].params) names.push_back(p.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "in0",      "in1",   "in2",   "out",        "indices",    "batch",     "channels",
                "in_h",     "in_w",  "out_h", "out_w",      "kernel_h",   "kernel_w",  "stride_h",
                "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w", "stride_in2"}));
  EXPECT_EQ(k.entries[0].elements_per_thread, 8);
  // No size, window or ceil_mode is baked into the source.
  EXPECT_EQ(k.source.find("ceil"), std::string::npos);
  EXPECT_NE(k.source.find("mb::max_pool2d<true, 8, I>"), std::string::npos) << k.source;
}

TEST(CodegenPool, PlannedGroupsCompileToPtx) {
  std::vector<StemOptions> graphs;
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
    for (bool channels_last : {false, true}) {
      StemOptions o;
      o.dtype = dtype;
      o.channels_last = channels_last;
      graphs.push_back(o);
      o.indices_read = true;
      o.sizes = {3, 12, 11, 7};
      graphs.push_back(o);
      o.batch_norm = false;
      o.dilation = {2, 2};
      graphs.push_back(o);
    }
  }
  std::vector<PoolSpec> specs;
  for (const StemOptions& o : graphs) {
    GraphBuilder b;
    stem_pool(b, o);
    Planned p = plan(b);
    auto pools = p.groups(KernelKind::Pool);
    ASSERT_EQ(pools.size(), 1u) << p.plan.to_string();
    specs.push_back(pools[0]->get<PoolGroup>()->spec);
    specs.push_back(pools[0]->get<PoolGroup>()->general);
  }
  compile_all(specs);
}

}  // namespace
}  // namespace mybackend

#else

TEST(CodegenPool, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }

#endif
