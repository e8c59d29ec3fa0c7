"""Note [Graph modules made lazily]: rewritten graphs get modules whose code
is generated when first needed, under dynamo's lazy-module switch."""

from __future__ import annotations

import torch
from torch.fx._lazy_graph_module import _LazyGraphModule, _use_lazy_graph_module

from mybackend.lowering.graph_modules import new_graph_module


def _traced() -> torch.fx.GraphModule:
    return torch.fx.symbolic_trace(lambda x: torch.relu(x) * 2 + 1)


def test_under_dynamos_switch_the_module_generates_code_when_first_run() -> None:
    root = _traced()
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(root.graph, {}))
    with _use_lazy_graph_module(True):
        module = new_graph_module(root, graph)
    assert isinstance(module, _LazyGraphModule)
    assert module._needs_recompile()  # no Python code generated yet
    x = torch.randn(5)
    torch.testing.assert_close(module(x), torch.relu(x) * 2 + 1)
    assert not module._needs_recompile()
    # A later in-place rewrite and recompile is picked up at the next call.
    for node in module.graph.nodes:
        if node.target is torch.relu:
            node.target = torch.tanh
    module.recompile()
    torch.testing.assert_close(module(x), torch.tanh(x) * 2 + 1)


def test_outside_dynamo_it_is_a_plain_graph_module() -> None:
    root = _traced()
    module = new_graph_module(root, root.graph)
    assert not isinstance(module, _LazyGraphModule)
    assert "relu" in module.code
