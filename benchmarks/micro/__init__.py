"""Kernel micro-benchmarks, each reported as a fraction of its roofline.

``python -m benchmarks.micro`` runs every case in ``cases.CASES`` for eager,
inductor and mybackend on the GPU (it skips without one); ``roofline`` holds the
ceilings and the floor arithmetic.
"""
