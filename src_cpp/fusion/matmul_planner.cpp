#include "fusion/matmul_planner.h"

#include <algorithm>
#include <optional>

#include "fusion/ir_match.h"
#include "fusion/pointwise_planner.h"

namespace mybackend {
namespace {

using ir_match::int_list_arg;
using ir_match::is_shape_view;
using ir_match::normalize_dim;
using ir_match::same_dim;
using ir_match::same_shape;
using ir_match::scalar;
using ir_match::swaps_last_two_dims;
using ir_match::tensor_arg;
using ir_match::views_then_cast;

bool is_product_op(const std::string& op) {
  return op == "aten::mm.default" || op == "aten::addmm.default" || op == "aten::bmm.default" ||
         op == "aten::baddbmm.default";
}

bool has_self(const std::string& op) {
  return op == "aten::addmm.default" || op == "aten::baddbmm.default";
}

bool is_batched(const std::string& op) {
  return op == "aten::bmm.default" || op == "aten::baddbmm.default";
}

bool matmul_dtype(DType dtype) {
  return dtype == DType::Float16 || dtype == DType::BFloat16 || dtype == DType::Float32;
}

}  // namespace

std::string matmul_candidate_problem(const Graph& graph, const Node& node) {
  if (node.kind != NodeKind::Aten || !is_product_op(node.op)) return "not a matrix product";
  if (node.outputs.size() != 1) return "not exactly one output";
  const Value& out = graph.value(node.outputs[0]);
  if (out.kind != ValueKind::Tensor) return "the output is not a tensor";
  const TensorType& t = out.tensor;
  if (t.device.type != DeviceType::CUDA) return "not on a CUDA device";
  if (!matmul_dtype(t.dtype))
    return "dtype " + std::string(dtype_name(t.dtype)) + " (cuBLASLt groups take f16, bf16, f32)";
  const std::int64_t rank = is_batched(node.op) ? 3 : 2;
  const std::size_t first = has_self(node.op) ? 1 : 0;
  for (std::size_t k = 0; k < (has_self(node.op) ? 3u : 2u); ++k) {
    const ValueId v = tensor_arg(graph, node, k);
    if (v < 0) return "operand " + std::to_string(k) + " is not a tensor";
    const TensorType& in = graph.value(v).tensor;
    if (in.device != t.device) return "operands on different devices";
    if (in.dtype != t.dtype) return "operands of different dtypes";
    if (k >= first && in.rank() != rank) return "an operand of unexpected rank";
  }
  if (has_self(node.op) && (!scalar(node.args[3]) || !scalar(node.args[4])))
    return "beta or alpha is not a number known at compile time";
  return {};
}

struct MatmulPlanner::Context {
  std::set<NodeId> partition;
  const ClaimedGroups* claimed = nullptr;  // by this and earlier planners
  std::set<NodeId> members;                // of the group being built
  std::vector<std::string> notes;
  bool usable(NodeId n) const {
    return partition.count(n) && !claimed->claimed(n) && !members.count(n);
  }
};

MatmulPlanner::MatmulPlanner(const GraphIndex& index, bool autotune, bool generated_kernels)
    : index_(index),
      graph_(index.graph),
      autotune_(autotune),
      generated_kernels_(generated_kernels) {}

// Follows transposes of the last two dims back from `value`; a transpose
// joins the group when only the group reads it.
MatmulOperand MatmulPlanner::resolve_operand(ValueId value, NodeId reader, Context& ctx) const {
  MatmulOperand operand{value, false};
  NodeId next_reader = reader;
  bool absorbing = true;
  while (true) {
    const Value& v = graph_.value(operand.value);
    if (v.producer == kGraphInput) break;
    const Node& producer = graph_.node(v.producer);
    if (!swaps_last_two_dims(graph_, producer)) break;
    const auto& readers = index_.readers[static_cast<std::size_t>(operand.value)];
    absorbing = absorbing && ctx.usable(producer.id) &&
                !index_.graph_output[static_cast<std::size_t>(operand.value)] &&
                readers.size() == 1 && readers[0] == next_reader;
    if (absorbing) ctx.members.insert(producer.id);
    next_reader = producer.id;
    operand.value = producer.args[0].value;
    operand.transposed = !operand.transposed;
  }
  return operand;
}

// The one reader of `value` when it may join the group: the value is no
// graph output (a graph output counts as a second reader) and the reader is
// in the partition and unclaimed.
const Node* MatmulPlanner::sole_reader(ValueId value, const Context& ctx) const {
  const auto& readers = index_.readers[static_cast<std::size_t>(value)];
  if (index_.graph_output[static_cast<std::size_t>(value)] || readers.size() != 1 ||
      !ctx.usable(readers[0]))
    return nullptr;
  return &graph_.node(readers[0]);
}

// Bias, then relu or gelu(tanh), through shape views that keep N
// (Note [Matmul groups], Note [Views after the product]).
void MatmulPlanner::match_epilogue(MatmulSpec& spec, Context& ctx) const {
  const TensorType& product = graph_.value(spec.output).tensor;
  const Dim n_dim = product.sizes.back();
  ValueId current = spec.output;
  std::vector<NodeId> views;  // seen through, joining with the next epilogue op
  auto take = [&](const Node& node) {
    ctx.members.insert(views.begin(), views.end());
    views.clear();
    ctx.members.insert(node.id);
    current = node.outputs[0];
    spec.output = current;
  };
  while (true) {
    const Node* reader = sole_reader(current, ctx);
    if (reader == nullptr) return;
    const Node& user = *reader;
    if (user.outputs.size() != 1 || tensor_arg(graph_, user, 0) < 0) return;
    const TensorType& out = graph_.value(user.outputs[0]).tensor;
    if (is_shape_view(user) && tensor_arg(graph_, user, 0) == current && out.rank() >= 1 &&
        same_dim(out.sizes.back(), n_dim)) {
      views.push_back(user.id);
      current = user.outputs[0];
      continue;
    }
    if (user.op == "aten::clone.default" && out.is_contiguous() &&
        same_shape(out, graph_.value(current).tensor)) {
      // Note [Residual sums in the product]: a copy of the fresh product is
      // the product.
      views.push_back(user.id);
      current = user.outputs[0];
      continue;
    }
    if (user.op == "aten::add.Tensor") {
      const ValueId a = tensor_arg(graph_, user, 0), b = tensor_arg(graph_, user, 1);
      const ValueId other = a == current ? b : a;
      const auto alpha = user.args.size() > 2 ? scalar(user.args[2]) : std::optional<double>(1.0);
      if (other < 0 || other == current || (a != current && b != current) || alpha != 1.0 ||
          out.dtype != spec.dtype || !same_shape(out, graph_.value(current).tensor))
        return;
      const TensorType& o = graph_.value(other).tensor;
      if (o.dtype != spec.dtype || o.device != product.device) return;
      if (spec.epilogue == MatmulEpilogue::None && o.rank() == 1 && same_dim(o.sizes[0], n_dim)) {
        spec.bias = other;
        spec.epilogue = MatmulEpilogue::Bias;
        take(user);
        continue;
      }
      if (match_residual(spec, other, out)) take(user);
      return;
    }
    const bool has_bias = spec.epilogue == MatmulEpilogue::Bias;
    if (user.op == "aten::relu.default" && out.dtype == spec.dtype) {
      spec.epilogue = has_bias ? MatmulEpilogue::ReluBias : MatmulEpilogue::Relu;
      take(user);
      return;
    }
    if (user.op == "aten::gelu.default" && out.dtype == spec.dtype && user.args.size() > 1 &&
        user.args[1].kind == Argument::Kind::String) {
      if (user.args[1].s == "tanh") {
        spec.epilogue = has_bias ? MatmulEpilogue::GeluTanhBias : MatmulEpilogue::GeluTanh;
        take(user);
      } else {
        ctx.notes.push_back("gelu(approximate='" + user.args[1].s +
                            "') not fused: cuBLASLt's GELU epilogue is the tanh approximation");
      }
    }
    return;
  }
}

// Note [Residual sums in the product]
// A transformer block adds each sublayer's projection to the residual
// stream: addmm (bias fused), shape views, often a clone (dropout in eval),
// then add(residual, projection). cuBLASLt's D = AB + C + bias computes the
// sum in the product's epilogue from the f32 accumulator, with the residual
// as C: no add kernel, no round trip of the projection through memory (24
// launches per ViT-B/16 forward). The residual must have the sum's shape
// (the runtime reads it in D's row-major order, which the views keep),
// the product's dtype, and come after the bias only: an activation epilogue
// would apply to the sum. 2-D products only, so D is [M, N].
bool MatmulPlanner::match_residual(MatmulSpec& spec, ValueId residual,
                                   const TensorType& sum) const {
  if (spec.batched || spec.c >= 0 || spec.out_dtype != spec.dtype ||
      (spec.epilogue != MatmulEpilogue::None && spec.epilogue != MatmulEpilogue::Bias))
    return false;
  if (!same_shape(graph_.value(residual).tensor, sum)) return false;
  spec.c = residual;
  spec.beta = 1.0;
  spec.c_is_residual = true;
  return true;
}

// sum.dim_IntList(G, [0]) beside mm(Gᵀ, X) or mm(X, G): one pass over G
// gives the weight gradient and the bias gradient (BGRADB / BGRADA).
void MatmulPlanner::match_bias_grad(MatmulSpec& spec, Context& ctx) const {
  if (spec.op != "aten::mm.default" || spec.alpha != 1.0 || spec.c >= 0 ||
      spec.epilogue != MatmulEpilogue::None || graph_.value(spec.output).producer != spec.product)
    return;
  if (spec.dtype == DType::Float16) {
    // On an H100 (2026-11-22) cuBLASLt's fp16 bias-gradient epilogue was up
    // to 2 fp16 ulps from eager's fp32-accumulated sum on 3-D Linear
    // backwards: the sum stays a separate (fp32-accumulating) reduction.
    ctx.notes.push_back("fp16 bias gradient left to a reduction (BGRAD epilogue less accurate)");
    return;
  }
  struct Candidate {
    ValueId g;
    MatmulEpilogue epilogue;
  };
  std::vector<Candidate> candidates;
  if (spec.mat1.transposed) candidates.push_back({spec.mat1.value, MatmulEpilogue::BiasGradMat1});
  if (!spec.mat2.transposed) candidates.push_back({spec.mat2.value, MatmulEpilogue::BiasGradMat2});
  for (const Candidate& c : candidates) {
    const TensorType& g = graph_.value(c.g).tensor;
    if (g.rank() != 2) continue;
    for (NodeId s : index_.readers[static_cast<std::size_t>(c.g)]) {
      const Node& sum = graph_.node(s);
      if (!ctx.usable(s) || sum.op != "aten::sum.dim_IntList" || tensor_arg(graph_, sum, 0) != c.g)
        continue;
      const auto dims = int_list_arg(sum, 1);
      if (!dims || dims->size() != 1 || normalize_dim((*dims)[0], 2) != 0) continue;
      // Note [Bias gradients summed in f32]
      // Under autocast the sum accumulates in f32 (dtype=torch.float32) and
      // is cast back to the product's dtype, through shape views: cuBLASLt's
      // epilogue accumulates in f32 and rounds once too, so the sum, the views
      // and the cast are one BGRAD output of the product's dtype.
      std::vector<NodeId> joined = {s};
      const DType summed = graph_.value(sum.outputs[0]).tensor.dtype;
      if (summed == DType::Float32 && spec.dtype != DType::Float32) {
        const std::vector<NodeId> chain =
            views_then_cast(index_, sum.outputs[0], [&](NodeId n) { return ctx.usable(n); });
        if (chain.empty() ||
            graph_.value(graph_.node(chain.back()).outputs[0]).tensor.dtype != spec.dtype)
          continue;
        joined.insert(joined.end(), chain.begin(), chain.end());
      } else {
        const bool dtype_none = sum.args.size() < 4 || sum.args[3].kind == Argument::Kind::None;
        if (!dtype_none || summed != spec.dtype) continue;
      }
      std::set<NodeId> trial = ctx.members;
      trial.insert(joined.begin(), joined.end());
      if (!index_.convex(trial)) {
        ctx.notes.push_back(sum.name +
                            " not fused as bias gradient: the group would not be convex");
        continue;
      }
      ctx.members.insert(joined.begin(), joined.end());
      spec.epilogue = c.epilogue;
      spec.bias_grad = graph_.node(joined.back()).outputs[0];
      return;
    }
  }
}

// Note [Products written in f32]: a 16-bit product, no epilogue, whose one
// reader (through shape views) upcasts it to a contiguous f32 tensor.
void MatmulPlanner::match_output_cast(MatmulSpec& spec, Context& ctx) const {
  if (spec.epilogue != MatmulEpilogue::None || spec.c >= 0 ||
      (spec.dtype != DType::BFloat16 && spec.dtype != DType::Float16))
    return;
  const std::vector<NodeId> chain =
      views_then_cast(index_, spec.output, [&](NodeId n) { return ctx.usable(n); });
  if (chain.empty()) return;
  const ValueId upcast = graph_.node(chain.back()).outputs[0];
  if (graph_.value(upcast).tensor.dtype != DType::Float32) return;
  if (generated_kernels_ && read_only_by_elementwise(upcast, ctx)) return;
  ctx.members.insert(chain.begin(), chain.end());
  spec.output = upcast;
  spec.out_dtype = DType::Float32;
}

// `value` is no graph output and every reader is an unclaimed elementwise
// op of the partition with a result of its shape: a generated kernel can
// read it through the cast (the pointwise planner moves a cast only into a
// group of its own shape).
bool MatmulPlanner::read_only_by_elementwise(ValueId value, const Context& ctx) const {
  const auto& readers = index_.readers[static_cast<std::size_t>(value)];
  if (readers.empty() || index_.graph_output[static_cast<std::size_t>(value)]) return false;
  const TensorType& cast = graph_.value(value).tensor;
  return std::all_of(readers.begin(), readers.end(), [&](NodeId r) {
    const Node& reader = graph_.node(r);
    return ctx.partition.count(r) && !ctx.claimed->claimed(r) &&
           pointwise_candidate_problem(graph_, reader).empty() && reader.outputs.size() == 1 &&
           graph_.value(reader.outputs[0]).kind == ValueKind::Tensor &&
           ir_match::same_shape(graph_.value(reader.outputs[0]).tensor, cast);
  });
}

void MatmulPlanner::claim(const std::vector<NodeId>& partition_nodes,
                          ClaimedGroups& claimed) const {
  Context ctx;
  ctx.partition.insert(partition_nodes.begin(), partition_nodes.end());
  ctx.claimed = &claimed;
  for (NodeId n : partition_nodes) {
    const Node& node = graph_.node(n);
    if (node.kind != NodeKind::Aten || !is_product_op(node.op) || claimed.claimed(n)) continue;
    if (std::string problem = matmul_candidate_problem(graph_, node); !problem.empty()) {
      claimed.refuse(n, "no cuBLASLt group: " + problem);
      continue;
    }
    ctx.members = {n};
    ctx.notes.clear();
    auto spec = std::make_shared<MatmulSpec>();
    spec->product = n;
    spec->autotune = autotune_;
    spec->op = node.op;
    spec->batched = is_batched(node.op);
    spec->output = node.outputs[0];
    spec->dtype = graph_.value(spec->output).tensor.dtype;
    spec->out_dtype = spec->dtype;
    const std::size_t first = has_self(node.op) ? 1 : 0;
    spec->mat1 = resolve_operand(node.args[first].value, n, ctx);
    spec->mat2 = resolve_operand(node.args[first + 1].value, n, ctx);
    if (has_self(node.op)) {
      const ValueId self = node.args[0].value;
      const TensorType& s = graph_.value(self).tensor;
      const double beta = *scalar(node.args[3]);
      spec->alpha = *scalar(node.args[4]);
      const TensorType& out = graph_.value(spec->output).tensor;
      if (beta == 1.0 && s.rank() == 1 && same_dim(s.sizes[0], out.sizes.back())) {
        spec->bias = self;
        spec->epilogue = MatmulEpilogue::Bias;
      } else if (beta != 0.0) {
        spec->c = self;
        spec->beta = beta;
      }
    }
    match_epilogue(*spec, ctx);
    match_bias_grad(*spec, ctx);
    match_output_cast(*spec, ctx);
    if (!index_.convex(ctx.members)) {
      // Cannot happen for the shapes matched above (each joined node's only
      // reader is in the group); kept as a guard: the product alone is convex.
      ctx.members = {n};
      claimed.refuse(n, "no cuBLASLt group: the matched pattern is not convex");
      continue;
    }
    KernelGroup group;
    group.nodes.assign(ctx.members.begin(), ctx.members.end());
    group.spec = spec->to_string();
    group.why = "cuBLASLt " + node.op.substr(6) + " with epilogue " +
                std::string(cublaslt_epilogue_name(spec->epilogue));
    if (spec->mat1.transposed || spec->mat2.transposed)
      group.why += "; transposed operands read in place (no copy)";
    if (spec->out_dtype != spec->dtype)
      group.why += "; written in " + std::string(dtype_short_name(spec->out_dtype)) +
                   " (the upcast joined the product)";
    for (const std::string& note : ctx.notes) group.why += "; " + note;
    group.set(std::move(spec));
    claimed.claim(std::move(group));
  }
}

}  // namespace mybackend
