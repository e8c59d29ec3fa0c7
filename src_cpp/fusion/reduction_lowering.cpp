#include "fusion/reduction_lowering.h"

#include <algorithm>
#include <map>
#include <set>

#include "common/error.h"
#include "fusion/pointwise_lowering.h"
#include "fusion/pointwise_planner.h"
#include "fusion/prologue.h"
#include "fusion/row_epilogue.h"

namespace mybackend {
namespace {

const Argument& arg_at(const Node& node, std::size_t i) {
  static const Argument kNone;
  return i < node.args.size() ? node.args[i] : kNone;
}

bool single_dim_argument(const Argument& arg, std::int64_t rank, std::vector<int>* dims) {
  if (arg.kind == Argument::Kind::None) return dims_argument(arg, rank, dims);
  if (arg.kind != Argument::Kind::Int) return false;
  return dims_argument(Argument::of_list({arg}), rank, dims);
}

// Arguments of each overload the planner reduces: where dims, keepdim,
// dtype and correction sit in the schema.
struct Overload {
  ReduceOp op;
  int dims = -1;        // argument index of int[]? dim (-1: every dim)
  bool single = false;  // int? dim (argmax/argmin, prod.dim_int)
  int dtype = -1;       // argument index of ScalarType? dtype
  int correction = -1;  // argument index of Scalar? correction
};

const Overload* overload_of(const std::string& op) {
  static const std::pair<const char*, Overload> table[] = {
      {"aten::sum.dim_IntList", {ReduceOp::Sum, 1, false, 3, -1}},
      {"aten::sum.default", {ReduceOp::Sum, -1, false, 1, -1}},
      {"aten::mean.dim", {ReduceOp::Mean, 1, false, 3, -1}},
      {"aten::mean.default", {ReduceOp::Mean, -1, false, 1, -1}},
      {"aten::prod.dim_int", {ReduceOp::Prod, 1, true, 3, -1}},
      {"aten::prod.default", {ReduceOp::Prod, -1, false, 1, -1}},
      {"aten::amax.default", {ReduceOp::Amax, 1, false, -1, -1}},
      {"aten::amin.default", {ReduceOp::Amin, 1, false, -1, -1}},
      {"aten::var.correction", {ReduceOp::Var, 1, false, -1, 2}},
      {"aten::std.correction", {ReduceOp::Std, 1, false, -1, 2}},
      {"aten::argmax.default", {ReduceOp::Argmax, 1, true, -1, -1}},
      {"aten::argmin.default", {ReduceOp::Argmin, 1, true, -1, -1}},
  };
  for (const auto& [name, overload] : table) {
    if (op == name) return &overload;
  }
  return nullptr;
}

// Aligned when `t` has the space's shape and is dense in the walk `order`
// (empty: the logical order), else Strided.
TensorArg arg_for(const TensorType& t, const std::string& space_key, int rank,
                  const std::vector<int>& order) {
  const bool full = shape_key(t) == space_key &&
                    (order.empty() ? likely_contiguous(t) : dense_in_order(t, order));
  if (rank == 0) return TensorArg{t.dtype, IndexMode::Contiguous, 0};
  return full ? TensorArg{t.dtype, IndexMode::Aligned, 0}
              : TensorArg{t.dtype, IndexMode::Strided, rank};
}

// An input's argument: arg_for's, or Periodic (PeriodicRows) where a
// Strided input repeats in the walk of `space` (Note [Periodic operands in
// reductions]); a period of 1 with rows is one value a row of the walk (an
// RMS norm's saved rstd beside its weight gradient's column sum, Note [One
// value a row]).
TensorArg input_arg_for(const TensorType& t, const TensorType& space, int rank,
                        const std::vector<int>& order) {
  TensorArg arg = arg_for(t, shape_key(space), rank, order);
  if (arg.mode != IndexMode::Strided) return arg;
  const PeriodicLayout periodic = static_periodic_layout(t, space, order);
  if (periodic.period < 1 || (periodic.period == 1 && periodic.block <= 1)) return arg;
  return TensorArg{t.dtype, periodic_mode(periodic, space), 0};
}

void make_general(PointwiseSpec& spec) {
  spec.index64 = true;
  if (spec.rank == 0) return;
  for (auto& t : spec.inputs) t = TensorArg{t.dtype, IndexMode::Strided, spec.rank};
  for (auto& o : spec.outputs) o.tensor = TensorArg{o.tensor.dtype, IndexMode::Strided, spec.rank};
}

// Note [Reductions walked in memory order]: the walk orders and the
// reduced dims' place in the input walk.
struct ReductionWalk {
  std::vector<int> in_order, out_order;
  int begin = 0, end = 0;
};

// Empty orders when the walk is the logical one; begin == end == -1 when
// the reduced dims are one range in neither order.
ReductionWalk reduction_walk(const TensorType& in_type, const ReductionNode& r, int out_rank) {
  ReductionWalk walk{{}, {}, r.logical_range ? r.begin : -1, r.logical_range ? r.end : -1};
  const std::vector<int> order = memory_order(in_type);
  if (order.empty()) return walk;
  const int rank = static_cast<int>(in_type.rank());
  const int reduced = static_cast<int>(r.dims.size());
  auto is_reduced = [&](int d) { return std::binary_search(r.dims.begin(), r.dims.end(), d); };
  int first = rank, last = -1;
  for (int k = 0; k < rank; ++k) {
    if (!is_reduced(order[static_cast<std::size_t>(k)])) continue;
    first = std::min(first, k);
    last = std::max(last, k);
  }
  if (last - first + 1 != reduced) return walk;  // apart in memory
  std::vector<int> out_order;
  if (out_rank == rank) {
    out_order = order;  // keepdim: the reduced dims stay, of size 1
  } else if (out_rank == rank - reduced) {
    for (int d : order) {
      if (is_reduced(d)) continue;
      const auto below = std::lower_bound(r.dims.begin(), r.dims.end(), d) - r.dims.begin();
      out_order.push_back(d - static_cast<int>(below));
    }
  } else {
    return walk;
  }
  return ReductionWalk{order, std::move(out_order), first, last + 1};
}

// The nodes of `pool` that `targets` depend on through nodes of `pool`,
// ascending.
std::vector<NodeId> depended_on(const GraphIndex& index, const std::vector<ValueId>& targets,
                                const std::set<NodeId>& pool) {
  std::set<NodeId> found;
  std::vector<NodeId> stack;
  for (ValueId v : targets) stack.push_back(index.graph.value(v).producer);
  while (!stack.empty()) {
    const NodeId n = stack.back();
    stack.pop_back();
    if (n < 0 || !pool.count(n) || !found.insert(n).second) continue;
    for (NodeId p : index.producers[static_cast<std::size_t>(n)]) stack.push_back(p);
  }
  return {found.begin(), found.end()};
}

// Note [Row epilogues]: the row epilogue's spec over the input space, its
// tensors in group->row_inputs / row_outputs, and the epilogue outputs its
// row values read appended to the epilogue (unstored unless read outside).
// `rows` are the row views and elementwise ops; `computed` the input-space
// nodes of the group; `results` the output-space values (the reduced value,
// the epilogue's).
std::string build_row_epilogue(const GraphIndex& index, const ReductionNode& reduction,
                               const std::vector<ValueId>& results, const std::vector<NodeId>& rows,
                               const std::set<NodeId>& computed, const std::set<NodeId>& members,
                               PointwiseSsa& epi, PointwiseSpec& espec, ReductionGroup& group,
                               ReductionSpec& spec) {
  const Graph& graph = index.graph;
  const TensorType& in_type = graph.value(reduction.input).tensor;
  const int in_rank = static_cast<int>(in_type.rank());
  // Row views: value -> the result it shows (one value a row).
  std::map<ValueId, ValueId> shows;
  for (ValueId v : results) shows[v] = v;
  for (NodeId id : rows) {
    const Node& node = graph.node(id);
    if (node.args.empty() || node.args[0].kind != Argument::Kind::Value) continue;
    const auto base = shows.find(node.args[0].value);
    if (base != shows.end() && !computed.count(id)) shows[node.outputs[0]] = base->second;
  }
  std::vector<ValueId> stored;  // what leaves the row epilogue
  for (NodeId id : rows) {
    const ValueId v = graph.node(id).outputs[0];
    if (!index.used_outside(v, members)) continue;
    // A view the kernel does not make: its readers outside would find nothing.
    if (!computed.count(id)) return "the row view " + graph.node(id).name + " is read outside";
    stored.push_back(v);
  }
  if (stored.empty()) return "the row epilogue stores nothing";
  const std::vector<NodeId> nodes = depended_on(index, stored, computed);
  // A tensor from outside holding one value a row (an RMS norm's saved
  // rstd) is read once a row too: the epilogue loads it in the result's
  // space, where it is dense, instead of each element finding it through
  // strides. Only where the result keeps the reduced dims (one layout).
  const bool keepdim = keeps_rows(graph.value(reduction.output).tensor, in_type, reduction.dims);
  // Row values first: inputs [0, R) of the SSA.
  PointwiseSsa ssa(graph);
  std::vector<ValueId> row_values;
  for (NodeId id : nodes) {
    for (const Argument& a : graph.node(id).args) {
      if (a.kind != Argument::Kind::Value) continue;
      const Value& value = graph.value(a.value);
      if (keepdim && value.kind == ValueKind::Tensor && !members.count(value.producer) &&
          keeps_rows(value.tensor, in_type, reduction.dims))
        shows[a.value] = a.value;
      const auto shown = shows.find(a.value);
      if (shown == shows.end() && computed.count(graph.value(a.value).producer) == 0 &&
          members.count(graph.value(a.value).producer) > 0)
        return graph.node(id).name +
               " reads a value of the group that is neither of the input "
               "space nor one a row";
      if (shown == shows.end()) continue;
      if (std::find(row_values.begin(), row_values.end(), a.value) != row_values.end()) continue;
      row_values.push_back(a.value);
      ssa.logical(a.value);
    }
  }
  for (NodeId id : nodes) {
    if (std::string p = ssa.add_node(graph.node(id)); !p.empty())
      return graph.node(id).name + ": " + p;
  }
  PointwiseSpec& rspec = ssa.spec();
  rspec.rank = in_rank;
  if (rspec.coords > 0 || !rspec.guards.empty()) return "the row epilogue walks a concatenation";
  const std::string in_key = shape_key(in_type);
  for (ValueId v : stored) {
    rspec.outputs.push_back(
        PwOutput{arg_for(graph.value(v).tensor, in_key, in_rank, group.in_order), ssa.logical(v)});
    group.row_outputs.push_back(v);
  }
  group.row_inputs = ssa.inputs();
  for (std::size_t k = 0; k < rspec.inputs.size(); ++k) {
    const ValueId v = group.row_inputs[k];
    if (k < row_values.size()) {
      // The result it shows, as an epilogue output (appended unstored).
      const ValueId result = shows.at(v);
      const std::int32_t instr = epi.logical(result);
      std::int32_t out = -1;
      for (std::size_t o = 0; o < espec.outputs.size(); ++o) {
        if (espec.outputs[o].value == instr) out = static_cast<std::int32_t>(o);
      }
      if (out < 0) {
        espec.outputs.push_back(
            PwOutput{TensorArg{graph.value(result).tensor.dtype, IndexMode::Contiguous, 0}, instr});
        out = static_cast<std::int32_t>(espec.outputs.size() - 1);
        ++spec.unstored_outputs;
      }
      spec.row_values.push_back(out);
      rspec.inputs[k] = TensorArg{graph.value(result).tensor.dtype, IndexMode::Contiguous, 0};
      group.row_inputs[k] = -1;
      continue;
    }
    rspec.inputs[k] = input_arg_for(graph.value(v).tensor, in_type, in_rank, group.in_order);
  }
  spec.row_epilogue = std::move(rspec);
  return {};
}

}  // namespace

std::optional<std::int64_t> static_row_length(const Graph& graph, const ReductionNode& r) {
  const TensorType& in = graph.value(r.input).tensor;
  std::int64_t length = 1;
  for (int d : r.dims) {
    const Dim& size = in.sizes[static_cast<std::size_t>(d)];
    if (!size.is_static()) return std::nullopt;
    length *= size.static_value();
  }
  return length;
}

bool dims_argument(const Argument& arg, std::int64_t rank, std::vector<int>* dims) {
  dims->clear();
  if (arg.kind == Argument::Kind::None || (arg.kind == Argument::Kind::List && arg.items.empty())) {
    for (int d = 0; d < rank; ++d) dims->push_back(d);
    return true;
  }
  if (arg.kind != Argument::Kind::List) return false;
  for (const Argument& item : arg.items) {
    if (item.kind != Argument::Kind::Int) return false;
    std::int64_t d = item.i < 0 ? item.i + rank : item.i;
    if (d < 0 || d >= rank) return false;
    dims->push_back(static_cast<int>(d));
  }
  std::sort(dims->begin(), dims->end());
  dims->erase(std::unique(dims->begin(), dims->end()), dims->end());
  return true;
}

std::string parse_reduction(const Graph& graph, const Node& node, ReductionNode* out,
                            bool memory_range) {
  if (node.kind != NodeKind::Aten) return "not an ATen node";
  const Overload* overload = overload_of(node.op);
  if (overload == nullptr) return "no generated reduction for " + node.op;
  if (node.outputs.size() != 1 || node.args.empty()) return "unexpected arguments";
  const Argument& self = node.args[0];
  if (self.kind != Argument::Kind::Value) return "the input is not a tensor";
  const Value& in = graph.value(self.value);
  const Value& result = graph.value(node.outputs[0]);
  if (in.kind != ValueKind::Tensor || result.kind != ValueKind::Tensor)
    return "the input or result is not a tensor";
  const TensorType& t = in.tensor;
  if (t.rank() == 0) return "reduces a 0-d tensor";
  if (t.rank() > kMaxKernelRank) return "rank above " + std::to_string(kMaxKernelRank);
  if (t.device.type != DeviceType::CUDA || result.tensor.device != t.device)
    return "not on one CUDA device";
  if (!codegen_supports_dtype(t.dtype) || !codegen_supports_dtype(result.tensor.dtype))
    return "dtype codegen lacks";
  std::vector<int> dims;
  const bool ok =
      overload->dims < 0
          ? dims_argument(Argument::none(), t.rank(), &dims)
          : (overload->single ? single_dim_argument(arg_at(node, overload->dims), t.rank(), &dims)
                              : dims_argument(arg_at(node, overload->dims), t.rank(), &dims));
  if (!ok) return "the reduced dims are not constant";
  ReductionNode r;
  for (std::size_t k = 1; k < dims.size(); ++k) r.logical_range &= dims[k] == dims[k - 1] + 1;
  if (!r.logical_range && !memory_range) return "the reduced dims are not one contiguous range";
  r.op = overload->op;
  r.input = self.value;
  r.output = node.outputs[0];
  r.dims = dims;
  r.begin = dims.front();
  r.end = dims.back() + 1;
  r.value_dtype = t.dtype;
  if (overload->dtype >= 0) {
    const Argument& dtype = arg_at(node, static_cast<std::size_t>(overload->dtype));
    if (dtype.kind == Argument::Kind::DType) r.value_dtype = static_cast<DType>(dtype.i);
  }
  // torch sums and multiplies bool and integers into int64.
  if (r.value_dtype == DType::Bool) r.value_dtype = DType::Int64;
  if (overload->correction >= 0) {
    const Argument& c = arg_at(node, static_cast<std::size_t>(overload->correction));
    if (c.kind == Argument::Kind::Int) {
      r.correction = static_cast<double>(c.i);
    } else if (c.kind == Argument::Kind::Float) {
      r.correction = c.f;
    } else if (c.kind != Argument::Kind::None) {
      return "the correction is not a constant";
    }
  }
  *out = r;
  return {};
}

std::shared_ptr<const ReductionGroup> build_reduction_group(
    const GraphIndex& index, const ReductionNode& reduction, const std::vector<NodeId>& prologue,
    const std::vector<NodeId>& epilogue, const std::vector<NodeId>& row_nodes, std::string* why) {
  const Graph& graph = index.graph;
  std::set<NodeId> members(prologue.begin(), prologue.end());
  members.insert(epilogue.begin(), epilogue.end());
  members.insert(row_nodes.begin(), row_nodes.end());
  members.insert(graph.value(reduction.output).producer);
  // The group's nodes of the input space: the prologue's and the row
  // epilogue's elementwise ops (not its row views).
  std::set<NodeId> computed(prologue.begin(), prologue.end());
  const std::string in_space = space_key(graph.value(reduction.input).tensor);
  for (NodeId id : row_nodes) {
    if (elementwise_of_space(graph, graph.node(id), in_space)) computed.insert(id);
  }
  const TensorType& in_type = graph.value(reduction.input).tensor;
  const TensorType& out_type = graph.value(reduction.output).tensor;
  const int in_rank = static_cast<int>(in_type.rank());
  const int out_rank = static_cast<int>(out_type.rank());

  auto group = std::make_shared<ReductionGroup>();
  group->reduced = reduction.input;
  group->result = reduction.output;
  ReductionWalk walk = reduction_walk(in_type, reduction, out_rank);
  if (walk.begin < 0) {
    *why = "the reduced dims are one contiguous range in neither logical nor memory order";
    return nullptr;
  }
  group->in_order = std::move(walk.in_order);
  group->out_order = std::move(walk.out_order);
  group->reduce_begin = walk.begin;
  group->reduce_end = walk.end;

  // Prologue: the value reduced, at each element of the input space.
  PointwiseSpec pspec;
  if (std::string p = prologue_spec(graph, depended_on(index, {reduction.input}, computed),
                                    reduction.input, reduction.value_dtype, &pspec, &group->inputs);
      !p.empty()) {
    *why = p;
    return nullptr;
  }
  for (std::size_t k = 0; k < pspec.inputs.size(); ++k)
    pspec.inputs[k] =
        input_arg_for(graph.value(group->inputs[k]).tensor, in_type, in_rank, group->in_order);

  // Epilogue: input 0 is the reduced value; outputs are what leaves the group.
  PointwiseSsa epi(graph);
  epi.logical(reduction.output);
  for (NodeId id : epilogue) {
    if (std::string p = epi.add_node(graph.node(id)); !p.empty()) {
      *why = graph.node(id).name + ": " + p;
      return nullptr;
    }
  }
  PointwiseSpec& espec = epi.spec();
  espec.rank = out_rank;
  const std::string out_key = shape_key(out_type);
  std::vector<NodeId> stored = {graph.value(reduction.output).producer};
  stored.insert(stored.end(), epilogue.begin(), epilogue.end());
  for (NodeId id : stored) {
    const ValueId v = graph.node(id).outputs[0];
    if (!index.used_outside(v, members)) continue;
    const TensorType& t = graph.value(v).tensor;
    espec.outputs.push_back(
        PwOutput{arg_for(t, out_key, out_rank, group->out_order), epi.logical(v)});
    group->outputs.push_back(v);
  }
  ReductionSpec spec;
  if (!row_nodes.empty()) {
    if (group->reduce_end != in_rank) {
      *why = "a row epilogue needs the reduced dims innermost";
      return nullptr;
    }
    std::vector<ValueId> results = {reduction.output};
    for (NodeId id : epilogue) results.push_back(graph.node(id).outputs[0]);
    if (std::string p = build_row_epilogue(index, reduction, results, row_nodes, computed, members,
                                           epi, espec, *group, spec);
        !p.empty()) {
      *why = "row epilogue: " + p;
      return nullptr;
    }
  }
  if (group->outputs.empty() && !spec.row_epilogue) {
    *why = "the group computes nothing anyone reads";
    return nullptr;
  }
  group->epilogue_inputs = epi.inputs();
  MB_ASSERT(!group->epilogue_inputs.empty() && group->epilogue_inputs[0] == reduction.output,
            "the epilogue's input 0 must be the reduced value");
  espec.inputs[0] = TensorArg{out_type.dtype, IndexMode::Contiguous, 0};
  for (std::size_t k = 1; k < espec.inputs.size(); ++k)
    espec.inputs[k] = input_arg_for(graph.value(group->epilogue_inputs[k]).tensor, out_type,
                                    out_rank, group->out_order);

  spec.op = reduction.op;
  spec.axis = group->reduce_end == in_rank ? ReduceAxis::Inner : ReduceAxis::Outer;
  // Short rows of a known length: a warp per row keeps the block busy.
  const std::optional<std::int64_t> row_length = static_row_length(graph, reduction);
  spec.strategy = spec.axis == ReduceAxis::Inner && row_length && *row_length <= 256
                      ? ReduceStrategy::WarpPerRow
                      : ReduceStrategy::BlockPerRow;
  spec.input_rank = in_rank;
  spec.prologue = std::move(pspec);
  spec.out_dtype = out_type.dtype;
  spec.correction = reduction.correction;
  spec.output_rank = out_rank;
  spec.epilogue = std::move(espec);
  spec.index64 = false;
  spec.threads = 256;
  ReductionSpec general = spec;
  general.index64 = true;
  make_general(*general.prologue);
  make_general(*general.epilogue);
  if (general.row_epilogue) make_general(*general.row_epilogue);
  if (std::string p = validate_variants(spec, general); !p.empty()) {
    *why = p;
    return nullptr;
  }
  group->spec = std::move(spec);
  group->general = std::move(general);
  return group;
}

}  // namespace mybackend
