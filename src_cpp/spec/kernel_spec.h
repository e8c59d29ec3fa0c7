// Stage 8a input: kernel specs, the printable parameter structs a fusion
// planner fills in and an emitter turns into CUDA C++ (practice "decide,
// then parametrise, then emit").
//
// Note [Specs hold no sizes]
// A spec fixes dtypes, ranks, index modes and the computation, never a size:
// numel, row counts, reduction lengths, shapes and strides are kernel
// arguments. One compiled kernel therefore serves every batch size and
// every dynamic shape, and the source (and its cache key) changes only
// when the computation does.
//
// Note [Spec text is the identity]
// to_string() prints every field in a fixed order; hash() is fnv1a64 of
// that text. Two specs with equal text are the same kernel. Adding a field
// means printing it, or two different kernels would share a hash.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ir/dtype.h"
#include "spec/launch_tuning.h"

namespace mybackend {

// Strided tensors take at most this many dims; the planner coalesces
// contiguous dims before it gets here.
constexpr int kMaxKernelRank = 8;

// How a kernel finds element i (a linear index, row-major, into the
// iteration space) of a tensor.
enum class IndexMode : std::int8_t {
  // At ptr[i], and ptr is 16-byte aligned: may be read with 16-byte vectors.
  Aligned,
  // At ptr[i], with no alignment promise: scalar accesses.
  Contiguous,
  // At ptr[sum_d coord_d * stride_d]: per-dim strides are kernel arguments;
  // stride 0 broadcasts. A tensor of rank r < the iteration rank R lines up
  // with the last r dims (numpy broadcasting).
  Strided,
  // At ptr[i mod period] (PeriodicLayout: block is the walk's numel),
  // 16-byte aligned, period a multiple of the kernel's vector width: a
  // tensor dense over the innermost dims of the iteration space and repeated
  // over all the others (a per-channel operand beside channels-last
  // activations, a bias over the last dim). The period is a kernel argument.
  // Pointwise inputs only (Note [Periodic operands] in
  // fusion/pointwise_planner.h).
  Periodic,
  // The same with rows: at ptr[i mod period + (i div block) * period], dense
  // again over the outermost dims (a squeeze-excitation gate [N, C] over a
  // channels-last [N, H, W, C]). Period and block are kernel arguments.
  PeriodicRows,
};

std::string_view index_mode_name(IndexMode mode);

inline bool is_periodic(IndexMode mode) {
  return mode == IndexMode::Periodic || mode == IndexMode::PeriodicRows;
}

// Elements per 16-byte access of a pointwise kernel whose tensors have
// `dtypes`: its narrowest dtype decides (8 at most).
int pointwise_vector_width(const std::vector<DType>& dtypes);

struct TensorArg {
  DType dtype = DType::Float32;
  IndexMode mode = IndexMode::Contiguous;
  int rank = 0;  // Strided only: the number of strides the kernel takes
};

// ---- pointwise --------------------------------------------------------------

// Each op's arity and dtype rule live in one table (pointwise_ops.cpp).
// clang-format off
enum class PwOp : std::int16_t {
  // Leaves: no SSA operands.
  Load,    // input `index`
  Scalar,  // scalar `index`
  Coord,   // i64: the walk's coordinate along coordinate axis `index` (Note [Concatenations in pointwise kernels])
  // Arithmetic.
  Add, Sub, Mul, Div, DivTrunc, DivFloor, Neg, Abs, Reciprocal, Pow, Fmod, Remainder,
  Maximum, Minimum, Clamp, Sign, Lerp,
  // Transcendental (floating only).
  Exp, Exp2, Expm1, Log, Log1p, Log2, Sqrt, Rsqrt, Sin, Cos, Tan, Tanh, Erf,
  // Activations and their backward forms (first operand: the incoming grad).
  Sigmoid, Relu, GeluErf, GeluTanh, Silu,
  ThresholdBackward,  // (grad, x, threshold): x <= threshold ? 0 : grad
  ReluBackward,       // (grad, y)
  SigmoidBackward,    // (grad, y)
  TanhBackward,       // (grad, y)
  SiluBackward,       // (grad, x)
  GeluErfBackward,    // (grad, x)
  GeluTanhBackward,   // (grad, x)
  // Rounding.
  Floor, Ceil, Round, Trunc,
  // Comparisons and predicates (result bool).
  Eq, Ne, Lt, Le, Gt, Ge, IsNan, IsInf,
  // Logic (operands any dtype, tested against zero; result bool).
  LogicalAnd, LogicalOr, LogicalXor, LogicalNot,
  // Bitwise (integers and bool; shifts integers only).
  BitAnd, BitOr, BitXor, BitNot, Shl, Shr,
  // Selection and conversion.
  Where,  // (cond: bool, a, b)
  Cast,   // to the instruction's dtype
};
// clang-format on

std::string_view pw_op_name(PwOp op);
std::optional<PwOp> pw_op_from_name(std::string_view name);
// Every op from Add on: the table tests and docs walk.
const std::vector<PwOp>& all_pw_ops();

// A scalar operand: either baked into the source (a literal, e.g. gelu's
// constants or a specialized Python float) or a kernel argument (so that
// changing it needs no recompile). Arguments travel as double (floating) or
// int64 (integral and bool).
struct PwScalar {
  DType dtype = DType::Float32;
  bool is_argument = false;
  double f = 0.0;      // literal value when dtype is floating
  std::int64_t i = 0;  // literal value otherwise (bool: 0 or 1)
};

// One SSA instruction; its value id is its position in PointwiseSpec::instrs.
struct PwInstr {
  PwOp op = PwOp::Load;
  DType dtype = DType::Float32;    // the result's dtype
  std::vector<std::int32_t> args;  // ids of earlier instructions
  std::int32_t index = -1;         // Load: input; Scalar: scalar; Coord: coordinate axis
};

// Note [Concatenations in pointwise kernels]
// A concatenation joins a pointwise kernel as a selection on the walk's
// coordinate along its dim: cat([a, b], d) is where(coord_d < size_a(d), a,
// b), with a and b evaluated in their own space. Each concatenated piece,
// and every input its (inlined) producers read, is a guarded input: Strided
// over the walk's rank, read only where the coordinate along each of its
// guards' axes lies in [lo, hi) (its element there is the tensor's element
// at coordinate - lo: the runtime shifts its pointer back by lo strides)
// and 0 elsewhere, so no piece is read outside its bounds and each element
// of the result reads one piece. `coords` axes are coordinates the kernel
// finds (kernel argument coord_dim<a>: the axis' position in the launch's
// coalesced walk, which the runtime keeps apart from its neighbours); the
// bounds are i64 scalars, kernel arguments (Note [Specs hold no sizes]).
struct PwGuard {
  std::int32_t input = 0;  // the guarded input
  std::int32_t axis = 0;   // coordinate axis
  std::int32_t lo = 0;     // scalar holding the first coordinate read
  std::int32_t hi = 0;     // scalar holding the end of the range
};

struct PwOutput {
  TensorArg tensor;
  std::int32_t value = 0;  // the instruction stored
};

// out_k[i] = f_k(in_0[i], ..., in_{N-1}[i], scalars) for i < numel.
//
// Dtypes: every operand already has the dtype the op computes in; the
// planner applies torch's type promotion as explicit Cast instructions.
// Values of dtype fp16/bf16 live in fp32 registers (math in fp32, as eager's
// opmath); a Cast *to* fp16/bf16 rounds to that precision, other ops do not.
//
// Aliasing: an output may share memory with an input only as an exact
// in-place update (same mode, same strides); each element is read before it
// is written by the same thread.
struct PointwiseSpec {
  int rank = 1;  // iteration-space rank (used by Strided tensors)
  std::vector<TensorArg> inputs;
  std::vector<PwScalar> scalars;
  std::vector<PwInstr> instrs;
  std::vector<PwOutput> outputs;
  // Note [Concatenations in pointwise kernels]: coordinate axes the
  // kernel finds and the guarded inputs.
  int coords = 0;
  std::vector<PwGuard> guards;
  // 64-bit offsets. Required when any tensor spans 2^30 elements or more:
  // 32-bit indexing keeps the other 2^30 as headroom for grid-stride steps.
  bool index64 = false;
  int threads = 256;  // block size
  // The launch tuning of the compile (Note [Tuning in the specs]); printed
  // when it is not the defaults.
  LaunchTuning tuning;

  std::string to_string() const;
  std::uint64_t hash() const;
};

// pointwise_vector_width of the spec's inputs and outputs.
int pointwise_vector_width(const PointwiseSpec& spec);

// Where a Periodic tensor holds the walk's element i: at
// i mod period + (i div block) * period. The tensor is dense over the walk's
// innermost dims (their sizes multiply to `period`), repeated over the next
// (stride 0; `block` is period times their sizes) and dense again, rows of
// `period`, over the outermost: a per-channel operand of a channels-last
// walk repeats over H and W for the whole walk (block = numel), a
// squeeze-excitation gate [N, C] over [N, H, W, C] for each image.
struct PeriodicLayout {
  std::int64_t period = 0;  // 0: the tensor is not periodic in the walk
  std::int64_t block = 0;
};

// The layout of the tensor whose `strides` walk `shape` (one stride per dim,
// in the walk's order; size-1 dims ignored), or period 0 (Note [Periodic
// operands] in fusion/pointwise_planner.h).
PeriodicLayout periodic_layout(const std::vector<std::int64_t>& shape,
                               const std::vector<std::int64_t>& strides);

// Note [Scalars as kernel arguments]
// A pointwise kernel's fp32/fp64 scalars other than 0, 1 and -1 become
// kernel arguments instead of literals of its source. Scalars that come from
// shapes are the reason: a training batch norm's gradient scales by 1/(N*H*W),
// one value per ResNet-50 stage, so its backward had groups identical but for
// that literal; one source per value meant 30 NVRTC programs where 20 are
// distinct (dumped kernels of ResNet-50 training, 2026-11-26). The kernel name
// and source now say "arg" (PwScalar::is_argument), the launch passes the
// value, and every stage shares one program. 0 and +-1 stay literals: they are
// the same everywhere (a ReLU's threshold, a sign) and let NVVM fold them.
// Values are passed as double and rounded to float in the kernel, as the
// literal would have been.
void make_scalars_arguments(PointwiseSpec& spec);

// ---- reduction --------------------------------------------------------------

enum class ReduceOp : std::int8_t { Sum, Mean, Amax, Amin, Prod, Var, Std, Argmax, Argmin };
std::string_view reduce_op_name(ReduceOp op);

// Inner: the input is viewed as [rows, n] and the contiguous n is reduced
// (any number of innermost dims, coalesced). Outer: [outer, n, inner] and
// the middle n is reduced (a reduction over a dim that is not innermost).
enum class ReduceAxis : std::int8_t { Inner, Outer };
std::string_view reduce_axis_name(ReduceAxis axis);

// Inner reductions only: a block per row, or a warp per row (short rows).
enum class ReduceStrategy : std::int8_t { BlockPerRow, WarpPerRow };
std::string_view reduce_strategy_name(ReduceStrategy strategy);

// Reduces one value per element of the input iteration space (rank
// `input_rank`, sizes passed at run time) to one value per output element.
//
// The value reduced is `input` read as is, or, with a prologue, the
// prologue's output 0 (a PointwiseSpec over the same iteration space whose
// outputs are not stored: output 0's tensor gives only its dtype).
// The reduced value has dtype `out_dtype` (Argmax/Argmin: Int64); it is
// stored to `output`, or, with an epilogue, becomes the epilogue's input 0
// (a PointwiseSpec over the output space; its other inputs are tensors of
// that space, and its outputs are what the kernel stores). The sub-specs'
// own index64 and threads are ignored: the reduction's apply.
//
// Accumulation: fp32 for fp16/bf16/fp32, fp64 for fp64, int64 for integers.
// Var/Std use Welford and divide by max(0, n - correction).
//
// Note [Row epilogues]
// An Inner reduction may carry a row epilogue: a PointwiseSpec over the
// input space (rank input_rank) that the kernel runs over each row right
// after reducing it, in the same block (or warp): the elementwise ops that
// read the row's result broadcast back over the row (an RMS norm's input
// gradient, x / x.norm(dim=-1, keepdim=True), x - x.mean(-1, keepdim=True)).
// Its inputs [0, row_values.size()) are row values, epilogue output
// row_values[k] of the row (held in registers, rounded to its dtype as a
// store would round it); the others are tensors of the input space. Its
// outputs are stored over the input space. The last `unstored_outputs`
// epilogue outputs only feed the row epilogue and are not stored. Kernels
// with a row epilogue have no split entries: a row is reduced by one block.
struct ReductionSpec {
  ReduceOp op = ReduceOp::Sum;
  ReduceAxis axis = ReduceAxis::Inner;
  ReduceStrategy strategy = ReduceStrategy::BlockPerRow;
  int input_rank = 2;  // iteration-space rank of the input side
  TensorArg input;     // used when there is no prologue
  std::optional<PointwiseSpec> prologue;
  DType out_dtype = DType::Float32;
  double correction = 1.0;  // Var/Std
  int output_rank = 1;      // iteration-space rank of the output side
  TensorArg output;         // used when there is no epilogue
  std::optional<PointwiseSpec> epilogue;
  std::optional<PointwiseSpec> row_epilogue;  // Note [Row epilogues]
  std::vector<std::int32_t> row_values;       // row_epilogue input k reads epilogue output [k]
  int unstored_outputs = 0;                   // trailing epilogue outputs read only by the rows
  bool index64 = false;
  int threads = 256;  // Inner: block size; Outer: always 32 x 8

  // The epilogue outputs the kernel stores: [0, stored_outputs()).
  std::size_t stored_outputs() const;

  std::string to_string() const;
  std::uint64_t hash() const;
};

// The prologue and epilogue with the implicit identity ones filled in, so
// that emitters and printers see one shape.
PointwiseSpec effective_prologue(const ReductionSpec& spec);
PointwiseSpec effective_epilogue(const ReductionSpec& spec);
// The accumulator dtype of a reduction over values of `dtype`.
DType reduction_acc_dtype(DType dtype);

// ---- normalization ----------------------------------------------------------

enum class NormKind : std::int8_t {
  SoftmaxForward,
  LogSoftmaxForward,
  SoftmaxBackward,     // (grad_out, out) -> grad_in
  LogSoftmaxBackward,  // (grad_out, out) -> grad_in
  LayerNormForward,    // x, weight?, bias? -> y, mean?, rstd?
  LayerNormBackward,   // grad_out, x, mean, rstd, weight? -> grad_in; grad_weight?, grad_bias?
  RmsNormForward,      // x, weight? -> y, rstd?
  RmsNormBackward,     // grad_out, x, rstd, weight? -> grad_in; grad_weight?
  // Class logits with a row stride (device/mb_cross_entropy.cuh); loss and
  // lse are fp32, one per row.
  CrossEntropyForward,   // x, target -> loss, lse
  CrossEntropyBackward,  // grad_loss, x, target, lse -> grad_in
  // Training batch norm's per-channel reductions over [rows, channels] with
  // the channels contiguous (device/mb_batch_norm.cuh); fp32 results.
  // weight_dtype is the running statistics' dtype.
  BatchNormStats,     // x, running_mean, running_var -> mean, invstd, new running stats
  BatchNormBackward,  // grad_out, x, mean, invstd -> grad_bias, grad_weight
  // Group norm's statistics over [N, C, spatial...] in either layout
  // (device/mb_group_norm.cuh); weight_dtype is the saved statistics'
  // dtype (x's).
  GroupNormStats,  // x -> mean, rstd ([N, G]); channel_mean, channel_rstd ([N, C], fp32)
};
std::string_view norm_kind_name(NormKind kind);
// Softmax or log-softmax forward: one row in, one row out.
inline bool is_softmax_forward(NormKind kind) {
  return kind == NormKind::SoftmaxForward || kind == NormKind::LogSoftmaxForward;
}
inline bool is_cross_entropy(NormKind kind) {
  return kind == NormKind::CrossEntropyForward || kind == NormKind::CrossEntropyBackward;
}
// Reductions over [rows, channels] with the channels contiguous, in a
// chunk stage and a totals stage (device/mb_batch_norm.cuh).
inline bool is_channel_reduction(NormKind kind) {
  return kind == NormKind::BatchNormStats || kind == NormKind::BatchNormBackward ||
         kind == NormKind::GroupNormStats;
}

// Row-wise over the last dim of a [rows, cols] view with contiguous rows
// (rows and cols are kernel arguments; eps too). Statistics (mean, rstd)
// are stored in the accumulation dtype: fp32, or fp64 for fp64 inputs.
//
// A forward layer or RMS norm may read x through a prologue (Note [Norm
// prologues] in fusion/norm_prologue.h): a PointwiseSpec whose output 0 (of
// dtype `dtype`, not stored) is x; its inputs are dense [rows, cols] tensors
// read in x's place, kernel parameters in0, in1, ...
struct NormSpec {
  NormKind kind = NormKind::SoftmaxForward;
  DType dtype = DType::Float32;         // x, grads, y
  DType out_dtype = DType::Float32;     // softmax/log_softmax forward output (may differ)
  DType weight_dtype = DType::Float32;  // weight, bias and their grads
  bool has_weight = false;
  bool has_bias = false;    // layer norm only
  bool save_stats = true;   // forward norms: write mean/rstd for backward
  bool param_grads = true;  // backward norms: also emit the dweight/dbias kernel
  // RMS norm forward with a weight: x * rstd is rounded to out_dtype before
  // the weight multiply, as HF Llama's and T5's `weight * h.to(dtype)` do
  // (Note [RMS-norm rounding] in fusion/norm_lowering.h).
  bool round_before_weight = false;
  bool aligned = false;  // every base pointer 16-byte aligned
  bool index64 = false;
  int threads = 256;
  // The launch tuning of the compile (Note [Tuning in the specs]); printed
  // when it is not the defaults.
  LaunchTuning tuning;
  std::optional<PointwiseSpec> prologue;
  // Forward layer and RMS norms: the prologue's result x is also stored, to
  // "xout", for its readers outside the group (Note [A norm prologue read
  // elsewhere] in fusion/norm_prologue.h).
  bool store_x = false;
  // Backward layer and RMS norms (Note [Norm epilogues] in
  // fusion/norm_epilogue.h): grad_in is not stored but becomes input 0 of
  // these elementwise ops over [rows, cols]; their other inputs are dense
  // tensors of that shape, and their outputs are what the kernel stores.
  std::optional<PointwiseSpec> epilogue;

  std::string to_string() const;
  std::uint64_t hash() const;
};

// ---- grouped casts ----------------------------------------------------------

// One dtype conversion a cast-group kernel knows.
struct CastPair {
  DType from = DType::Float32;
  DType to = DType::BFloat16;
};

// Many tensors converted or copied in one launch (Note [Grouped casts] and
// Note [Grouped layout copies] in fusion/cast_groups.h). The kernel takes, by
// value, a table of {src, dst, numel, pair, a, b} per tensor
// (device/mb_cast_table.cuh); a pair may keep the dtype (a copy); each block
// converts one chunk of threads * kCastElementsPerThread elements of one
// tensor. The spec lists only the conversions, which table entries name by
// index: how many tensors and of what sizes are arguments (Note [Specs hold
// no sizes]).
struct CastGroupSpec {
  std::vector<CastPair> pairs;  // distinct, in the order the planner met them
  int threads = 256;
  // Some member changes layout (Note [Grouped layout copies] in
  // fusion/cast_groups.h): the kernel has that path too.
  bool layout_copies = false;
  // The launch tuning of the compile (Note [Tuning in the specs]); printed
  // when it is not the defaults.
  LaunchTuning tuning;

  std::string to_string() const;
  std::uint64_t hash() const;
};

// Elements one thread of a cast-group kernel converts per chunk: two
// 16-byte vectors of the narrower dtype for 16-bit <-> f32 casts.
enum : int { kCastElementsPerThread = 16 };

// ---- max pooling ------------------------------------------------------------

// The memory order of a pool kernel's output, which it walks: NCHW
// (contiguous) or NHWC (channels-last). Window reads of the prologue are
// dense in the same order.
enum class PoolLayout : std::int8_t { Contiguous, ChannelsLast };
std::string_view pool_layout_name(PoolLayout layout);

// How a pool kernel finds the element (n, c, h, w) of one prologue input
// over the window space [N, C, H, W] (the pool's input shape).
enum class PoolRead : std::int8_t {
  // Dense in the spec's layout and of the window space's shape: read at the
  // window element's own offset (NHWC: `vector` channels at once).
  Window,
  // One value per channel, element c at ptr[c] (a [1, C, 1, 1] or [C, 1, 1]
  // broadcast, e.g. batch norm's scale and shift): read once per output
  // element, before the window loop.
  Channel,
  // At sum_d coord_d * stride_d over [N, C, H, W]; the four strides are a
  // kernel argument, stride 0 broadcasts.
  Strided,
};
std::string_view pool_read_name(PoolRead read);

// aten::max_pool2d_with_indices over a 4-D input, one output element (NCHW)
// or `vector` adjacent channels of one output pixel (NHWC) per thread
// (Note [Pool groups] in fusion/pool_planner.h).
//
// The value pooled at each window element is `dtype`'s element of the input
// read as is, or, with a prologue, the prologue's output 0 (a PointwiseSpec
// of rank 4 over the window space, recomputed for every window element it
// covers; its outputs are not stored, and its TensorArgs give only dtypes:
// `reads` says how each input is indexed). Kernel size, stride, padding,
// dilation and every size are kernel arguments (Note [Specs hold no
// sizes]); ceil_mode only changes the output size, which the caller passes.
//
// Semantics are eager's CUDA kernel's: a window element wins when it is
// greater than the best so far or NaN (so a NaN propagates), ties keep the
// first element in scan order (rows, then columns), the index is h * W + w
// within the input plane, padding is never read or selected.
//
// With `backward`, the kernel is aten::max_pool2d_with_indices_backward:
// one input element (NCHW) or `vector` channels of one input pixel (NHWC)
// per thread, the sum over the windows that cover it and chose it (their
// index equals h * W + w) of the gradient at those windows. The prologue
// computes that gradient over the output space [N, C, OH, OW] (`reads`
// index it there); the indices are a further input, dense in `layout`; the
// result, of `dtype`, is dense in `layout` over the input space. Sums run in
// the compute type, windows in row-major order, as eager's kernels add.
struct PoolSpec {
  DType dtype = DType::Float32;  // the pooled values, input side and output
  PoolLayout layout = PoolLayout::Contiguous;
  int vector = 1;              // channels per thread; above 1 only for ChannelsLast
  bool store_indices = false;  // forward only
  bool backward = false;
  std::optional<PointwiseSpec> prologue;
  std::vector<PoolRead> reads;  // per prologue input, or for the input alone
  bool index64 = false;
  int threads = 256;

  std::string to_string() const;
  std::uint64_t hash() const;
};

// The prologue with the implicit identity one (load `dtype`) filled in.
PointwiseSpec effective_prologue(const PoolSpec& spec);

// ---- validation -------------------------------------------------------------

// Empty when the spec can be emitted, else the reason it cannot: the
// planner's "can this group become kind K?" question, answered as a value.
std::string validate(const PointwiseSpec& spec);
std::string validate(const ReductionSpec& spec);
std::string validate(const NormSpec& spec);
std::string validate(const CastGroupSpec& spec);
std::string validate(const PoolSpec& spec);

// A group's fast and general variants (Note [Two pointwise variants]):
// empty when both can be emitted, else "invalid spec: <reason>".
template <class Spec>
std::string validate_variants(const Spec& fast, const Spec& general) {
  for (const Spec* s : {&fast, &general}) {
    if (std::string p = validate(*s); !p.empty()) return "invalid spec: " + p;
  }
  return {};
}

// DTypes generated kernels handle (no complex, no fp8 yet).
bool codegen_supports_dtype(DType dtype);

}  // namespace mybackend
