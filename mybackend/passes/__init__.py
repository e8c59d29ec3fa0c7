"""Graph passes: the FX rewrites between dynamo and lowering.

``pipeline.py`` lists them in the order they run, in three lists (before
aot_autograd, on the joint graph, on each compiled graph); ``driver.py``
runs a list (Note [Passes as data]); every other module holds one rewrite
or the helpers rewrites share (``fake_prop``: FakeTensor propagation,
``layout_contracts``: the strides ops accept, ``elementwise``: which nodes
are elementwise). ``common_subexpressions`` is the min-cut partitioner's
own first step, run by aot.py right before it.
"""
