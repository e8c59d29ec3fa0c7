"""Stage 8b (libs): the cuDNN the extension links is the one torch loads."""

import pytest
import torch

import mybackend
from mybackend import _C


def test_cudnn_version_is_none_or_torchs() -> None:
    version = _C.cudnn_version()
    if not mybackend.cuda_enabled():
        assert version is None
        return
    if version is None:
        pytest.skip("built without the cuDNN frontend headers (cmake/cudnn.cmake)")
    # Note [Which cuDNN]: one library in the process, so both report the same.
    assert version == torch.backends.cudnn.version()
    assert version >= 90000
