// Stage 7: tiled transposing copies (Note [Tiled transposing copies] in
// fusion/transposed_copies.h): which copies the planner makes a transpose
// group, the [batch, a, b] parts and tile it picks, the view a call's
// strides give, and the spec and group through the plan archive.
#include <gtest/gtest.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "common/archive.h"
#include "fusion/fusion_plan_archive.h"
#include "fusion/pointwise_planner.h"
#include "fusion/transposed_copies.h"
#include "fusion_graphs.h"

namespace mybackend {
namespace {

const DType BF16 = DType::BFloat16;
const DType F32 = DType::Float32;

// x copied into `to`'s layout: clone(x, memory_format=...) as the IR has it.
ValueId layout_copy(GraphBuilder& b, ValueId x, const TensorType& to) {
  return node1(b, "aten::clone.default", {v(x)}, to, "clone");
}

// A [K, C, kh, kw] weight of `dtype`, contiguous, copied into channels-last
// (Note [Channels-last planning]); with `cast_from`, first cast from that
// dtype as autocast does (the cast stays contiguous).
Planned weight_copy(std::vector<std::int64_t> sizes, DType dtype,
                    std::optional<DType> cast_from = std::nullopt,
                    const FusionOptions& options = generated_options()) {
  GraphBuilder b;
  ValueId w = b.add_input(out(tensor(cast_from.value_or(dtype), sizes), "w"));
  if (cast_from) {
    w = node1(b, "aten::_to_copy.default", {v(w), Argument::of_dtype(dtype)}, tensor(dtype, sizes),
              "cast");
  }
  b.set_outputs({v(layout_copy(b, w, nchw(dtype, sizes, true)))});
  return plan(b, options);
}

const TransposeGroup& only_transpose(const Planned& p) {
  const auto groups = p.groups(KernelKind::Transpose);
  EXPECT_EQ(groups.size(), 1u) << p.plan.to_string();
  static const TransposeGroup none;
  return groups.size() == 1 ? *groups[0]->get<TransposeGroup>() : none;
}

TEST(TransposedCopies, AWeightIntoChannelsLastIsATiledCopy) {
  const Planned p = weight_copy({64, 64, 3, 3}, BF16);
  const TransposeGroup& g = only_transpose(p);
  // Cout is the batch, Cin the output's contiguous run, kh * kw the input's.
  EXPECT_EQ(g.batch_dims, (std::vector<int>{0}));
  EXPECT_EQ(g.a_dims, (std::vector<int>{1}));
  EXPECT_EQ(g.b_dims, (std::vector<int>{2, 3}));
  // Whole 9-element rows, the whole [64, 9] slab in one tile.
  EXPECT_EQ(g.spec.tile_a, 64);
  EXPECT_EQ(g.spec.tile_b, 9);
  EXPECT_EQ(g.spec.threads, 256);
  EXPECT_FALSE(g.spec.index64);
  EXPECT_EQ(g.spec.in_dtype(), BF16);
  EXPECT_EQ(g.spec.out_dtype(), BF16);
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty());
  EXPECT_TRUE(p.groups(KernelKind::AtenSequence).empty());
  const KernelGroup& group = *p.groups(KernelKind::Transpose)[0];
  EXPECT_EQ(group.spec, g.spec.to_string());
  EXPECT_EQ(group.spec.rfind("transpose in=bf16 out=bf16 tile=64x9 index=i32 threads=256\n", 0), 0u)
      << group.spec;
  EXPECT_NE(group.why.find("64 x [64, 9] into 64 x [9, 64] through 64x9"), std::string::npos)
      << group.why;
  EXPECT_NE(group.why.find("Note [Tiled transposing copies]"), std::string::npos) << group.why;
}

// Autocast's weight path: the f32 weight cast to bf16, then the layout copy:
// one group of two nodes whose body casts.
TEST(TransposedCopies, AutocastsCastBeforeTheCopyJoinsIt) {
  const Planned p = weight_copy({64, 64, 3, 3}, BF16, F32);
  const TransposeGroup& g = only_transpose(p);
  EXPECT_EQ(p.groups(KernelKind::Transpose)[0]->nodes.size(), 2u);
  EXPECT_EQ(g.spec.in_dtype(), F32);
  EXPECT_EQ(g.spec.out_dtype(), BF16);
  EXPECT_EQ(p.graph.value(g.input).name, "w");
  EXPECT_NE(g.spec.body.to_string().find("cast %0 : bf16"), std::string::npos)
      << g.spec.body.to_string();
  EXPECT_NE(p.groups(KernelKind::Transpose)[0]->why.find("cast f32->bf16"), std::string::npos);
}

// A 1x1 weight lists its elements in the same order in both layouts: no
// reordering, so the lone copy stays ATen's.
TEST(TransposedCopies, APointwiseWeightNeedsNoReordering) {
  const Planned p = weight_copy({256, 128, 1, 1}, BF16);
  EXPECT_TRUE(p.groups(KernelKind::Transpose).empty()) << p.plan.to_string();
  EXPECT_TRUE(p.groups(KernelKind::Pointwise).empty()) << p.plan.to_string();
  EXPECT_EQ(p.groups(KernelKind::AtenSequence).size(), 1u);
}

TEST(TransposedCopies, ActivationsBetweenLayoutsBothWays) {
  const std::vector<std::int64_t> sizes = {1, 64, 56, 56};
  for (bool to_channels_last : {true, false}) {
    SCOPED_TRACE(to_channels_last ? "NCHW -> NHWC" : "NHWC -> NCHW");
    GraphBuilder b;
    const ValueId x = b.add_input(out(nchw(BF16, sizes, !to_channels_last), "x"));
    b.set_outputs({v(layout_copy(b, x, nchw(BF16, sizes, to_channels_last)))});
    const Planned p = plan(b);
    const TransposeGroup& g = only_transpose(p);
    EXPECT_TRUE(g.batch_dims.empty());  // N is 1: in no part
    if (to_channels_last) {
      // [C, H*W] -> [H*W, C]: 64-element pieces of the 3136-element rows.
      EXPECT_EQ(g.a_dims, (std::vector<int>{1}));
      EXPECT_EQ(g.b_dims, (std::vector<int>{2, 3}));
      EXPECT_EQ(g.spec.tile_a, 64);
      EXPECT_EQ(g.spec.tile_b, 64);
    } else {
      // [H*W, C] -> [C, H*W]: whole 64-channel rows.
      EXPECT_EQ(g.a_dims, (std::vector<int>{2, 3}));
      EXPECT_EQ(g.b_dims, (std::vector<int>{1}));
      EXPECT_EQ(g.spec.tile_a, 64);
      EXPECT_EQ(g.spec.tile_b, 64);
    }
  }
}

TEST(TransposedCopies, OddWeightsGetTilesOfTheirSlab) {
  struct Case {
    std::vector<std::int64_t> sizes;
    DType dtype;
    int tile_a, tile_b, threads;
  };
  for (const Case& c : std::vector<Case>{{{33, 17, 7, 7}, BF16, 17, 49, 256},
                                         {{1000, 3, 3, 3}, F32, 3, 9, 32},
                                         {{512, 512, 3, 3}, BF16, 256, 9, 256},
                                         {{512, 512, 3, 3}, F32, 128, 9, 256},
                                         {{64, 3, 7, 7}, DType::Float16, 3, 49, 160}}) {
    SCOPED_TRACE(shape_key(tensor(c.dtype, c.sizes)));
    const Planned p = weight_copy(c.sizes, c.dtype);
    const TransposeGroup& g = only_transpose(p);
    EXPECT_EQ(g.spec.tile_a, c.tile_a);
    EXPECT_EQ(g.spec.tile_b, c.tile_b);
    EXPECT_EQ(g.spec.threads, c.threads);
    EXPECT_EQ(validate(g.spec), "");
  }
}

TEST(TransposedCopies, TilesFollowTheShape) {
  // Long rows beside few of a: long pieces (an image's three channels).
  TransposeTile t = transpose_tile(3, 224 * 224, 2);
  EXPECT_EQ(t.a, 3);
  EXPECT_EQ(t.b, 1024);
  // Long rows of fp32: 64 x 32.
  t = transpose_tile(3136, 100, 4);
  EXPECT_EQ(t.a, 64);
  EXPECT_EQ(t.b, 32);
  // A piece never passes the rows' own length rounded up to a power of two.
  t = transpose_tile(2, 100, 2);
  EXPECT_EQ(t.b, 128);
  // Short rows of a long a: as many whole rows as about 8 KiB holds.
  t = transpose_tile(100000, 2, 2);
  EXPECT_EQ(t.a, 1024);
  EXPECT_EQ(t.b, 2);
  t = transpose_tile(100000, 64, 8);
  EXPECT_EQ(t.a, 16);
  EXPECT_EQ(t.b, 64);
}

// Note [Tiled transposing copies]: the cases that keep their path.
TEST(TransposedCopies, OtherCopiesKeepTheirPath) {
  // Symbolic sizes: ATen's copy, as before.
  {
    GraphBuilder b;
    TensorType in = tensor(BF16, {8, 16, 3, 3});
    in.sizes[0] = Dim(SymExpr::symbol("s0"));
    TensorType to = nchw(BF16, {8, 16, 3, 3}, true);
    to.sizes[0] = in.sizes[0];
    const ValueId x = b.add_input(out(in, "x"));
    b.set_outputs({v(layout_copy(b, x, to))});
    const Planned p = plan(b);
    EXPECT_TRUE(p.groups(KernelKind::Transpose).empty()) << p.plan.to_string();
  }
  // The innermost dim stays innermost (a window partition): the
  // vectorized pointwise copy (Note [Lone reordering copies]).
  {
    GraphBuilder b;
    TensorType windows = tensor(BF16, {2, 3, 4, 8});
    windows.strides = {Dim(96), Dim(8), Dim(24), Dim(1)};
    const ValueId x = b.add_input(out(windows, "x"));
    b.set_outputs({v(layout_copy(b, x, tensor(BF16, {2, 3, 4, 8})))});
    const Planned p = plan(b);
    EXPECT_TRUE(p.groups(KernelKind::Transpose).empty());
    EXPECT_EQ(p.groups(KernelKind::Pointwise).size(), 1u);
  }
  // A full reversal of four dims leaves two batch parts.
  {
    GraphBuilder b;
    TensorType reversed = tensor(F32, {2, 3, 4, 5});
    reversed.strides = {Dim(1), Dim(2), Dim(6), Dim(24)};
    const ValueId x = b.add_input(out(reversed, "x"));
    b.set_outputs({v(layout_copy(b, x, tensor(F32, {2, 3, 4, 5})))});
    EXPECT_TRUE(plan(b).groups(KernelKind::Transpose).empty());
  }
  // A cast read elsewhere too: the group stores two values, a pointwise
  // kernel's work.
  {
    GraphBuilder b;
    const std::vector<std::int64_t> sizes = {16, 8, 3, 3};
    const ValueId w = b.add_input(out(tensor(F32, sizes), "w"));
    const ValueId cast = node1(b, "aten::_to_copy.default", {v(w), Argument::of_dtype(BF16)},
                               tensor(BF16, sizes), "cast");
    b.set_outputs({v(layout_copy(b, cast, nchw(BF16, sizes, true))), v(cast)});
    const Planned p = plan(b);
    EXPECT_TRUE(p.groups(KernelKind::Transpose).empty());
    EXPECT_EQ(p.groups(KernelKind::Pointwise).size(), 1u) << p.plan.to_string();
  }
  // Generated kernels off: nothing is generated.
  FusionOptions off;
  EXPECT_TRUE(
      weight_copy({64, 64, 3, 3}, BF16, std::nullopt, off).groups(KernelKind::Transpose).empty());
}

using Triple = std::array<std::int64_t, 3>;

// `e` is a view of sizes [batch, a, b] with these strides (batch, a, b).
void expect_view(const std::optional<TransposeExtents>& e, Triple sizes, Triple in, Triple out) {
  ASSERT_TRUE(e);
  EXPECT_EQ((Triple{e->batch, e->a, e->b}), sizes);
  EXPECT_EQ(e->in_strides, in);
  EXPECT_EQ(e->out_strides, out);
}

// A 3-d transpose of the outer and inner dims keeps the middle one as the
// batch, between the two parts in both tensors.
TEST(TransposedCopies, TheBatchMayLieBetweenTheParts) {
  TensorType in = tensor(F32, {5, 6, 7});
  TensorType to = in;
  to.strides = {Dim(1), Dim(5), Dim(30)};  // memory order (2, 1, 0)
  const std::optional<TransposeParts> parts = transpose_parts(in, to);
  ASSERT_TRUE(parts);
  EXPECT_EQ(parts->batch_dims, (std::vector<int>{1}));
  EXPECT_EQ(parts->a_dims, (std::vector<int>{0}));
  EXPECT_EQ(parts->b_dims, (std::vector<int>{2}));
  TransposeGroup g;
  g.batch_dims = parts->batch_dims;
  g.a_dims = parts->a_dims;
  g.b_dims = parts->b_dims;
  expect_view(transpose_extents(g, {5, 6, 7}, {42, 7, 1}, {1, 5, 30}), {6, 5, 7}, {7, 42, 1},
              {5, 1, 30});
}

// The runtime's view of a call: a part's dims must collapse in both
// tensors, and every dim of size above 1 must be in a part.
TEST(TransposedCopies, ACallsStridesMustCollapseAsPlanned) {
  const Planned p = weight_copy({4, 8, 3, 3}, BF16);
  const TransposeGroup& g = only_transpose(p);
  const std::vector<std::int64_t> sizes = {4, 8, 3, 3};
  const std::vector<std::int64_t> channels_last = {72, 1, 24, 8};
  expect_view(transpose_extents(g, sizes, {72, 9, 3, 1}, channels_last), {4, 8, 9}, {72, 9, 1},
              {72, 1, 8});
  // kh and kw transposed in the call's input: they no longer collapse.
  EXPECT_FALSE(transpose_extents(g, sizes, {72, 9, 1, 3}, channels_last));
  // Strides of the wrong rank, a dim outside the parts of size above 1.
  EXPECT_FALSE(transpose_extents(g, sizes, {72, 9, 3}, channels_last));
  TransposeGroup missing = g;
  missing.batch_dims.clear();
  EXPECT_FALSE(transpose_extents(missing, sizes, {72, 9, 3, 1}, channels_last));
  TransposeGroup garbled = g;
  garbled.a_dims = {7};
  EXPECT_FALSE(transpose_extents(garbled, sizes, {72, 9, 3, 1}, channels_last));
}

TEST(TransposedCopies, SpecsValidate) {
  const Planned p = weight_copy({64, 64, 3, 3}, BF16, F32);
  const TransposeSpec spec = only_transpose(p).spec;
  EXPECT_EQ(validate(spec), "");
  TransposeSpec wide = spec;
  wide.tile_a = 1024;
  wide.tile_b = 64;  // 1024 x 65 floats: 260 KiB of shared memory
  EXPECT_NE(validate(wide).find("shared memory"), std::string::npos);
  TransposeSpec threads = spec;
  threads.threads = 48;
  EXPECT_NE(validate(threads), "");
  TransposeSpec two = spec;
  two.body.outputs.push_back(two.body.outputs[0]);
  EXPECT_NE(validate(two), "");
  TransposeSpec ints = spec;
  ints.body.inputs[0].dtype = DType::Int32;
  ints.body.instrs[0].dtype = DType::Int32;
  EXPECT_NE(validate(ints), "");
}

// The spec and its group through the plan archive (Note [Plan archive]).
TEST(TransposedCopies, TheGroupRoundTripsThroughTheArchive) {
  const Planned p = weight_copy({33, 17, 7, 7}, BF16, F32);
  const TransposeGroup& g = only_transpose(p);
  const std::string bytes = archived(g);
  TransposeGroup loaded;
  Reader reader(bytes, "transpose group");
  reader.limit(IdSpace::Value, p.graph.values().size());
  archive(reader, loaded);
  reader.finish();
  EXPECT_EQ(loaded.spec.to_string(), g.spec.to_string());
  EXPECT_EQ(loaded.spec.hash(), g.spec.hash());
  EXPECT_EQ(loaded.input, g.input);
  EXPECT_EQ(loaded.output, g.output);
  EXPECT_EQ(loaded.batch_dims, g.batch_dims);
  EXPECT_EQ(loaded.a_dims, g.a_dims);
  EXPECT_EQ(loaded.b_dims, g.b_dims);
  EXPECT_EQ(archived(loaded), bytes);
}

}  // namespace
}  // namespace mybackend
