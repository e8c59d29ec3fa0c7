// Stage 8a on a GPU: generated kernels run and agree with double-precision
// host references. Skips where there is no GPU. libcuda is opened with
// dlopen so that this binary starts (and skips) on CPU-only machines.
#include <gtest/gtest.h>

#if MYBACKEND_WITH_CODEGEN

#include <cuda.h>  // types only: every driver call goes through dlsym
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "codegen/device_sources.h"
#include "codegen/emit.h"
#include "codegen/launch_tuning.h"
#include "codegen/nvrtc.h"
#include "spec/kernel_spec.h"
#include "spec/pointwise_ops.h"

namespace mybackend {
namespace {

// Short names: the specs below are written out in full.
constexpr DType kF32 = DType::Float32, kF16 = DType::Float16, kBF16 = DType::BFloat16,
                kF64 = DType::Float64, kI32 = DType::Int32, kI64 = DType::Int64, kB8 = DType::Bool,
                kU8 = DType::UInt8;
constexpr IndexMode kAligned = IndexMode::Aligned, kContiguous = IndexMode::Contiguous,
                    kStrided = IndexMode::Strided;
constexpr ReduceAxis kInner = ReduceAxis::Inner, kOuter = ReduceAxis::Outer;
constexpr ReduceStrategy kBlock = ReduceStrategy::BlockPerRow, kWarp = ReduceStrategy::WarpPerRow;

// The driver calls these tests make: (member, symbol). The _v2 names are
// what cuda.h's macros map the plain names to.
// clang-format off
#define MB_DRIVER_CALLS(X)                                                                      \
  X(init, cuInit) X(device_get, cuDeviceGet) X(attribute, cuDeviceGetAttribute)                 \
  X(retain, cuDevicePrimaryCtxRetain) X(set_current, cuCtxSetCurrent) X(load, cuModuleLoadData) \
  X(unload, cuModuleUnload) X(function, cuModuleGetFunction) X(alloc, cuMemAlloc_v2)            \
  X(free, cuMemFree_v2) X(htod, cuMemcpyHtoD_v2) X(dtoh, cuMemcpyDtoH_v2)                       \
  X(launch, cuLaunchKernel) X(sync, cuCtxSynchronize) X(error_string, cuGetErrorString)
// clang-format on

struct Driver {
#define MB_MEMBER(member, symbol) decltype(&symbol) member = nullptr;
  MB_DRIVER_CALLS(MB_MEMBER)
#undef MB_MEMBER
  int arch = 0;
  std::string why_not;  // empty: usable
};

Driver open_driver() {
  Driver d;
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);  // kept open for the process
  if (lib == nullptr) {
    d.why_not = "no libcuda.so.1";
    return d;
  }
#define MB_BIND(member, symbol) d.member = reinterpret_cast<decltype(&symbol)>(dlsym(lib, #symbol));
  MB_DRIVER_CALLS(MB_BIND)
#undef MB_BIND
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  int major = 0;
  int minor = 0;
  if (d.init == nullptr || d.init(0) != CUDA_SUCCESS || d.device_get(&dev, 0) != CUDA_SUCCESS ||
      d.retain(&ctx, dev) != CUDA_SUCCESS || d.set_current(ctx) != CUDA_SUCCESS) {
    d.why_not = "no usable CUDA device";
    return d;
  }
  d.attribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
  d.attribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
  d.arch = major * 10 + minor;
  return d;
}

const Driver& driver() {
  static const Driver d = open_driver();
  return d;
}

#define CU_OK(call)                                                  \
  do {                                                               \
    const CUresult r_ = (call);                                      \
    const char* s_ = nullptr;                                        \
    if (r_ != CUDA_SUCCESS) driver().error_string(r_, &s_);          \
    ASSERT_EQ(r_, CUDA_SUCCESS) << #call << ": " << (s_ ? s_ : "?"); \
  } while (0)

// ---- host values <-> device bytes ---------------------------------------------

struct Bf16 {
  std::uint16_t bits;
};

// A double as the host type T stores it (integers wrap, floats round to
// nearest even), and back.
template <class T>
T to_host(double v) {
  if constexpr (std::is_same_v<T, Bf16>) {
    const float f = static_cast<float>(v);
    std::uint32_t u = 0;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{static_cast<std::uint16_t>((u >> 16) | 0x40)};
    u += 0x7fffu + ((u >> 16) & 1u);
    return Bf16{static_cast<std::uint16_t>(u >> 16)};
  } else if constexpr (std::is_same_v<T, _Float16>) {
    return static_cast<_Float16>(static_cast<float>(v));
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    return static_cast<T>(static_cast<std::int64_t>(v));
  } else {
    return static_cast<T>(v);
  }
}
template <class T>
double from_host(T v) {
  if constexpr (std::is_same_v<T, Bf16>) {
    const std::uint32_t u = static_cast<std::uint32_t>(v.bits) << 16;
    float f = 0;
    std::memcpy(&f, &u, 4);
    return f;
  } else {
    return static_cast<double>(
        static_cast<std::conditional_t<std::is_same_v<T, _Float16>, float, T>>(v));
  }
}

// Calls f(T{}) for the host type T of `dtype`.
template <class F>
void visit(DType dtype, F&& f) {
  switch (dtype) {
    case kF32: return f(float{});
    case kF64: return f(double{});
    case kF16: return f(_Float16{});
    case kBF16: return f(Bf16{});
    case kB8: return f(bool{});
    case kU8: return f(std::uint8_t{});
    case kI32: return f(std::int32_t{});
    case kI64: return f(std::int64_t{});
    default: ADD_FAILURE() << "dtype not used by these tests";
  }
}

// The value after a round trip through `dtype` (what storing it does).
double round_to(DType dtype, double v) {
  double out = v;
  visit(dtype, [&](auto t) { out = from_host(to_host<decltype(t)>(v)); });
  return out;
}

std::vector<double> rounded(DType dtype, std::vector<double> v) {
  for (auto& x : v) x = round_to(dtype, x);
  return v;
}

std::vector<unsigned char> encode(DType dtype, const std::vector<double>& values) {
  std::vector<unsigned char> out(values.size() * dtype_size_bytes(dtype));
  visit(dtype, [&](auto t) {
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto x = to_host<decltype(t)>(values[i]);
      std::memcpy(out.data() + i * sizeof x, &x, sizeof x);
    }
  });
  return out;
}

std::vector<double> decode(DType dtype, const std::vector<unsigned char>& bytes) {
  std::vector<double> out(bytes.size() / dtype_size_bytes(dtype));
  visit(dtype, [&](auto t) {
    for (std::size_t i = 0; i < out.size(); ++i) {
      std::memcpy(&t, bytes.data() + i * sizeof t, sizeof t);
      out[i] = from_host(t);
    }
  });
  return out;
}

// A device buffer of `dtype` elements, freed on scope exit.
class Buffer {
 public:
  Buffer(DType dtype, const std::vector<double>& values) : dtype_(dtype), count_(values.size()) {
    const auto bytes = encode(dtype, values);
    driver().alloc(&ptr_, std::max<std::size_t>(bytes.size(), 16));
    driver().htod(ptr_, bytes.data(), bytes.size());
  }
  Buffer(DType dtype, std::size_t count, double fill = 0)
      : Buffer(dtype, std::vector<double>(count, fill)) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { driver().free(ptr_); }
  std::vector<double> read() const {
    std::vector<unsigned char> bytes(count_ * dtype_size_bytes(dtype_));
    driver().dtoh(bytes.data(), ptr_, bytes.size());
    return decode(dtype_, bytes);
  }
  CUdeviceptr ptr() const { return ptr_; }

 private:
  DType dtype_;
  std::size_t count_;
  CUdeviceptr ptr_ = 0;
};

// One kernel argument, in KernelEntry::params order.
struct Arg {
  KernelParam::Kind kind;
  std::vector<long long> words;  // pointer, int64, double bits, or dims
};
Arg ptr(const Buffer& b) { return {KernelParam::Kind::Pointer, {static_cast<long long>(b.ptr())}}; }
Arg i64(long long v) { return {KernelParam::Kind::Int64, {v}}; }
Arg f64(double v) {
  long long bits = 0;
  std::memcpy(&bits, &v, 8);
  return {KernelParam::Kind::Float64, {bits}};
}
Arg dims(std::vector<long long> v) { return {KernelParam::Kind::Dims, std::move(v)}; }

// The arguments of `entry`, looked up by parameter name (Note [Kernel ABI]).
std::vector<Arg> by_name(const KernelEntry& entry, const std::map<std::string, Arg>& named) {
  std::vector<Arg> args;
  for (const auto& p : entry.params) args.push_back(named.at(p.name));
  return args;
}

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!driver().why_not.empty()) GTEST_SKIP() << driver().why_not;
    d_ = &driver();
  }
  // Compiles `kernel` to CUBIN for this GPU, runs entry `which` on `grid`
  // blocks (of the entry's own shape, or `block_x` threads) and waits.
  void run(const EmittedKernel& kernel, std::size_t which, std::vector<Arg> args, unsigned grid = 3,
           int block_x = 0) {
    NvrtcOptions options;
    options.target = GpuTarget::parse("sm_" + std::to_string(d_->arch));
    CompiledKernel image;
    ASSERT_NO_THROW(image = compile_cuda(compile_request(kernel, options)));
    const KernelEntry& entry = kernel.entries.at(which);
    ASSERT_EQ(args.size(), entry.params.size()) << entry.name;
    std::vector<void*> pointers;
    for (std::size_t i = 0; i < args.size(); ++i) {
      ASSERT_EQ(args[i].kind, entry.params[i].kind) << entry.params[i].name;
      if (args[i].kind == KernelParam::Kind::Dims) {
        ASSERT_EQ(args[i].words.size(), (entry.params[i].rank));
      }
      pointers.push_back(args[i].words.data());
    }
    CUmodule module = nullptr;
    CU_OK(d_->load(&module, image.image.data()));
    std::unique_ptr<CUmod_st, std::function<void(CUmodule)>> guard(
        module, [this](CUmodule m) { d_->unload(m); });
    CUfunction fn = nullptr;
    CU_OK(d_->function(&fn, module, entry.name.c_str()));
    CU_OK(d_->launch(fn, grid, 1, 1, static_cast<unsigned>(block_x > 0 ? block_x : entry.block_x),
                     static_cast<unsigned>(entry.block_y), 1, 0, nullptr, pointers.data(),
                     nullptr));
    CU_OK(d_->sync());
  }
  const Driver* d_ = nullptr;
};

void expect_close(const std::vector<double>& got, const std::vector<double>& want, double rtol,
                  double atol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < got.size() && reported < 5; ++i) {
    const bool both_nan = std::isnan(got[i]) && std::isnan(want[i]);
    const bool same_inf = std::isinf(want[i]) && got[i] == want[i];
    if (both_nan || same_inf || std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i]))
      continue;
    ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i];
    ++reported;
  }
}

std::vector<double> random_values(std::size_t n, double lo, double hi, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// ---- pointwise ----------------------------------------------------------------

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}
double gelu_tanh_grad(double x) {
  const double k = std::sqrt(2 / M_PI);
  const double t = std::tanh(k * (x + 0.044715 * x * x * x));
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x);
}
double max_nan(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }
double min_nan(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); }

std::int64_t i64_of(double x) { return static_cast<std::int64_t>(x); }

// torch semantics in double; integer results wrap later (round_to).
double reference(PwOp op, double a, double b, double c) {
  switch (op) {
    case PwOp::Add: return a + b;
    case PwOp::Sub: return a - b;
    case PwOp::Mul: return a * b;
    case PwOp::Div: return a / b;
    case PwOp::DivTrunc: return std::trunc(a / b);
    case PwOp::DivFloor: return std::floor(a / b);
    case PwOp::Neg: return -a;
    case PwOp::Abs: return std::fabs(a);
    case PwOp::Reciprocal: return 1 / a;
    case PwOp::Pow: return std::pow(a, b);
    case PwOp::Fmod: return std::fmod(a, b);
    case PwOp::Remainder: return a - std::floor(a / b) * b;
    case PwOp::Maximum: return max_nan(a, b);
    case PwOp::Minimum: return min_nan(a, b);
    case PwOp::Clamp: return min_nan(max_nan(a, b), c);
    case PwOp::Sign: return (a > 0) - (a < 0);
    case PwOp::Lerp: return a + c * (b - a);
    case PwOp::Exp: return std::exp(a);
    case PwOp::Exp2: return std::exp2(a);
    case PwOp::Expm1: return std::expm1(a);
    case PwOp::Log: return std::log(a);
    case PwOp::Log1p: return std::log1p(a);
    case PwOp::Log2: return std::log2(a);
    case PwOp::Sqrt: return std::sqrt(a);
    case PwOp::Rsqrt: return 1 / std::sqrt(a);
    case PwOp::Sin: return std::sin(a);
    case PwOp::Cos: return std::cos(a);
    case PwOp::Tan: return std::tan(a);
    case PwOp::Tanh: return std::tanh(a);
    case PwOp::Erf: return std::erf(a);
    case PwOp::Sigmoid: return sigmoid(a);
    case PwOp::Relu: return std::isnan(a) ? a : std::max(a, 0.0);
    case PwOp::GeluErf: return 0.5 * a * (1 + std::erf(a / std::sqrt(2.0)));
    case PwOp::GeluTanh: return gelu_tanh(a);
    case PwOp::Silu: return a * sigmoid(a);
    case PwOp::ThresholdBackward: return b <= c ? 0 : a;
    case PwOp::ReluBackward: return b <= 0 ? 0 : a;
    case PwOp::SigmoidBackward: return a * (1 - b) * b;
    case PwOp::TanhBackward: return a * (1 - b * b);
    case PwOp::SiluBackward: return a * sigmoid(b) * (1 + b * (1 - sigmoid(b)));
    case PwOp::GeluErfBackward:
      return a * (0.5 * (1 + std::erf(b / std::sqrt(2.0))) +
                  b * std::exp(-0.5 * b * b) / std::sqrt(2 * M_PI));
    case PwOp::GeluTanhBackward: return a * gelu_tanh_grad(b);
    case PwOp::Floor: return std::floor(a);
    case PwOp::Ceil: return std::ceil(a);
    case PwOp::Round: return std::nearbyint(a);
    case PwOp::Trunc: return std::trunc(a);
    case PwOp::Eq: return a == b;
    case PwOp::Ne: return a != b;
    case PwOp::Lt: return a < b;
    case PwOp::Le: return a <= b;
    case PwOp::Gt: return a > b;
    case PwOp::Ge: return a >= b;
    case PwOp::IsNan: return std::isnan(a);
    case PwOp::IsInf: return std::isinf(a);
    case PwOp::LogicalAnd: return a != 0 && b != 0;
    case PwOp::LogicalOr: return a != 0 || b != 0;
    case PwOp::LogicalXor: return (a != 0) != (b != 0);
    case PwOp::LogicalNot: return a == 0;
    case PwOp::BitAnd: return static_cast<double>(i64_of(a) & i64_of(b));
    case PwOp::BitOr: return static_cast<double>(i64_of(a) | i64_of(b));
    case PwOp::BitXor: return static_cast<double>(i64_of(a) ^ i64_of(b));
    case PwOp::BitNot: return static_cast<double>(~i64_of(a));
    case PwOp::Shl: return b >= 32 ? 0 : static_cast<double>(i64_of(a) << i64_of(b));
    case PwOp::Shr: return static_cast<double>(i64_of(a) >> std::min<std::int64_t>(i64_of(b), 31));
    case PwOp::Where: return a != 0 ? b : c;
    default: return NAN;
  }
}

// Inputs inside each op's domain (and away from its poles).
std::vector<double> operand(PwOp op, int k, DType dtype, std::size_t n, unsigned seed) {
  auto any = [op](std::initializer_list<PwOp> ops) {
    return std::count(ops.begin(), ops.end(), op) > 0;
  };
  if (dtype == kI32) {
    if (any({PwOp::Shl, PwOp::Shr})) return random_values(n, k ? 0 : -1000, k ? 40 : 1000, seed);
    if (op == PwOp::Pow) return random_values(n, k ? 0 : -3, k ? 6 : 4, seed);
    std::vector<double> v = random_values(n, -60, 60, seed);
    for (auto& x : v) x = (k == 1 && std::trunc(x) == 0) ? 7 : std::trunc(x);  // k == 1: divisors
    return v;
  }
  if (any({PwOp::Log, PwOp::Log2, PwOp::Sqrt, PwOp::Rsqrt, PwOp::Reciprocal}))
    return random_values(n, 0.05, 8, seed);
  if (op == PwOp::Log1p) return random_values(n, -0.9, 8, seed);
  if (op == PwOp::Pow) return random_values(n, k ? -2 : 0.1, k ? 2 : 3, seed);
  if (any({PwOp::Div, PwOp::DivFloor, PwOp::DivTrunc, PwOp::Fmod, PwOp::Remainder})) {
    return random_values(n, k ? 0.5 : -20, k ? 3 : 20, seed);
  }
  if (op == PwOp::Lerp && k == 2) return random_values(n, 0, 1, seed);
  return random_values(n, -3, 3, seed);
}

// out = op(in0, in1, ...), every tensor `mode`, run on a GPU.
class GpuPointwise : public GpuTest {
 protected:
  void check_op(PwOp op, DType dtype, IndexMode mode) {
    const PwOpInfo& info = pw_op_info(op);
    const std::size_t n = 1003;  // not a multiple of any vector width: the tail runs too
    PointwiseSpec spec;
    std::vector<std::vector<double>> ins;
    std::vector<std::int32_t> args;
    for (int k = 0; k < info.arity; ++k) {
      const DType t = (op == PwOp::Where && k == 0) ? kB8 : dtype;
      std::vector<double> v = operand(op, k, dtype, n, 17 * (k + 1) + static_cast<unsigned>(op));
      for (auto& x : v) x = round_to(t, t == kB8 ? x > 0 : x);
      if (k == 0 && is_floating(dtype)) v[5] = NAN;  // NaN propagation
      ins.push_back(v);
      spec.inputs.push_back({t, mode, 0});
      spec.instrs.push_back({PwOp::Load, t, {}, k});
      args.push_back(static_cast<std::int32_t>(spec.instrs.size() - 1));
    }
    const bool boolean = info.rule == PwRule::Compare || info.rule == PwRule::Predicate ||
                         info.rule == PwRule::Logical;
    const DType out = boolean ? kB8 : dtype;
    spec.instrs.push_back({op, out, args, -1});
    spec.outputs.push_back({{out, mode, 0}, static_cast<std::int32_t>(spec.instrs.size() - 1)});
    ASSERT_EQ(validate(spec), "");
    std::vector<std::unique_ptr<Buffer>> buffers;
    std::vector<Arg> kargs;
    for (std::size_t k = 0; k < ins.size(); ++k) {
      buffers.push_back(std::make_unique<Buffer>(spec.inputs[k].dtype, ins[k]));
      kargs.push_back(ptr(*buffers.back()));
    }
    Buffer result(out, n);
    kargs.push_back(ptr(result));
    kargs.push_back(i64(static_cast<long long>(n)));
    run(emit_pointwise(spec), 0, kargs);
    std::vector<double> want(n);
    auto in = [&ins](std::size_t k, std::size_t i) { return k < ins.size() ? ins[k][i] : 0.0; };
    for (std::size_t i = 0; i < n; ++i)
      want[i] = round_to(out, reference(op, in(0, i), in(1, i), in(2, i)));
    const bool narrow = dtype == kF16 || dtype == kBF16;
    const double rtol = out == kF32 ? 2e-6 : narrow ? 1e-2 : 0;
    expect_close(result.read(), want, rtol, is_floating(out) ? 1e-6 : 0,
                 std::string(pw_op_name(op)) + "/" + std::string(dtype_short_name(dtype)));
  }
};

TEST_F(GpuPointwise, FloatOpsMatchReference) {
  for (PwOp op : all_pw_ops()) {
    const PwRule rule = pw_op_info(op).rule;
    if (rule == PwRule::SameInteger || rule == PwRule::SameIntOrBool || op == PwOp::Cast) continue;
    check_op(op, kF32, kAligned);
  }
  for (PwOp op : {PwOp::Add, PwOp::GeluErf, PwOp::Silu, PwOp::Maximum, PwOp::Exp}) {
    check_op(op, kBF16, kAligned);
    check_op(op, kF16, kContiguous);
  }
}

TEST_F(GpuPointwise, IntegerOpsMatchReference) {
  for (PwOp op : all_pw_ops()) {
    const PwRule rule = pw_op_info(op).rule;
    if (rule == PwRule::SameFloat || op == PwOp::Cast || op == PwOp::IsNan || op == PwOp::IsInf)
      continue;
    check_op(op, kI32, kAligned);
  }
}

// out[i,j,k] = a[i,j,k] * b[k] + s over a [4, 5, 6] iteration space: a is
// a transposed view, b a broadcast row, out a padded (non-contiguous) view.
TEST_F(GpuPointwise, StridedBroadcastAndPaddedOutput) {
  for (bool index64 : {false, true}) {
    PointwiseSpec spec;
    spec.rank = 3;
    spec.index64 = index64;
    spec.inputs = {{kF32, kStrided, 3}, {kF32, kStrided, 1}};
    spec.scalars = {PwScalar{kF32, true, 0, 0}};
    spec.instrs = {{PwOp::Load, kF32, {}, 0},
                   {PwOp::Load, kF32, {}, 1},
                   {PwOp::Mul, kF32, {0, 1}, -1},
                   {PwOp::Scalar, kF32, {}, 0},
                   {PwOp::Add, kF32, {2, 3}, -1}};
    spec.outputs = {{{kF32, kStrided, 3}, 4}};
    const std::vector<double> a = random_values(120, -2, 2, 1);
    const std::vector<double> b = random_values(6, -2, 2, 2);
    const double s = 0.25;
    Buffer da(kF32, a);
    Buffer db(kF32, b);
    Buffer out(kF32, 4 * 40, -7.0);  // out[i,j,k] at i*40 + j*7 + k
    run(emit_pointwise(spec), 0,
        {ptr(da), ptr(db), ptr(out), f64(s), i64(120), dims({4, 5, 6}), dims({1, 4, 20}), dims({1}),
         dims({40, 7, 1})});
    std::vector<double> want(4 * 40, -7.0);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 5; ++j)
        for (int k = 0; k < 6; ++k)
          want[i * 40 + j * 7 + k] = static_cast<float>(a[i + 4 * j + 20 * k] * b[k] + s);
    expect_close(out.read(), want, 1e-6, 1e-6, index64 ? "strided/i64" : "strided/i32");
  }
}

TEST_F(GpuPointwise, CastsRoundLikeTorch) {
  std::vector<double> in = random_values(1000, -300, 300, 5);
  in.insert(in.end(), {0.5, 1.5, 2.5, -0.5, 65504.0, 65520.0, 1e-8, -0.0, 0.0});
  for (auto& x : in) x = round_to(kF32, x);
  const std::vector<DType> targets = {kF16, kBF16, kF64, kI32, kB8};
  PointwiseSpec spec;
  spec.inputs = {{kF32, kAligned, 0}};
  spec.instrs = {{PwOp::Load, kF32, {}, 0}};
  Buffer din(kF32, in);
  std::vector<std::unique_ptr<Buffer>> outs;
  std::vector<Arg> args = {ptr(din)};
  for (DType t : targets) {
    spec.instrs.push_back({PwOp::Cast, t, {0}, -1});
    spec.outputs.push_back({{t, kAligned, 0}, static_cast<std::int32_t>(spec.instrs.size() - 1)});
    outs.push_back(std::make_unique<Buffer>(t, in.size()));
    args.push_back(ptr(*outs.back()));
  }
  args.push_back(i64(static_cast<long long>(in.size())));
  run(emit_pointwise(spec), 0, args);
  for (std::size_t k = 0; k < targets.size(); ++k) {
    std::vector<double> want(in.size());
    // Float to int truncates toward zero.
    for (std::size_t i = 0; i < in.size(); ++i)
      want[i] = round_to(targets[k], targets[k] == kI32 ? std::trunc(in[i]) : in[i]);
    expect_close(outs[k]->read(), want, 0, 0,
                 "cast to " + std::string(dtype_short_name(targets[k])));
  }
}

// ---- reductions -----------------------------------------------------------------

double reduce_reference(ReduceOp op, const std::vector<double>& v, double correction) {
  const double n = static_cast<double>(v.size());
  double sum = 0, prod = 1, m2 = 0;
  std::size_t arg = 0;  // the first NaN, else the first extreme
  const bool max = op == ReduceOp::Argmax || op == ReduceOp::Amax;
  for (std::size_t i = 0; i < v.size(); ++i) {
    sum += v[i];
    prod *= v[i];
    const bool better = std::isnan(v[i]) || (max ? v[i] > v[arg] : v[i] < v[arg]);
    if (!std::isnan(v[arg]) && better) arg = i;
  }
  for (double x : v) m2 += (x - sum / n) * (x - sum / n);
  const double var = m2 / std::max(0.0, n - correction);
  switch (op) {
    case ReduceOp::Sum: return sum;
    case ReduceOp::Mean: return sum / n;
    case ReduceOp::Prod: return prod;
    case ReduceOp::Var: return var;
    case ReduceOp::Std: return std::sqrt(var);
    case ReduceOp::Argmax:
    case ReduceOp::Argmin: return static_cast<double>(arg);
    default: return v[arg];  // amax, amin
  }
}

class GpuReduction : public GpuTest {
 protected:
  // Reduces a [outer, n, inner] tensor over n (Inner: inner == 1); with
  // chunk > 0 through the split entries (Note [Split outer reductions],
  // Note [Split inner reductions]) in chunks of that length.
  void check(ReduceOp op, DType dtype, ReduceAxis axis, ReduceStrategy strategy, long long outer,
             long long n, long long inner, long long chunk = 0) {
    ReductionSpec spec;
    spec.op = op;
    spec.axis = axis;
    spec.strategy = strategy;
    spec.input = {dtype, axis == kInner && strategy == kBlock ? kAligned : kContiguous, 0};
    const bool arg = op == ReduceOp::Argmax || op == ReduceOp::Argmin;
    spec.out_dtype = arg || (!is_floating(dtype) && op == ReduceOp::Sum) ? kI64 : dtype;
    spec.output = {spec.out_dtype, kContiguous, 0};
    ASSERT_EQ(validate(spec), "");
    std::vector<double> v = random_values((outer * n * inner), op == ReduceOp::Prod ? 0.9 : -2,
                                          op == ReduceOp::Prod ? 1.1 : 2, 11);
    for (auto& x : v) x = round_to(dtype, is_floating(dtype) ? x : x * 50);
    const bool nan_ok = op == ReduceOp::Amax || op == ReduceOp::Amin || arg;
    if (nan_ok && is_floating(dtype) && outer > 1) v[(1 * n + n / 2) * inner] = NAN;  // NaN wins
    Buffer in(dtype, v);
    Buffer out(spec.out_dtype, (outer * inner));
    const EmittedKernel kernel = emit_reduction(spec);
    std::map<std::string, Arg> named = {{"in0", ptr(in)}, {"out0", ptr(out)}, {"n", i64(n)}};
    named.insert({{"rows", i64(outer)}, {"outer", i64(outer)}, {"inner", i64(inner)}});
    if (chunk > 0) {
      ASSERT_EQ(kernel.entries.size(), 3u);
      // 32 bytes a partial, as the runtime sizes the workspace.
      const long long splits = (n + chunk - 1) / chunk;
      Buffer partials(kF64, static_cast<std::size_t>(splits * outer * inner * 4), NAN);
      named.insert({{"partials", ptr(partials)}, {"chunk", i64(chunk)}});
      run(kernel, 1, by_name(kernel.entries[1], named), 5);
      run(kernel, 2, by_name(kernel.entries[2], named), 2);
    } else {
      run(kernel, 0, by_name(kernel.entries[0], named), 5);
    }
    std::vector<double> want;
    for (long long o = 0; o < outer; ++o) {
      for (long long j = 0; j < inner; ++j) {
        std::vector<double> slice;
        for (long long r = 0; r < n; ++r) slice.push_back(v[(o * n + r) * inner + j]);
        want.push_back(round_to(spec.out_dtype, reduce_reference(op, slice, spec.correction)));
      }
    }
    const double tol = dtype == kF32 ? 2e-5 : dtype == kBF16 ? 2e-2 : 0;
    expect_close(out.read(), want, tol, tol,
                 std::string(reduce_op_name(op)) + "/" + std::string(reduce_axis_name(axis)) + "/" +
                     std::string(reduce_strategy_name(strategy)) + "/" + std::to_string(n) +
                     (chunk > 0 ? "/chunk" + std::to_string(chunk) : ""));
  }
};

TEST_F(GpuReduction, EveryOpAndLayoutMatchesReference) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Amax, ReduceOp::Amin, ReduceOp::Prod,
                      ReduceOp::Var, ReduceOp::Std, ReduceOp::Argmax, ReduceOp::Argmin}) {
    check(op, kF32, kInner, kBlock, 37, 300, 1);  // vector path
    check(op, kF32, kInner, kBlock, 7, 301, 1);   // scalar path
    check(op, kF32, kInner, kWarp, 37, 45, 1);
    check(op, kF32, kOuter, kBlock, 3, 50, 45);
  }
  check(ReduceOp::Sum, kBF16, kInner, kBlock, 5, 512, 1);
  check(ReduceOp::Var, kBF16, kOuter, kBlock, 2, 64, 33);
  check(ReduceOp::Sum, kI32, kInner, kBlock, 5, 1000, 1);
  check(ReduceOp::Argmax, kI32, kOuter, kBlock, 2, 64, 33);
}

// Note [Split inner reductions]: rows cut in chunks (the last one short)
// give what one block per row gives; argmax/argmin return indices within
// the whole row, mean and var divide by the whole row length. 256-element
// chunks read vectors; chunks of 102 (not whole vectors: never the
// runtime's choice) and rows of 1001 read scalars.
TEST_F(GpuReduction, SplitInnerMatchesReference) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Amax, ReduceOp::Var, ReduceOp::Std,
                      ReduceOp::Argmax, ReduceOp::Argmin}) {
    check(op, kF32, kInner, kBlock, 3, 2000, 1, 256);
    check(op, kF32, kInner, kBlock, 1, 1001, 1, 256);
    check(op, kF32, kInner, kBlock, 2, 1000, 1, 102);
  }
  check(ReduceOp::Sum, kBF16, kInner, kBlock, 37, 4096, 1, 512);
  check(ReduceOp::Argmax, kI32, kInner, kBlock, 3, 3000, 1, 768);
}

// out0[r] = sum_c f32(a[r,c]) * f32(b[r,c]) * rsqrt(s) + bias[r]; out1 = bf16(out0) at stride 2.
TEST_F(GpuReduction, PrologueAndEpilogue) {
  ReductionSpec spec;
  PointwiseSpec pro;
  pro.rank = 2;
  pro.inputs = {{kF16, kAligned, 0}, {kF16, kAligned, 0}};
  pro.instrs = {{PwOp::Load, kF16, {}, 0},
                {PwOp::Cast, kF32, {0}, -1},
                {PwOp::Load, kF16, {}, 1},
                {PwOp::Cast, kF32, {2}, -1},
                {PwOp::Mul, kF32, {1, 3}, -1}};
  pro.outputs = {{{kF32, kContiguous, 0}, 4}};
  spec.prologue = pro;
  PointwiseSpec epi;
  epi.inputs = {{kF32, kContiguous, 0}, {kF32, kContiguous, 0}};
  epi.scalars = {PwScalar{kF32, true, 0, 0}};
  epi.instrs = {{PwOp::Load, kF32, {}, 0},    {PwOp::Scalar, kF32, {}, 0},
                {PwOp::Rsqrt, kF32, {1}, -1}, {PwOp::Mul, kF32, {0, 2}, -1},
                {PwOp::Load, kF32, {}, 1},    {PwOp::Add, kF32, {3, 4}, -1},
                {PwOp::Cast, kBF16, {5}, -1}};
  epi.outputs = {{{kF32, kContiguous, 0}, 5}, {{kBF16, kStrided, 1}, 6}};
  spec.epilogue = epi;
  ASSERT_EQ(validate(spec), "");
  const long long rows = 19, n = 520;
  const std::vector<double> a = rounded(kF16, random_values(rows * n, -1, 1, 3));
  const std::vector<double> b = rounded(kF16, random_values(rows * n, -1, 1, 4));
  const std::vector<double> bias = random_values(rows, -1, 1, 5);
  Buffer da(kF16, a), db(kF16, b), dbias(kF32, bias);
  Buffer out0(kF32, rows), out1(kBF16, (2 * rows));
  run(emit_reduction(spec), 0,
      {ptr(da), ptr(db), ptr(dbias), ptr(out0), ptr(out1), f64(4.0), i64(rows), i64(n),
       dims({rows}), dims({2})});
  std::vector<double> want0, want1((2 * rows), 0.0);
  for (long long r = 0; r < rows; ++r) {
    double s = 0;
    for (long long c = 0; c < n; ++c) s += a[r * n + c] * b[r * n + c];
    want0.push_back(s * 0.5 + bias[r]);
    want1[2 * r] = round_to(kBF16, want0.back());
  }
  expect_close(out0.read(), want0, 1e-5, 1e-5, "out0");
  expect_close(out1.read(), want1, 1e-2, 1e-2, "out1");
}

// ---- norms --------------------------------------------------------------------

// Host references for one row, in double.
struct RowStats {
  double mean = 0, rstd = 0;
};
RowStats stats(const double* x, long long cols, bool rms, double eps) {
  double sum = 0, sq = 0;
  for (long long c = 0; c < cols; ++c) sum += x[c];
  const double mean = rms ? 0 : sum / static_cast<double>(cols);
  for (long long c = 0; c < cols; ++c) sq += (x[c] - mean) * (x[c] - mean);
  return {mean, 1 / std::sqrt(sq / static_cast<double>(cols) + eps)};
}

// Expected outputs of one norm problem: y (forward), grad_in, grad_weight,
// grad_bias; the backward softmax kinds read x as the forward output.
struct NormWant {
  std::vector<double> y, gx, dw, db, mean, rstd;
};

NormWant norm_reference(NormKind kind, long long rows, long long cols, const std::vector<double>& x,
                        const std::vector<double>& g, const std::vector<double>& w,
                        const std::vector<double>& bias) {
  const bool rms = kind == NormKind::RmsNormForward || kind == NormKind::RmsNormBackward;
  const double n = static_cast<double>(cols);
  NormWant want;
  want.y.resize(x.size());
  want.gx.resize(x.size());
  want.dw.assign(cols, 0);
  want.db = want.dw;
  for (long long r = 0; r < rows; ++r) {
    const std::size_t base = (r * cols);
    const RowStats st = stats(&x[base], cols, rms, 1e-5);
    want.mean.push_back(st.mean);
    want.rstd.push_back(st.rstd);
    double mx = -INFINITY, se = 0, s1 = 0, s2 = 0, sg = 0, sgy = 0;
    for (long long c = 0; c < cols; ++c) mx = std::max(mx, x[base + c]);
    for (long long c = 0; c < cols; ++c) {
      const std::size_t i = base + c, k = c;
      const double xhat = (x[i] - st.mean) * st.rstd;
      se += std::exp(x[i] - mx);
      s1 += g[i] * w[k];
      s2 += g[i] * w[k] * xhat;
      sg += g[i];
      sgy += g[i] * x[i];
      want.dw[k] += g[i] * xhat;
      want.db[k] += g[i];
    }
    for (long long c = 0; c < cols; ++c) {
      const std::size_t i = base + c, k = c;
      const double xhat = (x[i] - st.mean) * st.rstd, wg = g[i] * w[k];
      switch (kind) {
        case NormKind::SoftmaxForward: want.y[i] = std::exp(x[i] - mx) / se; break;
        case NormKind::LogSoftmaxForward: want.y[i] = x[i] - mx - std::log(se); break;
        case NormKind::LayerNormForward: want.y[i] = xhat * w[k] + bias[k]; break;
        case NormKind::RmsNormForward: want.y[i] = x[i] * st.rstd * w[k]; break;
        case NormKind::SoftmaxBackward: want.gx[i] = x[i] * (g[i] - sgy); break;
        case NormKind::LogSoftmaxBackward: want.gx[i] = g[i] - std::exp(x[i]) * sg; break;
        case NormKind::LayerNormBackward:
          want.gx[i] = st.rstd * (wg - s1 / n - xhat * s2 / n);
          break;
        case NormKind::RmsNormBackward: want.gx[i] = st.rstd * (wg - xhat * s2 / n); break;
        default: break;  // cross-entropy and batch norm have tests of their own
      }
    }
  }
  return want;
}

class GpuNorm : public GpuTest {
 protected:
  // Weight and bias are fp32 (mixed precision) and present where allowed.
  void check(NormKind kind, DType dtype, long long rows, long long cols, bool aligned) {
    NormSpec spec;
    spec.kind = kind;
    spec.dtype = spec.out_dtype = dtype;
    spec.aligned = aligned;
    const bool ln = kind == NormKind::LayerNormForward || kind == NormKind::LayerNormBackward;
    spec.has_weight = ln || kind == NormKind::RmsNormForward || kind == NormKind::RmsNormBackward;
    spec.has_bias = ln;
    ASSERT_EQ(validate(spec), "");
    const std::size_t total = (rows * cols);
    const std::vector<double> x = rounded(dtype, random_values(total, -3, 3, 21));
    const std::vector<double> g = rounded(dtype, random_values(total, -1, 1, 22));
    const std::vector<double> w = random_values(cols, 0.5, 1.5, 23);
    const std::vector<double> bias = random_values(cols, -1, 1, 24);
    const NormWant want = norm_reference(kind, rows, cols, x, g, w, bias);
    Buffer dx(dtype, x), dg(dtype, g), dw(kF32, w), dbias(kF32, bias), dmean(kF32, want.mean),
        drstd(kF32, want.rstd);
    Buffer grad_w(kF32, cols), grad_b(kF32, cols);
    // Parameter grads in row chunks (Note [Split parameter grads]): three
    // chunks, the last one short whenever rows is not a multiple of three.
    const long long splits = std::min<long long>(3, rows);
    Buffer partials(kF32, static_cast<std::size_t>(2 * splits * cols));
    const EmittedKernel kernel = emit_norm(spec);
    const bool forward = kind == NormKind::SoftmaxForward || kind == NormKind::LogSoftmaxForward ||
                         kind == NormKind::LayerNormForward || kind == NormKind::RmsNormForward;
    const std::string what = std::string(norm_kind_name(kind)) + "/" +
                             std::string(dtype_short_name(dtype)) + "/" + std::to_string(cols);
    const double tol = dtype == kF32 ? 1e-4 : 3e-2;
    // The entries one launch runs: every one of a backward norm, in order;
    // for a forward norm its register-path entry, and apart from it the
    // row-per-block entry, as norm_kernel.cpp launches it: sized to the row,
    // and only for rows of whole vectors that fit a block (Note [Wide rows
    // for few rows]). Each forward entry writes fresh outputs, checked alone.
    std::vector<std::vector<std::size_t>> launches;
    std::vector<int> block_x;
    if (forward) {
      launches.push_back({0});
      block_x.push_back(0);
      if (kernel.entries.size() == 2) {
        const int threads = norm_row_block_threads(kernel.entries[1], cols);
        if (cols % kernel.entries[1].elements_per_thread != 0) {
          EXPECT_EQ(threads, 0) << what;
        }
        if (threads > 0) {
          launches.push_back({1});
          block_x.push_back(threads);
        }
      }
    } else {
      launches.emplace_back();
      for (std::size_t e = 0; e < kernel.entries.size(); ++e) launches.back().push_back(e);
      block_x.push_back(0);
    }
    for (std::size_t l = 0; l < launches.size(); ++l) {
      const std::string label = what + (l > 0 ? "/" + kernel.entries[launches[l][0]].name : "");
      Buffer out(dtype, total), out_mean(kF32, rows), out_rstd(kF32, rows);
      // By Note [Kernel ABI] name; softmax backward reads the forward output as "out".
      const std::map<std::string, Arg> named = {{"x", ptr(dx)},
                                                {"out", ptr(dx)},
                                                {"grad_out", ptr(dg)},
                                                {"weight", ptr(dw)},
                                                {"bias", ptr(dbias)},
                                                {"y", ptr(out)},
                                                {"grad_in", ptr(out)},
                                                {"mean", ptr(forward ? out_mean : dmean)},
                                                {"rows", i64(rows)},
                                                {"rstd", ptr(forward ? out_rstd : drstd)},
                                                {"cols", i64(cols)},
                                                {"grad_weight", ptr(grad_w)},
                                                {"eps", f64(1e-5)},
                                                {"grad_bias", ptr(grad_b)},
                                                {"partials", ptr(partials)},
                                                {"splits", i64(splits)}};
      for (std::size_t e : launches[l])
        run(kernel, e, by_name(kernel.entries[e], named), 4, block_x[l]);
      expect_close(out.read(), rounded(dtype, forward ? want.y : want.gx), tol, tol, label);
      if (forward && spec.has_weight)
        expect_close(out_rstd.read(), want.rstd, tol, tol, label + "/rstd");
      if (forward && ln) expect_close(out_mean.read(), want.mean, tol, tol, label + "/mean");
    }
    if (!forward && spec.has_weight) {
      ASSERT_EQ(kernel.entries.size(), 3u);
      expect_close(grad_w.read(), want.dw, tol, tol, what + "/grad_weight");
      if (ln) expect_close(grad_b.read(), want.db, tol, tol, what + "/grad_bias");
    }
  }
};

TEST_F(GpuNorm, EveryKindMatchesReference) {
  for (NormKind kind :
       {NormKind::SoftmaxForward, NormKind::LogSoftmaxForward, NormKind::SoftmaxBackward,
        NormKind::LogSoftmaxBackward, NormKind::LayerNormForward, NormKind::LayerNormBackward,
        NormKind::RmsNormForward, NormKind::RmsNormBackward}) {
    check(kind, kF32, 9, 1000, true);  // vector path
    check(kind, kF32, 9, 999, true);   // rows not 16-byte multiples: scalar path
    check(kind, kBF16, 5, 1024, true);
    check(kind, kF32, 3, 77, false);
    // Note [Rows in registers]: a row longer than the register path holds
    // (256 threads x 4 vectors of 4 fp32 at the default knobs) takes the
    // loop path; short rows share a warp (8-wide bf16 vectors, 2 threads
    // per row) and the last row group of the grid is ragged.
    check(kind, kF32, 2, 5000, true);
    check(kind, kBF16, 37, 40, true);
    // Note [Scalar rows in registers]: a window's 49 scores and ViT's 197
    // tokens, bf16 (not whole 8-wide vectors), many rows to a block.
    check(kind, kBF16, 301, 49, true);
    check(kind, kBF16, 67, 197, true);
  }
}

}  // namespace
}  // namespace mybackend

#else  // !MYBACKEND_WITH_CODEGEN

TEST(CodegenGpu, SkippedWithoutCuda) {
  GTEST_SKIP() << "mybackend_codegen is built only when CUDA is enabled";
}

#endif
