"""Files that other processes may read while this one writes them."""

from __future__ import annotations

import os
from pathlib import Path


def write_atomically(path: str | Path, data: bytes, folder_mode: int = 0o777) -> OSError | None:
    """Writes ``data`` to ``path`` through a temporary file and a rename, so
    that a reader (another process sharing the cache) sees the whole file or
    none; makes the folder if needed. Returns the error instead of raising:
    for a cache, a file not written only costs the next process its work."""
    path = Path(path)
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(mode=folder_mode, parents=True, exist_ok=True)
        temporary.write_bytes(data)
        os.replace(temporary, path)
    except OSError as error:
        return error
    return None
