// Stage 8a: reduction and normalization specs. Every emitted kernel is
// compiled with NVRTC to PTX for compute_90 through the compile pool.
#include <gtest/gtest.h>

#if MYBACKEND_WITH_CODEGEN

#include <algorithm>
#include <regex>
#include <string>
#include <vector>

#include "codegen/compile_pool.h"
#include "codegen/device_sources.h"
#include "codegen/emit.h"
#include "codegen/emit_common.h"
#include "codegen/launch_tuning.h"
#include "common/error.h"
#include "ptx_testing.h"
#include "spec/kernel_spec.h"

namespace mybackend {
namespace {

struct Case {
  std::string label;
  EmittedKernel kernel;
};

std::vector<CompileOutcome> compile_all(const std::vector<Case>& cases) {
  NvrtcOptions options;
  options.target = GpuTarget::parse("compute_90");
  std::vector<CompileRequest> requests;
  for (const auto& c : cases) requests.push_back(compile_request(c.kernel, options));
  std::vector<CompileOutcome> outcomes = CompilePool().compile(requests);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_TRUE(outcomes[i].ok()) << cases[i].label << ": " << outcomes[i].error << "\n"
                                  << cases[i].kernel.source;
  }
  return outcomes;
}

bool has_16_byte_load(const std::string& ptx) {
  return std::regex_search(ptx, std::regex(R"(ld\.global(\.nc)?\.(v4\.[bfsu]32|v2\.[bfsu]64)\s)"));
}

std::string name(DType d) { return std::string(dtype_short_name(d)); }

// ---- reductions -------------------------------------------------------------

const std::vector<ReduceOp> kReduceOps = {ReduceOp::Sum,  ReduceOp::Mean,   ReduceOp::Amax,
                                          ReduceOp::Amin, ReduceOp::Prod,   ReduceOp::Var,
                                          ReduceOp::Std,  ReduceOp::Argmax, ReduceOp::Argmin};

bool floating_only(ReduceOp op) {
  return op == ReduceOp::Mean || op == ReduceOp::Var || op == ReduceOp::Std;
}

DType result_dtype(ReduceOp op, DType in) {
  if (op == ReduceOp::Argmax || op == ReduceOp::Argmin) return DType::Int64;
  if (!is_floating(in) && (op == ReduceOp::Sum || op == ReduceOp::Prod)) return DType::Int64;
  return in;
}

ReductionSpec plain_reduction(ReduceOp op, DType in, ReduceAxis axis, ReduceStrategy strategy,
                              IndexMode mode) {
  ReductionSpec spec;
  spec.op = op;
  spec.axis = axis;
  spec.strategy = strategy;
  spec.input_rank = axis == ReduceAxis::Outer ? 3 : 2;
  spec.output_rank = axis == ReduceAxis::Outer ? 2 : 1;
  spec.input = TensorArg{in, mode, mode == IndexMode::Strided ? spec.input_rank : 0};
  spec.out_dtype = result_dtype(op, in);
  spec.output = TensorArg{spec.out_dtype, IndexMode::Contiguous, 0};
  return spec;
}

TEST(CodegenReduction, EveryOpAxisAndStrategyCompiles) {
  const std::vector<DType> floats = {DType::Float32, DType::Float16, DType::BFloat16,
                                     DType::Float64};
  const std::vector<DType> numeric = {DType::Float32, DType::Int32, DType::BFloat16, DType::Int64,
                                      DType::Float16, DType::UInt8, DType::Float64,  DType::Int8};
  struct Shape {
    ReduceAxis axis;
    ReduceStrategy strategy;
    IndexMode mode;
  };
  const std::vector<Shape> shapes = {
      {ReduceAxis::Inner, ReduceStrategy::BlockPerRow, IndexMode::Aligned},
      {ReduceAxis::Inner, ReduceStrategy::WarpPerRow, IndexMode::Strided},
      {ReduceAxis::Outer, ReduceStrategy::BlockPerRow, IndexMode::Contiguous}};
  std::vector<Case> cases;
  std::size_t n = 0;
  for (ReduceOp op : kReduceOps) {
    for (const Shape& shape : shapes) {
      const auto& dtypes = floating_only(op) ? floats : numeric;
      const DType in = dtypes[n++ % dtypes.size()];
      ReductionSpec spec = plain_reduction(op, in, shape.axis, shape.strategy, shape.mode);
      spec.index64 = n % 4 == 0;
      ASSERT_EQ(validate(spec), "") << spec.to_string();
      cases.push_back({std::string(reduce_op_name(op)) + "/" +
                           std::string(reduce_axis_name(shape.axis)) + "/" +
                           std::string(reduce_strategy_name(shape.strategy)) + "/" + name(in),
                       emit_reduction(spec)});
    }
  }
  compile_all(cases);
}

// sum((a * b) as f32 over rows), then out0 = s * rsqrt(scale) + bias (f32)
// and out1 = that as bf16: a prologue with casts and an epilogue with an
// extra tensor, an argument scalar and two outputs.
ReductionSpec fused_reduction(ReduceAxis axis, IndexMode mode) {
  ReductionSpec spec;
  spec.op = ReduceOp::Sum;
  spec.axis = axis;
  spec.input_rank = axis == ReduceAxis::Outer ? 3 : 2;
  spec.output_rank = axis == ReduceAxis::Outer ? 2 : 1;
  PointwiseSpec pro;
  pro.rank = spec.input_rank;
  // When strided, b is broadcast over all but the last dim (rank 1).
  pro.inputs = {{DType::Float16, mode, mode == IndexMode::Strided ? spec.input_rank : 0},
                {DType::Float16, mode, mode == IndexMode::Strided ? 1 : 0}};
  pro.instrs = {{PwOp::Load, DType::Float16, {}, 0},
                {PwOp::Cast, DType::Float32, {0}, -1},
                {PwOp::Load, DType::Float16, {}, 1},
                {PwOp::Cast, DType::Float32, {2}, -1},
                {PwOp::Mul, DType::Float32, {1, 3}, -1}};
  pro.outputs = {{{DType::Float32, IndexMode::Contiguous, 0}, 4}};
  spec.prologue = pro;
  spec.out_dtype = DType::Float32;
  PointwiseSpec epi;
  epi.rank = spec.output_rank;
  epi.inputs = {{DType::Float32, IndexMode::Contiguous, 0},
                {DType::Float32, IndexMode::Strided, 1}};
  epi.scalars = {PwScalar{DType::Float32, true, 0, 0}};
  epi.instrs = {{PwOp::Load, DType::Float32, {}, 0},    {PwOp::Scalar, DType::Float32, {}, 0},
                {PwOp::Rsqrt, DType::Float32, {1}, -1}, {PwOp::Mul, DType::Float32, {0, 2}, -1},
                {PwOp::Load, DType::Float32, {}, 1},    {PwOp::Add, DType::Float32, {3, 4}, -1},
                {PwOp::Cast, DType::BFloat16, {5}, -1}};
  epi.outputs = {{{DType::Float32, IndexMode::Contiguous, 0}, 5},
                 {{DType::BFloat16, IndexMode::Strided, 1}, 6}};
  spec.epilogue = epi;
  return spec;
}

TEST(CodegenReduction, PrologueAndEpilogueFuse) {
  std::vector<Case> cases;
  for (ReduceAxis axis : {ReduceAxis::Inner, ReduceAxis::Outer}) {
    for (IndexMode mode : {IndexMode::Aligned, IndexMode::Strided}) {
      const ReductionSpec spec = fused_reduction(axis, mode);
      ASSERT_EQ(validate(spec), "") << spec.to_string();
      cases.push_back(
          {std::string(reduce_axis_name(axis)) + "/" + std::string(index_mode_name(mode)),
           emit_reduction(spec)});
    }
  }
  const auto outcomes = compile_all(cases);
  ASSERT_TRUE(outcomes[0].ok());
  // Inner, every input aligned: the row loop reads 16 bytes at a time.
  EXPECT_TRUE(has_16_byte_load(outcomes[0].kernel->image)) << outcomes[0].kernel->image;

  std::vector<std::string> params;
  for (const auto& p : cases[3].kernel.entries[0].params) params.push_back(p.name);
  const std::vector<std::string> expected = {"in0",       "in1",         "ein1",       "out0",
                                             "out1",      "escalar0",    "outer",      "n",
                                             "inner",     "in_shape",    "stride_in0", "stride_in1",
                                             "out_shape", "stride_ein1", "stride_out1"};
  EXPECT_EQ(params, expected);
  EXPECT_EQ(cases[3].kernel.entries[0].block_x, 32);
  EXPECT_EQ(cases[3].kernel.entries[0].block_y, 8);
  // Note [Split outer reductions]: Outer kernels carry the split pair,
  // with the same parameters plus the workspace and the chunk length (they
  // compiled above, with the rest of the module); so do Inner block-per-row
  // ones (Note [Split inner reductions], tested in SplitInnerEntries).
  ASSERT_EQ(cases[3].kernel.entries.size(), 4u);
  EXPECT_EQ(cases[0].kernel.entries.size(), 3u);
  // Note [Narrow outer tiles]: Outer kernels also carry entry 3, entry 0's
  // parameters over narrow tiles.
  EXPECT_EQ(cases[3].kernel.entries[3].name, cases[3].kernel.entries[0].name + "_narrow");
  std::vector<std::string> narrow_params;
  for (const auto& p : cases[3].kernel.entries[3].params) narrow_params.push_back(p.name);
  EXPECT_EQ(narrow_params, expected);
  EXPECT_EQ(cases[3].kernel.entries[3].block_x, 32);
  EXPECT_EQ(cases[3].kernel.entries[3].block_y, 32);
  for (std::size_t e : {1u, 2u}) {
    const KernelEntry& entry = cases[3].kernel.entries[e];
    EXPECT_EQ(entry.name, cases[3].kernel.entries[0].name + (e == 1 ? "_partials" : "_totals"));
    std::vector<std::string> split_params;
    for (const auto& p : entry.params) split_params.push_back(p.name);
    std::vector<std::string> want = expected;
    want.push_back("partials");
    want.push_back("chunk");
    EXPECT_EQ(split_params, want);
  }
  for (std::size_t c : {2u, 3u}) EXPECT_TRUE(outcomes[c].ok()) << outcomes[c].error;
}

// Note [Periodic operands in reductions]: x (dense) times b, read at
// i mod period, reduced; the epilogue adds e, read in rows. No shape, no
// strides, no run-time division: the offsets multiply.
TEST(CodegenReduction, PeriodicInputsReadAtTheirOffset) {
  std::vector<Case> cases;
  for (ReduceAxis axis : {ReduceAxis::Inner, ReduceAxis::Outer}) {
    ReductionSpec spec = fused_reduction(axis, IndexMode::Aligned);
    spec.prologue->inputs[1] = {DType::Float16, IndexMode::Periodic, 0};
    spec.epilogue->inputs[1] = {DType::Float32, IndexMode::PeriodicRows, 0};
    spec.epilogue->outputs[1].tensor = {DType::BFloat16, IndexMode::Contiguous, 0};
    ASSERT_EQ(validate(spec), "") << spec.to_string();
    cases.push_back({std::string(reduce_axis_name(axis)), emit_reduction(spec)});
    ReductionSpec wide = spec;
    wide.index64 = true;
    cases.push_back({std::string(reduce_axis_name(axis)) + " index64", emit_reduction(wide)});
  }
  for (const Case& c : cases) {
    std::vector<std::string> params;
    for (const auto& p : c.kernel.entries[0].params) params.push_back(p.name);
    const bool divisors = c.label.find("index64") == std::string::npos;
    std::vector<std::string> periodic = {"period_in1", "period_ein1", "block_ein1"};
    if (divisors)
      periodic = {"period_in1",      "period_div_in1", "period_ein1",
                  "period_div_ein1", "block_ein1",     "block_div_ein1"};
    std::vector<std::string> got;
    for (const auto& name : params) {
      if (name.rfind("period_", 0) == 0 || name.rfind("block_", 0) == 0) got.push_back(name);
      EXPECT_EQ(name.find("shape"), std::string::npos) << c.label << ": " << name;
      EXPECT_EQ(name.find("stride_"), std::string::npos) << c.label << ": " << name;
    }
    EXPECT_EQ(got, periodic) << c.label;
    // The split entries take the same parameters (and read them alike).
    for (std::size_t e = 1; e < 3; ++e)
      EXPECT_EQ(c.kernel.entries[e].params.size(), params.size() + 2) << c.label;
    // The narrow entry (Outer: Note [Narrow outer tiles]) takes entry 0's.
    for (std::size_t e = 3; e < c.kernel.entries.size(); ++e)
      EXPECT_EQ(c.kernel.entries[e].params.size(), params.size()) << c.label;
  }
  // The same reductions over dense inputs only: the loops' own divisions.
  for (ReduceAxis axis : {ReduceAxis::Inner, ReduceAxis::Outer}) {
    ReductionSpec dense = fused_reduction(axis, IndexMode::Aligned);
    dense.epilogue->inputs[1] = {DType::Float32, IndexMode::Contiguous, 0};
    dense.epilogue->outputs[1].tensor = {DType::BFloat16, IndexMode::Contiguous, 0};
    cases.push_back({std::string(reduce_axis_name(axis)) + " dense", emit_reduction(dense)});
  }
  const auto outcomes = compile_all(cases);
  const std::regex division(R"(div\.[su]32)");
  auto divisions = [&](std::size_t k) {
    const std::string& ptx = outcomes[k].kernel->image;
    return std::distance(std::sregex_iterator(ptx.begin(), ptx.end(), division),
                         std::sregex_iterator());
  };
  for (std::size_t k = 0; k < outcomes.size(); ++k)
    ASSERT_TRUE(outcomes[k].ok()) << cases[k].label << ": " << outcomes[k].error;
  // Cases 0 and 2 are the 32-bit periodic kernels, 4 and 5 their dense twins.
  EXPECT_EQ(divisions(0), divisions(4)) << "the 32-bit variant divides by multiplying";
  EXPECT_EQ(divisions(2), divisions(5)) << "the 32-bit variant divides by multiplying";
}

// The PTX of one entry: from its .entry line to the next function.
std::string ptx_of_entry(const std::string& ptx, const std::string& name) {
  const std::size_t at = ptx.find(".entry " + name + "(");
  if (at == std::string::npos) return {};
  const std::size_t next = ptx.find(".entry ", at + 1);
  return ptx.substr(at, next == std::string::npos ? std::string::npos : next - at);
}

// Note [Split inner reductions]: an Inner block-per-row kernel carries
// _partials (the spec's block, reading the row's vectors as entry 0 does)
// and _totals (the spec's block, a block per row), each with entry 0's
// parameters plus the workspace and the chunk length; a warp per row keeps
// its one entry.
TEST(CodegenReduction, SplitInnerEntries) {
  std::vector<Case> cases;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Var, ReduceOp::Argmax}) {
    ReductionSpec spec = plain_reduction(op, DType::Float32, ReduceAxis::Inner,
                                         ReduceStrategy::BlockPerRow, IndexMode::Aligned);
    spec.threads = 128;
    ASSERT_EQ(validate(spec), "") << spec.to_string();
    cases.push_back({std::string(reduce_op_name(op)), emit_reduction(spec)});
  }
  cases.push_back(
      {"fused/strided", emit_reduction(fused_reduction(ReduceAxis::Inner, IndexMode::Strided))});
  const auto outcomes = compile_all(cases);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::vector<KernelEntry>& entries = cases[i].kernel.entries;
    ASSERT_EQ(entries.size(), 3u) << cases[i].label;
    EXPECT_EQ(entries[1].name, entries[0].name + "_partials");
    EXPECT_EQ(entries[2].name, entries[0].name + "_totals");
    std::vector<std::string> want;
    for (const auto& p : entries[0].params) want.push_back(p.name);
    EXPECT_NE(std::find(want.begin(), want.end(), "rows"), want.end()) << cases[i].label;
    EXPECT_EQ(std::find(want.begin(), want.end(), "inner"), want.end()) << cases[i].label;
    want.push_back("partials");
    want.push_back("chunk");
    for (std::size_t e : {1u, 2u}) {
      std::vector<std::string> got;
      for (const auto& p : entries[e].params) got.push_back(p.name);
      EXPECT_EQ(got, want) << entries[e].name;
      EXPECT_EQ(entries[e].params[want.size() - 2].kind, KernelParam::Kind::Pointer);
      EXPECT_EQ(entries[e].params[want.size() - 1].kind, KernelParam::Kind::Int64);
    }
    EXPECT_EQ(entries[1].block_x, entries[0].block_x) << cases[i].label;
    EXPECT_EQ(entries[1].block_y, 1) << cases[i].label;
    EXPECT_EQ(entries[1].elements_per_thread, entries[0].elements_per_thread) << cases[i].label;
    EXPECT_EQ(entries[2].block_x, entries[0].block_x) << cases[i].label;
    EXPECT_EQ(entries[2].block_y, 1) << cases[i].label;
    EXPECT_EQ(entries[2].elements_per_thread, 1) << cases[i].label;
    ASSERT_TRUE(outcomes[i].ok()) << cases[i].label;
    const std::string& ptx = outcomes[i].kernel->image;
    for (const KernelEntry& e : entries) {
      const std::string body = ptx_of_entry(ptx, e.name);
      ASSERT_FALSE(body.empty()) << e.name << "\n" << ptx;
      // __launch_bounds__ follows each entry's own block.
      EXPECT_NE(body.find(".maxntid " + std::to_string(e.block_x * e.block_y) + ", 1, 1"),
                std::string::npos)
          << e.name << "\n"
          << body;
    }
    // Aligned f32 rows: the partials read 16-byte vectors, as entry 0 does;
    // strided inputs read scalars.
    const bool aligned = i < 3;
    EXPECT_EQ(entries[0].elements_per_thread, aligned ? 4 : 1) << cases[i].label;
    EXPECT_EQ(has_16_byte_load(ptx_of_entry(ptx, entries[0].name)), aligned) << cases[i].label;
    EXPECT_EQ(has_16_byte_load(ptx_of_entry(ptx, entries[1].name)), aligned) << cases[i].label;
  }
  EXPECT_EQ(cases[0].kernel.entries[0].block_x, 128);
  const ReductionSpec warp = plain_reduction(ReduceOp::Sum, DType::Float32, ReduceAxis::Inner,
                                             ReduceStrategy::WarpPerRow, IndexMode::Aligned);
  EXPECT_EQ(emit_reduction(warp).entries.size(), 1u);
}

TEST(CodegenReduction, TextShowsNestedSpecs) {
  const std::string text = fused_reduction(ReduceAxis::Inner, IndexMode::Aligned).to_string();
  EXPECT_EQ(
      text.rfind(
          "reduction sum axis=inner strategy=block_per_row input_rank=2 output_rank=1 out=f32", 0),
      0u)
      << text;
  EXPECT_NE(text.find("  prologue:\n    pointwise rank=2"), std::string::npos) << text;
  EXPECT_NE(text.find("  epilogue:\n    pointwise rank=1"), std::string::npos) << text;
  ReductionSpec var = plain_reduction(ReduceOp::Var, DType::Float32, ReduceAxis::Inner,
                                      ReduceStrategy::BlockPerRow, IndexMode::Aligned);
  ReductionSpec biased = var;
  biased.correction = 0.0;
  EXPECT_NE(var.hash(), biased.hash());
  EXPECT_NE(emit_reduction(var).source, emit_reduction(biased).source);
}

TEST(CodegenReduction, ValidateExplainsRejections) {
  ReductionSpec s = plain_reduction(ReduceOp::Mean, DType::Int32, ReduceAxis::Inner,
                                    ReduceStrategy::BlockPerRow, IndexMode::Aligned);
  s.out_dtype = DType::Int32;
  s.output.dtype = DType::Int32;
  EXPECT_NE(validate(s).find("floating"), std::string::npos) << validate(s);
  s = plain_reduction(ReduceOp::Argmax, DType::Float32, ReduceAxis::Inner,
                      ReduceStrategy::BlockPerRow, IndexMode::Aligned);
  s.out_dtype = DType::Float32;
  s.output.dtype = DType::Float32;
  EXPECT_NE(validate(s).find("i64"), std::string::npos) << validate(s);
  s = fused_reduction(ReduceAxis::Inner, IndexMode::Aligned);
  s.prologue->outputs.push_back(s.prologue->outputs[0]);
  EXPECT_NE(validate(s).find("exactly one output"), std::string::npos) << validate(s);
  s = fused_reduction(ReduceAxis::Inner, IndexMode::Aligned);
  s.out_dtype = DType::Float64;
  EXPECT_NE(validate(s).find("epilogue input 0"), std::string::npos) << validate(s);
  s = plain_reduction(ReduceOp::Sum, DType::Bool, ReduceAxis::Inner, ReduceStrategy::BlockPerRow,
                      IndexMode::Aligned);
  EXPECT_NE(validate(s).find("b8"), std::string::npos) << validate(s);
  s = plain_reduction(ReduceOp::Sum, DType::Float32, ReduceAxis::Outer, ReduceStrategy::WarpPerRow,
                      IndexMode::Aligned);
  EXPECT_FALSE(validate(s).empty());
  EXPECT_THROW(emit_reduction(s), InternalError);
}

// ---- norms ------------------------------------------------------------------

const std::vector<NormKind> kNormKinds = {NormKind::SoftmaxForward,   NormKind::LogSoftmaxForward,
                                          NormKind::SoftmaxBackward,  NormKind::LogSoftmaxBackward,
                                          NormKind::LayerNormForward, NormKind::LayerNormBackward,
                                          NormKind::RmsNormForward,   NormKind::RmsNormBackward};

bool is_softmax(NormKind k) {
  return k == NormKind::SoftmaxForward || k == NormKind::LogSoftmaxForward ||
         k == NormKind::SoftmaxBackward || k == NormKind::LogSoftmaxBackward;
}

TEST(CodegenNorm, EveryKindAndDtypeCompiles) {
  std::vector<Case> cases;
  int n = 0;
  for (NormKind kind : kNormKinds) {
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
      NormSpec spec;
      spec.kind = kind;
      spec.dtype = spec.out_dtype = spec.weight_dtype = dtype;
      // Rotate the optional parts so that each appears with several kinds.
      spec.aligned = n % 2 == 0;
      spec.index64 = n % 5 == 0;
      if (!is_softmax(kind)) {
        spec.has_weight = n % 3 != 0;
        spec.has_bias =
            (kind == NormKind::LayerNormForward || kind == NormKind::LayerNormBackward) &&
            n % 2 == 0;
        spec.save_stats = n % 4 != 1;
        if (dtype != DType::Float64 && n % 2 == 1)
          spec.weight_dtype = DType::Float32;  // mixed precision
        if ((kind == NormKind::LayerNormForward || kind == NormKind::RmsNormForward) &&
            dtype == DType::Float32)
          spec.out_dtype = DType::BFloat16;  // Note [Norm outputs in 16 bits]
      } else if (kind == NormKind::SoftmaxForward && dtype == DType::Float16) {
        spec.out_dtype = DType::Float32;  // softmax(x, dtype=float32)
      }
      ++n;
      ASSERT_EQ(validate(spec), "") << spec.to_string();
      cases.push_back({std::string(norm_kind_name(kind)) + "/" + name(dtype), emit_norm(spec)});
    }
  }
  compile_all(cases);
}

// Note [Batch-norm reductions]: two entry points (row-chunk partials, then
// per-channel totals); vector reads of x only in the aligned variant. The
// block sizes are the device code's kChannelBlock and kTotalsBlock.
// Note [Rows in registers]: the aligned forward norms keep a row's vectors
// in registers (no local memory) and read by 16-byte vectors.
TEST(CodegenNorm, ForwardRowsStayInRegisters) {
  std::vector<Case> cases;
  for (NormKind kind :
       {NormKind::LayerNormForward, NormKind::RmsNormForward, NormKind::SoftmaxForward}) {
    for (DType dtype : {DType::Float32, DType::BFloat16}) {
      NormSpec spec;
      spec.kind = kind;
      spec.dtype = spec.out_dtype = spec.weight_dtype = dtype;
      spec.aligned = true;
      spec.has_weight = kind != NormKind::SoftmaxForward;
      spec.has_bias = kind == NormKind::LayerNormForward;
      spec.threads = 256;
      ASSERT_EQ(validate(spec), "") << spec.to_string();
      cases.push_back({std::string(norm_kind_name(kind)) + "/" + name(dtype), emit_norm(spec)});
    }
  }
  const auto outcomes = compile_all(cases);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(outcomes[i].ok());
    const std::string& ptx = outcomes[i].kernel->image;
    EXPECT_FALSE(std::regex_search(ptx, std::regex(R"(\.local|ld\.local|st\.local)")))
        << cases[i].label << "\n"
        << ptx;
    EXPECT_TRUE(has_16_byte_load(ptx)) << cases[i].label;
  }
}

TEST(CodegenNorm, BatchNormReductionsCompileForEveryDtypeAndLayout) {
  std::vector<Case> cases;
  for (NormKind kind : {NormKind::BatchNormStats, NormKind::BatchNormBackward}) {
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
      for (bool aligned : {true, false}) {
        NormSpec spec;
        spec.kind = kind;
        spec.dtype = dtype;
        spec.out_dtype = DType::Float32;
        spec.weight_dtype = dtype == DType::Float32 ? DType::Float32 : DType::BFloat16;
        spec.aligned = aligned;
        spec.index64 = !aligned;
        ASSERT_EQ(validate(spec), "") << spec.to_string();
        const EmittedKernel kernel = emit_norm(spec);
        ASSERT_EQ(kernel.entries.size(), 2u);
        EXPECT_EQ(kernel.entries[0].block_x * kernel.entries[0].block_y, 256);
        EXPECT_EQ(kernel.entries[1].block_x * kernel.entries[1].block_y, 1024);
        const int vec = aligned ? 16 / dtype_size_bytes(dtype) : 1;
        EXPECT_EQ(kernel.entries[0].elements_per_thread, vec) << spec.to_string();
        cases.push_back({std::string(norm_kind_name(kind)) + "/" + name(dtype) +
                             (aligned ? "/aligned" : "/general"),
                         kernel});
      }
    }
  }
  compile_all(cases);

  NormSpec stats;
  stats.kind = NormKind::BatchNormStats;
  stats.dtype = DType::BFloat16;
  stats.out_dtype = stats.weight_dtype = DType::Float32;
  auto names = [](const KernelEntry& e) {
    std::vector<std::string> params;
    for (const auto& p : e.params) params.push_back(p.name);
    return params;
  };
  const EmittedKernel kernel = emit_norm(stats);
  EXPECT_EQ(names(kernel.entries[0]),
            (std::vector<std::string>{"x", "partials", "rows", "cols", "splits"}));
  EXPECT_EQ(names(kernel.entries[1]),
            (std::vector<std::string>{"partials", "mean", "invstd", "running_mean", "running_var",
                                      "new_running_mean", "new_running_var", "cols", "splits",
                                      "momentum", "eps"}));
  NormSpec fp64 = stats;
  fp64.dtype = DType::Float64;
  EXPECT_NE(validate(fp64).find("fp32, bf16 or fp16"), std::string::npos);
  NormSpec half_stats = stats;
  half_stats.out_dtype = DType::BFloat16;
  EXPECT_NE(validate(half_stats).find("fp32"), std::string::npos);

  NormSpec backward = stats;
  backward.kind = NormKind::BatchNormBackward;
  const EmittedKernel sums = emit_norm(backward);
  EXPECT_EQ(names(sums.entries[0]), (std::vector<std::string>{"grad_out", "x", "mean", "partials",
                                                              "rows", "cols", "splits"}));
  EXPECT_EQ(names(sums.entries[1]), (std::vector<std::string>{"partials", "invstd", "grad_bias",
                                                              "grad_weight", "cols", "splits"}));
}

// Group norm's statistics (device/mb_group_norm.cuh): batch norm's chunk
// stage per image, a block per (sample, group) after it; the saved
// statistics in x's dtype, the per-channel ones in fp32.
TEST(CodegenNorm, GroupNormStatisticsCompileForEveryDtype) {
  std::vector<Case> cases;
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
    for (bool aligned : {true, false}) {
      NormSpec spec;
      spec.kind = NormKind::GroupNormStats;
      spec.dtype = spec.weight_dtype = dtype;
      spec.out_dtype = DType::Float32;
      spec.aligned = aligned;
      spec.index64 = !aligned;
      ASSERT_EQ(validate(spec), "") << spec.to_string();
      const EmittedKernel kernel = emit_norm(spec);
      ASSERT_EQ(kernel.entries.size(), 2u);
      EXPECT_EQ(kernel.entries[0].block_x, 256);
      EXPECT_EQ(kernel.entries[1].block_x, 1024);
      EXPECT_EQ(kernel.entries[0].elements_per_thread, aligned ? 16 / dtype_size_bytes(dtype) : 1);
      EXPECT_NE(kernel.source.find("mb::group_norm_stats_totals<" +
                                   std::string(emit::storage_type(dtype)) + ", I>"),
                std::string::npos)
          << kernel.source;
      cases.push_back(
          {std::string("group_norm_stats/") + name(dtype) + (aligned ? "/aligned" : "/general"),
           kernel});
    }
  }
  compile_all(cases);
  NormSpec spec;
  spec.kind = NormKind::GroupNormStats;
  spec.dtype = spec.weight_dtype = DType::BFloat16;
  spec.out_dtype = DType::Float32;
  const EmittedKernel kernel = emit_norm(spec);
  auto names = [](const KernelEntry& e) {
    std::vector<std::string> params;
    for (const auto& p : e.params) params.push_back(p.name);
    return params;
  };
  EXPECT_EQ(names(kernel.entries[0]),
            (std::vector<std::string>{"x", "partials", "rows", "cols", "splits", "images"}));
  EXPECT_EQ(names(kernel.entries[1]),
            (std::vector<std::string>{"partials", "mean", "rstd", "channel_mean", "channel_rstd",
                                      "cols", "splits", "units_per_image", "unit_cols", "units",
                                      "group_channels", "eps"}));
  NormSpec f32_saved = spec;
  f32_saved.weight_dtype = DType::Float32;
  EXPECT_NE(validate(f32_saved).find("x's dtype"), std::string::npos);
}

// The batch-norm knobs change the chunk stage's source: the row unroll and
// the lanes' cap are template arguments, MYBACKEND_BN_MIN_BLOCKS the launch
// bounds' second argument, which reaches the PTX as .minnctapersm (a
// register cap).
TEST(CodegenTuning, BatchNormKnobsCompileAndBoundTheChunkStage) {
  std::vector<Case> cases;
  for (int unroll : {1, 2, 4, 8}) {
    for (int min_blocks : {0, 3}) {
      LaunchTuning t;
      t.bn_row_unroll = unroll;
      t.bn_min_blocks = min_blocks;
      t.bn_max_lanes = min_blocks == 0 ? 256 : 32;
      for (NormKind kind : {NormKind::BatchNormStats, NormKind::BatchNormBackward}) {
        NormSpec spec;
        spec.tuning = t;
        spec.kind = kind;
        spec.dtype = DType::BFloat16;
        spec.out_dtype = spec.weight_dtype = DType::Float32;
        spec.aligned = true;
        const EmittedKernel k = emit_norm(spec);
        EXPECT_NE(k.source.find(", 8, " + std::to_string(unroll) + ", " +
                                std::to_string(t.bn_max_lanes) + ">"),
                  std::string::npos)
            << t.to_string();
        EXPECT_EQ(k.source.find("__launch_bounds__(256, 3)") != std::string::npos, min_blocks == 3)
            << t.to_string();
        cases.push_back({std::string(norm_kind_name(kind)) + " " + t.to_string(), k});
      }
    }
  }
  const auto outcomes = compile_all(cases);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(outcomes[i].ok()) << cases[i].label;
    const bool bounded = cases[i].label.find("bn_min_blocks=3") != std::string::npos;
    EXPECT_EQ(outcomes[i].kernel->image.find(".minnctapersm 3") != std::string::npos, bounded)
        << cases[i].label;
  }
}

TEST(CodegenNorm, BackwardEmitsParameterGradKernel) {
  NormSpec spec;
  spec.kind = NormKind::LayerNormBackward;
  spec.dtype = spec.out_dtype = DType::BFloat16;
  spec.weight_dtype = DType::Float32;
  spec.has_weight = spec.has_bias = true;
  spec.aligned = true;
  const EmittedKernel kernel = emit_norm(spec);
  // Note [Split parameter grads]: row-chunk partials, then their totals.
  ASSERT_EQ(kernel.entries.size(), 3u);
  EXPECT_EQ(kernel.entries[1].name, kernel.entries[0].name + "_param_partials");
  EXPECT_EQ(kernel.entries[2].name, kernel.entries[0].name + "_param_totals");
  auto names = [&](std::size_t e) {
    std::vector<std::string> params;
    for (const auto& p : kernel.entries[e].params) params.push_back(p.name);
    return params;
  };
  EXPECT_EQ(names(1), (std::vector<std::string>{"grad_out", "x", "mean", "rstd", "partials", "rows",
                                                "cols", "splits"}));
  EXPECT_EQ(names(2), (std::vector<std::string>{"partials", "grad_weight", "grad_bias", "rows",
                                                "cols", "splits"}));

  NormSpec no_grads = spec;
  no_grads.param_grads = false;
  EXPECT_EQ(emit_norm(no_grads).entries.size(), 1u);

  NormSpec softmax;
  softmax.kind = NormKind::SoftmaxForward;
  softmax.dtype = softmax.out_dtype = DType::Float16;
  softmax.aligned = true;
  const auto outcomes =
      compile_all({{"layer_norm_backward", kernel}, {"softmax f16 aligned", emit_norm(softmax)}});
  ASSERT_TRUE(outcomes[0].ok());
  for (const auto& entry : kernel.entries) {
    EXPECT_NE(outcomes[0].kernel->image.find(".entry " + entry.name), std::string::npos)
        << entry.name;
  }
  ASSERT_TRUE(outcomes[1].ok());
  EXPECT_TRUE(has_16_byte_load(outcomes[1].kernel->image));
}

// Note [Rows of any alignment]: both kinds, every logits dtype, both index
// widths; the body of each row moves in 16-byte vectors whatever the spec's
// alignment flag says, and the parameters are what the runtime fills.
TEST(CodegenNorm, CrossEntropyKindsCompileVectorized) {
  std::vector<Case> cases;
  for (NormKind kind : {NormKind::CrossEntropyForward, NormKind::CrossEntropyBackward}) {
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16}) {
      for (bool index64 : {false, true}) {
        NormSpec spec;
        spec.kind = kind;
        spec.dtype = spec.weight_dtype = dtype;
        spec.out_dtype = DType::Float32;
        spec.index64 = index64;
        ASSERT_EQ(validate(spec), "") << spec.to_string();
        cases.push_back(
            {std::string(norm_kind_name(kind)) + "/" + name(dtype) + (index64 ? "/i64" : "/i32"),
             emit_norm(spec)});
      }
    }
  }
  auto params = [](const EmittedKernel& k) {
    std::vector<std::string> names;
    for (const auto& p : k.entries[0].params) names.push_back(p.name);
    return names;
  };
  EXPECT_EQ(params(cases[0].kernel),
            (std::vector<std::string>{"x", "target", "loss", "lse", "rows", "cols", "row_stride",
                                      "ignore_index"}));
  EXPECT_EQ(params(cases.back().kernel),
            (std::vector<std::string>{"grad_loss", "x", "target", "lse", "grad_in", "rows", "cols",
                                      "row_stride", "out_row_stride", "ignore_index"}));
  const auto outcomes = compile_all(cases);
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    ASSERT_TRUE(outcomes[i].ok()) << cases[i].label;
    EXPECT_TRUE(has_16_byte_load(outcomes[i].kernel->image)) << cases[i].label;
  }

  NormSpec fp64;
  fp64.kind = NormKind::CrossEntropyForward;
  fp64.dtype = fp64.weight_dtype = DType::Float64;
  EXPECT_NE(validate(fp64), "");
  NormSpec bf16_loss = fp64;
  bf16_loss.dtype = bf16_loss.weight_dtype = DType::BFloat16;
  bf16_loss.out_dtype = DType::BFloat16;
  EXPECT_NE(validate(bf16_loss), "");
}

TEST(CodegenNorm, ValidateExplainsRejections) {
  NormSpec s;
  s.kind = NormKind::SoftmaxForward;
  s.has_weight = true;
  EXPECT_NE(validate(s).find("no weight"), std::string::npos) << validate(s);
  s = NormSpec{};
  s.kind = NormKind::RmsNormForward;
  s.has_bias = true;
  EXPECT_NE(validate(s).find("bias"), std::string::npos) << validate(s);
  s = NormSpec{};
  s.dtype = s.out_dtype = DType::Int32;
  EXPECT_NE(validate(s).find("floating"), std::string::npos) << validate(s);
  // Note [Norm outputs in 16 bits]: forward layer and RMS norms may store
  // another dtype; an RMS norm rounding before its weight, or a backward, not.
  s = NormSpec{};
  s.kind = NormKind::RmsNormForward;
  s.out_dtype = DType::Float16;
  EXPECT_EQ(validate(s), "");
  s.dtype = DType::BFloat16;
  s.has_weight = s.round_before_weight = true;
  EXPECT_NE(validate(s).find("keeps its dtype"), std::string::npos) << validate(s);
  EXPECT_THROW(emit_norm(s), InternalError);
  s = NormSpec{};
  s.kind = NormKind::LayerNormBackward;
  s.out_dtype = DType::Float16;
  EXPECT_NE(validate(s).find("may change the dtype"), std::string::npos) << validate(s);
}

// Every case compiles to PTX with no local memory; aligned ones
// (labels with "aligned=1") read by 16-byte vectors.
void expect_prologue_kernels_compile(const std::vector<Case>& cases) {
  const auto outcomes = compile_all(cases);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(outcomes[i].ok());
    const std::string& ptx = outcomes[i].kernel->image;
    EXPECT_FALSE(std::regex_search(ptx, std::regex(R"(\.local|ld\.local|st\.local)")))
        << cases[i].label;
    if (cases[i].label.find("aligned=1") != std::string::npos)
      EXPECT_TRUE(has_16_byte_load(ptx)) << cases[i].label;
  }
}

// x = bf16(gelu(in0) + in1) with in0 bf16 and in1 f32: a prologue of two
// dense inputs of different dtypes (Note [Norm prologues]).
PointwiseSpec gelu_add_prologue() {
  PointwiseSpec p;
  p.rank = 2;
  p.inputs = {TensorArg{DType::BFloat16, IndexMode::Contiguous, 0},
              TensorArg{DType::Float32, IndexMode::Contiguous, 0}};
  p.instrs = {
      {PwOp::Load, DType::BFloat16, {}, 0},    {PwOp::GeluErf, DType::BFloat16, {0}, -1},
      {PwOp::Cast, DType::Float32, {1}, -1},   {PwOp::Load, DType::Float32, {}, 1},
      {PwOp::Add, DType::Float32, {2, 3}, -1}, {PwOp::Cast, DType::BFloat16, {4}, -1},
  };
  p.outputs = {{TensorArg{DType::BFloat16, IndexMode::Contiguous, 0}, 5}};
  return p;
}

// A layer norm (with bias) or RMS norm with a weight, all in `dtype`.
NormSpec weighted_norm(NormKind kind, DType dtype, bool aligned) {
  NormSpec spec;
  spec.kind = kind;
  spec.dtype = spec.out_dtype = spec.weight_dtype = dtype;
  spec.has_weight = true;
  spec.has_bias = kind == NormKind::LayerNormForward || kind == NormKind::LayerNormBackward;
  spec.aligned = aligned;
  return spec;
}

// A bf16 forward norm reading x through gelu_add_prologue.
NormSpec forward_norm_with_prologue(NormKind kind, bool aligned) {
  NormSpec spec = weighted_norm(kind, DType::BFloat16, aligned);
  spec.prologue = gelu_add_prologue();
  return spec;
}

TEST(CodegenNorm, ForwardNormsReadXThroughAPrologue) {
  std::vector<Case> cases;
  for (NormKind kind : {NormKind::LayerNormForward, NormKind::RmsNormForward}) {
    for (bool aligned : {true, false}) {
      const NormSpec spec = forward_norm_with_prologue(kind, aligned);
      ASSERT_EQ(validate(spec), "") << spec.to_string();
      EXPECT_NE(spec.to_string().find("prologue:"), std::string::npos);
      NormSpec plain = spec;
      plain.prologue.reset();
      EXPECT_NE(spec.hash(), plain.hash());
      EmittedKernel kernel = emit_norm(spec);
      for (const KernelEntry& e : kernel.entries) {
        std::vector<std::string> names;
        for (const KernelParam& p : e.params) names.push_back(p.name);
        EXPECT_EQ(std::count(names.begin(), names.end(), "x"), 0) << e.name;
        EXPECT_EQ(std::count(names.begin(), names.end(), "in0"), 1) << e.name;
        EXPECT_EQ(std::count(names.begin(), names.end(), "in1"), 1) << e.name;
      }
      EXPECT_NE(kernel.source.find("mb_prologue"), std::string::npos);
      cases.push_back({spec.to_string(), kernel});
    }
  }
  expect_prologue_kernels_compile(cases);
}

// x = bf16(scores + bias): scores dense, bias Strided over x's rank 4 (Note
// [Softmax prologues with broadcast inputs]).
PointwiseSpec scores_plus_bias_prologue() {
  PointwiseSpec p;
  p.rank = 4;
  p.inputs = {TensorArg{DType::BFloat16, IndexMode::Contiguous, 0},
              TensorArg{DType::BFloat16, IndexMode::Strided, 4}};
  p.instrs = {
      {PwOp::Load, DType::BFloat16, {}, 0},
      {PwOp::Load, DType::BFloat16, {}, 1},
      {PwOp::Add, DType::BFloat16, {0, 1}, -1},
  };
  p.outputs = {{TensorArg{DType::BFloat16, IndexMode::Contiguous, 0}, 2}};
  return p;
}

TEST(CodegenNorm, SoftmaxReadsXThroughAPrologueWithABroadcastInput) {
  std::vector<Case> cases;
  for (NormKind kind : {NormKind::SoftmaxForward, NormKind::LogSoftmaxForward}) {
    for (bool aligned : {true, false}) {
      for (bool index64 : {false, true}) {
        NormSpec spec;
        spec.kind = kind;
        spec.dtype = spec.out_dtype = spec.weight_dtype = DType::BFloat16;
        spec.aligned = aligned;
        spec.index64 = index64;
        spec.prologue = scores_plus_bias_prologue();
        ASSERT_EQ(validate(spec), "") << spec.to_string();
        EmittedKernel kernel = emit_norm(spec);
        ASSERT_EQ(kernel.entries.size(), 1u);
        std::vector<std::string> names;
        for (const KernelParam& p : kernel.entries[0].params) {
          names.push_back(p.name);
          if (p.kind == KernelParam::Kind::Dims) EXPECT_EQ(p.rank, 4) << p.name;
        }
        // Note [Row placement by multipliers]: the 32-bit variant also takes
        // each size's multiplier and shift, and divides by neither.
        std::vector<std::string> want = {"in0", "in1", "shape", "stride_in1", "y", "rows", "cols"};
        if (!index64) want.insert(want.begin() + 3, "shape_div");
        EXPECT_EQ(names, want);
        EXPECT_EQ(kernel.source.find("rem /= size") == std::string::npos, !index64)
            << kernel.source;
        EXPECT_NE(kernel.source.find("Row row(const I r, const I cols)"), std::string::npos)
            << kernel.source;
        cases.push_back({spec.to_string(), kernel});
      }
    }
  }
  expect_prologue_kernels_compile(cases);
}

TEST(CodegenNorm, AForwardNormStoresTheXItComputes) {
  std::vector<Case> cases;
  for (NormKind kind : {NormKind::LayerNormForward, NormKind::RmsNormForward}) {
    for (bool aligned : {true, false}) {
      NormSpec spec = forward_norm_with_prologue(kind, aligned);
      spec.store_x = true;
      ASSERT_EQ(validate(spec), "") << spec.to_string();
      EXPECT_NE(spec.to_string().find("store_x=1"), std::string::npos);
      EmittedKernel kernel = emit_norm(spec);
      for (const KernelEntry& e : kernel.entries) {
        std::vector<std::string> names;
        for (const KernelParam& p : e.params) names.push_back(p.name);
        EXPECT_EQ(std::count(names.begin(), names.end(), "xout"), 1) << e.name;
      }
      EXPECT_NE(kernel.source.find("mb::store_compute<N>(xout + i, y0)"), std::string::npos);
      cases.push_back({spec.to_string(), kernel});
    }
  }
  expect_prologue_kernels_compile(cases);
  NormSpec softmax;
  softmax.dtype = softmax.out_dtype = softmax.weight_dtype = DType::BFloat16;
  softmax.prologue = gelu_add_prologue();
  softmax.store_x = true;
  EXPECT_NE(validate(softmax).find("stores x"), std::string::npos) << validate(softmax);
}

TEST(CodegenNorm, ValidateExplainsPrologueRejections) {
  NormSpec s;
  s.kind = NormKind::LayerNormForward;
  s.dtype = s.out_dtype = s.weight_dtype = DType::BFloat16;
  s.prologue = gelu_add_prologue();
  ASSERT_EQ(validate(s), "");
  NormSpec backward = s;
  backward.kind = NormKind::SoftmaxBackward;
  EXPECT_NE(validate(backward).find("only forward softmax, layer and RMS norms"),
            std::string::npos);
  NormSpec strided = s;
  strided.prologue->inputs[1] = TensorArg{DType::Float32, IndexMode::Strided, 2};
  EXPECT_NE(validate(strided).find("densely"), std::string::npos) << validate(strided);
  // A softmax's prologue may read Strided inputs, of x's rank only.
  NormSpec softmax = strided;
  softmax.kind = NormKind::SoftmaxForward;
  EXPECT_EQ(validate(softmax), "");
  softmax.prologue->inputs[1].rank = 1;
  EXPECT_NE(validate(softmax).find("x's rank"), std::string::npos) << validate(softmax);
  NormSpec other_dtype = s;
  other_dtype.dtype = other_dtype.out_dtype = DType::Float32;
  EXPECT_NE(validate(other_dtype).find("one output, x"), std::string::npos);
  NormSpec argument = s;
  argument.prologue->scalars = {PwScalar{DType::Float32, true, 0.0, 0}};
  EXPECT_NE(validate(argument).find("no scalar arguments"), std::string::npos);
  EXPECT_THROW(emit_norm(argument), InternalError);
}

// The residual gradient of a pre-norm transformer block after its layer
// norm's backward: s = grad_in + in1 (f32), stored with its bf16 cast
// (Note [Norm epilogues]).
PointwiseSpec residual_sum_epilogue() {
  PointwiseSpec p;
  p.rank = 2;
  p.inputs = {TensorArg{DType::Float32, IndexMode::Contiguous, 0},
              TensorArg{DType::Float32, IndexMode::Contiguous, 0}};
  p.instrs = {
      {PwOp::Load, DType::Float32, {}, 0},
      {PwOp::Load, DType::Float32, {}, 1},
      {PwOp::Add, DType::Float32, {0, 1}, -1},
      {PwOp::Cast, DType::BFloat16, {2}, -1},
  };
  p.outputs = {{TensorArg{DType::Float32, IndexMode::Contiguous, 0}, 2},
               {TensorArg{DType::BFloat16, IndexMode::Contiguous, 0}, 3}};
  return p;
}

TEST(CodegenNorm, BackwardNormsHandGradInToAnEpilogue) {
  std::vector<Case> cases;
  for (NormKind kind : {NormKind::LayerNormBackward, NormKind::RmsNormBackward}) {
    for (bool aligned : {true, false}) {
      NormSpec spec = weighted_norm(kind, DType::Float32, aligned);
      spec.epilogue = residual_sum_epilogue();
      ASSERT_EQ(validate(spec), "") << spec.to_string();
      EXPECT_NE(spec.to_string().find("epilogue:"), std::string::npos);
      NormSpec plain = spec;
      plain.epilogue.reset();
      EXPECT_NE(spec.hash(), plain.hash());
      EmittedKernel kernel = emit_norm(spec);
      std::vector<std::string> names;
      for (const KernelParam& p : kernel.entries.at(0).params) names.push_back(p.name);
      EXPECT_EQ(std::count(names.begin(), names.end(), "grad_in"), 0);
      for (const char* name : {"ein1", "eout0", "eout1"})
        EXPECT_EQ(std::count(names.begin(), names.end(), name), 1) << name;
      EXPECT_NE(kernel.source.find("mb_epilogue"), std::string::npos);
      cases.push_back({spec.to_string(), kernel});
    }
  }
  expect_prologue_kernels_compile(cases);
}

TEST(CodegenNorm, ValidateExplainsEpilogueRejections) {
  NormSpec s;
  s.kind = NormKind::LayerNormBackward;
  s.dtype = s.out_dtype = s.weight_dtype = DType::Float32;
  s.epilogue = residual_sum_epilogue();
  ASSERT_EQ(validate(s), "");
  NormSpec forward = s;
  forward.kind = NormKind::LayerNormForward;
  EXPECT_NE(validate(forward).find("only backward layer and RMS norms"), std::string::npos);
  NormSpec other_dtype = s;
  other_dtype.dtype = other_dtype.out_dtype = DType::BFloat16;
  EXPECT_NE(validate(other_dtype).find("input 0 must be grad_in"), std::string::npos);
  NormSpec strided = s;
  strided.epilogue->outputs[1].tensor = TensorArg{DType::BFloat16, IndexMode::Strided, 2};
  EXPECT_NE(validate(strided).find("densely"), std::string::npos) << validate(strided);
  NormSpec batch_norm = s;
  batch_norm.kind = NormKind::BatchNormBackward;
  batch_norm.has_weight = batch_norm.has_bias = false;
  EXPECT_NE(validate(batch_norm).find("no epilogue"), std::string::npos) << validate(batch_norm);
  EXPECT_THROW(emit_norm(strided), InternalError);
}

// dy = where(in0 <= 0, 0, in1): a ReLU gradient from the ReLU's bf16 output
// and the incoming bf16 gradient (Note [Gradient readers] in
// mb_batch_norm.cuh).
PointwiseSpec relu_gradient_prologue() {
  PointwiseSpec p;
  p.rank = 4;
  p.inputs = {TensorArg{DType::BFloat16, IndexMode::Contiguous, 0},
              TensorArg{DType::BFloat16, IndexMode::Contiguous, 0}};
  p.scalars = {PwScalar{DType::BFloat16, false, 0.0, 0}};
  p.instrs = {
      {PwOp::Load, DType::BFloat16, {}, 0},          {PwOp::Scalar, DType::BFloat16, {}, 0},
      {PwOp::Le, DType::Bool, {0, 1}, -1},           {PwOp::Load, DType::BFloat16, {}, 1},
      {PwOp::Where, DType::BFloat16, {2, 1, 3}, -1},
  };
  p.outputs = {{TensorArg{DType::BFloat16, IndexMode::Contiguous, 0}, 4}};
  return p;
}

TEST(CodegenNorm, BatchNormSumsReadTheGradientThroughAPrologue) {
  std::vector<Case> cases;
  for (bool aligned : {true, false}) {
    NormSpec spec;
    spec.kind = NormKind::BatchNormBackward;
    spec.dtype = DType::BFloat16;
    spec.out_dtype = spec.weight_dtype = DType::Float32;
    spec.aligned = aligned;
    spec.index64 = !aligned;
    spec.prologue = relu_gradient_prologue();
    ASSERT_EQ(validate(spec), "") << spec.to_string();
    NormSpec plain = spec;
    plain.prologue.reset();
    EXPECT_NE(spec.hash(), plain.hash());
    const EmittedKernel kernel = emit_norm(spec);
    ASSERT_EQ(kernel.entries.size(), 2u);
    std::vector<std::string> names;
    for (const KernelParam& p : kernel.entries[0].params) names.push_back(p.name);
    EXPECT_EQ(names, (std::vector<std::string>{"in0", "in1", "x", "mean", "partials", "rows",
                                               "cols", "splits"}));
    // The vector width stays x's (a bool mask would be read 8 bytes at a time).
    EXPECT_EQ(kernel.entries[0].elements_per_thread, aligned ? 8 : 1);
    // Rows in flight at storage width: the Load functor holds, then computes.
    EXPECT_NE(kernel.source.find("void hold("), std::string::npos);
    EXPECT_NE(kernel.source.find("Load{in0, in1}"), std::string::npos);
    cases.push_back({spec.to_string(), kernel});
  }
  expect_prologue_kernels_compile(cases);
  NormSpec stats;
  stats.kind = NormKind::BatchNormStats;
  stats.dtype = DType::BFloat16;
  stats.out_dtype = stats.weight_dtype = DType::Float32;
  stats.prologue = relu_gradient_prologue();
  EXPECT_NE(validate(stats).find("take a prologue"), std::string::npos) << validate(stats);
  NormSpec f32 = stats;
  f32.kind = NormKind::BatchNormBackward;
  f32.dtype = DType::Float32;
  EXPECT_NE(validate(f32).find("one output, grad_out"), std::string::npos) << validate(f32);
}

// ---- launch tuning (Note [Launch tuning knobs]) -----------------------------

// x (in_dtype) -> sigmoid -> tanh -> out_dtype, aligned: the micro chain's shape.
PointwiseSpec activation_chain(DType in_dtype, DType out_dtype) {
  PointwiseSpec spec;
  spec.rank = 1;
  spec.inputs = {TensorArg{in_dtype, IndexMode::Aligned, 0}};
  spec.instrs = {
      {PwOp::Load, in_dtype, {}, 0},
      {PwOp::Cast, DType::Float32, {0}, -1},
      {PwOp::Sigmoid, DType::Float32, {1}, -1},
      {PwOp::Tanh, DType::Float32, {2}, -1},
      {PwOp::Cast, out_dtype, {3}, -1},
  };
  spec.outputs = {{TensorArg{out_dtype, IndexMode::Aligned, 0}, 4}};
  return spec;
}

NormSpec forward_norm(NormKind kind, DType dtype, bool aligned) {
  NormSpec spec;
  spec.kind = kind;
  spec.dtype = spec.out_dtype = spec.weight_dtype = dtype;
  spec.has_weight = kind != NormKind::SoftmaxForward;
  spec.has_bias = kind == NormKind::LayerNormForward;
  spec.aligned = aligned;
  return spec;
}

const char* fake_env(const char* name) {
  const std::string n = name;
  if (n == "MYBACKEND_PW_BLOCK") return "512";
  if (n == "MYBACKEND_PW_VEC_PER_THREAD") return "3";  // not allowed: default
  if (n == "MYBACKEND_NORM_VEC_PER_THREAD") return "16";
  if (n == "MYBACKEND_NORM_BLOCKS_PER_SM") return "8x";  // not a number: default
  if (n == "MYBACKEND_SOFTMAX_BLOCK") return "256";
  if (n == "MYBACKEND_BN_BLOCKS_PER_SM") return "0";
  if (n == "MYBACKEND_BN_MIN_BLOCKS") return "5";  // not allowed: default
  if (n == "MYBACKEND_BN_CHUNK_PASSES") return "16";
  if (n == "MYBACKEND_BN_MAX_LANES") return "48";  // not a power of two: default
  if (n == "MYBACKEND_NORM_WIDE_WARPS_PER_SM") return "1024";
  return nullptr;
}

TEST(CodegenTuning, KnobsParseOrFallBackToDefaults) {
  const LaunchTuning defaults;
  const LaunchTuning t = launch_tuning_from(&fake_env);
  EXPECT_EQ(t.pw_block, 512);
  EXPECT_EQ(t.pw_vec_per_thread, defaults.pw_vec_per_thread);
  EXPECT_EQ(t.norm_vec_per_thread, 16);
  EXPECT_EQ(t.norm_blocks_per_sm, defaults.norm_blocks_per_sm);
  EXPECT_EQ(t.norm_block, defaults.norm_block);
  EXPECT_EQ(t.softmax_block, 256);
  EXPECT_EQ(t.softmax_blocks_per_sm, defaults.softmax_blocks_per_sm);
  EXPECT_EQ(t.row_block(true), 256);
  EXPECT_EQ(t.row_block(false), defaults.norm_block);
  EXPECT_EQ(t.row_blocks_per_sm(false), defaults.norm_blocks_per_sm);
  EXPECT_NE(t.to_string().find("pw_block=512"), std::string::npos);
  EXPECT_NE(t.to_string().find("softmax_block=256"), std::string::npos);
  EXPECT_EQ(t.bn_blocks_per_sm, 0);
  EXPECT_EQ(t.bn_min_blocks, defaults.bn_min_blocks);
  EXPECT_EQ(t.bn_chunk_passes, 16);
  EXPECT_EQ(t.bn_max_lanes, defaults.bn_max_lanes);
  EXPECT_EQ(t.norm_wide_warps_per_sm, 1024);
  EXPECT_NE(t.to_string().find("norm_wide_warps_per_sm=1024"), std::string::npos);
}

// Note [Few rows, smaller blocks]: BERT's 128 x 768 layer norm at batch 1.
TEST(CodegenTuning, FewRowsGetSmallerBlocksWithTheSameThreadsPerRow) {
  KernelEntry entry;
  entry.block_x = 256;
  entry.elements_per_thread = 8;       // bf16 vectors
  entry.row_elements_per_thread = 32;  // 4 vectors per thread: 24 -> 32 threads per row
  EXPECT_EQ(norm_rows_per_block(entry, 768), 8);
  const KernelEntry small = norm_launch_shape(entry, 128, 768, 132);
  EXPECT_EQ(small.block_x, 32);  // 128 blocks of one row: as close to 132 SMs as it gets
  EXPECT_EQ(norm_rows_per_block(small, 768), 1);
  // Enough rows: untouched. Loop-path rows (too long for registers): untouched.
  EXPECT_EQ(norm_launch_shape(entry, 32768, 768, 132).block_x, 256);
  EXPECT_EQ(norm_launch_shape(entry, 16, 1 << 16, 132).block_x, 256);
  // Never below the threads one row needs: 4096 columns take 128 threads.
  EXPECT_EQ(norm_launch_shape(entry, 4, 4096, 132).block_x, 128);
}

// Note [Scalar rows in registers]: rows of partial vectors hold one scalar
// per chunk, so a 7x7 window's 49 bf16 scores take 16 threads, not a block.
TEST(CodegenTuning, RowsOfPartialVectorsHoldScalarsInRegisters) {
  KernelEntry entry;
  entry.block_x = 128;
  entry.elements_per_thread = 8;               // bf16 vectors
  entry.row_elements_per_thread = 32;          // 4 vectors per thread
  EXPECT_EQ(norm_row_threads(entry, 48), 2);   // whole vectors: 6 of 8
  EXPECT_EQ(norm_row_threads(entry, 49), 16);  // 4 scalars a thread
  EXPECT_EQ(norm_rows_per_block(entry, 49), 8);
  EXPECT_EQ(norm_row_threads(entry, 197), 64);
  EXPECT_EQ(norm_row_threads(entry, 512), 16);  // whole vectors again
  EXPECT_EQ(norm_row_threads(entry, 513), 0);   // past 128 threads x 4 scalars: loop path
  EXPECT_EQ(norm_rows_per_block(entry, 513), 1);
}

// Note [Wide rows for few rows]: ViT-B/16's 197 x 768 bf16 layer norm at
// batch 1 takes the wide entry; enough rows to fill the device keep the
// narrow one.
TEST(CodegenTuning, FewRowsTakeTheWideRowsEntry) {
  const LaunchTuning kDefaults;
  KernelEntry narrow;
  narrow.block_x = 256;
  narrow.elements_per_thread = 8;
  narrow.row_elements_per_thread = 32;  // 32 threads per row of 768
  KernelEntry wide = narrow;
  wide.block_x = kRowBlockMaxThreads;
  wide.row_elements_per_thread = 8;  // a block of 96 threads per row of 768
  EXPECT_EQ(norm_row_threads(narrow, 768), 32);
  EXPECT_EQ(norm_row_block_threads(wide, 768), 96);
  EXPECT_EQ(norm_row_block_threads(wide, 1024), 128);
  EXPECT_EQ(norm_row_block_threads(wide, 8), 32);  // one vector: a warp
  EXPECT_EQ(norm_row_block_threads(wide, 4096), 512);
  EXPECT_EQ(norm_row_block_threads(wide, 4104), 0);  // more than one block
  EXPECT_EQ(norm_row_block_threads(wide, 770), 0);   // not whole vectors
  EXPECT_TRUE(norm_prefers_wide_rows(narrow, wide, 197, 768, 132, kDefaults));
  EXPECT_TRUE(norm_prefers_wide_rows(narrow, wide, 1, 1024, 132, kDefaults));
  // 3152 rows (ViT-B/16 at batch 16): 3152 warps, 24 a SM: narrow.
  EXPECT_FALSE(norm_prefers_wide_rows(narrow, wide, 3152, 768, 132, kDefaults));
  // The boundary: fewer than norm_wide_warps_per_sm warps a SM.
  const int per_sm = LaunchTuning{}.norm_wide_warps_per_sm;
  EXPECT_TRUE(norm_prefers_wide_rows(narrow, wide, per_sm * 132 - 1, 768, 132, kDefaults));
  EXPECT_FALSE(norm_prefers_wide_rows(narrow, wide, per_sm * 132, 768, 132, kDefaults));
  // The knob moves the boundary: 0 never takes the wide entry.
  LaunchTuning never;
  never.norm_wide_warps_per_sm = 0;
  EXPECT_FALSE(norm_prefers_wide_rows(narrow, wide, 1, 768, 132, never));
  // Rows the narrow entry cannot hold in registers (65536 columns), or that
  // are not whole vectors: the narrow entry's loop path.
  EXPECT_FALSE(norm_prefers_wide_rows(narrow, wide, 4, 1 << 16, 132, kDefaults));
  EXPECT_FALSE(norm_prefers_wide_rows(narrow, wide, 4, 770, 132, kDefaults));
}

// The wide entry (Note [A row per block]) exists for aligned forward layer
// and RMS norms, compiles, and keeps its row in registers.
TEST(CodegenNorm, ForwardNormsCarryAWideRowsEntry) {
  std::vector<Case> cases;
  for (NormKind kind : {NormKind::LayerNormForward, NormKind::RmsNormForward,
                        NormKind::SoftmaxForward, NormKind::LayerNormBackward}) {
    for (bool aligned : {true, false}) {
      NormSpec spec;
      spec.kind = kind;
      spec.dtype = spec.out_dtype = spec.weight_dtype = DType::BFloat16;
      spec.aligned = aligned;
      spec.has_weight = kind != NormKind::SoftmaxForward;
      spec.has_bias = kind == NormKind::LayerNormForward || kind == NormKind::LayerNormBackward;
      ASSERT_EQ(validate(spec), "") << spec.to_string();
      EmittedKernel kernel = emit_norm(spec);
      const bool wide_expected =
          aligned && (kind == NormKind::LayerNormForward || kind == NormKind::RmsNormForward);
      const bool has_wide =
          std::any_of(kernel.entries.begin(), kernel.entries.end(), [](const KernelEntry& e) {
            return e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, "_wide") == 0;
          });
      EXPECT_EQ(has_wide, wide_expected) << spec.to_string();
      if (has_wide) {
        ASSERT_EQ(kernel.entries.size(), 2u);
        EXPECT_EQ(kernel.entries[1].name, kernel.entries[0].name + "_wide");
        EXPECT_EQ(kernel.entries[1].row_elements_per_thread, kernel.entries[1].elements_per_thread);
        EXPECT_EQ(kernel.entries[1].block_x, kRowBlockMaxThreads);
        EXPECT_GT(kernel.entries[0].row_elements_per_thread,
                  kernel.entries[1].row_elements_per_thread);
        cases.push_back({spec.to_string(), kernel});
      }
    }
  }
  const auto outcomes = compile_all(cases);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(outcomes[i].ok());
    const std::string& ptx = outcomes[i].kernel->image;
    EXPECT_NE(ptx.find(cases[i].kernel.entries[1].name), std::string::npos) << cases[i].label;
    EXPECT_FALSE(std::regex_search(ptx, std::regex(R"(\.local|ld\.local|st\.local)")))
        << cases[i].label;
  }
}

// Every knob value emits kernels that compile, keep 16-byte accesses and
// tell the launcher their per-thread work.
TEST(CodegenTuning, EveryKnobValueCompiles) {
  std::vector<Case> cases;
  std::vector<LaunchTuning> tunings;
  for (int v : {1, 2, 4, 8, 16}) {
    LaunchTuning t;
    t.pw_vec_per_thread = v == 16 ? 8 : v;
    t.pw_block = v == 1 ? 1024 : 128;
    t.norm_vec_per_thread = v;
    t.norm_block = v == 16 ? 64 : 512;
    tunings.push_back(t);
  }
  for (const LaunchTuning& t : tunings) {
    const std::string label = t.to_string();
    PointwiseSpec chain = activation_chain(DType::BFloat16, DType::BFloat16);
    chain.tuning = t;
    const EmittedKernel pw = emit_pointwise(chain);
    EXPECT_EQ(pw.entries[0].elements_per_thread, 8 * t.pw_vec_per_thread) << label;
    cases.push_back({"chain " + label, pw});
    for (NormKind kind :
         {NormKind::SoftmaxForward, NormKind::LayerNormForward, NormKind::RmsNormForward}) {
      for (DType dtype : {DType::BFloat16, DType::Float32}) {
        for (bool aligned : {true, false}) {
          NormSpec norm = forward_norm(kind, dtype, aligned);
          norm.tuning = t;
          const EmittedKernel k = emit_norm(norm);
          const int vec = aligned ? 16 / dtype_size_bytes(dtype) : 1;
          EXPECT_EQ(k.entries[0].row_elements_per_thread, vec * t.norm_vec_per_thread) << label;
          cases.push_back({std::string(norm_kind_name(kind)) + "/" + name(dtype) + " " + label, k});
        }
      }
    }
  }
  const auto outcomes = compile_all(cases);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(outcomes[i].ok());
    const bool aligned = cases[i].kernel.entries[0].elements_per_thread > 1;
    if (aligned) {
      EXPECT_TRUE(has_16_byte_load(outcomes[i].kernel->image)) << cases[i].label;
    }
  }
}

// Note [Approximate math for 16-bit results]: fast forms only when every
// stored tensor is 16-bit; tanh.approx only for bf16 results.
TEST(CodegenTuning, ApproximateMathOnlyFor16BitResults) {
  const std::vector<Case> cases = {
      {"bf16", emit_pointwise(activation_chain(DType::BFloat16, DType::BFloat16))},
      {"f16", emit_pointwise(activation_chain(DType::Float16, DType::Float16))},
      {"f32 out", emit_pointwise(activation_chain(DType::BFloat16, DType::Float32))},
      {"softmax bf16", emit_norm(forward_norm(NormKind::SoftmaxForward, DType::BFloat16, true))},
      {"softmax f32", emit_norm(forward_norm(NormKind::SoftmaxForward, DType::Float32, true))},
  };
  const auto outcomes = compile_all(cases);
  auto ptx = [&](std::size_t i) { return outcomes[i].kernel->image; };
  auto has = [](const std::string& text, const char* what) {
    return text.find(what) != std::string::npos;
  };
  ASSERT_TRUE(outcomes[0].ok() && outcomes[1].ok() && outcomes[2].ok());
  EXPECT_TRUE(has(ptx(0), "tanh.approx.f32"));
  EXPECT_TRUE(has(ptx(0), "cvt.rn.bf16.f32"));
  EXPECT_FALSE(has(ptx(1), "tanh.approx.f32"));
  EXPECT_TRUE(has(ptx(1), "ex2.approx"));
  EXPECT_FALSE(has(ptx(2), "tanh.approx.f32"));
  EXPECT_FALSE(has(ptx(2), "div.approx"));
  EXPECT_TRUE(has(cases[3].kernel.source, "#define MB_APPROX_MATH 2"));
  EXPECT_FALSE(has(cases[4].kernel.source, "MB_APPROX_MATH"));
}

}  // namespace
}  // namespace mybackend

#else  // !MYBACKEND_WITH_CODEGEN

TEST(CodegenKinds, SkippedWithoutCuda) {
  GTEST_SKIP() << "mybackend_codegen is built only when CUDA is enabled";
}

#endif
