// Generated reduction groups at run time: prologue + reduction + epilogue
// in one kernel (Note [Reduction groups]). Sizes come from this call's
// symbol bindings: the input space is viewed as [rows, n] (Inner) or
// [outer, n, inner] (Outer), and the grid is sized from those numbers.
#include "runtime/generated/kernel_launch.h"

#ifdef MYBACKEND_WITH_CUDA

#include <ATen/cuda/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>

#include "codegen/launch_tuning.h"
#include "common/error.h"
#include "runtime/fast_divisors.h"

namespace mybackend {
namespace {

std::int64_t product(const std::vector<std::int64_t>& v, std::size_t from, std::size_t to) {
  std::int64_t p = 1;
  for (std::size_t d = from; d < to; ++d) p *= v[d];
  return p;
}

// A long Inner reduction into so few results that one block per result
// would leave most of the GPU idle: ATen's split reductions are faster
// there than a kernel without split entries (Note [Split inner reductions]).
constexpr std::int64_t kSplitReductionWork = std::int64_t{1} << 22;
// Note [Split outer reductions]: the fewest rows a chunk takes, and the
// workspace bytes per partial (the device code asserts its accumulators fit).
constexpr std::int64_t kMinSplitRows = 64;
constexpr std::int64_t kPartialBytes = 32;
// Note [Split inner reductions]: the fewest elements a chunk takes, 32 a
// thread of a 256-thread block. A block per row walked BERT's 3.1M-element
// MSE at about 0.23 us per 256-vector step (720 us), so a row of 2 x 8192
// f32 (16 steps, ~4 us) is about where halving it pays for the second
// launch; longer rows gain more.
constexpr std::int64_t kMinSplitElements = 8192;
// Chunks are whole multiples of this many elements, so each starts on a
// whole vector of any width the emitter picks (at most 8 elements).
constexpr std::int64_t kInnerChunkAlign = 256;
// Outer kernels' entries: 0 one pass, 1 and 2 split, 3 narrow tiles (Note
// [Narrow outer tiles]).
constexpr std::size_t kNarrowOuterEntry = 3;
// The longest rows the narrow entry takes: eight a thread row.
constexpr std::int64_t kNarrowOuterMaxRows = 256;

class ReductionKernel final : public GroupKernel<ReductionGroup> {
 public:
  ReductionKernel(KernelKind kind, const Graph& graph, std::shared_ptr<const ReductionGroup> group,
                  std::vector<Variant> variants, std::string target)
      : GroupKernel(kind, graph, std::move(group), std::move(variants), std::move(target)) {
    // Parameter names parsed once, not at every launch of a host-bound step.
    for (const Variant& v : variants_) {
      std::vector<std::vector<ParamRole>> entries;
      for (const KernelEntry& entry : v.kernel.entries) entries.push_back(roles_of(entry));
      roles_.push_back(std::move(entries));
    }
  }

 private:
  // What one kernel parameter carries at a launch (parsed from its name).
  struct ParamRole {
    enum class Kind : std::int8_t {
      Partials,
      Tensor,
      Strides,
      Rows,
      N,
      Inner,
      Chunk,
      InShape,
      OutShape,
      Period,
      PeriodDivisor,
      Block,
      BlockDivisor
    };
    enum class Side : std::int8_t { In, Ein, Out, Rin, Rout };  // Rin/Rout: the row epilogue
    Kind kind = Kind::Rows;
    Side side = Side::In;
    std::size_t index = 0;
  };

  static std::vector<ParamRole> roles_of(const KernelEntry& entry) {
    using Kind = ParamRole::Kind;
    std::vector<ParamRole> out;
    for (const KernelParam& p : entry.params) {
      ParamRole role;
      auto with_tensor = [&](Kind kind) {
        std::string side;
        role.kind = kind;
        role.index = parse(p.name, &side);
        role.side = side == "in"     ? ParamRole::Side::In
                    : side == "ein"  ? ParamRole::Side::Ein
                    : side == "rin"  ? ParamRole::Side::Rin
                    : side == "rout" ? ParamRole::Side::Rout
                                     : ParamRole::Side::Out;
      };
      switch (p.kind) {
        case KernelParam::Kind::Pointer:
          if (p.name == "partials") {
            role.kind = Kind::Partials;
          } else {
            with_tensor(Kind::Tensor);
          }
          break;
        case KernelParam::Kind::Int64:
          if (p.name == "rows" || p.name == "outer") {
            role.kind = Kind::Rows;
          } else if (p.name == "n") {
            role.kind = Kind::N;
          } else if (p.name == "inner") {
            role.kind = Kind::Inner;
          } else if (p.name == "chunk") {
            role.kind = Kind::Chunk;
          } else {
            const bool block = p.name.rfind("block_", 0) == 0;
            const bool divisor = p.name.find("div_") != std::string::npos;
            with_tensor(block ? (divisor ? Kind::BlockDivisor : Kind::Block)
                              : (divisor ? Kind::PeriodDivisor : Kind::Period));
            MB_ASSERT(role.side != ParamRole::Side::Out && role.side != ParamRole::Side::Rout,
                      "unexpected kernel parameter ", p.name);
          }
          break;
        case KernelParam::Kind::Dims:
          if (p.name == "in_shape" || p.name == "row_shape") {
            role.kind = Kind::InShape;
          } else if (p.name == "out_shape") {
            role.kind = Kind::OutShape;
          } else {
            with_tensor(Kind::Strides);
          }
          break;
        case KernelParam::Kind::Float64:
        case KernelParam::Kind::Bytes:
          MB_ASSERT(false, "reduction groups take no scalar or struct arguments, got ", p.name);
      }
      out.push_back(role);
    }
    return out;
  }

  // This call's tensors and their iteration strides.
  struct Call {
    std::vector<std::int64_t> in_shape, out_shape;
    std::int64_t rows = 1, n = 1, inner = 1;  // rows is `outer` for Outer reductions
    std::vector<at::Tensor> inputs, epilogue_inputs, outputs;  // epilogue_inputs[0] unused
    std::vector<std::vector<std::int64_t>> in_strides, ein_strides, out_strides;
    // Note [Row epilogues]: row_inputs below the row values' count unused.
    std::vector<at::Tensor> row_inputs, row_outputs;
    std::vector<std::vector<std::int64_t>> rin_strides, rout_strides;
    // Each periodic input's layout in the walk, set by fast_fits (Note
    // [Periodic operands in reductions]).
    std::vector<PeriodicLayout> in_periodic, ein_periodic, rin_periodic;
  };

  static bool side_fits(const std::vector<at::Tensor>& tensors, std::size_t first,
                        const std::vector<TensorArg>& args,
                        const std::vector<std::vector<std::int64_t>>& strides,
                        const std::vector<std::int64_t>& shape, std::int64_t numel,
                        std::vector<PeriodicLayout>* periodic) {
    if (numel >= kIndex32Limit) return false;
    if (periodic) periodic->assign(tensors.size(), PeriodicLayout{});
    for (std::size_t k = first; k < tensors.size(); ++k) {
      if (args[k].mode == IndexMode::Strided) {
        if (max_offset(shape, strides[k]) >= kIndex32Limit) return false;
        continue;
      }
      if (is_periodic(args[k].mode)) {
        (*periodic)[k] = fitting_periodic_layout(args[k].mode, shape, strides[k], numel,
                                                 /*unit_period=*/true);  // Note [One value a row]
        if ((*periodic)[k].period == 0) return false;
        continue;
      }
      // Dense in the walk's order (Note [Reductions walked in memory order]).
      if (!dense_strides(shape, strides[k]) || tensors[k].numel() != numel) return false;
      if (args[k].mode == IndexMode::Aligned && !aligned16(tensors[k])) return false;
    }
    return true;
  }

  bool fast_fits(Call& c) const {
    const ReductionSpec& s = group_->spec;
    std::vector<TensorArg> outs;
    for (std::size_t k = 0; k < s.stored_outputs(); ++k)
      outs.push_back(s.epilogue->outputs[k].tensor);
    const std::int64_t in_numel = product(c.in_shape, 0, c.in_shape.size());
    const std::int64_t out_numel = product(c.out_shape, 0, c.out_shape.size());
    const bool fits = side_fits(c.inputs, 0, s.prologue->inputs, c.in_strides, c.in_shape, in_numel,
                                &c.in_periodic) &&
                      side_fits(c.epilogue_inputs, 1, s.epilogue->inputs, c.ein_strides,
                                c.out_shape, out_numel, &c.ein_periodic) &&
                      side_fits(c.outputs, 0, outs, c.out_strides, c.out_shape, out_numel, nullptr);
    if (!fits || !s.row_epilogue) return fits;
    std::vector<TensorArg> row_outs;
    for (const auto& o : s.row_epilogue->outputs) row_outs.push_back(o.tensor);
    return side_fits(c.row_inputs, s.row_values.size(), s.row_epilogue->inputs, c.rin_strides,
                     c.in_shape, in_numel, &c.rin_periodic) &&
           side_fits(c.row_outputs, 0, row_outs, c.rout_strides, c.in_shape, in_numel, nullptr);
  }

  // One side's input tensors: the group's values and the spec's arguments
  // (entries below `first` are values, not tensors), named in errors.
  struct InputSide {
    const std::vector<ValueId>& values;
    const std::vector<TensorArg>& args;
    std::size_t first;
    const char* what;          // "input ", "epilogue input ", ...
    const char* broadcast_to;  // the space they are read in
  };

  // This call's tensors of `side` and their iteration strides over `shape`
  // (empty entries below side.first); empty or why they do not fit.
  static std::string bind(const ValueSlots& slots, const InputSide& side,
                          const std::vector<std::int64_t>& shape, std::vector<at::Tensor>& tensors,
                          std::vector<std::vector<std::int64_t>>& strides) {
    std::string why;
    tensors.resize(side.values.size());
    strides.resize(side.values.size());
    for (std::size_t k = side.first; k < side.values.size(); ++k) {
      auto t =
          cuda_tensor(slots[static_cast<std::size_t>(side.values[k])], side.args[k].dtype, &why);
      if (!t) return side.what + std::to_string(k) + why;
      tensors[k] = *t;
      if (!iteration_strides(*t, shape, strides[k]))
        return side.what + std::to_string(k) + " does not broadcast to " + side.broadcast_to;
    }
    return {};
  }

  // Allocates `values` (outputs `outs` of a spec) over `shape` with their IR
  // strides; false when a stride depends on an unbound symbol.
  bool allocate(const std::vector<ValueId>& values, const std::vector<PwOutput>& outs,
                const std::vector<std::int64_t>& shape, const SymbolBindings& bindings,
                const at::TensorOptions& options, PlannedOutputs& planned,
                std::vector<at::Tensor>& tensors,
                std::vector<std::vector<std::int64_t>>& strides) const {
    for (std::size_t k = 0; k < values.size(); ++k) {
      const auto ir_strides = evaluate_dims(graph_.value(values[k]).tensor.strides, bindings);
      if (!ir_strides) return false;
      const auto dtype = static_cast<c10::ScalarType>(outs[k].tensor.dtype);
      tensors.push_back(planned.empty_strided(values[k], shape, *ir_strides, options.dtype(dtype)));
      strides.emplace_back();
      iteration_strides(tensors.back(), shape, strides.back());
    }
    return true;
  }

  bool launch(ValueSlots& slots, const SymbolBindings& bindings,
              PlannedOutputs& planned) const override {
    const ReductionGroup& g = *group_;
    const ReductionSpec& s = g.spec;
    Call c;
    const auto in_shape = evaluate_dims(graph_.value(g.reduced).tensor.sizes, bindings);
    const auto out_shape = evaluate_dims(graph_.value(g.result).tensor.sizes, bindings);
    if (!in_shape || !out_shape) return fail("a size depends on an unbound symbol");
    // Note [Reductions walked in memory order]: strides are taken over the
    // logical shapes (*in_shape, *out_shape), then permuted into the walk.
    auto walk = [](const std::vector<int>& order, std::vector<std::int64_t>& dims) {
      if (!order.empty() && !dims.empty()) dims = permuted(dims, order);  // [0] of ein: none
    };
    c.in_shape = *in_shape;
    c.out_shape = *out_shape;
    walk(g.in_order, c.in_shape);
    walk(g.out_order, c.out_shape);
    const auto b = static_cast<std::size_t>(g.reduce_begin);
    const auto e = static_cast<std::size_t>(g.reduce_end);
    c.rows = product(c.in_shape, 0, b);
    c.n = product(c.in_shape, b, e);
    c.inner = product(c.in_shape, e, c.in_shape.size());
    const std::int64_t results = c.rows * c.inner;
    const bool extremum = s.op == ReduceOp::Amax || s.op == ReduceOp::Amin ||
                          s.op == ReduceOp::Argmax || s.op == ReduceOp::Argmin;
    if (extremum && c.n == 0 && results > 0)
      return fail("reducing zero elements: ATen raises eager's error");
    const InputSide prologue_side{g.inputs, s.prologue->inputs, 0, "input ", "the reduced shape"};
    const InputSide epilogue_side{g.epilogue_inputs, s.epilogue->inputs, 1, "epilogue input ",
                                  "the result"};
    if (std::string p = bind(slots, prologue_side, *in_shape, c.inputs, c.in_strides); !p.empty())
      return fail(p);
    if (std::string p = bind(slots, epilogue_side, *out_shape, c.epilogue_inputs, c.ein_strides);
        !p.empty())
      return fail(p);
    // Note [Row epilogues]: the row epilogue's tensors, over the input space;
    // the row values (registers) take no tensor.
    if (s.row_epilogue) {
      const InputSide row_side{g.row_inputs, s.row_epilogue->inputs, s.row_values.size(),
                               "row epilogue input ", "the reduced shape"};
      if (std::string p = bind(slots, row_side, *in_shape, c.row_inputs, c.rin_strides); !p.empty())
        return fail(p);
    }
    if (c.inputs.empty()) return fail("the group reads no tensor");
    const c10::Device device = c.inputs[0].device();
    for (const auto* side : {&c.epilogue_inputs, &c.row_inputs}) {
      for (const auto& t : *side) {
        if (t.defined() && t.device() != device) return fail("inputs on different devices");
      }
    }
    // Reductions into few results run split (Note [Split outer reductions],
    // Note [Split inner reductions]); a kernel without split entries (a
    // warp per row, whose rows are short) leaves long ones to ATen.
    const bool few_results = s.axis == ReduceAxis::Inner && results < 64;
    if (few_results && c.n * results >= kSplitReductionWork && !has_split_entries(0))
      return fail("only " + std::to_string(results) + " results of " + std::to_string(c.n) +
                  " elements each: ATen's split reduction is faster (ran ATen for this call)");
    c10::cuda::CUDAGuard guard(device);
    const at::TensorOptions options = c.inputs[0].options();
    if (!allocate(g.outputs, s.epilogue->outputs, *out_shape, bindings, options, planned, c.outputs,
                  c.out_strides) ||
        (s.row_epilogue && !allocate(g.row_outputs, s.row_epilogue->outputs, *in_shape, bindings,
                                     options, planned, c.row_outputs, c.rout_strides)))
      return fail("a stride of an output depends on an unbound symbol");
    for (auto& strides : c.in_strides) walk(g.in_order, strides);
    for (auto& strides : c.rin_strides) walk(g.in_order, strides);
    for (auto& strides : c.rout_strides) walk(g.in_order, strides);
    for (auto& strides : c.ein_strides) walk(g.out_order, strides);
    for (auto& strides : c.out_strides) walk(g.out_order, strides);
    if (results > 0) {
      const bool fast = variants_.size() > 1 && fast_fits(c);
      launch_variant(fast ? 0 : variants_.size() - 1, c, device.index());
    }
    for (std::size_t k = 0; k < g.outputs.size(); ++k)
      slots[static_cast<std::size_t>(g.outputs[k])] = c.outputs[k];
    for (std::size_t k = 0; k < g.row_outputs.size(); ++k)
      slots[static_cast<std::size_t>(g.row_outputs[k])] = c.row_outputs[k];
    return true;
  }

  // Whether variant v carries the _partials and _totals entries (every
  // variant comes from the one spec, so all of them do or none).
  bool has_split_entries(std::size_t v) const { return variants_[v].kernel.entries.size() >= 3; }

  // Blocks of the one-pass kernel (Outer: column tiles; Inner: rows), the
  // units that the split form multiplies by the chunk count.
  std::int64_t split_units(const Call& c) const {
    return group_->spec.axis == ReduceAxis::Outer ? outer_column_tiles(c.rows, c.inner) : c.rows;
  }

  // The chunk length for this call (Note [Split outer reductions]: rows of
  // n; Note [Split inner reductions]: elements of a row), or 0 when the
  // one-pass kernel's blocks alone fill the GPU (or the kernel has no split
  // entries).
  std::int64_t split_chunk(std::size_t v, const Call& c, int sm_count) const {
    if (!has_split_entries(v)) return 0;
    const bool outer = group_->spec.axis == ReduceAxis::Outer;
    const std::int64_t splits =
        outer_row_splits(split_units(c), c.n, sm_count, outer ? kMinSplitRows : kMinSplitElements);
    if (splits < 2) return 0;
    const std::int64_t chunk = (c.n + splits - 1) / splits;
    return outer ? chunk : (chunk + kInnerChunkAlign - 1) / kInnerChunkAlign * kInnerChunkAlign;
  }

  void launch_variant(std::size_t v, const Call& c, int device_index) const {
    const DeviceModules::Loaded& l = modules_.on(device_index, v);
    const std::int64_t resident = static_cast<std::int64_t>(l.sm_count) * 16;
    if (group_->spec.axis == ReduceAxis::Outer) {
      // Note [Narrow outer tiles]: too few wide tiles to fill the GPU, rows
      // short enough for one pass of 32 thread rows.
      const std::int64_t wide = outer_column_tiles(c.rows, c.inner);
      const std::int64_t narrow = outer_column_tiles(c.rows, c.inner, kNarrowOuterTileColumns);
      if (variants_[v].kernel.entries.size() > kNarrowOuterEntry && wide < l.sm_count &&
          narrow > wide && c.n <= kNarrowOuterMaxRows) {
        launch_entry(v, kNarrowOuterEntry, c, device_index, std::min(narrow, resident), nullptr, 0);
        return;
      }
    }
    if (const std::int64_t chunk = split_chunk(v, c, l.sm_count); chunk > 0) {
      // The device code counts the chunks the same way (rounding the chunk
      // up may leave fewer than outer_row_splits asked for).
      const std::int64_t splits = (c.n + chunk - 1) / chunk;
      // Inner: c.inner is 1, one partial a row and chunk.
      const at::Tensor partials =
          at::detail::empty_cuda({splits * c.rows * c.inner * kPartialBytes}, at::kByte,
                                 c.inputs[0].device(), std::nullopt);
      launch_entry(v, 1, c, device_index, std::min(split_units(c) * splits, resident), &partials,
                   chunk);
      // Totals: a block per 32 columns (Outer), a block per row (Inner).
      const bool outer = group_->spec.axis == ReduceAxis::Outer;
      const std::int64_t total_blocks = outer ? (c.rows * c.inner + 31) / 32 : c.rows;
      launch_entry(v, 2, c, device_index, std::min(total_blocks, resident), &partials, chunk);
      return;
    }
    const KernelEntry& entry = variants_[v].kernel.entries[0];
    std::int64_t blocks = 1;
    if (group_->spec.axis == ReduceAxis::Outer) {
      blocks = outer_column_tiles(c.rows, c.inner);
    } else if (group_->spec.strategy == ReduceStrategy::WarpPerRow) {
      const std::int64_t warps = std::max(1, entry.block_x / 32);
      blocks = (c.rows + warps - 1) / warps;
    } else {
      blocks = c.rows;
    }
    launch_entry(v, 0, c, device_index, std::min(blocks, resident), nullptr, 0);
  }

  // "in3", "ein2", "out1" with an optional "stride_", "period_" ... prefix
  // -> (side, index).
  static std::size_t parse(const std::string& name, std::string* side) {
    std::string base = name;
    for (const char* role : {"stride_", "period_div_", "period_", "block_div_", "block_"}) {
      if (base.rfind(role, 0) == 0) {
        base = base.substr(std::string(role).size());
        break;
      }
    }
    for (const char* prefix : {"ein", "rin", "rout", "out", "in"}) {
      const std::string p(prefix);
      if (base.rfind(p, 0) == 0) {
        *side = p;
        return static_cast<std::size_t>(std::stoul(base.substr(p.size())));
      }
    }
    MB_ASSERT(false, "unexpected kernel parameter ", name);
    return 0;
  }

  void launch_entry(std::size_t v, std::size_t e, const Call& c, int device_index,
                    std::int64_t grid, const at::Tensor* partials, std::int64_t chunk) const {
    using Kind = ParamRole::Kind;
    using Side = ParamRole::Side;
    const KernelEntry& entry = variants_[v].kernel.entries[e];
    const std::vector<ParamRole>& roles = roles_[v][e];
    KernelArgs args(entry);
    for (std::size_t i = 0; i < roles.size(); ++i) {
      const ParamRole& r = roles[i];
      const std::vector<PeriodicLayout>& periodic = r.side == Side::In    ? c.in_periodic
                                                    : r.side == Side::Rin ? c.rin_periodic
                                                                          : c.ein_periodic;
      switch (r.kind) {
        case Kind::Partials: args.set_pointer(i, partials->data_ptr()); break;
        case Kind::Tensor: {
          const at::Tensor& t = r.side == Side::In     ? c.inputs[r.index]
                                : r.side == Side::Ein  ? c.epilogue_inputs[r.index]
                                : r.side == Side::Rin  ? c.row_inputs[r.index]
                                : r.side == Side::Rout ? c.row_outputs[r.index]
                                                       : c.outputs[r.index];
          args.set_pointer(i, t.data_ptr());
          break;
        }
        case Kind::Strides:
          args.set_dims(i, r.side == Side::In     ? c.in_strides[r.index]
                           : r.side == Side::Ein  ? c.ein_strides[r.index]
                           : r.side == Side::Rin  ? c.rin_strides[r.index]
                           : r.side == Side::Rout ? c.rout_strides[r.index]
                                                  : c.out_strides[r.index]);
          break;
        case Kind::Rows: args.set_int(i, c.rows); break;
        case Kind::N: args.set_int(i, c.n); break;
        case Kind::Inner: args.set_int(i, c.inner); break;
        case Kind::Chunk: args.set_int(i, chunk); break;
        case Kind::InShape: args.set_dims(i, c.in_shape); break;
        case Kind::OutShape: args.set_dims(i, c.out_shape); break;
        case Kind::Period: args.set_int(i, periodic.at(r.index).period); break;
        case Kind::PeriodDivisor:
          args.set_int(i, packed_divisor(periodic.at(r.index).period));
          break;
        case Kind::Block: args.set_int(i, periodic.at(r.index).block); break;
        case Kind::BlockDivisor: args.set_int(i, packed_divisor(periodic.at(r.index).block)); break;
      }
    }
    const DeviceModules::Loaded& l = modules_.on(device_index, v);
    launch_on_stream(l, l.functions[e], grid, entry, args, device_index);
  }

  std::vector<std::vector<std::vector<ParamRole>>> roles_;  // per variant and entry
};

}  // namespace

KernelBuild reduction_build(const Graph& graph, std::shared_ptr<const ReductionGroup> group) {
  const int device = graph.value(group->result).tensor.device.index;
  return two_variant_build<ReductionKernel>(KernelKind::Reduction, graph, std::move(group), device,
                                            emit_reduction);
}

}  // namespace mybackend

#endif  // MYBACKEND_WITH_CUDA
