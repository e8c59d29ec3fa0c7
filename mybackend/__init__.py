"""mybackend: a torch.compile backend with a C++/CUDA core.

Use it by name, no import needed::

    torch.compile(model, backend="mybackend")

The public API is what ``__all__`` lists; everything else is internal.
"""

from __future__ import annotations

import atexit

import torch  # noqa: F401  (loads libtorch before the extension needs it)

from mybackend import _C
from mybackend._logging import register_with_torch_logging as _register_logging
from mybackend.backend import register as _register
from mybackend.compiled import BackendFailure
from mybackend.debug.partition_map import PartitionMap
from mybackend.explain import ExplainReport, explain
from mybackend.options import Options

__all__ = [
    "BackendFailure",
    "ExplainReport",
    "Options",
    "PartitionMap",
    "cuda_enabled",
    "explain",
    "supported_ops",
]
__version__ = "0.1.0"


def supported_ops() -> list[tuple[str, str]]:
    """Every ATen overload the C++ core runs, with its op class, sorted by name."""
    return list(_C.supported_ops())


def cuda_enabled() -> bool:
    """True when the loaded extension was built with its CUDA kernels."""
    return bool(_C.cuda_enabled())


_register()
_register_logging()
# Note [Kernels compiled beside the caller]: no kernel compile may still run
# while the interpreter tears down the extension, the kernel cache and NVRTC.
atexit.register(_C.wait_for_background_compiles)
