#include "fusion/norm_lowering.h"

#include <algorithm>

#include "fusion/ir_match.h"
#include "fusion/pointwise_planner.h"
#include "fusion/reduction_lowering.h"
#include "spec/launch_tuning.h"

namespace mybackend {

constexpr const char* kGroupNormStats = "mybackend::group_norm_stats.default";
namespace {

const Argument& arg_at(const Node& node, std::size_t i) {
  static const Argument kNone;
  return i < node.args.size() ? node.args[i] : kNone;
}

const TensorType* tensor_arg(const Graph& graph, const Node& node, std::size_t i) {
  const Argument& a = arg_at(node, i);
  if (a.kind != Argument::Kind::Value) return nullptr;
  const Value& v = graph.value(a.value);
  return v.kind == ValueKind::Tensor ? &v.tensor : nullptr;
}

DType stats_dtype(DType x) { return x == DType::Float64 ? DType::Float64 : DType::Float32; }

std::string tensor_problem(const TensorType& t, const Device& device, const std::string& what) {
  if (t.device.type != DeviceType::CUDA || t.device != device)
    return what + " is not on the norm's CUDA device";
  if (!is_floating(t.dtype) || !codegen_supports_dtype(t.dtype))
    return what + " has dtype " + std::string(dtype_name(t.dtype));
  return {};
}

// Common finish: both variants, validated.
std::string finish(NormGroup& g, const std::vector<NodeId>& nodes, NormMatch* out) {
  g.spec.aligned = true;
  g.spec.index64 = false;
  // The defaults; the compile's tuning comes later (Note [Tuning in the specs]).
  g.spec.threads = LaunchTuning{}.row_block(is_softmax_forward(g.spec.kind));
  g.general = g.spec;
  g.general.aligned = false;
  g.general.index64 = true;
  for (const NormSpec* s : {&g.spec, &g.general}) {
    if (std::string p = validate(*s); !p.empty()) return "invalid spec: " + p;
  }
  out->nodes = nodes;
  std::sort(out->nodes.begin(), out->nodes.end());
  out->group = std::make_shared<NormGroup>(std::move(g));
  return {};
}

std::string last_dim(const Node& node, std::size_t dim_arg, std::int64_t rank) {
  const Argument& d = arg_at(node, dim_arg);
  if (d.kind != Argument::Kind::Int) return "the softmax dim is not a constant";
  const std::int64_t dim = d.i < 0 ? d.i + rank : d.i;
  if (dim != rank - 1) return "softmax over a dim that is not the last one runs as ATen";
  return {};
}

std::string match_softmax(const Graph& graph, const Node& node, NormMatch* out) {
  const bool forward =
      node.op == "aten::_softmax.default" || node.op == "aten::_log_softmax.default";
  const bool log = node.op.find("log_softmax") != std::string::npos;
  const TensorType* x = tensor_arg(graph, node, 0);
  if (x == nullptr || node.outputs.size() != 1) return "unexpected arguments";
  const TensorType& y = graph.value(node.outputs[0]).tensor;
  if (x->rank() == 0) return "softmax of a 0-d tensor";
  if (std::string p = last_dim(node, forward ? 1 : 2, x->rank()); !p.empty()) return p;
  if (std::string p = tensor_problem(*x, x->device, "the input"); !p.empty()) return p;
  if (std::string p = tensor_problem(y, x->device, "the result"); !p.empty()) return p;
  NormGroup g;
  g.rows_of = node.args[0].value;
  g.spec.dtype = x->dtype;
  g.spec.out_dtype = forward ? y.dtype : x->dtype;
  g.spec.weight_dtype = x->dtype;
  if (forward) {
    g.spec.kind = log ? NormKind::LogSoftmaxForward : NormKind::SoftmaxForward;
    g.inputs = {{"x", node.args[0].value}};
    g.outputs = {{"y", node.outputs[0]}};
  } else {
    g.spec.kind = log ? NormKind::LogSoftmaxBackward : NormKind::SoftmaxBackward;
    const TensorType* o = tensor_arg(graph, node, 1);
    if (o == nullptr || o->dtype != x->dtype || y.dtype != x->dtype)
      return "softmax backward that changes the dtype runs as ATen";
    g.inputs = {{"grad_out", node.args[0].value}, {"out", node.args[1].value}};
    g.outputs = {{"grad_in", node.outputs[0]}};
  }
  return finish(g, {node.id}, out);
}

// mybackend::cross_entropy_forward(x, target, ignore_index) -> (loss, lse)
// mybackend::cross_entropy_backward(grad_loss, x, target, lse, ignore_index[, pad])
//   -> grad_in [rows, classes + pad]
// (mybackend/ops/cross_entropy.py). x is [rows, classes] with unit column
// stride; any row stride (Note [Rows of any alignment]). The gradient's
// rows end in `pad` zeros (Note [Padded cross-entropy gradient]).
std::string match_cross_entropy(const Graph& graph, const Node& node, NormMatch* out) {
  const bool forward = node.op == "mybackend::cross_entropy_forward.default";
  const std::size_t x_arg = forward ? 0 : 1;
  const TensorType* x = tensor_arg(graph, node, x_arg);
  const TensorType* target = tensor_arg(graph, node, x_arg + 1);
  const Argument& ignore = arg_at(node, forward ? 2 : 4);
  if (x == nullptr || target == nullptr || ignore.kind != Argument::Kind::Int)
    return "unexpected arguments";
  if (node.outputs.size() != (forward ? 2u : 1u)) return "unexpected results";
  if (x->rank() != 2 || target->rank() != 1) return "cross-entropy over [rows, classes] only";
  if (std::string p = tensor_problem(*x, x->device, "the logits"); !p.empty()) return p;
  if (x->dtype == DType::Float64) return "fp64 logits run as ATen";
  if (target->dtype != DType::Int64 || target->device != x->device)
    return "the targets are not int64 on the logits' device";
  NormGroup g;
  g.rows_of = node.args[x_arg].value;
  g.ignore_index = ignore.i;
  g.spec.kind = forward ? NormKind::CrossEntropyForward : NormKind::CrossEntropyBackward;
  g.spec.dtype = x->dtype;
  g.spec.out_dtype = DType::Float32;
  g.spec.weight_dtype = x->dtype;
  g.inputs = {{"x", node.args[x_arg].value}, {"target", node.args[x_arg + 1].value}};
  if (forward) {
    g.outputs = {{"loss", node.outputs[0]}, {"lse", node.outputs[1]}};
  } else {
    const TensorType* grad = tensor_arg(graph, node, 0);
    const TensorType* lse = tensor_arg(graph, node, 3);
    if (grad == nullptr || lse == nullptr) return "unexpected arguments";
    for (const TensorType* t : {grad, lse}) {
      if (t->dtype != DType::Float32 || t->device != x->device || t->rank() != 1)
        return "grad_loss and lse are not fp32 rows on the logits' device";
    }
    g.inputs.push_back({"grad_loss", node.args[0].value});
    g.inputs.push_back({"lse", node.args[3].value});
    const TensorType& y = graph.value(node.outputs[0]).tensor;
    if (y.dtype != x->dtype) return "the gradient's dtype differs from the logits'";
    std::int64_t pad = 0;
    if (node.args.size() > 5) {
      const Argument& pad_arg = arg_at(node, 5);
      if (pad_arg.kind != Argument::Kind::Int || pad_arg.i < 0) return "unexpected arguments";
      pad = pad_arg.i;
    }
    if (y.rank() != 2) return "the gradient is not [rows, classes + pad]";
    const Dim& classes = x->sizes[1];
    const Dim& width = y.sizes[1];
    if (classes.is_static() && width.is_static() &&
        width.static_value() != classes.static_value() + pad)
      return "the gradient is not [rows, classes + pad]";
    g.outputs = {{"grad_in", node.outputs[0]}};
  }
  return finish(g, {node.id}, out);
}

// mybackend::batch_norm_stats(x, running_mean, running_var, momentum, eps)
//   -> (mean, invstd, new_running_mean, new_running_var)
// mybackend::batch_norm_backward_reduce(grad_out, x, mean, invstd)
//   -> (grad_bias, grad_weight)
// (mybackend/ops/batch_norm.py). x is [N, C, ...] with the channels innermost in
// memory; per-channel results are fp32.
std::string match_batch_norm(const Graph& graph, const Node& node, NormMatch* out) {
  const bool stats = node.op == "mybackend::batch_norm_stats.default";
  const std::size_t x_arg = stats ? 0 : 1;
  const TensorType* x = tensor_arg(graph, node, x_arg);
  if (x == nullptr || node.outputs.size() != (stats ? 4u : 2u)) return "unexpected arguments";
  if (x->rank() < 2) return "batch norm over fewer than 2 dims";
  if (std::string p = tensor_problem(*x, x->device, "the input"); !p.empty()) return p;
  if (x->dtype == DType::Float64) return "fp64 batch norm runs as ATen";
  // Channels not innermost: the kernel would need a transposed copy of the
  // whole activation; ATen reads that layout as it is.
  const Dim& channel_stride = x->strides[1];
  if (channel_stride.is_static() && channel_stride.static_value() != 1 &&
      !(x->sizes[1].is_static() && x->sizes[1].static_value() == 1))
    return "the channels are not innermost in memory (not channels-last)";
  NormGroup g;
  g.rows_of = node.args[x_arg].value;
  g.spec.kind = stats ? NormKind::BatchNormStats : NormKind::BatchNormBackward;
  g.spec.dtype = x->dtype;
  g.spec.out_dtype = DType::Float32;
  g.spec.weight_dtype = x->dtype;
  g.inputs = {{"x", node.args[x_arg].value}};
  if (stats) {
    const TensorType* running_mean = tensor_arg(graph, node, 1);
    const TensorType* running_var = tensor_arg(graph, node, 2);
    const Argument& momentum = arg_at(node, 3);
    const Argument& eps = arg_at(node, 4);
    if (running_mean == nullptr || running_var == nullptr) return "unexpected arguments";
    for (const TensorType* t : {running_mean, running_var}) {
      if (std::string p = tensor_problem(*t, x->device, "a running statistic"); !p.empty())
        return p;
    }
    if (running_mean->dtype != running_var->dtype)
      return "the running statistics have different dtypes";
    if (momentum.kind != Argument::Kind::Float || eps.kind != Argument::Kind::Float)
      return "momentum or eps is not a constant";
    g.spec.weight_dtype = running_mean->dtype;
    g.momentum = momentum.f;
    g.eps = eps.f;
    g.inputs.push_back({"running_mean", node.args[1].value});
    g.inputs.push_back({"running_var", node.args[2].value});
    g.outputs = {{"mean", node.outputs[0]},
                 {"invstd", node.outputs[1]},
                 {"new_running_mean", node.outputs[2]},
                 {"new_running_var", node.outputs[3]}};
  } else {
    const TensorType* grad = tensor_arg(graph, node, 0);
    const TensorType* mean = tensor_arg(graph, node, 2);
    const TensorType* invstd = tensor_arg(graph, node, 3);
    if (grad == nullptr || mean == nullptr || invstd == nullptr) return "unexpected arguments";
    if (grad->dtype != x->dtype || grad->device != x->device || grad->rank() != x->rank())
      return "grad_out and x differ in dtype, device or rank";
    for (const TensorType* t : {mean, invstd}) {
      if (t->dtype != DType::Float32 || t->device != x->device)
        return "the saved statistics are not fp32 on x's device";
    }
    g.inputs.push_back({"grad_out", node.args[0].value});
    g.inputs.push_back({"mean", node.args[2].value});
    g.inputs.push_back({"invstd", node.args[3].value});
    g.outputs = {{"grad_bias", node.outputs[0]}, {"grad_weight", node.outputs[1]}};
  }
  return finish(g, {node.id}, out);
}

// mybackend::group_norm_stats(x, groups, eps) -> (mean, rstd, channel_mean,
// channel_rstd) (mybackend/ops/group_norm.py, Note [Group-norm statistics]).
// x is [N, C, spatial...], channels-last or contiguous (the launch reads
// either; another layout runs the op's ATen implementation).
std::string match_group_norm(const Graph& graph, const Node& node, NormMatch* out) {
  const TensorType* x = tensor_arg(graph, node, 0);
  if (x == nullptr || node.outputs.size() != 4u) return "unexpected arguments";
  if (x->rank() < 2) return "group norm over fewer than 2 dims";
  if (std::string p = tensor_problem(*x, x->device, "the input"); !p.empty()) return p;
  if (x->dtype == DType::Float64) return "fp64 group norm runs as ATen";
  const Argument& eps = arg_at(node, 2);
  if (eps.kind != Argument::Kind::Float) return "eps is not a constant";
  NormGroup g;
  g.rows_of = node.args[0].value;
  g.spec.kind = NormKind::GroupNormStats;
  g.spec.dtype = x->dtype;
  g.spec.out_dtype = DType::Float32;
  g.spec.weight_dtype = x->dtype;
  g.eps = eps.f;
  g.inputs = {{"x", node.args[0].value}};
  g.outputs = {{"mean", node.outputs[0]},
               {"rstd", node.outputs[1]},
               {"channel_mean", node.outputs[2]},
               {"channel_rstd", node.outputs[3]}};
  return finish(g, {node.id}, out);
}

// Trailing normalized dims: weight/bias (when present) have exactly those sizes.
std::string normalized_dims(const Node& node, std::int64_t rank, int* count) {
  const Argument& shape = arg_at(node, node.op == "aten::native_layer_norm.default" ? 1 : 2);
  if (shape.kind != Argument::Kind::List || shape.items.empty()) return "no normalized_shape";
  if (static_cast<std::int64_t>(shape.items.size()) > rank) return "normalized_shape too long";
  *count = static_cast<int>(shape.items.size());
  return {};
}

std::string match_layer_norm(const GraphIndex& index, const Node& node, NormMatch* out) {
  const Graph& graph = index.graph;
  const bool forward = node.op == "aten::native_layer_norm.default";
  NormGroup g;
  if (forward) {
    // (input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd)
    const TensorType* x = tensor_arg(graph, node, 0);
    if (x == nullptr || node.outputs.size() != 3) return "unexpected arguments";
    if (std::string p = normalized_dims(node, x->rank(), &g.normalized_dims); !p.empty()) return p;
    if (std::string p = tensor_problem(*x, x->device, "the input"); !p.empty()) return p;
    const TensorType* w = tensor_arg(graph, node, 2);
    const TensorType* b = tensor_arg(graph, node, 3);
    const Argument& eps = arg_at(node, 4);
    if (eps.kind != Argument::Kind::Float && eps.kind != Argument::Kind::Int)
      return "eps is not a constant";
    g.eps = eps.kind == Argument::Kind::Float ? eps.f : static_cast<double>(eps.i);
    g.spec.kind = NormKind::LayerNormForward;
    g.spec.dtype = x->dtype;
    g.spec.out_dtype = x->dtype;
    g.spec.has_weight = w != nullptr;
    g.spec.has_bias = b != nullptr;
    g.spec.weight_dtype = w ? w->dtype : (b ? b->dtype : x->dtype);
    if (w && b && w->dtype != b->dtype) return "weight and bias differ in dtype";
    for (const TensorType* p : {w, b}) {
      if (p == nullptr) continue;
      if (std::string problem = tensor_problem(*p, x->device, "a parameter"); !problem.empty())
        return problem;
      if (p->rank() != g.normalized_dims) return "a parameter does not have normalized_shape";
    }
    const TensorType& y = graph.value(node.outputs[0]).tensor;
    if (y.dtype != x->dtype) return "the result dtype differs from the input's";
    for (int k = 1; k <= 2; ++k) {
      const Value& stat = graph.value(node.outputs[static_cast<std::size_t>(k)]);
      if (stat.kind != ValueKind::Tensor || stat.tensor.dtype != stats_dtype(x->dtype))
        return "the statistics are not in the accumulation dtype";
    }
    // Inference reads neither statistic: the kernel then stores y alone.
    const std::set<NodeId> self = {node.id};
    g.spec.save_stats =
        index.used_outside(node.outputs[1], self) || index.used_outside(node.outputs[2], self);
    g.rows_of = node.args[0].value;
    g.inputs = {{"x", node.args[0].value}};
    if (w) g.inputs.push_back({"weight", node.args[2].value});
    if (b) g.inputs.push_back({"bias", node.args[3].value});
    g.outputs = {{"y", node.outputs[0]}};
    if (g.spec.save_stats) {
      g.outputs.push_back({"mean", node.outputs[1]});
      g.outputs.push_back({"rstd", node.outputs[2]});
    }
    return finish(g, {node.id}, out);
  }
  // (grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask)
  const TensorType* gy = tensor_arg(graph, node, 0);
  const TensorType* x = tensor_arg(graph, node, 1);
  const TensorType* mean = tensor_arg(graph, node, 3);
  const TensorType* rstd = tensor_arg(graph, node, 4);
  const TensorType* w = tensor_arg(graph, node, 5);
  const Argument& mask = arg_at(node, 7);
  if (!gy || !x || !mean || !rstd || node.outputs.size() != 3) return "unexpected arguments";
  if (mask.kind != Argument::Kind::List || mask.items.size() != 3) return "no output_mask";
  bool wanted[3];
  for (int k = 0; k < 3; ++k) {
    const Argument& m = mask.items[static_cast<std::size_t>(k)];
    if (m.kind != Argument::Kind::Bool) return "output_mask is not constant";
    wanted[k] = m.b;
  }
  if (!wanted[0]) return "no grad_input wanted: the parameter grads alone run as ATen";
  if (std::string p = normalized_dims(node, x->rank(), &g.normalized_dims); !p.empty()) return p;
  if (std::string p = tensor_problem(*x, x->device, "the input"); !p.empty()) return p;
  if (gy->dtype != x->dtype) return "grad_out and input differ in dtype";
  if (mean->dtype != stats_dtype(x->dtype) || rstd->dtype != stats_dtype(x->dtype))
    return "the statistics are not in the accumulation dtype";
  const bool want_w = wanted[1] && w != nullptr;
  const bool want_b = wanted[2];
  g.spec.kind = NormKind::LayerNormBackward;
  g.spec.dtype = x->dtype;
  g.spec.out_dtype = x->dtype;
  g.spec.has_weight = w != nullptr;
  g.spec.has_bias = want_b;
  g.spec.param_grads = want_w || want_b;
  g.spec.weight_dtype = w ? w->dtype : x->dtype;
  if (w) {
    if (std::string p = tensor_problem(*w, x->device, "the weight"); !p.empty()) return p;
    if (w->rank() != g.normalized_dims) return "the weight does not have normalized_shape";
  }
  if (want_b) {
    const Value& db = graph.value(node.outputs[2]);
    if (db.kind != ValueKind::Tensor || db.tensor.dtype != g.spec.weight_dtype)
      return "grad_bias has another dtype than the weight";
  }
  g.rows_of = node.args[1].value;
  g.inputs = {{"grad_out", node.args[0].value},
              {"x", node.args[1].value},
              {"mean", node.args[3].value},
              {"rstd", node.args[4].value}};
  if (w) g.inputs.push_back({"weight", node.args[5].value});
  g.outputs = {{"grad_in", node.outputs[0]}};
  // A grad_weight nobody asked for is still computed (into scratch memory).
  if (g.spec.param_grads && w) g.outputs.push_back({"grad_weight", want_w ? node.outputs[1] : -1});
  if (want_b) g.outputs.push_back({"grad_bias", node.outputs[2]});
  return finish(g, {node.id}, out);
}

// ---- RMS norm (Note [RMS-norm chain]) ---------------------------------------

bool is_number(const Argument& a, double* value) {
  if (a.kind == Argument::Kind::Float)
    *value = a.f;
  else if (a.kind == Argument::Kind::Int)
    *value = static_cast<double>(a.i);
  else
    return false;
  return true;
}

bool is_convert(const Node& n) {
  return n.op == "aten::_to_copy.default" || n.op == "prims::convert_element_type.default";
}

// Every value of `from` is a value of `to`: the widening casts an RMS-norm
// chain upcasts x with (Note [RMS-norm rounding]).
bool exact_widening(DType from, DType to) {
  if (from == to) return true;
  const bool half = from == DType::BFloat16 || from == DType::Float16;
  if (to == DType::Float32) return half;
  if (to == DType::Float64) return half || from == DType::Float32;
  return false;
}

// The tensor `v` is an exact cast of, or -1: v's producer converts a
// floating tensor on v's device into v's dtype exactly (exact_widening).
ValueId widened_from(const Graph& graph, ValueId v) {
  const NodeId producer = graph.value(v).producer;
  if (producer < 0) return -1;
  const Node& cast = graph.node(producer);
  if (!is_convert(cast) || cast.args.empty() || cast.args[0].kind != Argument::Kind::Value ||
      cast.outputs.size() != 1)
    return -1;
  const Value& in = graph.value(cast.args[0].value);
  const Value& out = graph.value(v);
  if (in.kind != ValueKind::Tensor || out.kind != ValueKind::Tensor ||
      !is_floating(in.tensor.dtype) || in.tensor.device != out.tensor.device ||
      !exact_widening(in.tensor.dtype, out.tensor.dtype))
    return -1;
  return cast.args[0].value;
}

// The only reader of `v`, when exactly one node reads it and the graph does
// not return it.
const Node* sole_reader(const GraphIndex& index, ValueId v) {
  const auto& readers = index.readers[static_cast<std::size_t>(v)];
  if (readers.size() != 1 || index.graph_output[static_cast<std::size_t>(v)]) return nullptr;
  return &index.graph.node(readers[0]);
}

// mul.Tensor(a, b) with {a, b} == {v, other}: returns other, or -1.
ValueId mul_partner(const Node& n, ValueId v) {
  if (n.op != "aten::mul.Tensor" || n.args.size() < 2) return -1;
  const Argument& a = n.args[0];
  const Argument& b = n.args[1];
  if (a.kind != Argument::Kind::Value || b.kind != Argument::Kind::Value) return -1;
  if (a.value == v) return b.value;
  if (b.value == v) return a.value;
  return -1;
}

DType dtype_of(const Graph& graph, ValueId v) { return graph.value(v).tensor.dtype; }

std::string match_rms_norm(const GraphIndex& index, const Node& mean, NormMatch* out) {
  const Graph& graph = index.graph;
  if (mean.op != "aten::mean.dim") return "not an RMS-norm chain";
  ReductionNode r;
  if (std::string p = parse_reduction(graph, mean, &r); !p.empty()) return p;
  const TensorType& sq_type = graph.value(r.input).tensor;
  const std::int64_t rank = sq_type.rank();
  const Argument& keepdim = arg_at(mean, 2);
  if (r.end != rank || keepdim.kind != Argument::Kind::Bool || !keepdim.b)
    return "not an RMS-norm chain (mean over trailing dims with keepdim)";
  // Square: pow(xs, 2) or mul(xs, xs).
  const NodeId square_id = graph.value(r.input).producer;
  if (square_id < 0) return "not an RMS-norm chain (no square)";
  const Node& square = graph.node(square_id);
  ValueId xs = -1;
  double exponent = 0;
  if (square.op == "aten::pow.Tensor_Scalar" && square.args.size() >= 2 &&
      square.args[0].kind == Argument::Kind::Value && is_number(square.args[1], &exponent) &&
      exponent == 2.0) {
    xs = square.args[0].value;
  } else if (square.op == "aten::mul.Tensor" && square.args.size() >= 2 &&
             square.args[0].kind == Argument::Kind::Value &&
             square.args[1].kind == Argument::Kind::Value &&
             square.args[0].value == square.args[1].value) {
    xs = square.args[0].value;
  } else {
    return "not an RMS-norm chain (the mean's input is no square)";
  }
  if (sole_reader(index, r.input) != &mean) return "the square is read elsewhere";
  const Node* add = sole_reader(index, mean.outputs[0]);
  double eps = 0;
  if (add == nullptr || (add->op != "aten::add.Scalar" && add->op != "aten::add.Tensor") ||
      add->args.size() < 2 || add->args[0].kind != Argument::Kind::Value ||
      add->args[0].value != mean.outputs[0] || !is_number(add->args[1], &eps) ||
      (add->args.size() > 2 && add->args[2].kind != Argument::Kind::None &&
       !(add->args[2].kind == Argument::Kind::Int && add->args[2].i == 1)))
    return "not an RMS-norm chain (no mean + eps)";
  const Node* rsqrt = sole_reader(index, add->outputs[0]);
  if (rsqrt == nullptr || rsqrt->op != "aten::rsqrt.default")
    return "not an RMS-norm chain (no rsqrt)";
  const ValueId rstd = rsqrt->outputs[0];
  // The chain's dtype: the square, the statistics and x * rstd are of it.
  const DType chain = dtype_of(graph, rstd);
  for (ValueId v : {xs, r.input, mean.outputs[0], add->outputs[0]}) {
    if (graph.value(v).kind != ValueKind::Tensor || dtype_of(graph, v) != chain)
      return "the RMS-norm chain changes the dtype between its square and its rsqrt";
  }
  // x: what xs exactly widens (the upcast of a 16-bit x) when the kernel,
  // computing in x's accumulation dtype, computes in the chain's; else xs.
  ValueId x = widened_from(graph, xs);
  if (x < 0 || stats_dtype(dtype_of(graph, x)) != chain) x = xs;
  // The normalising mul: a reader of rstd that multiplies x's values as
  // the chain squared them: xs itself; x, which the mul widens as the cast
  // did (T5's `x * rsqrt`); or a second exact cast of x to xs's dtype read
  // by this mul alone (Note [One widening cast per reader] in
  // mybackend/passes/widening_casts.py gives each reader its own copy).
  const Node* scale = nullptr;
  ValueId scaled = -1;
  for (NodeId reader : index.readers[static_cast<std::size_t>(rstd)]) {
    const Node& mul = graph.node(reader);
    const ValueId partner = mul_partner(mul, rstd);
    if (partner < 0) continue;
    const bool copy = x != xs && widened_from(graph, partner) == x &&
                      dtype_of(graph, partner) == chain && sole_reader(index, partner) == &mul;
    if (partner == xs || (x != xs && partner == x) || copy) {
      scale = &mul;
      scaled = partner;
    }
  }
  if (scale == nullptr) return "not an RMS-norm chain (no x * rsqrt)";
  if (dtype_of(graph, scale->outputs[0]) != chain)
    return "the RMS-norm chain changes the dtype between its square and its rsqrt";
  std::vector<NodeId> nodes = {square.id, mean.id, add->id, rsqrt->id, scale->id};
  if (x != xs) {
    // The upcast joins when only the chain reads it; read elsewhere too, it
    // runs anyway and the norm reads it, as x.
    if (!index.used_outside(xs, {square.id, scale->id})) {
      nodes.push_back(graph.value(xs).producer);
    } else if (scaled == xs) {
      x = xs;
    } else {
      return "the upcast input is read elsewhere";
    }
  }
  if (scaled != xs && scaled != x) nodes.push_back(graph.value(scaled).producer);
  if (graph.value(x).kind != ValueKind::Tensor) return "the input is not a tensor";
  const TensorType& xt = graph.value(x).tensor;
  if (std::string p = tensor_problem(xt, xt.device, "the input"); !p.empty()) return p;
  const int normalized = static_cast<int>(rank - r.begin);
  // The tail (Note [RMS-norm rounding]): the weight multiply in the
  // chain's dtype, then the cast to x's dtype (torch's decomposition), or
  // the cast first, then the weight multiply in x's dtype (HF Llama, T5).
  ValueId y = scale->outputs[0];
  ValueId weight = -1;
  const auto take_weight = [&](DType result) {
    const Node* w = sole_reader(index, y);
    if (w == nullptr || w->outputs.size() != 1 || dtype_of(graph, w->outputs[0]) != result)
      return false;
    const ValueId partner = mul_partner(*w, y);
    if (partner < 0 || partner == y || graph.value(partner).kind != ValueKind::Tensor) return false;
    const NodeId producer = graph.value(partner).producer;
    if (std::find(nodes.begin(), nodes.end(), producer) != nodes.end()) return false;
    // One weight per column: the normalized dims' sizes exactly.
    const TensorType& wt = graph.value(partner).tensor;
    if (wt.rank() != normalized) return false;
    for (int d = 0; d < normalized; ++d) {
      if (!ir_match::same_dim(wt.sizes[static_cast<std::size_t>(d)],
                              xt.sizes[static_cast<std::size_t>(rank - normalized + d)]))
        return false;
    }
    weight = partner;
    nodes.push_back(w->id);
    y = w->outputs[0];
    return true;
  };
  const auto take_cast = [&]() {
    const Node* c = sole_reader(index, y);
    if (c == nullptr || !is_convert(*c) || c->outputs.size() != 1 ||
        dtype_of(graph, c->outputs[0]) != xt.dtype ||
        graph.value(c->outputs[0]).tensor.device != xt.device)
      return false;
    nodes.push_back(c->id);
    y = c->outputs[0];
    return true;
  };
  bool round_before_weight = false;
  if (take_weight(chain)) {
    take_cast();
  } else if (take_cast() && take_weight(xt.dtype)) {
    round_before_weight = xt.dtype != chain;
  }
  const TensorType& yt = graph.value(y).tensor;
  if (yt.dtype != xt.dtype) return "the RMS-norm chain's result dtype differs from its input's";
  if (shape_key(yt) != shape_key(xt)) return "the RMS-norm chain changes the shape";
  NormGroup g;
  g.spec.kind = NormKind::RmsNormForward;
  g.spec.dtype = xt.dtype;
  g.spec.out_dtype = xt.dtype;
  g.spec.has_weight = weight >= 0;
  g.spec.round_before_weight = round_before_weight;
  g.spec.weight_dtype = weight >= 0 ? graph.value(weight).tensor.dtype : xt.dtype;
  if (weight >= 0) {
    if (std::string p = tensor_problem(graph.value(weight).tensor, xt.device, "the weight");
        !p.empty())
      return p;
  }
  std::set<NodeId> members(nodes.begin(), nodes.end());
  g.spec.save_stats = index.used_outside(rstd, members);
  if (g.spec.save_stats && graph.value(rstd).tensor.dtype != stats_dtype(xt.dtype))
    return "rsqrt is kept and not in the accumulation dtype";
  for (NodeId n : nodes) {
    for (ValueId o : graph.node(n).outputs) {
      if (o != y && o != rstd && index.used_outside(o, members))
        return "an intermediate of the RMS-norm chain is read elsewhere";
    }
  }
  if (!index.convex(members)) return "the RMS-norm chain is not convex";
  g.eps = eps;
  g.normalized_dims = normalized;
  g.rows_of = x;
  g.inputs = {{"x", x}};
  if (weight >= 0) g.inputs.push_back({"weight", weight});
  g.outputs = {{"y", y}};
  if (g.spec.save_stats) g.outputs.push_back({"rstd", rstd});
  return finish(g, nodes, out);
}

}  // namespace

bool is_norm_anchor(const std::string& op) {
  return op == "aten::_softmax.default" || op == "aten::_log_softmax.default" ||
         op == "aten::_softmax_backward_data.default" ||
         op == "aten::_log_softmax_backward_data.default" ||
         op == "aten::native_layer_norm.default" ||
         op == "aten::native_layer_norm_backward.default" || is_cross_entropy_op(op) ||
         is_batch_norm_op(op) || op == kGroupNormStats;
}

bool is_batch_norm_op(const std::string& op) {
  return op == "mybackend::batch_norm_stats.default" ||
         op == "mybackend::batch_norm_backward_reduce.default";
}

bool is_cross_entropy_op(const std::string& op) {
  return op == "mybackend::cross_entropy_forward.default" ||
         op == "mybackend::cross_entropy_backward.default";
}

std::string adopt_norm_part(NormGroup with, const std::vector<NodeId>& nodes,
                            const std::string& part, NormMatch* match) {
  for (const NormSpec* s : {&with.spec, &with.general}) {
    if (std::string p = validate(*s); !p.empty()) return part + " not taken: " + p;
  }
  match->nodes.insert(match->nodes.end(), nodes.begin(), nodes.end());
  std::sort(match->nodes.begin(), match->nodes.end());
  match->group = std::make_shared<NormGroup>(std::move(with));
  return "with " + std::to_string(nodes.size()) + " " + part + " elementwise op" +
         (nodes.size() > 1 ? "s" : "");
}

// Note [Norm outputs in 16 bits]
// Under autocast a layer norm runs in f32 and its result is cast to bf16
// (or fp16) for the product that follows: a kernel writing f32 rows, then a
// cast kernel reading them back. When the f32 result has no other reader
// (through shape views that keep the rows), the cast joins the norm group
// and the kernel stores y in the cast's dtype: one launch and half the
// bytes. GPT-2 has 25 of them per forward. An RMS norm's f32 result is
// taken the same way (a Llama-style decoder's f32 residual stream: 32 per
// forward of llama_gqa, each cast a 5 us kernel on an H200), unless the
// chain rounds x * rstd before its weight multiply (Note [RMS-norm
// rounding]): that rounding is to the norm's own dtype, which the stored
// dtype would replace.
namespace {

void absorb_output_cast(const GraphIndex& index, const std::set<NodeId>& partition,
                        NormMatch* match) {
  const Graph& graph = index.graph;
  const NormGroup& g = *match->group;
  // An RMS chain rounding before its weight is not f32 (validate() says so too).
  const bool forward =
      g.spec.kind == NormKind::LayerNormForward || g.spec.kind == NormKind::RmsNormForward;
  if (!forward || g.spec.dtype != DType::Float32 || g.normalized_dims != 1) return;
  auto y = std::find_if(g.outputs.begin(), g.outputs.end(),
                        [](const auto& o) { return o.first == "y"; });
  if (y == g.outputs.end()) return;
  const std::vector<NodeId> chain =
      ir_match::views_then_cast(index, y->second, [&](NodeId n) { return partition.count(n) > 0; });
  if (chain.empty()) return;
  const ValueId cast_output = graph.node(chain.back()).outputs[0];
  const DType stored = graph.value(cast_output).tensor.dtype;
  if (stored != DType::BFloat16 && stored != DType::Float16) return;
  NormGroup cast = g;
  cast.spec.out_dtype = cast.general.out_dtype = stored;
  for (auto& o : cast.outputs)
    if (o.first == "y") o.second = cast_output;
  for (const NormSpec* s : {&cast.spec, &cast.general})
    if (!validate(*s).empty()) return;
  match->nodes.insert(match->nodes.end(), chain.begin(), chain.end());
  std::sort(match->nodes.begin(), match->nodes.end());
  match->group = std::make_shared<NormGroup>(std::move(cast));
}

}  // namespace

std::string match_norm(const GraphIndex& index, const std::set<NodeId>& partition, NodeId anchor,
                       NormMatch* out) {
  const Node& node = index.graph.node(anchor);
  std::string problem;
  if (is_cross_entropy_op(node.op)) {
    problem = match_cross_entropy(index.graph, node, out);
  } else if (is_batch_norm_op(node.op)) {
    problem = match_batch_norm(index.graph, node, out);
  } else if (node.op == kGroupNormStats) {
    problem = match_group_norm(index.graph, node, out);
  } else if (node.op.find("softmax") != std::string::npos && is_norm_anchor(node.op)) {
    problem = match_softmax(index.graph, node, out);
  } else if (node.op.find("native_layer_norm") != std::string::npos) {
    problem = match_layer_norm(index, node, out);
  } else {
    problem = match_rms_norm(index, node, out);
  }
  if (!problem.empty()) return problem;
  absorb_output_cast(index, partition, out);  // forward layer and RMS norms only
  for (NodeId n : out->nodes) {
    if (partition.count(n) == 0) return "part of the norm lies outside the partition";
  }
  return {};
}

}  // namespace mybackend
