#include "fusion/pointwise_lowering.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <utility>

#include "fusion/type_promotion.h"

namespace mybackend {
namespace {

constexpr const char* kCatOp = "aten::cat.default";
// A kernel body this long compiles slowly and gains nothing over ATen.
constexpr std::size_t kMaxInstructions = 2048;

// Thrown inside a builder; add_node turns it into the returned reason.
struct Refuse {
  std::string reason;
};

// The number of a 0-dim `aten::scalar_tensor(number)` producing `v`, or null.
const Argument* scalar_tensor_constant(const Graph& graph, ValueId v) {
  const Value& value = graph.value(v);
  if (value.producer < 0 || value.kind != ValueKind::Tensor || value.tensor.rank() != 0)
    return nullptr;
  const Node& node = graph.node(value.producer);
  if (node.op != "aten::scalar_tensor.default" || node.args.empty()) return nullptr;
  const Argument& c = node.args[0];
  const bool number = c.kind == Argument::Kind::Bool || c.kind == Argument::Kind::Int ||
                      c.kind == Argument::Kind::Float;
  return number ? &c : nullptr;
}

}  // namespace

// The view of one node that the table's builders work with.
class PwNodeBuilder {
 public:
  PwNodeBuilder(PointwiseSsa& ssa, const Node& node) : ssa_(ssa), node_(node) {}

  const Node& node() const { return node_; }
  DType out() const { return ssa_.graph_->value(node_.outputs[0]).tensor.dtype; }

  const Argument& arg(std::size_t i) const {
    static const Argument kNone;
    return i < node_.args.size() ? node_.args[i] : kNone;
  }
  bool is_none(std::size_t i) const { return arg(i).kind == Argument::Kind::None; }
  bool is_tensor(std::size_t i) const {
    const Argument& a = arg(i);
    return a.kind == Argument::Kind::Value && ssa_.graph_->value(a.value).kind == ValueKind::Tensor;
  }

  // Operand i as an instruction of dtype `to` (a literal for Python numbers).
  std::int32_t get(std::size_t i, DType to) {
    const Argument& a = arg(i);
    switch (a.kind) {
      case Argument::Kind::Value: {
        if (!is_tensor(i)) refuse("operand ", i, " is a symbolic scalar");
        const PointwiseSsa::Rep rep = ssa_.value(a.value);
        // Floating consumers may read the unrounded register (opmath);
        // anything else sees the logical value.
        const std::int32_t from = is_floating(to) ? rep.instr : ssa_.logical(a.value);
        return ssa_.cast(from, to);
      }
      case Argument::Kind::Int:
        return ssa_.literal(to, static_cast<double>(a.i), to == DType::Bool ? a.i != 0 : a.i);
      case Argument::Kind::Float:
        if (!is_floating(to) && to != DType::Bool) refuse("a float scalar in integer math");
        return ssa_.literal(to, a.f, a.f != 0.0);
      case Argument::Kind::Bool: return ssa_.literal(to, a.b ? 1.0 : 0.0, a.b ? 1 : 0);
      default: break;
    }
    refuse("operand ", i, " is neither a tensor nor a number");
    return 0;
  }
  // Operand i in whatever register dtype it has (logical ops, predicates).
  std::int32_t raw(std::size_t i) {
    if (!is_tensor(i))
      return get(i, arg(i).kind == Argument::Kind::Float ? DType::Float32 : DType::Int64);
    return ssa_.value(arg(i).value).instr;
  }
  std::int32_t logical(std::size_t i) {
    if (!is_tensor(i)) refuse("operand ", i, " must be a tensor");
    return ssa_.logical(arg(i).value);
  }

  PromotionOperand promotion(std::size_t i) const {
    using K = PromotionOperand::Kind;
    const Argument& a = arg(i);
    if (a.kind == Argument::Kind::Int) return {K::Scalar, DType::Int64};
    if (a.kind == Argument::Kind::Float) return {K::Scalar, DType::Float64};
    if (a.kind == Argument::Kind::Bool) return {K::Scalar, DType::Bool};
    const TensorType& t = ssa_.graph_->value(a.value).tensor;
    return {t.rank() == 0 ? K::ZeroDimTensor : K::DimTensor, t.dtype};
  }
  DType promoted(std::initializer_list<std::size_t> operands) const {
    std::vector<PromotionOperand> list;
    for (std::size_t i : operands) list.push_back(promotion(i));
    std::optional<DType> d = result_type(list);
    if (!d) refuse("no type promotion for these operands");
    return *d;
  }

  std::int32_t emit(PwOp op, DType dtype, std::vector<std::int32_t> args) {
    return ssa_.emit(op, dtype, std::move(args));
  }
  std::int32_t cast(std::int32_t instr, DType to) { return ssa_.cast(instr, to); }
  std::int32_t literal(DType dtype, double f) {
    return ssa_.literal(dtype, f, static_cast<std::int64_t>(f));
  }
  // Scalar argument i as a literal of `dtype` (alpha, value, threshold).
  std::int32_t scalar(std::size_t i, DType dtype) {
    const Argument& a = arg(i);
    if (a.kind != Argument::Kind::Int && a.kind != Argument::Kind::Float &&
        a.kind != Argument::Kind::Bool)
      refuse("argument ", i, " must be a number");
    return get(i, dtype);
  }
  bool scalar_is_one(std::size_t i) const {
    const Argument& a = arg(i);
    return a.kind == Argument::Kind::None || (a.kind == Argument::Kind::Int && a.i == 1) ||
           (a.kind == Argument::Kind::Float && a.f == 1.0);
  }

  void result(std::int32_t instr) { ssa_.values_[node_.outputs[0]] = {instr, out()}; }

  template <typename... Parts>
  [[noreturn]] void refuse(Parts&&... parts) const {
    std::string text;
    ((text += to_text(parts)), ...);
    throw Refuse{text};
  }

 private:
  static std::string to_text(const char* s) { return s; }
  static std::string to_text(const std::string& s) { return s; }
  static std::string to_text(std::size_t v) { return std::to_string(v); }

  PointwiseSsa& ssa_;
  const Node& node_;
};

namespace {

using Builder = std::function<void(PwNodeBuilder&)>;

DType compute_of(PwNodeBuilder& b) { return opmath_dtype(b.out()); }

void require_numeric(PwNodeBuilder& b) {
  if (b.out() == DType::Bool) b.refuse("bool arithmetic is not generated");
}
void require_floating(PwNodeBuilder& b) {
  if (!is_floating(b.out())) b.refuse("the result is not floating");
}

Builder unary(PwOp op, bool floating_only) {
  return [op, floating_only](PwNodeBuilder& b) {
    floating_only ? require_floating(b) : require_numeric(b);
    const DType c = compute_of(b);
    b.result(b.emit(op, c, {b.get(0, c)}));
  };
}

Builder binary(PwOp op, bool floating_only = false) {
  return [op, floating_only](PwNodeBuilder& b) {
    floating_only ? require_floating(b) : require_numeric(b);
    const DType c = compute_of(b);
    b.result(b.emit(op, c, {b.get(0, c), b.get(1, c)}));
  };
}

// pow(x, c) for the constant exponents eager's CUDA kernel special-cases
// (PowKernel.cu: 2, 3, 0.5, -0.5, -1, -2) in the same form: GPT-2's GELU
// cubes its input, and powf is a long libdevice routine where x * x * x is
// two multiplies.
void pow_op(PwNodeBuilder& b) {  // (self, exponent)
  require_floating(b);
  const DType c = compute_of(b);
  const Argument& e = b.arg(1);
  std::optional<double> exponent;
  if (e.kind == Argument::Kind::Float) exponent = e.f;
  if (e.kind == Argument::Kind::Int) exponent = static_cast<double>(e.i);
  const std::int32_t x = b.get(0, c);
  auto mul = [&](std::int32_t l, std::int32_t r) { return b.emit(PwOp::Mul, c, {l, r}); };
  if (exponent == 2.0) return b.result(mul(x, x));
  if (exponent == 3.0) return b.result(mul(mul(x, x), x));
  if (exponent == 0.5) return b.result(b.emit(PwOp::Sqrt, c, {x}));
  if (exponent == -0.5) return b.result(b.emit(PwOp::Rsqrt, c, {x}));
  if (exponent == -1.0) return b.result(b.emit(PwOp::Reciprocal, c, {x}));
  if (exponent == -2.0) return b.result(b.emit(PwOp::Reciprocal, c, {mul(x, x)}));
  b.result(b.emit(PwOp::Pow, c, {x, b.get(1, c)}));
}

// self (+|-) alpha * other
Builder add_sub(PwOp op) {
  return [op](PwNodeBuilder& b) {
    require_numeric(b);
    const DType c = compute_of(b);
    const std::int32_t self = b.get(0, c);
    std::int32_t other = b.get(1, c);
    if (!b.scalar_is_one(2)) other = b.emit(PwOp::Mul, c, {other, b.scalar(2, c)});
    b.result(b.emit(op, c, {self, other}));
  };
}

// other - alpha * self
void rsub(PwNodeBuilder& b) {
  require_numeric(b);
  const DType c = compute_of(b);
  std::int32_t self = b.get(0, c);
  if (!b.scalar_is_one(2)) self = b.emit(PwOp::Mul, c, {self, b.scalar(2, c)});
  const std::int32_t other = b.get(1, c);
  b.result(b.emit(PwOp::Sub, c, {other, self}));
}

Builder compare(PwOp op) {
  return [op](PwNodeBuilder& b) {
    if (b.out() != DType::Bool) b.refuse("a comparison must return bool");
    const DType c = opmath_dtype(b.promoted({0, 1}));
    b.result(b.emit(op, DType::Bool, {b.get(0, c), b.get(1, c)}));
  };
}

Builder logical(PwOp op, int arity) {
  return [op, arity](PwNodeBuilder& b) {
    if (b.out() != DType::Bool) b.refuse("a logical op must return bool");
    std::vector<std::int32_t> args;
    for (int i = 0; i < arity; ++i) args.push_back(b.raw(static_cast<std::size_t>(i)));
    b.result(b.emit(op, DType::Bool, args));
  };
}

Builder predicate(PwOp op) {
  return [op](PwNodeBuilder& b) {
    if (b.out() != DType::Bool) b.refuse("a predicate must return bool");
    b.result(b.emit(op, DType::Bool, {b.raw(0)}));
  };
}

Builder bitwise(PwOp op, int arity) {
  return [op, arity](PwNodeBuilder& b) {
    if (is_floating(b.out())) b.refuse("bitwise ops take integers or bool");
    std::vector<std::int32_t> args;
    for (int i = 0; i < arity; ++i) args.push_back(b.get(static_cast<std::size_t>(i), b.out()));
    b.result(b.emit(op, b.out(), args));
  };
}

void where(PwNodeBuilder& b) {
  const DType c = compute_of(b);
  b.result(b.emit(PwOp::Where, c, {b.get(0, DType::Bool), b.get(1, c), b.get(2, c)}));
}

void masked_fill(PwNodeBuilder& b) {  // (self, mask, value)
  const DType c = compute_of(b);
  b.result(b.emit(PwOp::Where, c, {b.get(1, DType::Bool), b.get(2, c), b.get(0, c)}));
}

// clamp(self, min?, max?): max(self, min), then min(., max); NaN propagates.
Builder clamp(bool has_min, bool has_max) {
  return [has_min, has_max](PwNodeBuilder& b) {
    require_numeric(b);
    const DType c = compute_of(b);
    std::int32_t x = b.get(0, c);
    std::size_t next = 1;
    if (has_min) {
      if (!b.is_none(next)) x = b.emit(PwOp::Maximum, c, {x, b.get(next, c)});
      ++next;
    }
    if (has_max && !b.is_none(next)) x = b.emit(PwOp::Minimum, c, {x, b.get(next, c)});
    b.result(x);
  };
}

std::string string_arg(PwNodeBuilder& b, std::size_t i, const std::string& fallback) {
  const Argument& a = b.arg(i);
  if (a.kind == Argument::Kind::None) return fallback;
  if (a.kind != Argument::Kind::String) b.refuse("argument ", i, " must be a string");
  return a.s;
}

void gelu(PwNodeBuilder& b) {
  require_floating(b);
  const std::string approximate = string_arg(b, 1, "none");
  if (approximate != "none" && approximate != "tanh") b.refuse("unknown gelu approximation");
  const DType c = compute_of(b);
  b.result(b.emit(approximate == "tanh" ? PwOp::GeluTanh : PwOp::GeluErf, c, {b.get(0, c)}));
}

void gelu_backward(PwNodeBuilder& b) {  // (grad_output, self, approximate)
  require_floating(b);
  const std::string approximate = string_arg(b, 2, "none");
  if (approximate != "none" && approximate != "tanh") b.refuse("unknown gelu approximation");
  const DType c = compute_of(b);
  const PwOp op = approximate == "tanh" ? PwOp::GeluTanhBackward : PwOp::GeluErfBackward;
  b.result(b.emit(op, c, {b.get(0, c), b.get(1, c)}));
}

void threshold_backward(PwNodeBuilder& b) {  // (grad_output, self, threshold)
  require_numeric(b);
  const DType c = compute_of(b);
  b.result(b.emit(PwOp::ThresholdBackward, c, {b.get(0, c), b.get(1, c), b.scalar(2, c)}));
}

void div_mode(PwNodeBuilder& b) {  // (self, other, rounding_mode?)
  const std::string mode = string_arg(b, 2, "");
  PwOp op = PwOp::Div;
  if (mode == "trunc")
    op = PwOp::DivTrunc;
  else if (mode == "floor")
    op = PwOp::DivFloor;
  else if (!mode.empty())
    b.refuse("unknown rounding mode");
  op == PwOp::Div ? require_floating(b) : require_numeric(b);
  const DType c = compute_of(b);
  if (op == PwOp::DivTrunc && c != b.out() && is_floating(b.out())) {
    // Eager's fp16/bf16 kernel rounds the quotient to the 16-bit type before
    // truncating (2.999 becomes 3.0, then 3); truncating the fp32 quotient
    // would give 2 (found by the OpInfo sweep).
    const std::int32_t quotient = b.cast(b.emit(PwOp::Div, c, {b.get(0, c), b.get(1, c)}), b.out());
    b.result(b.emit(PwOp::Trunc, c, {b.cast(quotient, c)}));
    return;
  }
  b.result(b.emit(op, c, {b.get(0, c), b.get(1, c)}));
}

// self + value * t1 * t2, or self + value * (t1 / t2), as eager's CUDA kernels.
Builder addc(bool divide) {
  return [divide](PwNodeBuilder& b) {
    require_numeric(b);
    if (divide) require_floating(b);
    const DType c = compute_of(b);
    const std::int32_t value =
        b.arg(3).kind == Argument::Kind::None ? b.literal(c, 1.0) : b.scalar(3, c);
    std::int32_t term;
    if (divide) {
      term = b.emit(PwOp::Mul, c, {value, b.emit(PwOp::Div, c, {b.get(1, c), b.get(2, c)})});
    } else {
      term = b.emit(PwOp::Mul, c, {b.emit(PwOp::Mul, c, {value, b.get(1, c)}), b.get(2, c)});
    }
    b.result(b.emit(PwOp::Add, c, {b.get(0, c), term}));
  };
}

// _to_copy / convert_element_type: one cast of the logical value.
void convert(PwNodeBuilder& b) { b.result(b.cast(b.logical(0), b.out())); }

void identity(PwNodeBuilder& b) {  // clone
  if (b.out() != b.promotion(0).dtype) b.refuse("clone changes the dtype");
  b.result(b.logical(0));
}

// Note [Fills as literals]
// full_like(x, v), zeros_like(x), ones_like(x) and full(size, v) compute no
// element from anything they read: x gives only the shape. Left to ATen
// they are a fill kernel and a tensor the reading kernel loads (T5's
// relative position buckets clamp against a full_like, masks are filled
// with -inf beside the scores). In a group they are a literal of the
// result's dtype, which the readers use in registers. A group that would
// read no tensor at all stays ATen (pointwise_planner.cpp).
Builder fill(std::optional<double> value) {
  return [value](PwNodeBuilder& b) {
    const DType out = b.out();
    b.result(value ? b.literal(out, *value) : b.scalar(1, out));
  };
}

const std::map<std::string, Builder>& table() {
  static const std::map<std::string, Builder> ops = [] {
    std::map<std::string, Builder> t;
    // Arithmetic.
    t["aten::add.Tensor"] = add_sub(PwOp::Add);
    t["aten::add.Scalar"] = add_sub(PwOp::Add);
    t["aten::sub.Tensor"] = add_sub(PwOp::Sub);
    t["aten::sub.Scalar"] = add_sub(PwOp::Sub);
    t["aten::rsub.Scalar"] = rsub;
    t["aten::rsub.Tensor"] = rsub;
    t["aten::mul.Tensor"] = binary(PwOp::Mul);
    t["aten::mul.Scalar"] = binary(PwOp::Mul);
    t["aten::div.Tensor"] = binary(PwOp::Div, true);
    t["aten::div.Scalar"] = binary(PwOp::Div, true);
    t["aten::div.Tensor_mode"] = div_mode;
    t["aten::pow.Tensor_Scalar"] = pow_op;
    t["aten::pow.Tensor_Tensor"] = binary(PwOp::Pow, true);
    t["aten::maximum.default"] = binary(PwOp::Maximum);
    t["aten::minimum.default"] = binary(PwOp::Minimum);
    t["aten::fmod.Tensor"] = binary(PwOp::Fmod);
    t["aten::fmod.Scalar"] = binary(PwOp::Fmod);
    t["aten::remainder.Tensor"] = binary(PwOp::Remainder);
    t["aten::remainder.Scalar"] = binary(PwOp::Remainder);
    t["aten::neg.default"] = unary(PwOp::Neg, false);
    t["aten::abs.default"] = unary(PwOp::Abs, false);
    t["aten::sign.default"] = unary(PwOp::Sign, false);
    t["aten::relu.default"] = unary(PwOp::Relu, false);
    t["aten::clamp.default"] = clamp(true, true);
    t["aten::clamp.Tensor"] = clamp(true, true);
    t["aten::clamp_min.default"] = clamp(true, false);
    t["aten::clamp_max.default"] = clamp(false, true);
    t["aten::addcmul.default"] = addc(false);
    t["aten::addcdiv.default"] = addc(true);
    // Floating math.
    const std::pair<const char*, PwOp> floating[] = {
        {"exp", PwOp::Exp},     {"exp2", PwOp::Exp2},
        {"expm1", PwOp::Expm1}, {"log", PwOp::Log},
        {"log1p", PwOp::Log1p}, {"log2", PwOp::Log2},
        {"sqrt", PwOp::Sqrt},   {"rsqrt", PwOp::Rsqrt},
        {"sin", PwOp::Sin},     {"cos", PwOp::Cos},
        {"tan", PwOp::Tan},     {"tanh", PwOp::Tanh},
        {"erf", PwOp::Erf},     {"sigmoid", PwOp::Sigmoid},
        {"silu", PwOp::Silu},   {"reciprocal", PwOp::Reciprocal},
        {"floor", PwOp::Floor}, {"ceil", PwOp::Ceil},
        {"round", PwOp::Round}, {"trunc", PwOp::Trunc},
    };
    for (const auto& [name, op] : floating)
      t[std::string("aten::") + name + ".default"] = unary(op, true);
    t["aten::gelu.default"] = gelu;
    // Backward forms.
    t["aten::gelu_backward.default"] = gelu_backward;
    t["aten::threshold_backward.default"] = threshold_backward;
    t["aten::sigmoid_backward.default"] = binary(PwOp::SigmoidBackward, true);
    t["aten::tanh_backward.default"] = binary(PwOp::TanhBackward, true);
    t["aten::silu_backward.default"] = binary(PwOp::SiluBackward, true);
    // Comparisons, predicates, logic, bits.
    const std::pair<const char*, PwOp> comparisons[] = {{"eq", PwOp::Eq}, {"ne", PwOp::Ne},
                                                        {"lt", PwOp::Lt}, {"le", PwOp::Le},
                                                        {"gt", PwOp::Gt}, {"ge", PwOp::Ge}};
    for (const auto& [name, op] : comparisons) {
      t[std::string("aten::") + name + ".Tensor"] = compare(op);
      t[std::string("aten::") + name + ".Scalar"] = compare(op);
    }
    t["aten::isnan.default"] = predicate(PwOp::IsNan);
    t["aten::isinf.default"] = predicate(PwOp::IsInf);
    t["aten::logical_and.default"] = logical(PwOp::LogicalAnd, 2);
    t["aten::logical_or.default"] = logical(PwOp::LogicalOr, 2);
    t["aten::logical_xor.default"] = logical(PwOp::LogicalXor, 2);
    t["aten::logical_not.default"] = logical(PwOp::LogicalNot, 1);
    t["aten::bitwise_and.Tensor"] = bitwise(PwOp::BitAnd, 2);
    t["aten::bitwise_or.Tensor"] = bitwise(PwOp::BitOr, 2);
    t["aten::bitwise_xor.Tensor"] = bitwise(PwOp::BitXor, 2);
    t["aten::bitwise_not.default"] = bitwise(PwOp::BitNot, 1);
    // Selection and conversion.
    t["aten::where.self"] = where;
    t["aten::masked_fill.Scalar"] = masked_fill;
    t["aten::masked_fill.Tensor"] = masked_fill;
    t["aten::_to_copy.default"] = convert;
    t["prims::convert_element_type.default"] = convert;
    t["aten::clone.default"] = identity;
    // Note [Fills as literals]
    t["aten::full_like.default"] = fill(std::nullopt);
    t["aten::full.default"] = fill(std::nullopt);
    t["aten::zeros_like.default"] = fill(0.0);
    t["aten::ones_like.default"] = fill(1.0);
    return t;
  }();
  return ops;
}

}  // namespace

bool has_pointwise_lowering(const std::string& op) { return table().count(op) != 0; }

std::vector<std::string> pointwise_lowering_ops() {
  std::vector<std::string> out;
  for (const auto& entry : table()) out.push_back(entry.first);
  return out;
}

struct PointwiseSsa::State {
  PointwiseSpec spec;
  std::vector<ValueId> inputs;
  std::unordered_map<ValueId, Rep> values;
  Space space;
  std::map<Space, std::unordered_map<ValueId, Rep>> other_spaces;
  std::vector<int> coord_dims;
};

std::string PointwiseSsa::add_node(const Node& node) {
  if (node.op != kCatOp && table().count(node.op) == 0)
    return "no pointwise lowering for " + node.op;
  if (node.outputs.size() != 1) return "more than one output";
  // Builders append; a refusal restores the state from before the node.
  State saved{spec_, inputs_, values_, space_, other_spaces_, coord_dims_};
  try {
    lower(node);
    if (values_.count(node.outputs[0]) == 0) return "the lowering produced no result";
    return {};
  } catch (const Refuse& refusal) {
    spec_ = std::move(saved.spec);
    inputs_ = std::move(saved.inputs);
    values_ = std::move(saved.values);
    space_ = std::move(saved.space);
    other_spaces_ = std::move(saved.other_spaces);
    coord_dims_ = std::move(saved.coord_dims);
    return refusal.reason;
  }
}

void PointwiseSsa::lower(const Node& node) {
  if (node.op == kCatOp) {
    lower_cat(node);
    return;
  }
  auto it = table().find(node.op);
  if (it == table().end()) throw Refuse{"no pointwise lowering for " + node.op};
  PwNodeBuilder builder(*this, node);
  it->second(builder);
}

bool PointwiseSsa::guarded(std::size_t input) const {
  return std::any_of(spec_.guards.begin(), spec_.guards.end(),
                     [&](const PwGuard& g) { return static_cast<std::size_t>(g.input) == input; });
}

int PointwiseSsa::coord_axis(int dim_from_end) {
  for (std::size_t a = 0; a < coord_dims_.size(); ++a)
    if (coord_dims_[a] == dim_from_end) return static_cast<int>(a);
  coord_dims_.push_back(dim_from_end);
  spec_.coords = static_cast<int>(coord_dims_.size());
  return spec_.coords - 1;
}

std::int32_t PointwiseSsa::bound(std::int64_t value) {
  for (std::size_t k = 0; k < spec_.scalars.size(); ++k) {
    const PwScalar& o = spec_.scalars[k];
    if (o.dtype == DType::Int64 && o.is_argument && o.i == value)
      return static_cast<std::int32_t>(k);
  }
  spec_.scalars.push_back(PwScalar{DType::Int64, /*is_argument=*/true, 0.0, value});
  return static_cast<std::int32_t>(spec_.scalars.size() - 1);
}

// Note [Concatenations in pointwise kernels] in spec/kernel_spec.h.
void PointwiseSsa::lower_cat(const Node& node) {
  if (node.args.empty() || node.args[0].kind != Argument::Kind::List)
    throw Refuse{"the pieces are not a list"};
  std::int64_t dim = 0;
  if (node.args.size() > 1) {
    if (node.args[1].kind != Argument::Kind::Int) throw Refuse{"the dim is not a number"};
    dim = node.args[1].i;
  }
  const TensorType& out = graph_->value(node.outputs[0]).tensor;
  const auto rank = static_cast<std::int64_t>(out.rank());
  if (rank == 0) throw Refuse{"a 0-dim concatenation"};
  if (dim < 0) dim += rank;
  if (dim < 0 || dim >= rank) throw Refuse{"the dim is out of range"};
  const TensorType& walk = walk_ != nullptr ? *walk_ : out;
  const auto walk_rank = static_cast<std::int64_t>(walk.rank());
  if (walk_rank < rank) throw Refuse{"the concatenation has a higher rank than the walk"};
  const int from_end = static_cast<int>(dim - rank);
  const int axis = coord_axis(from_end);
  // Where the current space lies along the axis: the pieces split that.
  std::int64_t base = 0;
  std::optional<std::int64_t> extent;
  for (const Range& r : space_) {
    if (r.axis != axis) continue;
    base = r.lo;
    extent = r.hi - r.lo;
  }
  if (!extent) {
    const Dim& size = walk.sizes[static_cast<std::size_t>(walk_rank + from_end)];
    if (!size.is_static()) throw Refuse{"the walk's size along the concatenation is symbolic"};
    extent = size.static_value();
  }
  const Dim& out_size = out.sizes[static_cast<std::size_t>(dim)];
  if (!out_size.is_static() || out_size.static_value() != *extent)
    throw Refuse{"the concatenation is broadcast along its dim"};
  std::vector<std::pair<std::int32_t, std::int64_t>> pieces;  // (value, end of its range)
  std::int64_t at = 0;
  for (const Argument& item : node.args[0].items) {
    if (item.kind != Argument::Kind::Value) throw Refuse{"a piece is not a tensor"};
    const TensorType& t = graph_->value(item.value).tensor;
    if (static_cast<std::int64_t>(t.rank()) != rank)
      throw Refuse{"a piece has another rank (a legacy empty tensor)"};
    const Dim& size = t.sizes[static_cast<std::size_t>(dim)];
    if (!size.is_static()) throw Refuse{"a piece's size along the dim is symbolic"};
    if (size.static_value() == 0) continue;
    Space inner;
    for (const Range& r : space_)
      if (r.axis != axis) inner.push_back(r);
    inner.push_back(Range{axis, base + at, base + at + size.static_value()});
    std::sort(inner.begin(), inner.end());
    at += size.static_value();
    // Evaluate the piece in its own space, then come back.
    other_spaces_[space_] = std::move(values_);
    const Space outer = std::exchange(space_, inner);
    values_ = std::move(other_spaces_[space_]);
    const std::int32_t piece = cast(logical(item.value), out.dtype);
    other_spaces_[space_] = std::move(values_);
    space_ = outer;
    values_ = std::move(other_spaces_[space_]);
    pieces.emplace_back(piece, base + at);
    // Each space lowers what it reads again: nested concatenations that
    // read one value in many spaces must not grow the kernel without bound.
    if (spec_.instrs.size() > kMaxInstructions)
      throw Refuse{"the pieces' spaces take more than " + std::to_string(kMaxInstructions) +
                   " instructions"};
  }
  if (pieces.empty() || at != *extent) throw Refuse{"the pieces do not cover the concatenation"};
  const std::int32_t coord = leaf(PwOp::Coord, DType::Int64, axis);
  std::int32_t result = pieces.back().first;
  for (std::size_t k = pieces.size() - 1; k-- > 0;) {
    const std::int32_t end = leaf(PwOp::Scalar, DType::Int64, bound(pieces[k].second));
    const std::int32_t below = emit(PwOp::Lt, DType::Bool, {coord, end});
    result = emit(PwOp::Where, out.dtype, {below, pieces[k].first, result});
  }
  values_[node.outputs[0]] = Rep{result, out.dtype};
}

PointwiseSsa::Rep PointwiseSsa::value(ValueId v) {
  auto it = values_.find(v);
  if (it != values_.end()) return it->second;
  const TensorType& t = graph_->value(v).tensor;
  // A 0-dim constant (the 0 of a decomposed ReLU gradient, where(mask,
  // scalar_tensor(0), dy)) is a literal of the kernel, not a tensor it loads:
  // one input less, and prologues that read only x-shaped tensors take it.
  if (const Argument* c = scalar_tensor_constant(*graph_, v)) {
    const double f = c->kind == Argument::Kind::Float  ? c->f
                     : c->kind == Argument::Kind::Bool ? (c->b ? 1.0 : 0.0)
                                                       : static_cast<double>(c->i);
    const std::int64_t i = c->kind == Argument::Kind::Bool ? (c->b ? 1 : 0) : c->i;
    Rep rep{literal(t.dtype, f, i), t.dtype};
    values_.emplace(v, rep);
    return rep;
  }
  // Note [Concatenations in pointwise kernels]: what a piece computes is
  // computed in the piece's space; what the walk computes is not read there.
  const NodeId producer = graph_->value(v).producer;
  if (producer >= 0 && piece_nodes_.count(producer)) {
    if (space_.empty())
      throw Refuse{"the walk reads " + graph_->value(v).name + ", a piece's value"};
    lower(graph_->node(producer));
    auto done = values_.find(v);
    if (done == values_.end()) throw Refuse{"the lowering produced no result"};
    return done->second;
  }
  if (!space_.empty()) {
    auto walk_values = other_spaces_.find(Space{});
    if (walk_values != other_spaces_.end() && walk_values->second.count(v))
      throw Refuse{"a piece reads " + graph_->value(v).name + ", which the walk computes"};
  }
  TensorArg arg;
  arg.dtype = t.dtype;
  spec_.inputs.push_back(arg);
  inputs_.push_back(v);
  const auto input = static_cast<std::int32_t>(spec_.inputs.size() - 1);
  for (const Range& r : space_)
    spec_.guards.push_back(PwGuard{input, r.axis, bound(r.lo), bound(r.hi)});
  const std::int32_t id = emit(PwOp::Load, t.dtype, {}, input);
  Rep rep{id, t.dtype};
  values_.emplace(v, rep);
  return rep;
}

std::int32_t PointwiseSsa::logical(ValueId v) {
  const Rep rep = value(v);
  return cast(rep.instr, rep.logical);
}

std::int32_t PointwiseSsa::emit(PwOp op, DType dtype, std::vector<std::int32_t> args,
                                std::int32_t index) {
  spec_.instrs.push_back(PwInstr{op, dtype, std::move(args), index});
  return static_cast<std::int32_t>(spec_.instrs.size() - 1);
}

std::int32_t PointwiseSsa::cast(std::int32_t instr, DType to) {
  if (spec_.instrs[static_cast<std::size_t>(instr)].dtype == to) return instr;
  // Reuse an equal cast: CSE for the common "upcast each use" pattern.
  for (std::size_t k = 0; k < spec_.instrs.size(); ++k) {
    const PwInstr& in = spec_.instrs[k];
    if (in.op == PwOp::Cast && in.dtype == to && in.args.size() == 1 && in.args[0] == instr)
      return static_cast<std::int32_t>(k);
  }
  return emit(PwOp::Cast, to, {instr});
}

std::int32_t PointwiseSsa::literal(DType dtype, double f, std::int64_t i) {
  PwScalar s;
  s.dtype = dtype;
  s.f = is_floating(dtype) ? f : 0.0;
  s.i = is_floating(dtype) ? 0 : (dtype == DType::Bool ? (i != 0) : i);
  for (std::size_t k = 0; k < spec_.scalars.size(); ++k) {
    const PwScalar& o = spec_.scalars[k];
    if (o.dtype == s.dtype && !o.is_argument && o.i == s.i &&
        (o.f == s.f || (o.f != o.f && s.f != s.f)))
      return leaf(PwOp::Scalar, dtype, static_cast<std::int32_t>(k));
  }
  spec_.scalars.push_back(s);
  return emit(PwOp::Scalar, dtype, {}, static_cast<std::int32_t>(spec_.scalars.size() - 1));
}

std::int32_t PointwiseSsa::leaf(PwOp op, DType dtype, std::int32_t index) {
  for (std::size_t id = 0; id < spec_.instrs.size(); ++id) {
    const PwInstr& in = spec_.instrs[id];
    if (in.op == op && in.index == index) return static_cast<std::int32_t>(id);
  }
  return emit(op, dtype, {}, index);
}

}  // namespace mybackend
