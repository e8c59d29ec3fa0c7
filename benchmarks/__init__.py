"""Benchmarks of mybackend against eager, Inductor and CUDA graphs.

Layout (one idea per file):

* ``models.py``    the model registry (full and tiny variants, random weights)
* ``backends.py``  benchmark backend names -> torch.compile keyword arguments
* ``scenarios.py`` inference and training rows; references for the accuracy check
* ``common.py``    timing, accuracy, compile counters, memory
* ``runner.py``    measuring every backend of a row in one process
* ``results.py``   result records and results.json
* ``report.py``    markdown tables (results.md); merging runs
* ``charts.py``    PNG charts
* ``cli.py``       ``python -m benchmarks``
* ``engine_sweep.py`` the op sweep of every engine on the GPU (docs/op-sweep.md)
* ``distributed.py`` DDP and FSDP2 training under torchrun (docs/distributed.md)
* ``zoo/``         the model zoo's builders, by family
* ``micro/``       kernel micro-benchmarks against the roofline
"""
