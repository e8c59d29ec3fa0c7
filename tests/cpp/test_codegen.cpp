// Stage 8a: pointwise specs, the NVRTC wrapper and the compile pool. Every
// emitted kernel is compiled with NVRTC to PTX for compute_90 (no GPU
// needed); reductions and norms are in test_codegen_kinds.cpp.
#include <gtest/gtest.h>

#if MYBACKEND_WITH_CODEGEN

#include <algorithm>
#include <limits>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "codegen/compile_pool.h"
#include "codegen/device_sources.h"
#include "codegen/emit.h"
#include "codegen/emit_common.h"
#include "codegen/nvrtc.h"
#include "common/error.h"
#include "common/hash.h"
#include "ptx_testing.h"
#include "spec/kernel_spec.h"
#include "spec/pointwise_ops.h"

namespace mybackend {
namespace {

const std::vector<DType> kFloats = {DType::Float32, DType::Float16, DType::BFloat16,
                                    DType::Float64};
const std::vector<DType> kInts = {DType::Int8,  DType::UInt8,  DType::Int16, DType::UInt16,
                                  DType::Int32, DType::UInt32, DType::Int64, DType::UInt64};

std::vector<DType> all_dtypes() {
  std::vector<DType> all = kFloats;
  all.insert(all.end(), kInts.begin(), kInts.end());
  all.push_back(DType::Bool);
  return all;
}

// The dtypes an op's rule allows for its result (Cast: for its operand).
std::vector<DType> dtypes_for(PwRule rule) {
  std::vector<DType> out;
  switch (rule) {
    case PwRule::SameFloat: return kFloats;
    case PwRule::SameInteger: return kInts;
    case PwRule::SameNumeric:
      out = kFloats;
      out.insert(out.end(), kInts.begin(), kInts.end());
      return out;
    case PwRule::SameIntOrBool:
      out = kInts;
      out.push_back(DType::Bool);
      return out;
    default: return all_dtypes();
  }
}

TensorArg tensor(DType dtype, IndexMode mode, int rank) { return TensorArg{dtype, mode, rank}; }

// One op applied to fresh inputs, result stored. `mode` applies to every
// tensor; Strided makes the last operand a broadcast of lower rank, and an
// odd `variant` turns the second operand into a scalar (literal or argument).
PointwiseSpec op_spec(PwOp op, DType dtype, IndexMode mode, int variant, bool index64 = false) {
  const PwOpInfo& info = pw_op_info(op);
  PointwiseSpec spec;
  spec.rank = mode == IndexMode::Strided ? 3 : 1;
  spec.index64 = index64;
  DType result = dtype;
  if (info.rule == PwRule::Compare || info.rule == PwRule::Predicate ||
      info.rule == PwRule::Logical) {
    result = DType::Bool;
  }
  if (info.rule == PwRule::Cast)
    result = dtype == DType::Float32 ? DType::BFloat16 : DType::Float32;
  std::vector<std::int32_t> args;
  for (int k = 0; k < info.arity; ++k) {
    const DType operand = (info.rule == PwRule::Where && k == 0) ? DType::Bool : dtype;
    const bool as_scalar = k == 1 && variant % 2 == 1;
    if (as_scalar) {
      const bool argument = variant % 4 == 3;
      spec.scalars.push_back(PwScalar{operand, argument, 0.1, 3});
      spec.instrs.push_back(
          PwInstr{PwOp::Scalar, operand, {}, static_cast<std::int32_t>(spec.scalars.size() - 1)});
    } else {
      const int rank = (mode == IndexMode::Strided && k == info.arity - 1) ? 1 : spec.rank;
      spec.inputs.push_back(tensor(operand, mode, rank));
      spec.instrs.push_back(
          PwInstr{PwOp::Load, operand, {}, static_cast<std::int32_t>(spec.inputs.size() - 1)});
    }
    args.push_back(static_cast<std::int32_t>(spec.instrs.size() - 1));
  }
  spec.instrs.push_back(PwInstr{op, result, args, -1});
  spec.outputs.push_back(
      PwOutput{tensor(result, mode, spec.rank), static_cast<std::int32_t>(spec.instrs.size() - 1)});
  return spec;
}

struct Case {
  std::string label;
  EmittedKernel kernel;
};

NvrtcOptions ptx_options() {
  NvrtcOptions options;
  options.target = GpuTarget::parse("compute_90");
  return options;
}

// Compiles every case through the pool; each failure reports its label,
// NVRTC's log and the source.
std::vector<CompileOutcome> compile_all(const std::vector<Case>& cases,
                                        const NvrtcOptions& options = ptx_options()) {
  std::vector<CompileRequest> requests;
  for (const auto& c : cases) requests.push_back(compile_request(c.kernel, options));
  std::vector<CompileOutcome> outcomes = CompilePool().compile(requests);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    EXPECT_TRUE(outcomes[i].ok()) << cases[i].label << ": " << outcomes[i].error << "\n"
                                  << cases[i].kernel.source;
  }
  return outcomes;
}

// ld.global.nc.v4.u32, st.global.v4.f32, st.global.v2.f64, ...: one
// 16-byte access per instruction.
bool has_16_byte_access(const std::string& ptx, const std::string& op) {
  const std::regex pattern(op + R"(\.global(\.nc)?\.(v4\.[bfsu]32|v2\.[bfsu]64)\s)");
  return std::regex_search(ptx, pattern);
}

IndexMode mode_for(std::size_t i) {
  static constexpr IndexMode kModes[] = {IndexMode::Aligned, IndexMode::Strided,
                                         IndexMode::Contiguous};
  return kModes[i % 3];
}

TEST(CodegenPointwise, EveryOpCompilesAcrossDtypesAndModes) {
  std::vector<Case> cases;
  std::set<DType> dtypes_seen;
  std::set<IndexMode> modes_seen;
  std::size_t n = 0;
  for (PwOp op : all_pw_ops()) {
    const std::vector<DType> allowed = dtypes_for(pw_op_info(op).rule);
    // Two samples per op, rotating through its dtypes, modes and scalar
    // variants, so that each dtype and mode meets many ops.
    for (int sample = 0; sample < 2; ++sample, ++n) {
      const DType dtype = allowed[(n * 5 + static_cast<std::size_t>(sample)) % allowed.size()];
      const IndexMode mode = mode_for(n);
      dtypes_seen.insert(dtype);
      modes_seen.insert(mode);
      const PointwiseSpec spec = op_spec(op, dtype, mode, static_cast<int>(n));
      ASSERT_EQ(validate(spec), "") << spec.to_string();
      cases.push_back({std::string(pw_op_name(op)) + "/" + std::string(dtype_short_name(dtype)) +
                           "/" + std::string(index_mode_name(mode)),
                       emit_pointwise(spec)});
    }
  }
  EXPECT_EQ(dtypes_seen.size(), all_dtypes().size());
  EXPECT_EQ(modes_seen.size(), 3u);
  compile_all(cases);
}

// Every dtype to every dtype: one kernel per source dtype, one output per
// target (several outputs per kernel on purpose).
TEST(CodegenPointwise, CastsBetweenAllDtypes) {
  std::vector<Case> cases;
  for (DType from : all_dtypes()) {
    PointwiseSpec spec;
    spec.inputs = {tensor(from, IndexMode::Aligned, 0)};
    spec.instrs = {PwInstr{PwOp::Load, from, {}, 0}};
    for (DType to : all_dtypes()) {
      spec.instrs.push_back(PwInstr{PwOp::Cast, to, {0}, -1});
      spec.outputs.push_back(PwOutput{tensor(to, IndexMode::Aligned, 0),
                                      static_cast<std::int32_t>(spec.instrs.size() - 1)});
    }
    ASSERT_EQ(validate(spec), "");
    cases.push_back({"cast from " + std::string(dtype_short_name(from)), emit_pointwise(spec)});
  }
  compile_all(cases);
}

// A fused chain as the planner would build it: bf16 in, math in fp32,
// explicit casts, literal and argument scalars, two outputs.
PointwiseSpec fused_chain(IndexMode mode, bool index64) {
  PointwiseSpec spec;
  spec.rank = 2;
  spec.index64 = index64;
  // Strided: the second input is a broadcast row (rank 1).
  spec.inputs = {tensor(DType::BFloat16, mode, 2),
                 tensor(DType::Float32, mode, mode == IndexMode::Strided ? 1 : 0)};
  spec.scalars = {PwScalar{DType::Float32, false, 0.5, 0}, PwScalar{DType::Float32, true, 0, 0}};
  spec.instrs = {
      {PwOp::Load, DType::BFloat16, {}, 0},        {PwOp::Cast, DType::Float32, {0}, -1},
      {PwOp::Load, DType::Float32, {}, 1},         {PwOp::Add, DType::Float32, {1, 2}, -1},
      {PwOp::Scalar, DType::Float32, {}, 0},       {PwOp::Mul, DType::Float32, {3, 4}, -1},
      {PwOp::GeluTanh, DType::Float32, {5}, -1},   {PwOp::Scalar, DType::Float32, {}, 1},
      {PwOp::Maximum, DType::Float32, {6, 7}, -1}, {PwOp::Cast, DType::BFloat16, {8}, -1},
      {PwOp::Gt, DType::Bool, {6, 7}, -1},
  };
  spec.outputs = {{tensor(DType::BFloat16, mode, 2), 9}, {tensor(DType::Bool, mode, 2), 10}};
  return spec;
}

TEST(CodegenPointwise, VectorizedKernelsUse16ByteAccesses) {
  std::vector<Case> cases;
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    cases.push_back({"relu/" + std::string(dtype_short_name(dtype)),
                     emit_pointwise(op_spec(PwOp::Relu, dtype, IndexMode::Aligned, 0))});
  }
  cases.push_back({"fused chain", emit_pointwise(fused_chain(IndexMode::Aligned, false))});
  const auto outcomes = compile_all(cases);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    ASSERT_TRUE(outcomes[i].ok());
    const std::string& ptx = outcomes[i].kernel->image;
    EXPECT_TRUE(has_16_byte_access(ptx, "ld")) << cases[i].label << ": no 16-byte load in\n" << ptx;
    EXPECT_TRUE(has_16_byte_access(ptx, "st")) << cases[i].label << ": no 16-byte store in\n"
                                               << ptx;
    EXPECT_GT(cases[i].kernel.entries[0].elements_per_thread, 1);
  }
}

TEST(CodegenPointwise, StridedKernelsUseScalarAccessesAndTakeShapes) {
  const PointwiseSpec spec = fused_chain(IndexMode::Strided, false);
  const EmittedKernel kernel = emit_pointwise(spec);
  const auto outcomes = compile_all({{"strided chain", kernel}});
  ASSERT_TRUE(outcomes[0].ok());
  EXPECT_FALSE(has_16_byte_access(outcomes[0].kernel->image, "ld"));
  EXPECT_FALSE(has_16_byte_access(outcomes[0].kernel->image, "st"));
  // Sizes are arguments (Note [Specs hold no sizes]): numel, the shape, its
  // divisors (Note [Divisors as multipliers]) and one stride set per
  // strided tensor, with the broadcast input's rank.
  std::vector<std::string> names;
  for (const auto& p : kernel.entries[0].params)
    names.push_back(p.name +
                    (p.kind == KernelParam::Kind::Dims ? "/" + std::to_string(p.rank) : ""));
  const std::vector<std::string> expected = {
      "in0",     "in1",         "out0",         "out1",         "scalar1",       "numel",
      "shape/2", "shape_div/2", "stride_in0/2", "stride_in1/1", "stride_out0/2", "stride_out1/2"};
  EXPECT_EQ(names, expected);
}

// Note [Divisors as multipliers]: the 32-bit variant finds coordinates by
// multiply and shift; the 64-bit variant and the knob's 0 keep division.
TEST(CodegenPointwise, ThirtyTwoBitIndexMathDividesByMultiplying) {
  // std::regex recurses per character on long PTX: plain searches.
  auto divides = [](const std::string& ptx) {
    for (const char* op :
         {"div.s32", "div.u32", "rem.s32", "rem.u32", "div.s64", "div.u64", "rem.s64", "rem.u64"}) {
      if (ptx.find(op) != std::string::npos) return true;
    }
    return false;
  };
  PointwiseSpec plain = fused_chain(IndexMode::Strided, false);
  plain.tuning.pw_fast_divisors = 0;
  const auto outcomes =
      compile_all({{"fast divisors", emit_pointwise(fused_chain(IndexMode::Strided, false))},
                   {"plain division", emit_pointwise(plain)},
                   {"index64", emit_pointwise(fused_chain(IndexMode::Strided, true))}});
  ASSERT_TRUE(outcomes[0].ok() && outcomes[1].ok() && outcomes[2].ok());
  EXPECT_FALSE(divides(outcomes[0].kernel->image));
  EXPECT_NE(outcomes[0].kernel->image.find("mul.hi.u32"), std::string::npos);
  EXPECT_TRUE(divides(outcomes[1].kernel->image));
  EXPECT_TRUE(divides(outcomes[2].kernel->image));
  const EmittedKernel plain_kernel = emit_pointwise(plain);
  for (const auto& p : plain_kernel.entries[0].params) EXPECT_NE(p.name, "shape_div");
}

// Note [Vectors beside strided inputs]: a broadcast input alone keeps the
// aligned activation and outputs in 16-byte vectors.
TEST(CodegenPointwise, AlignedTensorsBesideABroadcastStayVectorized) {
  PointwiseSpec spec = fused_chain(IndexMode::Aligned, false);
  spec.inputs[1] = tensor(DType::Float32, IndexMode::Strided, 1);  // a per-column scale
  ASSERT_EQ(validate(spec), "");
  const EmittedKernel kernel = emit_pointwise(spec);
  EXPECT_NE(kernel.source.find("shape.d[1]) % VEC == 0 ? numel / VEC : 0"), std::string::npos)
      << kernel.source;
  EXPECT_GT(kernel.entries[0].elements_per_thread, 1);
  const auto outcomes = compile_all({{"aligned beside a broadcast", kernel}});
  ASSERT_TRUE(outcomes[0].ok());
  EXPECT_TRUE(has_16_byte_access(outcomes[0].kernel->image, "ld"));
  EXPECT_TRUE(has_16_byte_access(outcomes[0].kernel->image, "st"));
}

// relu((x - mean) * rsqrt(var + eps) * weight + bias) over a channels-last
// bf16 activation: the activation and the output aligned, the four
// per-channel operands strided (rank 4, broadcast over N, H, W).
PointwiseSpec channels_last_batch_norm_relu() {
  PointwiseSpec spec;
  spec.rank = 4;
  spec.inputs = {tensor(DType::BFloat16, IndexMode::Aligned, 0)};
  for (int k = 0; k < 4; ++k) spec.inputs.push_back(tensor(DType::BFloat16, IndexMode::Strided, 4));
  spec.scalars = {PwScalar{DType::Float32, false, 1e-3, 0}};
  auto add = [&spec](PwOp op, DType dtype, std::vector<std::int32_t> args, int index = -1) {
    spec.instrs.push_back({op, dtype, std::move(args), index});
    return static_cast<std::int32_t>(spec.instrs.size() - 1);
  };
  auto load = [&](int k) {
    return add(PwOp::Cast, DType::Float32, {add(PwOp::Load, DType::BFloat16, {}, k)});
  };
  const auto centred = add(PwOp::Sub, DType::Float32, {load(0), load(1)});
  const auto eps = add(PwOp::Scalar, DType::Float32, {}, 0);
  const auto inv_std =
      add(PwOp::Rsqrt, DType::Float32, {add(PwOp::Add, DType::Float32, {load(2), eps})});
  const auto scaled =
      add(PwOp::Mul, DType::Float32, {add(PwOp::Mul, DType::Float32, {centred, inv_std}), load(3)});
  const auto shifted = add(PwOp::Add, DType::Float32, {scaled, load(4)});
  const auto relu = add(PwOp::Relu, DType::Float32, {shifted});
  const auto stored = add(PwOp::Cast, DType::BFloat16, {relu});
  spec.outputs = {{tensor(DType::BFloat16, IndexMode::Aligned, 0), stored}};
  return spec;
}

// Note [Vectors held at storage width]: the five-operand batch norm kernel
// stays at few enough registers for 10 or more blocks of 128 threads a SM
// (71 when every operand's vector was converted to float first).
TEST(CodegenPointwise, VectorsAreHeldAtStorageWidth) {
  const PointwiseSpec spec = channels_last_batch_norm_relu();
  ASSERT_EQ(validate(spec), "");
  const EmittedKernel kernel = emit_pointwise(spec);
  EXPECT_EQ(kernel.source.find("float x0[UNROLL][VEC]"), std::string::npos) << kernel.source;
  EXPECT_NE(kernel.source.find("mb::bf16 raw0[UNROLL][VEC]"), std::string::npos) << kernel.source;
  NvrtcOptions cubin;
  cubin.target = GpuTarget::parse("sm_90");
  const auto outcomes = compile_all({{"batch norm + relu", kernel}}, cubin);
  ASSERT_TRUE(outcomes[0].ok());
  const int registers = cubin_registers(outcomes[0].kernel->image, kernel.entries[0].name);
  EXPECT_GT(registers, 0);
  EXPECT_LE(registers, 48) << kernel.source;  // 40 with NVRTC 13.0
}

// Note [Periodic operands]: the per-channel operands read at i mod period,
// one 16-byte load each, with no shape and no strides.
TEST(CodegenPointwise, PeriodicInputsAreVectorsAtTheirOffset) {
  PointwiseSpec spec = channels_last_batch_norm_relu();
  for (std::size_t k = 1; k < spec.inputs.size(); ++k)
    spec.inputs[k] = tensor(DType::BFloat16, IndexMode::Periodic, 0);
  ASSERT_EQ(validate(spec), "");
  const EmittedKernel kernel = emit_pointwise(spec);
  std::vector<std::string> params;
  for (const auto& p : kernel.entries[0].params) params.push_back(p.name);
  EXPECT_EQ(std::count(params.begin(), params.end(), "shape"), 0);
  EXPECT_EQ(std::count(params.begin(), params.end(), "stride_in1"), 0);
  EXPECT_EQ(std::count(params.begin(), params.end(), "period_in4"), 1);
  EXPECT_EQ(std::count(params.begin(), params.end(), "period_div_in4"), 1);
  EXPECT_EQ(std::count(params.begin(), params.end(), "block_div_in4"), 0);
  PointwiseSpec rows = spec;
  rows.inputs[4] = tensor(DType::BFloat16, IndexMode::PeriodicRows, 0);
  const EmittedKernel rows_kernel = emit_pointwise(rows);
  std::vector<std::string> row_params;
  for (const auto& p : rows_kernel.entries[0].params) row_params.push_back(p.name);
  EXPECT_EQ(std::count(row_params.begin(), row_params.end(), "block_div_in4"), 1);
  EXPECT_EQ(std::count(row_params.begin(), row_params.end(), "block_div_in3"), 0);
  EXPECT_EQ(kernel.entries[0].elements_per_thread, 8);
  PointwiseSpec wide = spec;
  wide.index64 = true;
  const EmittedKernel wide_kernel = emit_pointwise(wide);
  for (const auto& p : wide_kernel.entries[0].params) EXPECT_NE(p.name, "period_div_in1");
  const auto outcomes = compile_all(
      {{"periodic", kernel}, {"periodic index64", wide_kernel}, {"periodic rows", rows_kernel}});
  ASSERT_TRUE(outcomes[0].ok() && outcomes[1].ok() && outcomes[2].ok());
  const std::string& ptx = outcomes[0].kernel->image;
  const std::regex load(k16ByteLoad);
  EXPECT_EQ(
      std::distance(std::sregex_iterator(ptx.begin(), ptx.end(), load), std::sregex_iterator()), 5)
      << ptx;
  EXPECT_FALSE(has(ptx, kLocalMemory));
  EXPECT_FALSE(has(ptx, R"(div\.[su]32)")) << "the 32-bit variant divides by multiplying";
}

TEST(CodegenSpec, OnlyPointwiseInputsArePeriodic) {
  PointwiseSpec spec = channels_last_batch_norm_relu();
  spec.outputs[0].tensor.mode = IndexMode::Periodic;
  EXPECT_NE(validate(spec).find("only a pointwise input may be periodic"), std::string::npos);
}

// Note [Smooth divisions]: y = x / s (rounded to `stored`), or floor(x / s).
PointwiseSpec divided(DType stored, bool floored) {
  PointwiseSpec spec;
  spec.inputs = {tensor(DType::BFloat16, IndexMode::Aligned, 0)};
  spec.scalars = {PwScalar{DType::Float32, true, 6.0, 0}};
  spec.instrs = {{PwOp::Load, DType::BFloat16, {}, 0},
                 {PwOp::Cast, DType::Float32, {0}, -1},
                 {PwOp::Scalar, DType::Float32, {}, 0},
                 {PwOp::Div, DType::Float32, {1, 2}, -1}};
  if (floored) spec.instrs.push_back({PwOp::Floor, DType::Float32, {3}, -1});
  spec.instrs.push_back({PwOp::Cast, stored, {floored ? 4 : 3}, -1});
  spec.outputs = {
      {tensor(stored, IndexMode::Aligned, 0), static_cast<int>(spec.instrs.size() - 1)}};
  return spec;
}

TEST(CodegenPointwise, SmoothDivisionsAreApproximateOnlyFor16BitStores) {
  const PointwiseSpec bf16 = divided(DType::BFloat16, false);
  EXPECT_EQ(emit::smooth_values(bf16), (std::vector<bool>{true, true, true, true, true}));
  const PointwiseSpec floored = divided(DType::BFloat16, true);
  EXPECT_EQ(emit::smooth_values(floored),
            (std::vector<bool>{false, false, false, false, true, true}));
  const auto outcomes = compile_all({{"bf16 store", emit_pointwise(bf16)},
                                     {"f32 store", emit_pointwise(divided(DType::Float32, false))},
                                     {"floored", emit_pointwise(floored)}});
  ASSERT_TRUE(outcomes[0].ok() && outcomes[1].ok() && outcomes[2].ok());
  EXPECT_NE(outcomes[0].kernel->image.find("div.full.f32"), std::string::npos);
  EXPECT_EQ(outcomes[0].kernel->image.find("div.rn.f32"), std::string::npos);
  EXPECT_NE(outcomes[1].kernel->image.find("div.rn.f32"), std::string::npos);
  EXPECT_EQ(outcomes[1].kernel->image.find("div.full.f32"), std::string::npos);
  EXPECT_NE(outcomes[2].kernel->image.find("div.rn.f32"), std::string::npos);
  EXPECT_EQ(outcomes[2].kernel->image.find("div.full.f32"), std::string::npos);
}

TEST(CodegenPointwise, Index64AndCubin) {
  const EmittedKernel wide = emit_pointwise(fused_chain(IndexMode::Strided, true));
  EXPECT_NE(wide.source.find("typedef long long I;"), std::string::npos);
  const EmittedKernel narrow = emit_pointwise(fused_chain(IndexMode::Strided, false));
  EXPECT_NE(narrow.source.find("typedef int I;"), std::string::npos);
  compile_all({{"index64", wide},
               {"index64 aligned", emit_pointwise(fused_chain(IndexMode::Aligned, true))}});

  NvrtcOptions cubin;
  cubin.target = GpuTarget::parse("sm_90");
  const auto outcomes = compile_all({{"cubin", narrow}}, cubin);
  ASSERT_TRUE(outcomes[0].ok());
  EXPECT_EQ(outcomes[0].kernel->kind, ImageKind::Cubin);
  EXPECT_EQ(outcomes[0].kernel->image.substr(0, 4), std::string("\x7f"
                                                                "ELF"));
}

TEST(CodegenPointwise, EmissionIsDeterministicAndNamedByHash) {
  const PointwiseSpec spec = fused_chain(IndexMode::Aligned, false);
  const EmittedKernel a = emit_pointwise(spec);
  const EmittedKernel b = emit_pointwise(fused_chain(IndexMode::Aligned, false));
  EXPECT_EQ(a.source, b.source);
  ASSERT_EQ(a.entries.size(), 1u);
  EXPECT_NE(a.entries[0].name.find("mb_pointwise_"), std::string::npos);
  EXPECT_NE(a.entries[0].name,
            emit_pointwise(fused_chain(IndexMode::Contiguous, false)).entries[0].name);
  // The source carries its spec as a comment, for dumps.
  EXPECT_NE(a.source.find("// pointwise rank=2"), std::string::npos);
}

// Note [Scalars as kernel arguments]: y = x * scale + shift, for two values of
// scale, is one program; 0, +-1, infinities and 16-bit scalars stay literals.
TEST(CodegenPointwise, ScalarsBecomeArgumentsSoValuesShareAProgram) {
  auto scaled = [](double scale) {
    PointwiseSpec spec = op_spec(PwOp::Mul, DType::Float32, IndexMode::Aligned, 1);
    spec.scalars[0].f = scale;
    return spec;
  };
  PointwiseSpec a = scaled(1.0 / 3136), b = scaled(1.0 / 784);
  EXPECT_NE(emit_pointwise(a).source, emit_pointwise(b).source);  // literals differ
  make_scalars_arguments(a);
  make_scalars_arguments(b);
  ASSERT_TRUE(a.scalars[0].is_argument);
  const EmittedKernel ka = emit_pointwise(a);
  EXPECT_EQ(ka.source, emit_pointwise(b).source);
  EXPECT_EQ(ka.entries[0].name, emit_pointwise(b).entries[0].name);
  bool has_scalar_param = false;
  for (const KernelParam& p : ka.entries[0].params)
    has_scalar_param |= p.name == "scalar0" && p.kind == KernelParam::Kind::Float64;
  EXPECT_TRUE(has_scalar_param);
  compile_all({{"scalar argument", ka}});

  for (double kept : {0.0, 1.0, -1.0, std::numeric_limits<double>::infinity()}) {
    PointwiseSpec literal = scaled(kept);
    make_scalars_arguments(literal);
    EXPECT_FALSE(literal.scalars[0].is_argument) << kept;
  }
  PointwiseSpec half = op_spec(PwOp::Mul, DType::BFloat16, IndexMode::Aligned, 1);
  make_scalars_arguments(half);
  EXPECT_FALSE(half.scalars[0].is_argument);
}

TEST(CodegenSpec, PointwiseTextIsStable) {
  PointwiseSpec spec;
  spec.rank = 2;
  spec.inputs = {tensor(DType::Float16, IndexMode::Aligned, 0),
                 tensor(DType::Float32, IndexMode::Strided, 1)};
  spec.scalars = {PwScalar{DType::Float32, false, 0.1, 0}, PwScalar{DType::Int64, true, 0, 0}};
  spec.instrs = {{PwOp::Load, DType::Float16, {}, 0},
                 {PwOp::Cast, DType::Float32, {0}, -1},
                 {PwOp::Load, DType::Float32, {}, 1},
                 {PwOp::Scalar, DType::Float32, {}, 0},
                 {PwOp::Clamp, DType::Float32, {1, 2, 3}, -1}};
  spec.outputs = {{tensor(DType::Float32, IndexMode::Contiguous, 0), 4}};
  const std::string expected =
      "pointwise rank=2 index=i32 threads=256\n"
      "  in0 f16 aligned\n"
      "  in1 f32 strided rank=1\n"
      "  sc0 f32 = 0x1.999999999999ap-4\n"
      "  sc1 i64 = arg\n"
      "  %0 = load in0 : f16\n"
      "  %1 = cast %0 : f32\n"
      "  %2 = load in1 : f32\n"
      "  %3 = scalar sc0 : f32\n"
      "  %4 = clamp %1, %2, %3 : f32\n"
      "  out0 f32 contiguous = %4\n";
  EXPECT_EQ(spec.to_string(), expected);
  EXPECT_EQ(spec.hash(), fnv1a64(expected));
  PointwiseSpec other = spec;
  other.index64 = true;
  EXPECT_NE(other.hash(), spec.hash());
}

TEST(CodegenSpec, OpNamesRoundTrip) {
  for (PwOp op : all_pw_ops()) EXPECT_EQ(pw_op_from_name(pw_op_name(op)), op);
  EXPECT_EQ(pw_op_from_name("no_such_op"), std::nullopt);
}

TEST(CodegenSpec, ValidateExplainsRejections) {
  auto base = [] { return op_spec(PwOp::Add, DType::Float32, IndexMode::Aligned, 0); };
  PointwiseSpec s = base();
  s.instrs[2].args = {0};
  EXPECT_NE(validate(s).find("takes 2 operands"), std::string::npos) << validate(s);
  s = base();
  s.instrs[2].args = {0, 2};
  EXPECT_NE(validate(s).find("not an earlier value"), std::string::npos) << validate(s);
  s = base();
  s.inputs[1].dtype = DType::Float16;
  s.instrs[1].dtype = DType::Float16;
  EXPECT_NE(validate(s).find("share one non-bool dtype"), std::string::npos) << validate(s);
  s = op_spec(PwOp::Exp, DType::Int32, IndexMode::Aligned, 0);
  EXPECT_NE(validate(s).find("floating"), std::string::npos) << validate(s);
  s = base();
  s.outputs[0].tensor.dtype = DType::Float64;
  EXPECT_NE(validate(s).find("out0"), std::string::npos) << validate(s);
  s = base();
  s.inputs[0].dtype = DType::Complex64;
  EXPECT_NE(validate(s).find("not supported"), std::string::npos) << validate(s);
  s = base();
  s.threads = 100;
  EXPECT_NE(validate(s).find("threads"), std::string::npos);
  s = base();
  s.outputs.clear();
  EXPECT_FALSE(validate(s).empty());
  EXPECT_THROW(emit_pointwise(s), InternalError);
}

TEST(CodegenNvrtc, TargetsParseAndPrint) {
  EXPECT_EQ(GpuTarget::parse("sm_90").name(), "sm_90");
  EXPECT_TRUE(GpuTarget::parse("sm_90").cubin);
  EXPECT_FALSE(GpuTarget::parse("compute_80").cubin);
  EXPECT_EQ(GpuTarget::parse("compute_90a").name(), "compute_90a");
  EXPECT_THROW(GpuTarget::parse("hopper"), Error);
  EXPECT_THROW(GpuTarget::parse("sm_"), Error);
  const std::vector<int> archs = nvrtc_supported_archs();
  EXPECT_NE(std::find(archs.begin(), archs.end(), 90), archs.end());
  EXPECT_FALSE(nvrtc_version().empty());
}

TEST(CodegenNvrtc, OptionsAreIeeeByDefault) {
  NvrtcOptions options;
  const auto strings = options.to_strings();
  EXPECT_EQ(std::find(strings.begin(), strings.end(), "--use_fast_math"), strings.end());
  EXPECT_NE(std::find(strings.begin(), strings.end(), "-std=c++17"), strings.end());
  EXPECT_NE(std::find(strings.begin(), strings.end(), "-default-device"), strings.end());
  options.lineinfo = true;
  options.fast_math = true;
  const auto more = options.to_strings();
  EXPECT_NE(std::find(more.begin(), more.end(), "-lineinfo"), more.end());
  EXPECT_NE(std::find(more.begin(), more.end(), "--use_fast_math"), more.end());
}

TEST(CodegenNvrtc, FailureCarriesCallAndLog) {
  CompileRequest request;
  request.name = "broken.cu";
  request.source = "extern \"C\" __global__ void k() { this_is_not_declared = 1; }\n";
  request.options = ptx_options();
  try {
    compile_cuda(request);
    FAIL() << "expected a compile error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("nvrtcCompileProgram"), std::string::npos) << what;
    EXPECT_NE(what.find("NVRTC_ERROR_COMPILATION"), std::string::npos) << what;
    EXPECT_NE(what.find("this_is_not_declared"), std::string::npos) << what;
    EXPECT_NE(what.find("broken.cu"), std::string::npos) << what;
  }
}

TEST(CodegenPool, ResultsKeepRequestOrderAndIsolateFailures) {
  std::vector<CompileRequest> requests;
  std::vector<std::string> names;
  for (PwOp op : {PwOp::Exp, PwOp::Log, PwOp::Sin, PwOp::Cos, PwOp::Tanh}) {
    const EmittedKernel kernel = emit_pointwise(op_spec(op, DType::Float32, IndexMode::Aligned, 0));
    requests.push_back(compile_request(kernel, ptx_options()));
    names.push_back(kernel.entries[0].name);
  }
  requests[2].source += "\n#error deliberately broken\n";
  const auto outcomes = CompilePool(4).compile(requests);
  ASSERT_EQ(outcomes.size(), requests.size());
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    if (i == 2) {
      EXPECT_FALSE(outcomes[i].ok());
      EXPECT_NE(outcomes[i].error.find("deliberately broken"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(outcomes[i].ok()) << outcomes[i].error;
    EXPECT_NE(outcomes[i].kernel->image.find(".entry " + names[i]), std::string::npos);
  }
}

TEST(CodegenPool, ParallelForRethrowsLowestIndex) {
  CompilePool pool(2);
  std::vector<int> done(10, 0);
  try {
    pool.parallel_for(done.size(), [&](std::size_t i) {
      done[i] = 1;
      if (i == 3 || i == 7) throw Error("item " + std::to_string(i));
    });
    FAIL() << "expected a throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "item 3");
  }
  EXPECT_EQ(std::count(done.begin(), done.end(), 1), 10);
  pool.parallel_for(0, [](std::size_t) { FAIL(); });
}

TEST(CodegenDeviceSources, AreEmbeddedInOrder) {
  const auto& sources = device_sources();
  ASSERT_FALSE(sources.empty());
  EXPECT_EQ(sources.front().name, "mb_types.cuh");
  for (const auto& s : sources) EXPECT_NE(s.text.find("#pragma once"), std::string::npos) << s.name;
}

#ifdef MYBACKEND_CUDA_INCLUDE_DIR
// The generated kernels need no toolkit headers (Note [No toolkit
// headers]); a source that wants cuda_fp16.h gets it through include_paths.
TEST(CodegenNvrtc, ToolkitHeadersNeedAnIncludePath) {
  CompileRequest request;
  request.name = "fp16.cu";
  request.source =
      "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
      "extern \"C\" __global__ void k(__half* h, __nv_bfloat16* b) { h[0] = __float2half(1.f); "
      "b[0] = __float2bfloat16(2.f); }\n";
  request.options = ptx_options();
  EXPECT_THROW(compile_cuda(request), Error);
  request.options.include_paths = {MYBACKEND_CUDA_INCLUDE_DIR};
  EXPECT_FALSE(compile_cuda(request).image.empty());
}
#endif

}  // namespace
}  // namespace mybackend

#else  // !MYBACKEND_WITH_CODEGEN

TEST(Codegen, SkippedWithoutCuda) {
  GTEST_SKIP() << "mybackend_codegen is built only when CUDA is enabled";
}

#endif
