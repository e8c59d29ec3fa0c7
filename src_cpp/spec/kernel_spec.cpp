#include "spec/kernel_spec.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/error.h"
#include "common/hash.h"
#include "spec/hexfloat.h"

namespace mybackend {

std::string_view index_mode_name(IndexMode mode) {
  switch (mode) {
    case IndexMode::Aligned: return "aligned";
    case IndexMode::Contiguous: return "contiguous";
    case IndexMode::Strided: return "strided";
    case IndexMode::Periodic: return "periodic";
    case IndexMode::PeriodicRows: return "periodic_rows";
  }
  return "?";
}

int pointwise_vector_width(const std::vector<DType>& dtypes) {
  int narrowest = 16;
  for (DType dtype : dtypes) narrowest = std::min(narrowest, dtype_size_bytes(dtype));
  return std::min(8, 16 / std::max(narrowest, 1));
}

int pointwise_vector_width(const PointwiseSpec& spec) {
  std::vector<DType> dtypes;
  for (const auto& t : spec.inputs) dtypes.push_back(t.dtype);
  for (const auto& o : spec.outputs) dtypes.push_back(o.tensor.dtype);
  return pointwise_vector_width(dtypes);
}

PeriodicLayout periodic_layout(const std::vector<std::int64_t>& shape,
                               const std::vector<std::int64_t>& strides) {
  // From the innermost dim out: dense dims (the period), broadcast dims (the
  // rest of the block), then dense rows of one period each.
  enum class Part { Period, Block, Rows } part = Part::Period;
  PeriodicLayout layout{1, 1};
  std::int64_t repeats = 1, rows = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    const std::int64_t size = shape[d], stride = strides[d];
    if (size == 1) continue;
    if (part == Part::Period && stride == layout.period) {
      layout.period *= size;
    } else if (part != Part::Rows && stride == 0) {
      part = Part::Block;
      repeats *= size;
    } else if (part != Part::Period && stride == layout.period * rows) {
      part = Part::Rows;
      rows *= size;
    } else {
      return {};
    }
  }
  layout.block = layout.period * repeats;
  return layout;
}

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Mean: return "mean";
    case ReduceOp::Amax: return "amax";
    case ReduceOp::Amin: return "amin";
    case ReduceOp::Prod: return "prod";
    case ReduceOp::Var: return "var";
    case ReduceOp::Std: return "std";
    case ReduceOp::Argmax: return "argmax";
    case ReduceOp::Argmin: return "argmin";
  }
  return "?";
}

std::string_view reduce_axis_name(ReduceAxis axis) {
  return axis == ReduceAxis::Inner ? "inner" : "outer";
}

std::string_view reduce_strategy_name(ReduceStrategy strategy) {
  return strategy == ReduceStrategy::BlockPerRow ? "block_per_row" : "warp_per_row";
}

std::string_view pool_layout_name(PoolLayout layout) {
  return layout == PoolLayout::ChannelsLast ? "nhwc" : "nchw";
}

std::string_view pool_read_name(PoolRead read) {
  switch (read) {
    case PoolRead::Window: return "window";
    case PoolRead::Channel: return "channel";
    case PoolRead::Strided: return "strided";
  }
  return "?";
}

std::string_view norm_kind_name(NormKind kind) {
  switch (kind) {
    case NormKind::SoftmaxForward: return "softmax";
    case NormKind::LogSoftmaxForward: return "log_softmax";
    case NormKind::SoftmaxBackward: return "softmax_backward";
    case NormKind::LogSoftmaxBackward: return "log_softmax_backward";
    case NormKind::LayerNormForward: return "layer_norm";
    case NormKind::LayerNormBackward: return "layer_norm_backward";
    case NormKind::RmsNormForward: return "rms_norm";
    case NormKind::RmsNormBackward: return "rms_norm_backward";
    case NormKind::CrossEntropyForward: return "cross_entropy";
    case NormKind::CrossEntropyBackward: return "cross_entropy_backward";
    case NormKind::BatchNormStats: return "batch_norm_stats";
    case NormKind::BatchNormBackward: return "batch_norm_backward_reduce";
    case NormKind::GroupNormStats: return "group_norm_stats";
  }
  return "?";
}

namespace {

std::string tensor_text(const TensorArg& t) {
  std::string out =
      std::string(dtype_short_name(t.dtype)) + " " + std::string(index_mode_name(t.mode));
  if (t.mode == IndexMode::Strided) out += " rank=" + std::to_string(t.rank);
  return out;
}

// Exact and locale-free: the text feeds the hash (Note [Spec text is the
// identity]).
std::string number_text(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value < 0 ? "-inf" : "inf";
  return hexfloat(value);
}

std::string scalar_text(const PwScalar& s) {
  std::string out = std::string(dtype_short_name(s.dtype)) + " = ";
  if (s.is_argument) return out + "arg";
  if (is_floating(s.dtype)) return out + number_text(s.f);
  return out + std::to_string(s.i);
}

std::string instr_text(const PwInstr& in) {
  std::string out = std::string(pw_op_name(in.op));
  if (in.op == PwOp::Load) out += " in" + std::to_string(in.index);
  if (in.op == PwOp::Scalar) out += " sc" + std::to_string(in.index);
  for (std::size_t k = 0; k < in.args.size(); ++k)
    out += (k ? ", %" : " %") + std::to_string(in.args[k]);
  return out + " : " + std::string(dtype_short_name(in.dtype));
}

// " tuning=[...]" when the spec's tuning is not the defaults (Note [Tuning
// in the specs]): default specs keep the text they always had.
std::string tuning_text(const LaunchTuning& tuning) {
  if (tuning == LaunchTuning{}) return {};
  return " tuning=[" + tuning.to_string() + "]";
}

void indent_into(std::ostringstream& out, const std::string& text, const std::string& indent) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) out << indent << line << "\n";
}

}  // namespace

std::string PointwiseSpec::to_string() const {
  std::ostringstream out;
  out << "pointwise rank=" << std::to_string(rank) << " index=" << (index64 ? "i64" : "i32")
      << " threads=" << std::to_string(threads) << tuning_text(tuning) << "\n";
  for (std::size_t k = 0; k < inputs.size(); ++k)
    out << "  in" << std::to_string(k) << " " << tensor_text(inputs[k]) << "\n";
  for (std::size_t k = 0; k < scalars.size(); ++k)
    out << "  sc" << std::to_string(k) << " " << scalar_text(scalars[k]) << "\n";
  for (std::size_t k = 0; k < instrs.size(); ++k)
    out << "  %" << std::to_string(k) << " = " << instr_text(instrs[k]) << "\n";
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    out << "  out" << std::to_string(k) << " " << tensor_text(outputs[k].tensor) << " = %"
        << std::to_string(outputs[k].value) << "\n";
  }
  // Note [Concatenations in pointwise kernels]; nothing when there are none,
  // so other kernels keep their text.
  if (coords > 0) out << "  coords " << std::to_string(coords) << "\n";
  for (const PwGuard& g : guards) {
    out << "  guard in" << std::to_string(g.input) << " axis" << std::to_string(g.axis) << " [sc"
        << std::to_string(g.lo) << ", sc" << std::to_string(g.hi) << ")\n";
  }
  return out.str();
}

std::uint64_t PointwiseSpec::hash() const { return fnv1a64(to_string()); }

void make_scalars_arguments(PointwiseSpec& spec) {
  for (PwScalar& s : spec.scalars) {
    if (s.dtype != DType::Float32 && s.dtype != DType::Float64) continue;
    if (!std::isfinite(s.f) || s.f == 0.0 || s.f == 1.0 || s.f == -1.0) continue;
    s.is_argument = true;
  }
}

std::string ReductionSpec::to_string() const {
  std::ostringstream out;
  out << "reduction " << reduce_op_name(op) << " axis=" << reduce_axis_name(axis)
      << " strategy=" << reduce_strategy_name(strategy)
      << " input_rank=" << std::to_string(input_rank)
      << " output_rank=" << std::to_string(output_rank) << " out=" << dtype_short_name(out_dtype)
      << " correction=" << number_text(correction) << " index=" << (index64 ? "i64" : "i32")
      << " threads=" << std::to_string(threads) << "\n";
  if (prologue) {
    out << "  prologue:\n";
    indent_into(out, prologue->to_string(), "    ");
  } else {
    out << "  input " << tensor_text(input) << "\n";
  }
  if (epilogue) {
    out << "  epilogue:\n";
    indent_into(out, epilogue->to_string(), "    ");
  } else {
    out << "  output " << tensor_text(output) << "\n";
  }
  if (row_epilogue) {
    out << "  row epilogue (row values";
    for (std::int32_t v : row_values) out << " out" << std::to_string(v);
    out << "; unstored outputs " << std::to_string(unstored_outputs) << "):\n";
    indent_into(out, row_epilogue->to_string(), "    ");
  }
  return out.str();
}

std::uint64_t ReductionSpec::hash() const { return fnv1a64(to_string()); }

std::size_t ReductionSpec::stored_outputs() const {
  const std::size_t all = epilogue ? epilogue->outputs.size() : 1;
  return all - static_cast<std::size_t>(unstored_outputs);
}

// "1"/"0", as streaming a bool prints it, without the locale's num_put
// (Note in docs/design/0004-fusion-planner.md: it crashed on the GPU image).
static const char* flag(bool value) { return value ? "1" : "0"; }

std::string NormSpec::to_string() const {
  std::ostringstream out;
  out << "norm " << norm_kind_name(kind) << " dtype=" << dtype_short_name(dtype)
      << " out=" << dtype_short_name(out_dtype) << " weight=" << dtype_short_name(weight_dtype)
      << " has_weight=" << flag(has_weight) << " has_bias=" << flag(has_bias)
      << " save_stats=" << flag(save_stats) << " param_grads=" << flag(param_grads)
      << " aligned=" << flag(aligned) << " index=" << (index64 ? "i64" : "i32")
      << " threads=" << std::to_string(threads)
      << (round_before_weight ? " round_before_weight=1" : "") << (store_x ? " store_x=1" : "")
      << tuning_text(tuning) << "\n";
  if (prologue) {
    out << "  prologue:\n";
    indent_into(out, prologue->to_string(), "    ");
  }
  if (epilogue) {
    out << "  epilogue:\n";
    indent_into(out, epilogue->to_string(), "    ");
  }
  return out.str();
}

std::uint64_t NormSpec::hash() const { return fnv1a64(to_string()); }

std::string CastGroupSpec::to_string() const {
  std::ostringstream out;
  out << "cast_group pairs=";
  for (std::size_t k = 0; k < pairs.size(); ++k) {
    out << (k ? "," : "") << dtype_short_name(pairs[k].from) << "->"
        << dtype_short_name(pairs[k].to);
  }
  out << " threads=" << std::to_string(threads);
  if (layout_copies) out << " layout_copies";
  out << tuning_text(tuning) << "\n";
  return out.str();
}

std::uint64_t CastGroupSpec::hash() const { return fnv1a64(to_string()); }

std::string PoolSpec::to_string() const {
  std::ostringstream out;
  out << (backward ? "max_pool2d_backward" : "max_pool2d") << " layout=" << pool_layout_name(layout)
      << " dtype=" << dtype_short_name(dtype) << " vector=" << std::to_string(vector);
  if (!backward) out << " indices=" << flag(store_indices);
  out << " index=" << (index64 ? "i64" : "i32") << " threads=" << std::to_string(threads) << "\n";
  out << "  reads=";
  for (std::size_t k = 0; k < reads.size(); ++k) out << (k ? "," : "") << pool_read_name(reads[k]);
  out << "\n";
  if (prologue) {
    out << "  prologue:\n";
    indent_into(out, prologue->to_string(), "    ");
  }
  return out.str();
}

std::uint64_t PoolSpec::hash() const { return fnv1a64(to_string()); }

namespace {

// The prologue of a kernel that reads `input` as it is: one load, stored
// nowhere (the kernel takes output 0 as its value).
PointwiseSpec identity_prologue(const TensorArg& input, int rank, bool index64) {
  PointwiseSpec p;
  p.rank = rank;
  p.index64 = index64;
  p.inputs = {input};
  p.instrs = {PwInstr{PwOp::Load, input.dtype, {}, 0}};
  p.outputs = {PwOutput{TensorArg{input.dtype, IndexMode::Contiguous, 0}, 0}};
  return p;
}

}  // namespace

PointwiseSpec effective_prologue(const ReductionSpec& spec) {
  if (spec.prologue) return *spec.prologue;
  return identity_prologue(spec.input, spec.input_rank, spec.index64);
}

PointwiseSpec effective_prologue(const PoolSpec& spec) {
  if (spec.prologue) return *spec.prologue;
  return identity_prologue(TensorArg{spec.dtype, IndexMode::Contiguous, 0}, 4, spec.index64);
}

PointwiseSpec effective_epilogue(const ReductionSpec& spec) {
  if (spec.epilogue) return *spec.epilogue;
  PointwiseSpec p;
  p.rank = spec.output_rank;
  p.index64 = spec.index64;
  p.inputs = {TensorArg{spec.out_dtype, IndexMode::Contiguous, 0}};
  p.instrs = {PwInstr{PwOp::Load, spec.out_dtype, {}, 0}};
  p.outputs = {PwOutput{spec.output, 0}};
  return p;
}

DType reduction_acc_dtype(DType dtype) {
  if (dtype == DType::Float64) return DType::Float64;
  if (is_floating(dtype)) return DType::Float32;
  // Integers accumulate in 64 bits, as torch sums them into int64.
  return dtype == DType::UInt64 ? DType::UInt64 : DType::Int64;
}

bool codegen_supports_dtype(DType dtype) {
  switch (dtype) {
    case DType::Bool:
    case DType::UInt8:
    case DType::Int8:
    case DType::Int16:
    case DType::UInt16:
    case DType::Int32:
    case DType::UInt32:
    case DType::Int64:
    case DType::UInt64:
    case DType::Float16:
    case DType::BFloat16:
    case DType::Float32:
    case DType::Float64: return true;
    default: return false;
  }
}

}  // namespace mybackend
