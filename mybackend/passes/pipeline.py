"""mybackend's graph passes, in the order they run: three lists run by
mybackend/passes/driver.py (Note [Passes as data]).

- ``BEFORE_AOT``: on dynamo's graph (torch-level calls), on a copy of it
  (Note [Recovery runs the user's program]), before aot_autograd traces it.
- ``ON_JOINT``: on a training graph's joint forward-backward graph, before
  the min-cut partitioner splits it: planned there, forward and backward
  agree on the strides of every tensor the forward saves.
- ``PER_GRAPH``: on each ATen graph the core compiles (inference, forward,
  backward), before lowering.

A new pass goes into its list as one line; its module holds the rewrite.
Each entry's name is its stage name in explain()'s compile times.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mybackend._logging import warn_once
from mybackend.distributed import fsdp2_in_use
from mybackend.ops.attention_masks import SDPA_TARGETS, rewrite_attention_masks
from mybackend.ops.causal_masks import rewrite_causal_masks
from mybackend.ops.cross_entropy import rewrite_cross_entropy
from mybackend.ops.interpolate import keep_resampling_whole
from mybackend.options import Options, register_pass_names
from mybackend.passes.batch_norm_gradients import copy_batch_norm_gradients
from mybackend.passes.conv_biases import peel_grouped_conv_biases
from mybackend.passes.driver import GraphPass, PassContext, always
from mybackend.passes.gathered_tables import gather_tables_in_final_layout
from mybackend.passes.hoist import hoist_parameter_work
from mybackend.passes.layout import plan_channels_last
from mybackend.passes.matmul_padding import pad_matmuls
from mybackend.passes.mutations import batch_input_mutations
from mybackend.passes.noop_copies import drop_empty_pads, drop_identity_copies
from mybackend.passes.patch_convolutions import patch_convolutions_as_products
from mybackend.passes.permuted_cats import write_permuted_cats
from mybackend.passes.scatter_adds import fold_scatter_adds
from mybackend.passes.slice_scatter_cats import scatters_into_zeros_as_cats
from mybackend.passes.softmax_views import softmaxes_before_views
from mybackend.passes.transposed_operands import copy_transposed_operands
from mybackend.passes.views_after_elementwise import move_elementwise_past_views
from mybackend.passes.widening_casts import cast_after_views, split_widening_casts

INFERENCE = frozenset({"inference"})


def _causal_masks(ctx: PassContext) -> int:
    return rewrite_causal_masks(ctx.gm, recompile=False)


def _attention_masks(ctx: PassContext) -> int:
    return rewrite_attention_masks(ctx.gm, recompile=False)


def _cross_entropy(ctx: PassContext) -> int:
    return rewrite_cross_entropy(ctx.gm, recompile=False)


def _resampling(ctx: PassContext) -> int:
    return keep_resampling_whole(ctx.gm, recompile=False)


def _channels_last(ctx: PassContext) -> int:
    # Note [Layout regions pay for their copies]: judged in inference graphs;
    # a joint graph plans every convolution, its backward's with it.
    every_region = ctx.options.channels_last_everywhere or ctx.kind not in INFERENCE
    ctx.gm, conversions = plan_channels_last(
        ctx.gm, ctx.inputs(), recompile=False, every_region=every_region
    )
    return conversions


def _patch_convolutions(ctx: PassContext) -> int:
    ctx.gm, rewritten = patch_convolutions_as_products(ctx.gm, ctx.inputs())
    return rewritten


def _pad_matmuls(ctx: PassContext) -> int:
    ctx.gm, padded = pad_matmuls(ctx.gm, ctx.inputs(), ctx.kind, recompile=False)
    return padded


def _input_mutations(ctx: PassContext) -> int:
    return batch_input_mutations(ctx.gm, recompile=False)


def _hoist(ctx: PassContext) -> int:
    """Moves constant work, and with the option parameter-only work, to a
    prepare graph (Note [Hoisted parameter work], Note [Constants are always
    hoisted]): the graph compiled gains the hoisted values as static inputs."""
    static = ctx.static_inputs if ctx.options.hoist_parameter_work else []
    if static and fsdp2_in_use():  # Note [Graphs under FSDP2]: refills no watch can see
        warn_once(
            "hoist-fsdp2",
            "mybackend: hoist_parameter_work is ignored while FSDP2 (fully_shard) shards "
            "modules: FSDP2 refills parameters in place, keeping their version counters, "
            "so hoisted values could not follow optimizer steps",
        )
        static = []
    plan = hoist_parameter_work(ctx.gm, ctx.inputs(), static)
    if plan is None:
        return 0
    ctx.hoist = plan
    ctx.gm, ctx.example_inputs = plan.main, plan.example_inputs
    ctx.static_inputs = [*ctx.static_inputs, *plan.hoisted_inputs]
    return len(plan.hoisted_inputs)


def _grouped_conv_biases(ctx: PassContext) -> int:
    return peel_grouped_conv_biases(ctx.gm, recompile=False)


def _empty_pads(ctx: PassContext) -> int:
    return drop_empty_pads(ctx.gm, recompile=False)


def _identity_copies(ctx: PassContext) -> int:
    return drop_identity_copies(ctx.gm, recompile=False)


def _batch_norm_gradients(ctx: PassContext) -> int:
    return copy_batch_norm_gradients(ctx.gm, recompile=False)


def _casts_after_views(ctx: PassContext) -> int:
    return cast_after_views(ctx.gm, recompile=False)


def _widening_casts(ctx: PassContext) -> int:
    return split_widening_casts(ctx.gm, recompile=False)


def _scatter_adds(ctx: PassContext) -> int:
    return fold_scatter_adds(ctx.gm, recompile=False)


def _slice_scatters(ctx: PassContext) -> int:
    return scatters_into_zeros_as_cats(ctx.gm, recompile=False)


def _gathered_tables(ctx: PassContext) -> int:
    return gather_tables_in_final_layout(ctx.gm, recompile=False)


def _permuted_cats(ctx: PassContext) -> int:
    return write_permuted_cats(ctx.gm, recompile=False)


def _softmax_views(ctx: PassContext) -> int:
    return softmaxes_before_views(ctx.gm, recompile=False)


def _views_after_elementwise(ctx: PassContext) -> int:
    return move_elementwise_past_views(ctx.gm, recompile=False)


def _transposed_operands(ctx: PassContext) -> int:
    return copy_transposed_operands(ctx.gm, recompile=False)


def _fused_cross_entropy(options: Options) -> bool:
    return options.fused_cross_entropy


def _channels_last_on(options: Options) -> bool:
    return options.channels_last


def _pad_matmuls_on(options: Options) -> bool:
    return options.pad_matmuls


def _generated_kernels(options: Options) -> bool:
    return options.generated_kernels


BEFORE_AOT: tuple[GraphPass, ...] = (
    # Note [Constant causal masks]
    GraphPass("causal_masks", always, _causal_masks, targets=SDPA_TARGETS),
    # Note [Attention masks with a broadcast last dim]
    GraphPass("attention_masks", always, _attention_masks, targets=SDPA_TARGETS),
    # Note [Fused cross-entropy]
    GraphPass("cross_entropy", _fused_cross_entropy, _cross_entropy, targets=(F.cross_entropy,)),
    # Note [Resampling kept whole]
    GraphPass("resampling", always, _resampling, targets=(F.interpolate,)),
)

ON_JOINT: tuple[GraphPass, ...] = (
    GraphPass("layout", _channels_last_on, _channels_last),  # Note [Channels-last planning]
    GraphPass("padding", _pad_matmuls_on, _pad_matmuls),  # Note [Aligned matrix products]
)

PER_GRAPH: tuple[GraphPass, ...] = (
    GraphPass("input_mutations", always, _input_mutations),  # Note [Batched input mutations]
    # Note [Pads that add nothing]
    GraphPass("empty_pads", always, _empty_pads, targets=(torch.ops.aten.constant_pad_nd.default,)),
    # Note [Clones that keep their layout]
    GraphPass(
        "identity_copies",
        always,
        _identity_copies,
        targets=(torch.ops.aten.clone.default, torch.ops.aten.expand.default),
    ),
    # Note [Patch convolutions as products]
    GraphPass(
        "patch_convolutions",
        always,
        _patch_convolutions,
        kinds=INFERENCE,
        targets=(torch.ops.aten.convolution.default,),
    ),
    GraphPass("padding", _pad_matmuls_on, _pad_matmuls),
    # A training graph's layout was planned on its joint graph.
    GraphPass("layout", _channels_last_on, _channels_last, kinds=INFERENCE),
    # Note [Grouped convolution biases]
    GraphPass(
        "grouped_conv_biases",
        always,
        _grouped_conv_biases,
        targets=(torch.ops.aten.convolution.default,),
    ),
    GraphPass("hoisting", always, _hoist, kinds=INFERENCE),  # Note [Hoisted parameter work]
    # Note [A ReLU gradient recomputed by its batch-norm sums]
    GraphPass("batch_norm_gradients", _generated_kernels, _batch_norm_gradients),
    # Note [Widening casts after views], Note [One widening cast per reader]
    GraphPass("casts_after_views", _generated_kernels, _casts_after_views),
    GraphPass("widening_casts", _generated_kernels, _widening_casts),
    GraphPass("scatter_adds", always, _scatter_adds),  # Note [Scatters into their addend]
    # Note [Slice scatters into zeros]
    GraphPass(
        "slice_scatters",
        always,
        _slice_scatters,
        targets=(torch.ops.aten.slice_scatter.default,),
    ),
    GraphPass("permuted_cats", always, _permuted_cats),  # Note [Permuted concatenations]
    # Note [Gathered tables in their final layout]
    GraphPass(
        "gathered_tables",
        always,
        _gathered_tables,
        targets=(torch.ops.aten.index.Tensor,),
    ),
    # Note [Transposed operands copied untransposed]
    GraphPass(
        "transposed_operands",
        _generated_kernels,
        _transposed_operands,
        targets=(torch.ops.aten.clone.default,),
    ),
    # Note [Softmaxes before their views]
    GraphPass(
        "softmax_views",
        _generated_kernels,
        _softmax_views,
        targets=(torch.ops.aten._softmax.default, torch.ops.aten._log_softmax.default),
    ),
    # Note [Elementwise ops past their views]
    GraphPass(
        "views_after_elementwise",
        _generated_kernels,
        _views_after_elementwise,
        targets=(torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default),
    ),
)

LISTS = (BEFORE_AOT, ON_JOINT, PER_GRAPH)  # in the order a graph meets them

# Every name a pass list gives a compile-time stage (compile_times.breakdown).
PASS_NAMES = frozenset(p.name for passes in LISTS for p in passes)
register_pass_names(PASS_NAMES)  # what the option disabled_passes accepts
