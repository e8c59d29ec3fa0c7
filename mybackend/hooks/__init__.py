"""Hooks the pipeline calls while it compiles and runs a graph, below aot.py
(the tools users call, explain() and mybackend/debug/, sit above it):

- ``dumps``: per-stage dumps (dump_dir / MYBACKEND_DUMP_DIR),
- ``reproducer``: writes standalone reproducers of compile failures,
- ``tracing``: TORCH_TRACE (tlparse) artifacts of each graph,
- ``accuracy``: accuracy_check, each partition against eager ATen,
- ``background``: background_compile, compiling on a worker thread.
"""
