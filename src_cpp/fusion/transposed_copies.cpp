#include "fusion/transposed_copies.h"

#include <algorithm>
#include <set>
#include <string>

#include "fusion/pointwise_lowering.h"
#include "fusion/pointwise_planner.h"

namespace mybackend {
namespace {

// Note [Transpose tiles] in codegen/device/mb_transpose.cuh: a tile holds
// about this many bytes of its widest dtype; rows of b up to kWholeRows
// elements are taken whole, longer ones in pieces beside at most
// kWideTileA rows of a; no side above kMaxTileSide.
constexpr std::int64_t kTileBytes = 8192;
constexpr std::int64_t kWholeRows = 64;
constexpr std::int64_t kWideTileA = 64;
constexpr std::int64_t kMaxTileSide = 1024;
constexpr std::int64_t kMaxThreads = 256;
// 32-bit offsets hold tensors below 2^30 elements (see PointwiseSpec::index64).
constexpr std::int64_t kIndex32Elements = std::int64_t{1} << 30;

std::int64_t floor_pow2(std::int64_t n) {
  std::int64_t p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}

std::int64_t ceil_pow2(std::int64_t n) {
  std::int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// The dims of size above 1, outermost first by stride, when `t` is dense in
// that order; nullopt when it is not dense in any order.
std::optional<std::vector<int>> dense_dims(const TensorType& t) {
  const int rank = static_cast<int>(t.rank());
  std::vector<int> order(static_cast<std::size_t>(rank));
  for (int d = 0; d < rank; ++d) order[static_cast<std::size_t>(d)] = d;
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) {
    return t.strides[static_cast<std::size_t>(x)].static_value() >
           t.strides[static_cast<std::size_t>(y)].static_value();
  });
  if (!dense_in_order(t, order)) return std::nullopt;
  std::vector<int> dims;
  for (int d : order)
    if (t.sizes[static_cast<std::size_t>(d)].static_value() != 1) dims.push_back(d);
  return dims;
}

std::vector<std::int64_t> static_values(const std::vector<Dim>& dims) {
  std::vector<std::int64_t> out;
  for (const Dim& d : dims) out.push_back(d.static_value());
  return out;
}

std::string sizes_text(const std::vector<std::int64_t>& sizes) {
  std::string out = "[";
  for (std::size_t k = 0; k < sizes.size(); ++k) out += (k ? ", " : "") + std::to_string(sizes[k]);
  return out + "]";
}

}  // namespace

std::optional<TransposeParts> transpose_parts(const TensorType& in, const TensorType& out) {
  if (in.rank() < 2 || shape_key(in) != shape_key(out) || !static_layout(in) || !static_layout(out))
    return std::nullopt;
  const std::optional<std::vector<int>> in_order = dense_dims(in);
  const std::optional<std::vector<int>> out_order = dense_dims(out);
  if (!in_order || !out_order || in_order->size() < 2) return std::nullopt;
  // The innermost dim stays innermost: a copy the pointwise kernel
  // vectorizes (Note [Lone reordering copies]), not a transpose.
  if (in_order->back() == out_order->back()) return std::nullopt;
  std::vector<int> out_position(static_cast<std::size_t>(in.rank()), -1);
  for (std::size_t k = 0; k < out_order->size(); ++k)
    out_position[static_cast<std::size_t>((*out_order)[k])] = static_cast<int>(k);
  // Runs of dims that follow each other in both orders collapse into one.
  std::vector<std::vector<int>> runs;
  for (std::size_t k = 0; k < in_order->size(); ++k) {
    const int d = (*in_order)[k];
    if (k == 0 || out_position[static_cast<std::size_t>(d)] !=
                      out_position[static_cast<std::size_t>((*in_order)[k - 1])] + 1)
      runs.emplace_back();
    runs.back().push_back(d);
  }
  if (runs.size() > 3) return std::nullopt;  // more than one batch part
  TransposeParts parts;
  for (std::vector<int>& run : runs) {
    // Each tensor's innermost dim ends its run.
    if (run.back() == in_order->back()) {
      parts.b_dims = std::move(run);
    } else if (run.back() == out_order->back()) {
      parts.a_dims = std::move(run);
    } else {
      parts.batch_dims = std::move(run);
    }
  }
  return parts;
}

std::optional<TransposeExtents> transpose_extents(const TransposeGroup& group,
                                                  const std::vector<std::int64_t>& sizes,
                                                  const std::vector<std::int64_t>& in_strides,
                                                  const std::vector<std::int64_t>& out_strides) {
  if (in_strides.size() != sizes.size() || out_strides.size() != sizes.size()) return std::nullopt;
  TransposeExtents e;
  const std::vector<int>* parts[] = {&group.batch_dims, &group.a_dims, &group.b_dims};
  std::int64_t* extents[] = {&e.batch, &e.a, &e.b};
  for (std::size_t p = 0; p < 3; ++p) {
    const std::vector<int>& dims = *parts[p];
    std::int64_t size = 1;
    for (std::size_t j = 0; j < dims.size(); ++j) {
      const int d = dims[j];
      if (d < 0 || static_cast<std::size_t>(d) >= sizes.size()) return std::nullopt;
      const auto at = static_cast<std::size_t>(d);
      if (j > 0) {
        const auto outer = static_cast<std::size_t>(dims[j - 1]);
        for (const std::vector<std::int64_t>* strides : {&in_strides, &out_strides})
          if ((*strides)[outer] != (*strides)[at] * sizes[at]) return std::nullopt;
      }
      size *= sizes[at];
    }
    *extents[p] = size;
    e.in_strides[p] = dims.empty() ? 0 : in_strides[static_cast<std::size_t>(dims.back())];
    e.out_strides[p] = dims.empty() ? 0 : out_strides[static_cast<std::size_t>(dims.back())];
  }
  // The dims outside the parts have size 1, and none is in two parts.
  std::int64_t numel = 1;
  for (std::int64_t s : sizes) numel *= s;
  if (numel != e.numel()) return std::nullopt;
  return e;
}

TransposeTile transpose_tile(std::int64_t a, std::int64_t b, int widest_bytes) {
  const std::int64_t budget = kTileBytes / std::max(1, widest_bytes);  // elements
  std::int64_t tile_a = 1, tile_b = 1;
  if (b <= kWholeRows) {
    tile_b = b;
    tile_a =
        a * b <= budget && a <= kMaxTileSide ? a : floor_pow2(std::min(budget / b, kMaxTileSide));
  } else {
    tile_a = std::min(a, kWideTileA);
    tile_b = std::min({floor_pow2(budget / tile_a), ceil_pow2(b), kMaxTileSide});
  }
  const std::int64_t elements = tile_a * tile_b;
  const std::int64_t threads =
      std::min(kMaxThreads, std::max<std::int64_t>(32, (elements + 31) / 32 * 32));
  return TransposeTile{static_cast<int>(tile_a), static_cast<int>(tile_b),
                       static_cast<int>(threads)};
}

std::shared_ptr<const TransposeGroup> plan_transposed_copy(const GraphIndex& index,
                                                           const std::vector<NodeId>& nodes,
                                                           std::string* why) {
  const Graph& graph = index.graph;
  // A copy's nodes read one value each; a binary op rules the group out
  // before its SSA is built.
  for (NodeId id : nodes)
    if (graph.node(id).input_values().size() != 1) return nullptr;
  const std::set<NodeId> members(nodes.begin(), nodes.end());
  ValueId stored = -1;
  for (NodeId id : nodes) {
    for (ValueId v : graph.node(id).outputs) {
      if (!index.used_outside(v, members)) continue;
      if (stored >= 0) return nullptr;  // two stored values: a pointwise group's work
      stored = v;
    }
  }
  if (stored < 0) return nullptr;
  PointwiseSsa ssa(graph);
  for (NodeId id : nodes)
    if (!ssa.add_node(graph.node(id)).empty()) return nullptr;
  const std::int32_t value = ssa.logical(stored);
  if (ssa.inputs().size() != 1) return nullptr;
  for (const PwInstr& instr : ssa.spec().instrs)
    if (instr.op != PwOp::Load && instr.op != PwOp::Cast) return nullptr;
  const ValueId input = ssa.inputs()[0];
  const TensorType& in = graph.value(input).tensor;
  const TensorType& out = graph.value(stored).tensor;
  if (!is_floating(in.dtype) || !is_floating(out.dtype) || in.device != out.device) return nullptr;
  std::optional<TransposeParts> parts = transpose_parts(in, out);
  if (!parts) return nullptr;
  auto group = std::make_shared<TransposeGroup>();
  group->input = input;
  group->output = stored;
  group->batch_dims = std::move(parts->batch_dims);
  group->a_dims = std::move(parts->a_dims);
  group->b_dims = std::move(parts->b_dims);
  const std::optional<TransposeExtents> extents = transpose_extents(
      *group, static_values(out.sizes), static_values(in.strides), static_values(out.strides));
  if (!extents) return nullptr;
  TransposeSpec& spec = group->spec;
  spec.body = ssa.spec();
  spec.body.rank = 0;
  spec.body.inputs = {TensorArg{in.dtype, IndexMode::Contiguous, 0}};
  spec.body.outputs = {PwOutput{TensorArg{out.dtype, IndexMode::Contiguous, 0}, value}};
  const TransposeTile tile = transpose_tile(
      extents->a, extents->b, std::max(dtype_size_bytes(in.dtype), dtype_size_bytes(out.dtype)));
  spec.tile_a = tile.a;
  spec.tile_b = tile.b;
  spec.threads = tile.threads;
  spec.index64 = extents->numel() >= kIndex32Elements;
  if (!validate(spec).empty()) return nullptr;
  *why = "transposing copy: " + std::to_string(extents->batch) + " x " +
         sizes_text({extents->a, extents->b}) + " into " + std::to_string(extents->batch) + " x " +
         sizes_text({extents->b, extents->a}) + " through " + std::to_string(tile.a) + "x" +
         std::to_string(tile.b) + " shared-memory tiles" +
         (in.dtype == out.dtype ? std::string()
                                : ", cast " + std::string(dtype_short_name(in.dtype)) + "->" +
                                      std::string(dtype_short_name(out.dtype))) +
         " (Note [Tiled transposing copies])";
  return group;
}

}  // namespace mybackend
