"""New graph modules for rewritten graphs, without an eager code generation.

Note [Graph modules made lazily]
``torch.fx.GraphModule(root, graph)`` generates the module's Python code as
it is built: 0.1 s for ResNet-50's 3000-node joint graph on the development
machine, paid by the layout plan and by each of the three matrix-product
paddings (joint, forward, backward) even when the module is never run (the
min-cut partitioner and the lowering walk nodes, not code). Dynamo compiles
with torch's lazy graph modules switched on (``torch._dynamo.config.
use_lazy_graph_module``): a module made through torch's own factory then
generates its code when first run or read, so a rewrite's module costs
nothing until something needs its code. Outside a dynamo compile, and in a
torch without the factory, this is the plain constructor.
"""

from __future__ import annotations

import torch

try:  # private in torch 2.11; the plain constructor serves where it is gone
    from torch.fx._lazy_graph_module import _make_graph_module
except ImportError:  # pragma: no cover - depends on the torch release
    _make_graph_module = None


def new_graph_module(root: torch.nn.Module, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    """A module running ``graph`` with ``root``'s attributes (Note [Graph
    modules made lazily])."""
    if _make_graph_module is None:
        return torch.fx.GraphModule(root, graph)
    return _make_graph_module(root, graph)
