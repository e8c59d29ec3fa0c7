"""The GraphBuilder calls that built one ``_C.Graph``, kept so another
process can build the same graph without lowering (Note [Warm start] in
mybackend/warm_start.py).

Note [Graph tapes]
``_C.Graph`` has no constructor from text or bytes; the only way to make one
is ``_C.GraphBuilder``. Lowering is deterministic in the builder calls it
makes, and the builder numbers values and nodes in call order, so the calls
themselves are a complete description of the graph: replaying them gives a
graph whose ``structural_hash()`` and ``to_text()`` equal the original's.
Every argument is a Python primitive, a list or a tagged tuple (see
mybackend/lowering/arguments.py and tensor_meta.py), so a tape pickles as
it is. Recording costs one tuple per call, against the FX walk, schema
lookups and FakeTensor reads lowering does per node.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from mybackend import _C

# One builder call: the method name and its positional arguments.
TapeCall = tuple[str, tuple[Any, ...]]


@dataclasses.dataclass
class GraphTape:
    """The builder calls of one graph, in order."""

    calls: list[TapeCall] = dataclasses.field(default_factory=list)

    def replay(self) -> Any:  # -> _C.Graph
        """Builds the recorded graph anew (the core verifies it as it compiles)."""
        builder = _C.GraphBuilder()
        for method, args in self.calls:
            getattr(builder, method)(*args)
        return builder.build()


class RecordingGraphBuilder:
    """A ``_C.GraphBuilder`` that records every call on a GraphTape."""

    def __init__(self) -> None:
        self._builder = _C.GraphBuilder()
        self.tape = GraphTape()

    def add_input(self, spec: tuple[Any, ...]) -> int:
        self.tape.calls.append(("add_input", (spec,)))
        return self._builder.add_input(spec)

    def add_node(self, *args: Any) -> list[int]:
        """``GraphBuilder.add_node(kind, op, args, outputs, name, source)``,
        recorded as called (positionally: a tape replays them as they are)."""
        self.tape.calls.append(("add_node", args))
        return self._builder.add_node(*args)

    def set_outputs(self, outputs: list[Any]) -> None:
        self.tape.calls.append(("set_outputs", (outputs,)))
        self._builder.set_outputs(outputs)

    def build(self) -> Any:  # -> _C.Graph
        return self._builder.build()


__all__ = ["GraphTape", "RecordingGraphBuilder", "TapeCall"]
