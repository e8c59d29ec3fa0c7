"""torch's and Triton's source keys, kept on disk for warm starts (option
``warm_start``).

Note [Source keys kept]
Every AOTAutogradCache key holds two hashes of installed code that torch
computes once per process by reading it all: ``torch_key()``, a SHA-256
over the source of every module of torch (about 2,100 files), and, inside
``CacheBase.get_system()``, Triton's ``triton_key()`` (its compiler,
backend and language sources and the whole ``libtriton`` library). A warm
start pays both before it can look anything up: on the 2-core development
machine 0.7 s (2.6 s with a cold file cache) and 0.36 s, where issue 35
allows a warm first call half a second beyond dynamo's trace.

So mybackend stores each value the first time it is computed, keyed by a
fingerprint that is cheap to take and changes whenever the code could: the
package's version (torch's git revision too), the folder it is installed
in, and the path, size and modification time of every module file under it
(``os.stat`` of each, about 40 ms for torch). A later process with the same
fingerprint gives torch the stored value:

- torch's key through the setter of its one-slot cache (``torch_key.set``,
  codecache.py's ``torch_key_cache``);
- Triton's key by computing ``CacheBase.get_system()`` itself, with
  ``triton_compat.triton_key`` (the name get_system imports when it runs)
  answering the stored value for that one call; get_system keeps its result
  for the process (``functools.cache``).

The values are the ones torch and Triton would compute, so cache entries
written by Inductor or by processes without mybackend match as before. An
edited module changes its size or modification time and so the
fingerprint: the key is computed again and stored anew. A stored value that
does not have the form of its key is ignored, with one warning. Where torch
already computed a key in the process, or its internals are not the ones
named above (another torch version), nothing is given and torch computes
as it would have.

The files live in torch's cache folder (``TORCHINDUCTOR_CACHE_DIR``), beside
the AOTAutogradCache entries they serve, written by atomic renames.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch._inductor import codecache
from torch._inductor.runtime.runtime_utils import cache_dir  # type: ignore[attr-defined]

from mybackend._files import write_atomically
from mybackend._logging import warn_once
from mybackend.compile_times import count

TORCH_KEY_STORED = "torch source key: computed and stored"
TORCH_KEY_LOADED = "torch source key: read from the cache"
TRITON_KEY_STORED = "Triton source key: computed and stored"
TRITON_KEY_LOADED = "Triton source key: read from the cache"
# What the keys read: module sources and extensions, and torch_key's two
# extra files (a .cpp and a linker script).
_MODULE_SUFFIXES = (".py", ".so", ".pyd", ".cpp", ".ld")
_SHA256_BYTES = hashlib.sha256().digest_size
_primed = False
_lock = threading.Lock()


def fingerprint(root: str, version: str) -> str:
    """What identifies the code under ``root`` without reading it (Note
    [Source keys kept])."""
    hasher = hashlib.sha256()
    hasher.update(f"{version}|{root}".encode())
    _hash_modules(root, "", hasher)
    return hasher.hexdigest()


def _hash_modules(folder: str, relative: str, hasher: Any) -> None:
    """Hashes each module file's relative path, size and mtime under
    ``folder``: files in name order, then each subfolder (not __pycache__,
    not through a link) in name order, as a top-down ``os.walk`` visits them.
    ``os.scandir`` with string prefixes: the walk and ``relpath`` of every
    file took 0.050 s of a warm start's 0.25 s for torch's 2,158 files, this
    0.032 s."""
    try:
        entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    except OSError:  # a folder that cannot be listed, as os.walk skips it
        return
    subfolders = []
    for entry in entries:
        try:
            is_folder = entry.is_dir()
        except OSError:
            is_folder = False
        if is_folder:
            if entry.name != "__pycache__" and not entry.is_symlink():
                subfolders.append(entry)
            continue
        if not entry.name.endswith(_MODULE_SUFFIXES):
            continue
        path = relative + entry.name
        try:
            stat = entry.stat()
        except OSError:  # gone since the listing: a package being changed
            hasher.update(f"{path}|missing\n".encode())
            continue
        hasher.update(f"{path}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    for entry in subfolders:
        _hash_modules(entry.path, relative + entry.name + os.sep, hasher)


def torch_fingerprint() -> str:
    version = f"{torch.__version__}|{torch.version.git_version}"
    return fingerprint(os.path.dirname(torch.__file__), version)


def key_file(kind: str, fingerprint_value: str, folder: str | None = None) -> Path:
    """Where the key of ``kind`` ("torch", "triton") with this fingerprint is stored."""
    return Path(folder or cache_dir()) / "mybackend_source_keys" / f"{kind}-{fingerprint_value}"


def prime(folder: str | None = None) -> None:
    """Gives torch its source keys from the stored values, or computes and
    stores them; once per process (Note [Source keys kept]). Compiles on
    other threads wait for the first: the Triton key's stand-in must be
    gone before another thread could take it for the real function."""
    global _primed
    with _lock:
        if _primed:
            return
        _primed = True
        try:
            _prime_torch_key(folder)
            _prime_triton_key(folder)
        except OSError:  # an unreadable package folder: torch computes its keys itself
            return


def _prime_torch_key(folder: str | None) -> None:
    path = key_file("torch", torch_fingerprint(), folder)
    torch_key = codecache.torch_key
    stored = _read(path, lambda value: len(value) == _SHA256_BYTES)
    if stored is not None:
        setter = getattr(torch_key, "set", None)  # absent where a test replaced torch_key
        if setter is None:
            return
        try:
            setter(stored)
        except AssertionError:  # torch computed it already in this process
            return
        count(TORCH_KEY_LOADED)
        return
    value = torch_key()
    if isinstance(value, bytes) and len(value) == _SHA256_BYTES:
        write_atomically(path, value)
        count(TORCH_KEY_STORED)


def _prime_triton_key(folder: str | None) -> None:
    compat, get_system = _triton_hooks()
    if compat is None or get_system is None:
        return
    if get_system.cache_info().currsize:  # torch computed its system info already
        return
    try:
        import triton
    except ImportError:
        return
    version = str(triton.__version__)
    path = key_file("triton", fingerprint(os.path.dirname(triton.__file__), version), folder)
    stored = _read(path, lambda value: value.startswith(version.encode()))
    if stored is None:
        value = compat.triton_key()
        if isinstance(value, str) and value.startswith(version):
            write_atomically(path, value.encode())
            count(TRITON_KEY_STORED)
        return
    text, real = stored.decode(), compat.triton_key
    compat.triton_key = lambda: text
    try:
        get_system()
    finally:
        compat.triton_key = real
    count(TRITON_KEY_LOADED)


def _triton_hooks() -> tuple[Any, Any]:
    """torch's triton_compat module and CacheBase.get_system, or Nones where
    this torch has no Triton or names them otherwise."""
    try:
        from torch._inductor.runtime import triton_compat
    except ImportError:
        return None, None
    get_system = getattr(getattr(codecache, "CacheBase", None), "get_system", None)
    if not getattr(triton_compat, "HAS_TRITON", False) or not callable(
        getattr(triton_compat, "triton_key", None)
    ):
        return None, None
    if not callable(getattr(get_system, "cache_info", None)):
        return None, None
    return triton_compat, get_system


def _read(path: Path, valid: Callable[[bytes], bool]) -> bytes | None:
    try:
        value = path.read_bytes()
    except OSError:
        return None
    if not valid(value):
        warn_once(
            f"source-key:{path.name.split('-')[0]}",
            f"mybackend: ignored a stored source key ({path}: {len(value)} bytes, not the form"
            " of its key); it is computed again",
        )
        return None
    return value
