"""mybackend's custom operators and the torch-level rewrites that bring
them into a graph:

- ``cross_entropy``: ``mybackend::cross_entropy_forward`` / ``_backward``
  (Note [Fused cross-entropy]),
- ``batch_norm``: ``mybackend::batch_norm_stats`` / ``_backward_reduce``,
  reached through the decomposition table (Note [Training batch norm]),
- ``group_norm``: ``mybackend::group_norm_stats``, reached through the
  decomposition table (Note [Group-norm statistics]),
- ``interpolate``: ``mybackend::interpolate``, ``F.interpolate`` kept whole
  through aot_autograd (Note [Resampling kept whole]),
- ``attention_masks``: SDPA masks made readable by fused attention kernels
  (Note [Attention masks with a broadcast last dim]).

Importing a module registers its operators with torch.library.
"""
