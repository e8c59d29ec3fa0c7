"""A CUDA compile simulated on the CPU: the rewrites mybackend gates on the
device, opened to CPU graphs.

Note [A CUDA compile on the CPU]
Several of mybackend's rewrites only touch CUDA graphs, because the kernels
they lead to are CUDA kernels: the decomposition table (CUDA's, with the
training batch norm's custom ops), the fused cross-entropy and the resampling
ops before aot_autograd, the channels-last plan and the matrix-product
padding of the joint graph. A tool that asks, without a GPU, what a CUDA
compile does (``compile_breakdown --as-cuda``: how long it takes;
``aten_survey``: what it leaves to ATen) must open those gates to CPU graphs
as well, or it reports a compile the GPU machine never runs (a survey saw
the cross-entropy's ``gather`` and the batch norm's ATen ops in every
training graph). The custom ops all have CPU implementations, so the model
still runs on the CPU inside the block.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from unittest import mock

DEVICES = ("cpu", "cuda")


@contextlib.contextmanager
def as_cuda() -> Iterator[None]:
    """CPU graphs traced and rewritten as CUDA graphs are (Note [A CUDA
    compile on the CPU])."""
    import mybackend.aot as aot
    import mybackend.ops.batch_norm as batch_norm
    import mybackend.ops.cross_entropy as cross_entropy
    import mybackend.ops.interpolate as interpolate
    from mybackend.decompositions import decomposition_table
    from mybackend.passes import layout, matmul_padding, pipeline

    with contextlib.ExitStack() as patches:
        for module, name, value in (
            # CUDA's table, whatever the example inputs' device
            (aot, "decomposition_table", lambda *args, **kwargs: decomposition_table()),
            (batch_norm, "REWRITTEN_DEVICES", DEVICES),
            (cross_entropy, "REWRITTEN_DEVICES", DEVICES),
            (interpolate, "REWRITTEN_DEVICES", DEVICES),
            (
                pipeline,
                "plan_channels_last",
                functools.partial(layout.plan_channels_last, device_types=DEVICES),
            ),
            (
                pipeline,
                "pad_matmuls",
                functools.partial(matmul_padding.pad_matmuls, device_types=DEVICES),
            ),
        ):
            patches.enter_context(mock.patch.object(module, name, value))
        yield
