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

Note [Backward graphs recompiled lazily]
aot_autograd hands the backward compiler a plain module: it compiles the
backward on the first backward call, outside dynamo's lazy switch, and
deep-copies the partitioner's module there (generating its code once,
torch's cost). When a pass then rewrites that graph (autocast's casts,
batch-norm gradients, scatter-adds: most CUDA training graphs), the pass
driver's final ``recompile()`` generated all of it a second time, which
nothing reads unless the graph runs eagerly (a fallback, the eager floor, an
accuracy check, a dump): 0.1 s for T5-base's 4237-node backward graph
on the development machine. ``recompile_lazily`` makes such a module lazy in
place (the same object, so every holder of it sees the new code) and marks
its code stale; it is generated when the module is first run or its code
read. tests/unit/test_compile_work.py counts the code generations.
"""

from __future__ import annotations

import torch

try:  # private in torch 2.11; the plain constructor serves where it is gone
    from torch.fx._lazy_graph_module import _LazyGraphModule, _make_graph_module
except ImportError:  # pragma: no cover - depends on the torch release
    _LazyGraphModule = None  # type: ignore[assignment,misc]
    _make_graph_module = None


def new_graph_module(root: torch.nn.Module, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    """A module running ``graph`` with ``root``'s attributes (Note [Graph
    modules made lazily])."""
    if _make_graph_module is None:
        return torch.fx.GraphModule(root, graph)
    return _make_graph_module(root, graph)


def recompile_lazily(gm: torch.fx.GraphModule) -> None:
    """``gm.recompile()``, deferred until the code is needed (Note [Backward
    graphs recompiled lazily]). A plain GraphModule becomes lazy in place;
    a module of a subclass of its own, or a torch without lazy modules,
    recompiles now."""
    if _LazyGraphModule is not None and not isinstance(gm, _LazyGraphModule):
        bases = type(gm).__bases__
        # Each GraphModule instance has a class of its own (GraphModule.__new__),
        # on which recompile() installs its forward: so does the new one.
        if bases == (torch.fx.GraphModule,):

            class GraphModuleImpl(_LazyGraphModule):
                pass

            GraphModuleImpl.__name__ = type(gm).__name__
            gm.__class__ = GraphModuleImpl
    gm.recompile()


def keep_dynamo_metadata(original: torch.fx.GraphModule, rewritten: torch.fx.GraphModule) -> None:
    """Gives ``rewritten`` the dynamo metadata of ``original`` (Note
    [Dynamo's metadata on a rewritten graph]); nothing when the two differ
    in their placeholders, for aot_autograd then finds no static input
    rather than wrong ones."""
    old = list(original.graph.find_nodes(op="placeholder"))
    new = list(rewritten.graph.find_nodes(op="placeholder"))
    if [n.name for n in old] != [n.name for n in new]:
        return
    for before, after in zip(old, new, strict=True):
        if hasattr(before, "_dynamo_source"):
            after._dynamo_source = before._dynamo_source  # type: ignore[attr-defined]
    if hasattr(original, "_param_name_to_source"):
        rewritten._param_name_to_source = original._param_name_to_source
    for key, value in original.meta.items():
        rewritten.meta.setdefault(key, value)
