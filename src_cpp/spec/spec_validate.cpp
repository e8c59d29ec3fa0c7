// validate(): can a spec be emitted? The answer is a reason string (empty:
// yes), never an exception, so the planner can report it in explain().
#include <string>

#include "common/error.h"
#include "spec/kernel_spec.h"
#include "spec/pointwise_ops.h"

namespace mybackend {
namespace {

std::string name(DType dtype) { return std::string(dtype_short_name(dtype)); }

bool numeric(DType dtype) { return dtype != DType::Bool; }
bool integer(DType dtype) { return is_integral(dtype); }

std::string check_threads(int threads) {
  if (threads < 32 || threads > 1024 || threads % 32 != 0) {
    return "threads must be a multiple of 32 in [32, 1024], got " + std::to_string(threads);
  }
  return {};
}

std::string check_tensor(const TensorArg& t, int rank, const std::string& what,
                         bool periodic_allowed = false) {
  if (!codegen_supports_dtype(t.dtype))
    return what + ": dtype " + name(t.dtype) + " is not supported";
  if (is_periodic(t.mode) && !periodic_allowed)
    return what + ": only a pointwise input may be periodic";
  if (t.mode == IndexMode::Strided && (t.rank < 0 || t.rank > rank)) {
    return what + ": strided rank " + std::to_string(t.rank) + " outside [0, " +
           std::to_string(rank) + "]";
  }
  return {};
}

// The dtype rule of one instruction, given its operands' dtypes.
std::string check_rule(const PwOpInfo& info, DType result, const std::vector<DType>& a) {
  auto all_equal = [&](DType d) {
    for (DType x : a) {
      if (x != d) return false;
    }
    return true;
  };
  switch (info.rule) {
    case PwRule::Leaf:
    case PwRule::Cast: return {};
    case PwRule::SameNumeric:
      if (!all_equal(result) || !numeric(result))
        return "operands and result must share one non-bool dtype";
      return {};
    case PwRule::SameFloat:
      if (!all_equal(result) || !is_floating(result))
        return "operands and result must share one floating dtype";
      return {};
    case PwRule::SameInteger:
      if (!all_equal(result) || !integer(result))
        return "operands and result must share one integer dtype";
      return {};
    case PwRule::SameIntOrBool:
      if (!all_equal(result) || is_floating(result))
        return "operands and result must share one integer or bool dtype";
      return {};
    case PwRule::Compare:
      if (result != DType::Bool || !all_equal(a[0]))
        return "operands must share one dtype and the result must be b8";
      return {};
    case PwRule::Predicate:
    case PwRule::Logical:
      if (result != DType::Bool) return "the result must be b8";
      return {};
    case PwRule::Where:
      if (a[0] != DType::Bool || a[1] != result || a[2] != result) return "needs (b8, T, T) -> T";
      return {};
  }
  return "unknown dtype rule";
}

std::string check_instr(const PointwiseSpec& spec, std::size_t id) {
  const PwInstr& in = spec.instrs[id];
  if (static_cast<std::size_t>(in.op) > static_cast<std::size_t>(PwOp::Cast)) return "unknown op";
  const PwOpInfo& info = pw_op_info(in.op);
  if (!codegen_supports_dtype(in.dtype)) return "dtype " + name(in.dtype) + " is not supported";
  if (static_cast<int>(in.args.size()) != info.arity) {
    return "takes " + std::to_string(info.arity) + " operands, got " +
           std::to_string(in.args.size());
  }
  std::vector<DType> arg_dtypes;
  for (std::int32_t a : in.args) {
    if (a < 0 || static_cast<std::size_t>(a) >= id)
      return "operand %" + std::to_string(a) + " is not an earlier value";
    arg_dtypes.push_back(spec.instrs[static_cast<std::size_t>(a)].dtype);
  }
  if (in.op == PwOp::Load) {
    if (in.index < 0 || static_cast<std::size_t>(in.index) >= spec.inputs.size())
      return "no input " + std::to_string(in.index);
    if (spec.inputs[static_cast<std::size_t>(in.index)].dtype != in.dtype)
      return "dtype differs from the input's";
  }
  if (in.op == PwOp::Coord) {
    if (in.index < 0 || in.index >= spec.coords)
      return "no coordinate axis " + std::to_string(in.index);
    if (in.dtype != DType::Int64) return "a coordinate is i64";
  }
  if (in.op == PwOp::Scalar) {
    if (in.index < 0 || static_cast<std::size_t>(in.index) >= spec.scalars.size())
      return "no scalar " + std::to_string(in.index);
    if (spec.scalars[static_cast<std::size_t>(in.index)].dtype != in.dtype)
      return "dtype differs from the scalar's";
  }
  std::string problem = check_rule(info, in.dtype, arg_dtypes);
  if (!problem.empty()) {
    std::string got;
    for (DType d : arg_dtypes) got += (got.empty() ? "" : ", ") + name(d);
    problem += " (got " + got + " -> " + name(in.dtype) + ")";
  }
  return problem;
}

// Note [Concatenations in pointwise kernels]
std::string check_guards(const PointwiseSpec& spec) {
  if (spec.coords < 0 || spec.coords > kMaxKernelRank)
    return "coordinate axes " + std::to_string(spec.coords) + " outside [0, " +
           std::to_string(kMaxKernelRank) + "]";
  auto int_scalar = [&](std::int32_t k) {
    return k >= 0 && static_cast<std::size_t>(k) < spec.scalars.size() &&
           spec.scalars[static_cast<std::size_t>(k)].dtype == DType::Int64;
  };
  for (const PwGuard& g : spec.guards) {
    const std::string what = "guard of in" + std::to_string(g.input);
    if (g.input < 0 || static_cast<std::size_t>(g.input) >= spec.inputs.size())
      return what + ": no such input";
    const TensorArg& t = spec.inputs[static_cast<std::size_t>(g.input)];
    if (t.mode != IndexMode::Strided || t.rank != spec.rank)
      return what + ": a guarded input is Strided over the walk's rank";
    if (g.axis < 0 || g.axis >= spec.coords)
      return what + ": no coordinate axis " + std::to_string(g.axis);
    if (!int_scalar(g.lo) || !int_scalar(g.hi)) return what + ": its bounds must be i64 scalars";
    if (!spec.scalars[static_cast<std::size_t>(g.lo)].is_argument ||
        !spec.scalars[static_cast<std::size_t>(g.hi)].is_argument)
      return what + ": its bounds must be kernel arguments";
  }
  return {};
}

}  // namespace

std::string validate(const PointwiseSpec& spec) {
  if (std::string p = check_threads(spec.threads); !p.empty()) return p;
  if (spec.rank < 0 || spec.rank > kMaxKernelRank) {
    return "iteration rank " + std::to_string(spec.rank) + " outside [0, " +
           std::to_string(kMaxKernelRank) + "]";
  }
  if (spec.outputs.empty()) return "a pointwise kernel needs at least one output";
  for (std::size_t k = 0; k < spec.inputs.size(); ++k) {
    if (std::string p = check_tensor(spec.inputs[k], spec.rank, "in" + std::to_string(k),
                                     /*periodic_allowed=*/true);
        !p.empty())
      return p;
  }
  for (std::size_t k = 0; k < spec.scalars.size(); ++k) {
    if (!codegen_supports_dtype(spec.scalars[k].dtype))
      return "sc" + std::to_string(k) + ": dtype not supported";
  }
  for (std::size_t id = 0; id < spec.instrs.size(); ++id) {
    if (std::string p = check_instr(spec, id); !p.empty()) {
      return "%" + std::to_string(id) + " (" + std::string(pw_op_name(spec.instrs[id].op)) +
             "): " + p;
    }
  }
  for (std::size_t k = 0; k < spec.outputs.size(); ++k) {
    const PwOutput& out = spec.outputs[k];
    const std::string what = "out" + std::to_string(k);
    if (std::string p = check_tensor(out.tensor, spec.rank, what); !p.empty()) return p;
    if (out.value < 0 || static_cast<std::size_t>(out.value) >= spec.instrs.size())
      return what + ": no value %" + std::to_string(out.value);
    if (spec.instrs[static_cast<std::size_t>(out.value)].dtype != out.tensor.dtype)
      return what + ": dtype differs from its value's";
  }
  return check_guards(spec);
}

namespace {

// Which value and result dtypes each reduction accepts.
std::string check_reduce_dtypes(ReduceOp op, DType value, DType out) {
  const bool floating_op = op == ReduceOp::Mean || op == ReduceOp::Var || op == ReduceOp::Std;
  if (value == DType::Bool) return "reduces b8 values; cast them first";
  if (floating_op && (!is_floating(value) || !is_floating(out)))
    return "needs floating values and result";
  if ((op == ReduceOp::Argmax || op == ReduceOp::Argmin) && out != DType::Int64)
    return "returns i64";
  if (!codegen_supports_dtype(out) || out == DType::Bool)
    return "result dtype " + name(out) + " is not supported";
  return {};
}

// The elementwise part of a reduction, norm or pool kernel: a pointwise
// spec whose emitters walk no concatenation.
std::string validate_embedded(const PointwiseSpec& spec) {
  if (spec.coords > 0 || !spec.guards.empty())
    return "only a pointwise kernel walks concatenations";
  return validate(spec);
}

}  // namespace

std::string validate(const ReductionSpec& spec) {
  if (std::string p = check_threads(spec.threads); !p.empty()) return p;
  if (spec.axis == ReduceAxis::Outer && spec.strategy != ReduceStrategy::BlockPerRow) {
    return "outer reductions have one strategy: block_per_row";
  }
  const PointwiseSpec prologue = effective_prologue(spec);
  if (prologue.rank != spec.input_rank) return "prologue rank differs from input_rank";
  if (prologue.outputs.size() != 1)
    return "the prologue must have exactly one output (the value reduced)";
  if (std::string p = validate_embedded(prologue); !p.empty()) return "prologue: " + p;
  const DType value = prologue.outputs[0].tensor.dtype;
  if (std::string p = check_reduce_dtypes(spec.op, value, spec.out_dtype); !p.empty()) {
    return std::string(reduce_op_name(spec.op)) + " of " + name(value) + " -> " +
           name(spec.out_dtype) + ": " + p;
  }
  const PointwiseSpec epilogue = effective_epilogue(spec);
  if (epilogue.rank != spec.output_rank) return "epilogue rank differs from output_rank";
  if (epilogue.inputs.empty() || epilogue.inputs[0].dtype != spec.out_dtype) {
    return "epilogue input 0 must be the reduced value, of dtype " + name(spec.out_dtype);
  }
  if (std::string p = validate_embedded(epilogue); !p.empty()) return "epilogue: " + p;
  if (spec.unstored_outputs < 0 ||
      static_cast<std::size_t>(spec.unstored_outputs) > epilogue.outputs.size())
    return "unstored_outputs out of range";
  if (!spec.row_epilogue) {
    if (spec.unstored_outputs != 0 || !spec.row_values.empty())
      return "row values and unstored outputs need a row epilogue";
    return {};
  }
  // Note [Row epilogues]
  const PointwiseSpec& rows = *spec.row_epilogue;
  if (spec.axis != ReduceAxis::Inner) return "only an inner reduction takes a row epilogue";
  if (rows.rank != spec.input_rank) return "row epilogue rank differs from input_rank";
  if (rows.outputs.empty()) return "the row epilogue stores nothing";
  if (spec.row_values.size() > rows.inputs.size()) return "more row values than row inputs";
  for (std::size_t k = 0; k < spec.row_values.size(); ++k) {
    const std::int32_t v = spec.row_values[k];
    if (v < 0 || static_cast<std::size_t>(v) >= epilogue.outputs.size())
      return "row value " + std::to_string(k) + " names no epilogue output";
    if (rows.inputs[k].dtype != epilogue.outputs[static_cast<std::size_t>(v)].tensor.dtype)
      return "row value " + std::to_string(k) + " has another dtype than its epilogue output";
  }
  for (const PwScalar& s : rows.scalars) {
    if (s.is_argument) return "a row epilogue takes no scalar arguments";
  }
  if (std::string p = validate_embedded(rows); !p.empty()) return "row epilogue: " + p;
  return {};
}

namespace {

// Note [Norm prologues]: x computed from dense inputs read as x would be;
// a softmax's may also read Strided inputs of x's rank (Note [Softmax
// prologues with broadcast inputs]).
std::string check_norm_prologue(const NormSpec& spec) {
  const bool backward_sums = spec.kind == NormKind::BatchNormBackward;
  const bool softmax = is_softmax_forward(spec.kind);
  if (spec.kind != NormKind::LayerNormForward && spec.kind != NormKind::RmsNormForward &&
      !backward_sums && !softmax)
    return "only forward softmax, layer and RMS norms and batch-norm backward sums take a "
           "prologue";
  const PointwiseSpec& p = *spec.prologue;
  const char* what = backward_sums ? "grad_out" : "x";
  if (p.outputs.size() != 1 || p.outputs[0].tensor.dtype != spec.dtype)
    return std::string("the prologue must have one output, ") + what + ", of dtype " +
           name(spec.dtype);
  if (p.inputs.empty()) return "the prologue reads no tensor";
  for (const TensorArg& in : p.inputs) {
    if (softmax && in.mode == IndexMode::Strided) {
      if (in.rank != p.rank || p.rank < 1)
        return "a softmax prologue's strided inputs have x's rank";
      continue;
    }
    if (in.mode != IndexMode::Contiguous)
      return std::string("prologue inputs are read densely, as ") + what;
  }
  for (const PwScalar& s : p.scalars) {
    if (s.is_argument) return "a norm prologue takes no scalar arguments";
  }
  if (std::string problem = validate_embedded(p); !problem.empty()) return "prologue: " + problem;
  return {};
}

// Note [Norm epilogues]: grad_in as input 0, dense inputs and outputs of its shape.
std::string check_norm_epilogue(const NormSpec& spec) {
  if (spec.kind != NormKind::LayerNormBackward && spec.kind != NormKind::RmsNormBackward)
    return "only backward layer and RMS norms take an epilogue";
  const PointwiseSpec& p = *spec.epilogue;
  if (p.inputs.empty() || p.inputs[0].dtype != spec.dtype)
    return "the epilogue's input 0 must be grad_in, of dtype " + name(spec.dtype);
  if (p.outputs.empty()) return "the epilogue stores nothing";
  for (const TensorArg& in : p.inputs) {
    if (in.mode != IndexMode::Contiguous) return "epilogue inputs are read densely, as grad_in";
  }
  for (const PwOutput& out : p.outputs) {
    if (out.tensor.mode != IndexMode::Contiguous)
      return "epilogue outputs are written densely, as grad_in";
  }
  for (const PwScalar& s : p.scalars) {
    if (s.is_argument) return "a norm epilogue takes no scalar arguments";
  }
  if (std::string problem = validate_embedded(p); !problem.empty()) return "epilogue: " + problem;
  return {};
}

}  // namespace

std::string validate(const NormSpec& spec) {
  if (std::string p = check_threads(spec.threads); !p.empty()) return p;
  if (spec.round_before_weight && (spec.kind != NormKind::RmsNormForward || !spec.has_weight))
    return "only an RMS norm forward with a weight rounds before the weight multiply";
  for (DType d : {spec.dtype, spec.out_dtype, spec.weight_dtype}) {
    if (!is_floating(d) || !codegen_supports_dtype(d))
      return "norms need floating dtypes, got " + name(d);
  }
  const bool softmax =
      spec.kind == NormKind::SoftmaxForward || spec.kind == NormKind::LogSoftmaxForward ||
      spec.kind == NormKind::SoftmaxBackward || spec.kind == NormKind::LogSoftmaxBackward;
  const bool softmax_forward =
      spec.kind == NormKind::SoftmaxForward || spec.kind == NormKind::LogSoftmaxForward;
  const bool layer_norm =
      spec.kind == NormKind::LayerNormForward || spec.kind == NormKind::LayerNormBackward;
  if (is_cross_entropy(spec.kind)) {
    if (spec.dtype == DType::Float64) return "cross-entropy kernels take fp32, bf16 or fp16 logits";
    if (spec.out_dtype != DType::Float32) return "cross-entropy losses are fp32";
    if (spec.has_weight || spec.has_bias) return "cross-entropy has no class weights here";
    if (spec.prologue || spec.epilogue) return "cross-entropy takes no prologue or epilogue";
    return {};
  }
  if (is_channel_reduction(spec.kind)) {
    if (spec.dtype == DType::Float64)
      return "batch and group norm statistics take fp32, bf16 or fp16 data";
    if (spec.out_dtype != DType::Float32) return "batch and group norm statistics are fp32";
    if (spec.has_weight || spec.has_bias)
      return "batch and group norm statistics read no weight or bias";
    if (spec.epilogue) return "batch and group norm statistics take no epilogue";
    if (spec.kind == NormKind::GroupNormStats && spec.weight_dtype != spec.dtype)
      return "group norm saves its statistics in x's dtype";
    return spec.prologue ? check_norm_prologue(spec) : std::string();
  }
  // Note [Norm outputs in 16 bits]: a layer or RMS norm forward may write y
  // in another floating dtype (an RMS norm only when it rounds nothing
  // before its weight multiply: that rounding is to out_dtype).
  const bool norm_forward =
      spec.kind == NormKind::LayerNormForward || spec.kind == NormKind::RmsNormForward;
  if (!softmax_forward && !norm_forward && spec.out_dtype != spec.dtype)
    return "only softmax and layer or RMS norm forward may change the dtype";
  if (spec.round_before_weight && spec.out_dtype != spec.dtype)
    return "an RMS norm rounding before its weight multiply keeps its dtype";
  if (softmax && (spec.has_weight || spec.has_bias)) return "softmax has no weight or bias";
  if (spec.has_bias && !layer_norm) return "only layer norm has a bias";
  if (spec.prologue) {
    if (std::string p = check_norm_prologue(spec); !p.empty()) return p;
  }
  if (spec.store_x && (!spec.prologue || (spec.kind != NormKind::LayerNormForward &&
                                          spec.kind != NormKind::RmsNormForward)))
    return "only a forward layer or RMS norm with a prologue stores x";
  if (spec.epilogue) return check_norm_epilogue(spec);
  return {};
}

std::string validate(const CastGroupSpec& spec) {
  if (std::string p = check_threads(spec.threads); !p.empty()) return p;
  if (spec.pairs.empty()) return "a cast group needs at least one conversion";
  // The table names a pair in one byte (device/mb_cast_table.cuh).
  if (spec.pairs.size() > 255) return "a cast group knows at most 255 conversions";
  for (std::size_t k = 0; k < spec.pairs.size(); ++k) {
    const CastPair& c = spec.pairs[k];
    for (DType d : {c.from, c.to}) {
      if (!is_floating(d) || !codegen_supports_dtype(d))
        return "cast groups convert between floating dtypes, got " + name(d);
    }
    for (std::size_t j = 0; j < k; ++j) {
      if (spec.pairs[j].from == c.from && spec.pairs[j].to == c.to)
        return "the pair " + name(c.from) + "->" + name(c.to) + " is listed twice";
    }
  }
  return {};
}

std::string validate(const PoolSpec& spec) {
  if (std::string p = check_threads(spec.threads); !p.empty()) return p;
  if (!is_floating(spec.dtype) || !codegen_supports_dtype(spec.dtype))
    return "max pooling takes floating values, got " + name(spec.dtype);
  // A thread's channels are one access of at most 16 bytes (a multiple of
  // the index type's alignment too: indices are stored as vectors of i64).
  const int widest = 16 / dtype_size_bytes(spec.dtype);
  if (spec.vector < 1 || spec.vector > widest || (spec.vector & (spec.vector - 1)) != 0)
    return "vector must be a power of two in [1, " + std::to_string(widest) + "] for " +
           name(spec.dtype) + ", got " + std::to_string(spec.vector);
  if (spec.vector > 1 && spec.layout != PoolLayout::ChannelsLast)
    return "only channels-last pooling reads channel vectors";
  if (spec.backward && spec.store_indices)
    return "a pool's backward reads the indices; it stores none";
  const PointwiseSpec prologue = effective_prologue(spec);
  if (prologue.rank != 4)
    return "the prologue's iteration space is [N, C, H, W] (the backward's [N, C, OH, OW]), rank 4";
  if (prologue.outputs.size() != 1)
    return "the prologue must have exactly one output (the value pooled, or the gradient)";
  if (std::string p = validate_embedded(prologue); !p.empty()) return "prologue: " + p;
  if (prologue.outputs[0].tensor.dtype != spec.dtype)
    return "the prologue's output is " + name(prologue.outputs[0].tensor.dtype) +
           ", the pool's values " + name(spec.dtype);
  for (const PwScalar& s : prologue.scalars) {
    if (s.is_argument) return "pool prologues take their scalars as literals, not arguments";
  }
  if (spec.reads.size() != prologue.inputs.size())
    return "one read mode per prologue input: " + std::to_string(spec.reads.size()) + " for " +
           std::to_string(prologue.inputs.size());
  return {};
}

}  // namespace mybackend
