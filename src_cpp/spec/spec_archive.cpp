#include "spec/spec_archive.h"

namespace mybackend {

template <class Ar>
void archive(Ar& ar, LaunchTuning& t) {
  fields(ar, t.pw_block, t.pw_vec_per_thread, t.pw_blocks_per_sm, t.pw_coalesce_dims,
         t.pw_fast_divisors, t.norm_block, t.norm_vec_per_thread, t.norm_blocks_per_sm,
         t.norm_wide_warps_per_sm, t.softmax_block, t.softmax_blocks_per_sm, t.bn_row_unroll,
         t.bn_blocks_per_sm, t.bn_chunk_passes, t.bn_max_lanes, t.bn_min_blocks);
}

// ---- generated kernels ------------------------------------------------------

template <class Ar>
void archive(Ar& ar, TensorArg& t) {
  fields(ar, t.dtype, t.mode, t.rank);
}

template <class Ar>
void archive(Ar& ar, PwScalar& s) {
  fields(ar, s.dtype, s.is_argument, s.f, s.i);
}

template <class Ar>
void archive(Ar& ar, PwInstr& instr) {
  fields(ar, instr.op, instr.dtype, instr.args, instr.index);
}

template <class Ar>
void archive(Ar& ar, PwGuard& g) {
  fields(ar, g.input, g.axis, g.lo, g.hi);
}

template <class Ar>
void archive(Ar& ar, PwOutput& o) {
  fields(ar, o.tensor, o.value);
}

template <class Ar>
void archive(Ar& ar, PointwiseSpec& s) {
  fields(ar, s.rank, s.inputs, s.scalars, s.instrs, s.outputs, s.coords, s.guards, s.index64,
         s.threads, s.tuning);
}

template <class Ar>
void archive(Ar& ar, ReductionSpec& s) {
  fields(ar, s.op, s.axis, s.strategy, s.input_rank, s.input, s.prologue, s.out_dtype, s.correction,
         s.output_rank, s.output, s.epilogue, s.row_epilogue, s.row_values, s.unstored_outputs,
         s.index64, s.threads);
}

template <class Ar>
void archive(Ar& ar, NormSpec& s) {
  fields(ar, s.kind, s.dtype, s.out_dtype, s.weight_dtype, s.has_weight, s.has_bias, s.save_stats,
         s.param_grads, s.round_before_weight, s.aligned, s.index64, s.threads, s.tuning,
         s.prologue, s.epilogue, s.store_x);
}

template <class Ar>
void archive(Ar& ar, CastPair& p) {
  fields(ar, p.from, p.to);
}

template <class Ar>
void archive(Ar& ar, CastGroupSpec& s) {
  fields(ar, s.pairs, s.threads, s.layout_copies, s.tuning);
}

template <class Ar>
void archive(Ar& ar, PoolSpec& s) {
  fields(ar, s.dtype, s.layout, s.vector, s.store_indices, s.backward, s.prologue, s.reads,
         s.index64, s.threads);
}

template <class Ar>
void archive(Ar& ar, TransposeSpec& s) {
  fields(ar, s.body, s.tile_a, s.tile_b, s.index64, s.threads);
}

// ---- library calls ------------------------------------------------------------

template <class Ar>
void archive(Ar& ar, MatmulOperand& o) {
  ar.id(o.value, IdSpace::Value);
  fields(ar, o.transposed);
}

template <class Ar>
void archive(Ar& ar, MatmulSpec& s) {
  ar.id(s.product, IdSpace::Node);
  fields(ar, s.op, s.batched, s.mat1, s.mat2, s.dtype, s.out_dtype, s.alpha);
  ar.id(s.c, IdSpace::Value);
  fields(ar, s.beta, s.c_is_residual, s.epilogue);
  for (ValueId* id : {&s.bias, &s.output, &s.bias_grad}) ar.id(*id, IdSpace::Value);
  fields(ar, s.autotune);
}

template <class Ar>
void archive(Ar& ar, StackView& view) {
  fields(ar, view.kind, view.dims);
}

template <class Ar>
void archive(Ar& ar, StackedGradient& g) {
  fields(ar, g.gradient);
  ar.id(g.part, IdSpace::Value);
  fields(ar, g.views);
}

template <class Ar>
void archive(Ar& ar, GradientStack& stack) {
  ar.id(stack.value, IdSpace::Value);
  fields(ar, stack.dim, stack.parts);
}

template <class Ar>
void archive(Ar& ar, AttentionSpec& s) {
  fields(ar, s.source);
  ar.id(s.anchor, IdSpace::Node);
  fields(ar, s.op, s.dtype);
  for (ValueId* id : {&s.q, &s.k, &s.v, &s.bias}) ar.id(*id, IdSpace::Value);
  fields(ar, s.causal, s.scale);
  for (ValueId* id : {&s.out, &s.logsumexp}) ar.id(*id, IdSpace::Value);
  archive_ids(ar, s.extra_outputs, IdSpace::Value);
  for (ValueId* id : {&s.grad_out, &s.grad_q, &s.grad_k, &s.grad_v}) ar.id(*id, IdSpace::Value);
  fields(ar, s.stack);
}

template <class Ar>
void archive(Ar& ar, ConvBatchNorm& bn) {
  for (ValueId* id : {&bn.weight, &bn.bias, &bn.mean, &bn.var}) ar.id(*id, IdSpace::Value);
  fields(ar, bn.eps);
}

template <class Ar>
void archive(Ar& ar, ConvSpec& s) {
  fields(ar, s.direction);
  ar.id(s.conv, IdSpace::Node);
  fields(ar, s.dtype, s.spatial_dims, s.stride, s.padding, s.dilation, s.groups);
  for (ValueId* id : {&s.input, &s.weight, &s.bias}) ar.id(*id, IdSpace::Value);
  fields(ar, s.batch_norm, s.bn);
  ar.id(s.residual, IdSpace::Value);
  fields(ar, s.relu);
  for (ValueId* id : {&s.output, &s.grad_output, &s.grad_input, &s.grad_weight, &s.grad_bias})
    ar.id(*id, IdSpace::Value);
}

MB_ARCHIVE_BOTH_WAYS(LaunchTuning);
MB_ARCHIVE_BOTH_WAYS(TensorArg);
MB_ARCHIVE_BOTH_WAYS(PwScalar);
MB_ARCHIVE_BOTH_WAYS(PwInstr);
MB_ARCHIVE_BOTH_WAYS(PwGuard);
MB_ARCHIVE_BOTH_WAYS(PwOutput);
MB_ARCHIVE_BOTH_WAYS(PointwiseSpec);
MB_ARCHIVE_BOTH_WAYS(ReductionSpec);
MB_ARCHIVE_BOTH_WAYS(NormSpec);
MB_ARCHIVE_BOTH_WAYS(CastPair);
MB_ARCHIVE_BOTH_WAYS(CastGroupSpec);
MB_ARCHIVE_BOTH_WAYS(PoolSpec);
MB_ARCHIVE_BOTH_WAYS(TransposeSpec);
MB_ARCHIVE_BOTH_WAYS(MatmulOperand);
MB_ARCHIVE_BOTH_WAYS(MatmulSpec);
MB_ARCHIVE_BOTH_WAYS(StackView);
MB_ARCHIVE_BOTH_WAYS(StackedGradient);
MB_ARCHIVE_BOTH_WAYS(GradientStack);
MB_ARCHIVE_BOTH_WAYS(AttentionSpec);
MB_ARCHIVE_BOTH_WAYS(ConvBatchNorm);
MB_ARCHIVE_BOTH_WAYS(ConvSpec);

}  // namespace mybackend
