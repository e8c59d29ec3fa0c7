#include "codegen/emit_common.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "common/error.h"
#include "spec/pointwise_ops.h"

namespace mybackend {

std::size_t KernelParam::size_bytes() const {
  if (kind == Kind::Bytes) return bytes;
  return kind == Kind::Dims ? static_cast<std::size_t>(rank) * 8 : 8;
}

namespace emit {

std::string_view storage_type(DType dtype) {
  switch (dtype) {
    case DType::Bool: return "bool";
    case DType::UInt8: return "mb::u8";
    case DType::Int8: return "mb::i8";
    case DType::Int16: return "mb::i16";
    case DType::UInt16: return "mb::u16";
    case DType::Int32: return "mb::i32";
    case DType::UInt32: return "mb::u32";
    case DType::Int64: return "mb::i64";
    case DType::UInt64: return "mb::u64";
    case DType::Float16: return "mb::f16";
    case DType::BFloat16: return "mb::bf16";
    case DType::Float32: return "float";
    case DType::Float64: return "double";
    default: break;
  }
  MB_ASSERT(false, "no CUDA storage type for dtype ", dtype_name(dtype));
  return {};
}

std::string_view compute_type(DType dtype) {
  if (dtype == DType::Float16 || dtype == DType::BFloat16) return "float";
  return storage_type(dtype);
}

std::string_view index_type(bool index64) { return index64 ? "long long" : "int"; }

namespace {

std::string float_literal(DType dtype, double f) {
  const bool wide = dtype == DType::Float64;
  if (std::isnan(f)) return wide ? "mb::nan_f64()" : "mb::nan_f32()";
  if (std::isinf(f)) {
    std::string inf = wide ? "mb::inf_f64()" : "mb::inf_f32()";
    return f < 0 ? "(-" + inf + ")" : inf;
  }
  if (wide) return hexfloat(f);
  // Rounded to float here; fp16/bf16 literals round further on the device.
  std::string text = hexfloat(static_cast<double>(static_cast<float>(f))) + "f";
  if (dtype == DType::Float16) return "mb::round_f16(" + text + ")";
  if (dtype == DType::BFloat16) return "mb::round_bf16(" + text + ")";
  return text;
}

}  // namespace

std::string literal(DType dtype, double f, std::int64_t i) {
  if (is_floating(dtype)) return float_literal(dtype, f);
  if (dtype == DType::Bool) return i != 0 ? "true" : "false";
  if (dtype == DType::UInt64) return "(" + std::to_string(static_cast<std::uint64_t>(i)) + "ULL)";
  const std::string text =
      i == INT64_MIN ? "(-9223372036854775807LL - 1)" : std::to_string(i) + "LL";
  return "static_cast<" + std::string(compute_type(dtype)) + ">(" + text + ")";
}

std::string cast_expr(DType from, DType to, const std::string& expr) {
  if (to == DType::Bool) return from == DType::Bool ? expr : "(" + expr + " != 0)";
  if (to == DType::Float16) return "mb::round_f16(static_cast<float>(" + expr + "))";
  if (to == DType::BFloat16) return "mb::round_bf16(static_cast<float>(" + expr + "))";
  if (compute_type(from) == compute_type(to)) return expr;
  return "static_cast<" + std::string(compute_type(to)) + ">(" + expr + ")";
}

std::string hex16(std::uint64_t value) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(16, '0');
  for (int d = 15; d >= 0; --d, value >>= 4)
    out[static_cast<std::size_t>(d)] = kDigits[value & 0xf];
  return out;
}

int approx_math_level(const std::vector<DType>& stored) {
  if (stored.empty()) return 0;
  bool all_bf16 = true, all_16 = true;
  for (DType dtype : stored) {
    all_bf16 = all_bf16 && dtype == DType::BFloat16;
    all_16 = all_16 && (dtype == DType::BFloat16 || dtype == DType::Float16);
  }
  return all_bf16 ? 2 : (all_16 ? 1 : 0);
}

std::string approx_math_define(int level) {
  return level == 0 ? std::string() : "#define MB_APPROX_MATH " + std::to_string(level) + "\n";
}

std::string comment_block(const std::string& text) {
  std::ostringstream out;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) out << "// " << line << "\n";
  return out.str();
}

namespace {

std::string call(std::string_view fn, const std::vector<std::string>& a) {
  std::string out = "mb::" + std::string(fn) + "(";
  for (std::size_t k = 0; k < a.size(); ++k) out += (k ? ", " : "") + a[k];
  return out + ")";
}

// Arithmetic on narrow integers promotes to int in C++; the cast brings the
// result back to the instruction's type, which is also where it wraps.
std::string wrapped(DType dtype, const std::string& expr) {
  return "static_cast<" + std::string(compute_type(dtype)) + ">(" + expr + ")";
}

std::string bitwise_not(DType dtype, const std::string& a) {
  return dtype == DType::Bool ? "(!" + a + ")" : wrapped(dtype, "~" + a);
}

// Ops that are one mb:: call of the same name as in the device headers.
std::string_view device_function(PwOp op) {
  switch (op) {
    case PwOp::DivTrunc: return "div_trunc";
    case PwOp::DivFloor: return "div_floor";
    case PwOp::Abs: return "abs";
    case PwOp::Reciprocal: return "reciprocal";
    case PwOp::Pow: return "pow";
    case PwOp::Fmod: return "fmod";
    case PwOp::Remainder: return "remainder";
    case PwOp::Maximum: return "maximum";
    case PwOp::Minimum: return "minimum";
    case PwOp::Clamp: return "clamp";
    case PwOp::Sign: return "sign";
    case PwOp::Lerp: return "lerp";
    case PwOp::Exp: return "exp";
    case PwOp::Exp2: return "exp2";
    case PwOp::Expm1: return "expm1";
    case PwOp::Log: return "log";
    case PwOp::Log1p: return "log1p";
    case PwOp::Log2: return "log2";
    case PwOp::Sqrt: return "sqrt";
    case PwOp::Rsqrt: return "rsqrt";
    case PwOp::Sin: return "sin";
    case PwOp::Cos: return "cos";
    case PwOp::Tan: return "tan";
    case PwOp::Tanh: return "tanh";
    case PwOp::Erf: return "erf";
    case PwOp::Sigmoid: return "sigmoid";
    case PwOp::Relu: return "relu";
    case PwOp::GeluErf: return "gelu_erf";
    case PwOp::GeluTanh: return "gelu_tanh";
    case PwOp::Silu: return "silu";
    case PwOp::ThresholdBackward: return "threshold_backward";
    case PwOp::ReluBackward: return "relu_backward";
    case PwOp::SigmoidBackward: return "sigmoid_backward";
    case PwOp::TanhBackward: return "tanh_backward";
    case PwOp::SiluBackward: return "silu_backward";
    case PwOp::GeluErfBackward: return "gelu_erf_backward";
    case PwOp::GeluTanhBackward: return "gelu_tanh_backward";
    case PwOp::Floor: return "floor";
    case PwOp::Ceil: return "ceil";
    case PwOp::Round: return "round";
    case PwOp::Trunc: return "trunc";
    case PwOp::IsNan: return "is_nan";
    case PwOp::IsInf: return "is_inf";
    case PwOp::Shl: return "shl";
    case PwOp::Shr: return "shr";
    default: return {};
  }
}

// Ops written as C++ operators: the operator text.
std::string_view infix_operator(PwOp op) {
  switch (op) {
    case PwOp::Add: return "+";
    case PwOp::Sub: return "-";
    case PwOp::Mul: return "*";
    case PwOp::Div: return "/";
    case PwOp::Eq: return "==";
    case PwOp::Ne: return "!=";
    case PwOp::Lt: return "<";
    case PwOp::Le: return "<=";
    case PwOp::Gt: return ">";
    case PwOp::Ge: return ">=";
    case PwOp::BitAnd: return "&";
    case PwOp::BitOr: return "|";
    case PwOp::BitXor: return "^";
    default: return {};
  }
}

// The right-hand side of one instruction, given its operands' names.
std::string instr_expr(const PointwiseSpec& spec, const PwInstr& in,
                       const std::vector<std::string>& a) {
  const std::string_view fn = device_function(in.op);
  if (!fn.empty()) return call(fn, a);
  const std::string_view infix = infix_operator(in.op);
  const bool is_bool_result = pw_op_info(in.op).rule == PwRule::Compare;
  if (!infix.empty()) {
    const std::string expr = "(" + a[0] + " " + std::string(infix) + " " + a[1] + ")";
    return is_bool_result ? expr : wrapped(in.dtype, expr);
  }
  switch (in.op) {
    case PwOp::Load: return "x" + std::to_string(in.index);
    case PwOp::Scalar: return "s" + std::to_string(in.index);
    case PwOp::Coord: return "c" + std::to_string(in.index);
    case PwOp::Neg: return wrapped(in.dtype, "-" + a[0]);
    case PwOp::LogicalAnd: return "((" + a[0] + " != 0) && (" + a[1] + " != 0))";
    case PwOp::LogicalOr: return "((" + a[0] + " != 0) || (" + a[1] + " != 0))";
    case PwOp::LogicalXor: return "((" + a[0] + " != 0) != (" + a[1] + " != 0))";
    case PwOp::LogicalNot: return "(" + a[0] + " == 0)";
    case PwOp::BitNot: return bitwise_not(in.dtype, a[0]);
    case PwOp::Where: return "(" + a[0] + " ? " + a[1] + " : " + a[2] + ")";
    case PwOp::Cast:
      return cast_expr(spec.instrs[static_cast<std::size_t>(in.args[0])].dtype, in.dtype, a[0]);
    default: break;
  }
  MB_ASSERT(false, "no emission rule for pointwise op ", pw_op_name(in.op));
  return {};
}

}  // namespace

std::vector<bool> used_inputs(const PointwiseSpec& spec) {
  std::vector<bool> used(spec.inputs.size(), false);
  for (const auto& in : spec.instrs) {
    if (in.op == PwOp::Load) used[static_cast<std::size_t>(in.index)] = true;
  }
  return used;
}

// Note [Smooth divisions]
// An IEEE fp32 division is a subroutine of about a dozen instructions with a
// slow-path branch; hardswish's `/ 6` made MobileNet-v3's batch-1 batch norm
// + hardswish kernels 4.3 us against 3.0 us for the same kernel multiplying
// by 1/6 (H200). Where every tensor a kernel stores is 16-bit (Note
// [Approximate math for 16-bit results]), a division whose quotient reaches
// the stores through continuous ops only (arithmetic, min/max, activations,
// float casts, a select's values) is PTX div.full.f32: 2 ulps over the full
// range, far below the 2^-8 or 2^-11 the store rounds to. A quotient that
// anything discontinuous reads -- floor, round, a comparison, a remainder,
// an integer cast, a select's condition -- keeps the IEEE division, since
// there a 1-ulp error can move a result by a whole step (floor(12 / 6)).
// The emitter marks the divisions (mb::smooth_div); the device header picks
// the form by MB_APPROX_MATH.
std::vector<bool> smooth_values(const PointwiseSpec& spec) {
  auto passes_smoothly = [](PwOp op) {
    switch (op) {
      case PwOp::Add:
      case PwOp::Sub:
      case PwOp::Mul:
      case PwOp::Div:
      case PwOp::Neg:
      case PwOp::Abs:
      case PwOp::Reciprocal:
      case PwOp::Pow:
      case PwOp::Maximum:
      case PwOp::Minimum:
      case PwOp::Clamp:
      case PwOp::Lerp:
      case PwOp::Exp:
      case PwOp::Exp2:
      case PwOp::Expm1:
      case PwOp::Log:
      case PwOp::Log1p:
      case PwOp::Log2:
      case PwOp::Sqrt:
      case PwOp::Rsqrt:
      case PwOp::Sin:
      case PwOp::Cos:
      case PwOp::Tan:
      case PwOp::Tanh:
      case PwOp::Erf:
      case PwOp::Sigmoid:
      case PwOp::Relu:
      case PwOp::GeluErf:
      case PwOp::GeluTanh:
      case PwOp::Silu: return true;
      default: return false;
    }
  };
  std::vector<bool> smooth(spec.instrs.size(), true);
  // Users come after their operands: walk back, so each user's verdict is final.
  for (std::size_t id = spec.instrs.size(); id-- > 0;) {
    const PwInstr& in = spec.instrs[id];
    for (std::size_t k = 0; k < in.args.size(); ++k) {
      bool passes = passes_smoothly(in.op);
      if (in.op == PwOp::Where) passes = k > 0;  // the values, not the condition
      if (in.op == PwOp::Cast) passes = is_floating(in.dtype);
      if (!passes || !smooth[id]) smooth[static_cast<std::size_t>(in.args[k])] = false;
    }
  }
  return smooth;
}

std::string body_function(const PointwiseSpec& spec, std::string_view name) {
  std::ostringstream out;
  out << "__device__ __forceinline__ void " << name << "(";
  std::string sep;
  for (std::size_t k = 0; k < spec.inputs.size(); ++k, sep = ", ") {
    out << sep << "const " << compute_type(spec.inputs[k].dtype) << " x" << std::to_string(k);
  }
  for (std::size_t k = 0; k < spec.scalars.size(); ++k) {
    if (!spec.scalars[k].is_argument) continue;
    out << sep << "const " << compute_type(spec.scalars[k].dtype) << " s" << std::to_string(k);
    sep = ", ";
  }
  for (int a = 0; a < spec.coords; ++a, sep = ", ") out << sep << "const long long c" << a;
  for (std::size_t k = 0; k < spec.outputs.size(); ++k, sep = ", ") {
    out << sep << compute_type(spec.outputs[k].tensor.dtype) << "& y" << std::to_string(k);
  }
  out << ") {\n";
  for (std::size_t k = 0; k < spec.scalars.size(); ++k) {
    const PwScalar& s = spec.scalars[k];
    if (s.is_argument) continue;
    out << "  const " << compute_type(s.dtype) << " s" << std::to_string(k) << " = "
        << literal(s.dtype, s.f, s.i) << ";\n";
  }
  const std::vector<bool> smooth = smooth_values(spec);
  for (std::size_t id = 0; id < spec.instrs.size(); ++id) {
    const PwInstr& in = spec.instrs[id];
    std::vector<std::string> args;
    for (std::int32_t a : in.args) args.push_back("v" + std::to_string(a));
    const bool smooth_div = in.op == PwOp::Div && smooth[id] && is_floating(in.dtype);
    out << "  const " << compute_type(in.dtype) << " v" << std::to_string(id) << " = "
        << (smooth_div ? wrapped(in.dtype, call("smooth_div", args)) : instr_expr(spec, in, args))
        << ";  // " << pw_op_name(in.op) << (smooth_div ? " (Note [Smooth divisions])" : "")
        << "\n";
  }
  for (std::size_t k = 0; k < spec.outputs.size(); ++k) {
    out << "  y" << std::to_string(k) << " = v" << std::to_string(spec.outputs[k].value) << ";\n";
  }
  out << "}\n";
  return out.str();
}

std::string dense_vec_member(const PointwiseSpec& spec, const std::string& ptr_prefix,
                             std::string_view body, std::string_view name) {
  const std::vector<bool> used = used_inputs(spec);
  std::ostringstream src;
  src << "  template <int N>\n  __device__ __forceinline__ void " << name
      << "(const I i, Value (&y0)[N]) const {\n";
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    const std::string x = "x" + std::to_string(k);
    src << "    " << compute_type(spec.inputs[k].dtype) << " " << x << "[N];\n";
    if (used[k])
      src << "    mb::load_compute<N>(" << ptr_prefix << std::to_string(k) << " + i, " << x
          << ");\n";
  }
  src << "#pragma unroll\n    for (int k = 0; k < N; ++k) " << body << "("
      << body_call_args(spec, "x", "[k]", "s", "y", "[k]") << ");\n  }\n";
  return src.str();
}

std::string dense_held_members(const PointwiseSpec& spec, const std::string& ptr_prefix,
                               std::string_view body) {
  const std::vector<bool> used = used_inputs(spec);
  std::ostringstream held, hold, values;
  held << "  template <int N>\n  struct Held {\n";
  hold << "  template <int N>\n  __device__ __forceinline__ void hold(const I i, Held<N>& h) "
          "const {\n";
  values << "  template <int N>\n  __device__ __forceinline__ void values(const Held<N>& h, "
            "Value (&y0)[N]) const {\n#pragma unroll\n    for (int k = 0; k < N; ++k) {\n";
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    const std::string n = std::to_string(k);
    const DType dtype = spec.inputs[k].dtype;
    values << "      const " << compute_type(dtype) << " x" << n << " = ";
    if (!used[k]) {
      values << compute_type(dtype) << "(0);\n";
      continue;
    }
    held << "    " << storage_type(dtype) << " r" << n << "[N];\n";
    hold << "    mb::load_stored<N>(" << ptr_prefix << n << " + i, h.r" << n << ");\n";
    values << "mb::to_compute(h.r" << n << "[k]);\n";
  }
  held << "  };\n";
  hold << "  }\n";
  values << "      " << body << "(" << body_call_args(spec, "x", "", "s", "y", "[k]")
         << ");\n    }\n  }\n";
  return held.str() + hold.str() + values.str();
}

std::string body_call_args(const PointwiseSpec& spec, const std::string& in_prefix,
                           const std::string& in_suffix, const std::string& scalar_prefix,
                           const std::string& out_prefix, const std::string& out_suffix,
                           const std::string& coord_suffix) {
  std::string out;
  auto add = [&out](const std::string& item) { out += (out.empty() ? "" : ", ") + item; };
  for (std::size_t k = 0; k < spec.inputs.size(); ++k)
    add(in_prefix + std::to_string(k) + in_suffix);
  for (std::size_t k = 0; k < spec.scalars.size(); ++k) {
    if (spec.scalars[k].is_argument) add(scalar_prefix + std::to_string(k));
  }
  for (int a = 0; a < spec.coords; ++a) add("c" + std::to_string(a) + coord_suffix);
  for (std::size_t k = 0; k < spec.outputs.size(); ++k)
    add(out_prefix + std::to_string(k) + out_suffix);
  return out;
}

std::string scalar_locals(const PointwiseSpec& spec, const std::string& arg_prefix,
                          const std::string& indent) {
  std::ostringstream out;
  for (std::size_t k = 0; k < spec.scalars.size(); ++k) {
    const PwScalar& s = spec.scalars[k];
    if (!s.is_argument) continue;
    // Arguments arrive as double or int64 (Note [Kernel ABI]).
    const DType wire = is_floating(s.dtype) ? DType::Float64 : DType::Int64;
    out << indent << "const " << compute_type(s.dtype) << " s" << std::to_string(k) << " = "
        << cast_expr(wire, s.dtype, arg_prefix + std::to_string(k)) << ";\n";
  }
  return out.str();
}

std::string strided_offsets(const std::vector<OffsetTensor>& tensors, int rank,
                            const std::string& shape, const std::string& linear,
                            const std::string& indent, const std::string& divisors, int coords) {
  std::ostringstream out;
  for (const auto& t : tensors) out << indent << "I " << t.offset_var << " = 0;\n";
  for (int a = 0; a < coords; ++a) out << indent << "I c" << a << " = 0;\n";
  bool any_dims = false;
  for (const auto& t : tensors) any_dims = any_dims || t.rank > 0;
  if (!any_dims) return out.str();
  // Peel coordinates off the linear index from the innermost dim out; after
  // unrolling, every `d >= ...` test is a compile-time constant.
  out << indent << "{\n"
      << indent << "  I rem = " << linear << ";\n"
      << "#pragma unroll\n"
      << indent << "  for (int d = " << std::to_string(rank - 1) << "; d >= 0; --d) {\n"
      << indent << "    const I size = static_cast<I>(" << shape << ".d[d]);\n"
      << indent << "    if (d > 0 && size == 1) continue;  // Note [Coalesced dims]\n"
      << (divisors.empty() ? indent + "    const I coord = d > 0 ? rem % size : rem;\n" + indent +
                                 "    if (d > 0) rem /= size;\n"
                           : indent + "    I coord = rem;\n" + indent + "    if (d > 0) {\n" +
                                 indent + "      const I q = mb::fast_div(rem, " + divisors +
                                 ".d[d]);\n" + indent + "      coord = rem - q * size;\n" + indent +
                                 "      rem = q;\n" + indent + "    }\n");
  for (int a = 0; a < coords; ++a)  // Note [Concatenations in pointwise kernels]
    out << indent << "    if (d == coord_dim" << a << ") c" << a << " = coord;\n";
  for (const auto& t : tensors) {
    if (t.rank == 0) continue;
    const int lead = rank - t.rank;
    out << indent << "    if (d >= " << std::to_string(lead) << ") " << t.offset_var
        << " += coord * static_cast<I>(" << t.strides << ".d[d - " << std::to_string(lead)
        << "]);\n";
  }
  out << indent << "  }\n" << indent << "}\n";
  return out.str();
}

std::string periodic_offset(const TensorArg& t, const std::string& n, const std::string& linear,
                            const std::string& indent, bool divisors) {
  auto quotient = [&](const std::string& part) {
    return divisors ? "mb::fast_div(" + linear + ", " + part + "div_" + n + ")"
                    : "(" + linear + ") / static_cast<I>(" + part + n + ")";
  };
  const std::string period = "static_cast<I>(period_" + n + ")";
  if (t.mode == IndexMode::Periodic)
    return indent + "const I off_" + n + " = " + linear + " - " + quotient("period_") + " * " +
           period + ";\n";
  return indent + "const I off_" + n + " = " + linear + " + (" + quotient("block_") + " - " +
         quotient("period_") + ") * " + period + ";\n";
}

std::vector<std::string> periodic_params(const TensorArg& t, const std::string& n, bool divisors) {
  std::vector<std::string> names;
  if (!is_periodic(t.mode)) return names;
  for (const std::string part : {"period_", "block_"}) {
    if (part == "block_" && t.mode != IndexMode::PeriodicRows) continue;
    names.push_back(part + n);
    if (divisors) names.push_back(part + "div_" + n);
  }
  return names;
}

std::string dims_param(int rank, const std::string& name) {
  return "const mb::Dims<" + std::to_string(rank) + "> " + name;
}

}  // namespace emit
}  // namespace mybackend
