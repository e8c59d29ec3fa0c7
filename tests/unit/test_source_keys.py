"""torch's and Triton's source keys kept on disk (Note [Source keys kept] in
mybackend/source_keys.py): a later process hands torch the keys an earlier
one computed, and only while the packages' files are unchanged."""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path

import pytest
import torch
from torch._inductor import codecache

from mybackend import source_keys
from mybackend.compile_times import counts
from mybackend.source_keys import (
    TORCH_KEY_LOADED,
    TORCH_KEY_STORED,
    TRITON_KEY_LOADED,
    TRITON_KEY_STORED,
)
from tests.testing import run_in_fresh_python

# A child process: primes the keys from TORCHINDUCTOR_CACHE_DIR, then prints
# the keys torch now holds, the keys computed from the sources, and what
# prime() did.
CHILD = r"""
import json
from torch._inductor import codecache
from torch._inductor.runtime import triton_compat
from mybackend import compile_times, source_keys

source_keys.prime()
held = codecache.torch_key().hex()
system = codecache.CacheBase.get_system()
codecache.torch_key.clear()
codecache.CacheBase.get_system.cache_clear()
result = {
    "held": held,
    "computed": codecache.torch_key().hex(),
    "system": system,
    "system_computed": codecache.CacheBase.get_system(),
    "has_triton": bool(triton_compat.HAS_TRITON),
    "counts": compile_times.counts(),
}
print("RESULT " + json.dumps(result))
"""


def run_child(cache: Path) -> dict[str, object]:
    done = run_in_fresh_python(CHILD, env={**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(cache)})
    assert done.returncode == 0, done.stderr[-4000:]
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))  # type: ignore[no-any-return]


def test_a_second_process_reads_the_keys_computed_in_the_first(tmp_path: Path) -> None:
    first = run_child(tmp_path)
    triton = first["has_triton"]
    assert first["counts"] == {TORCH_KEY_STORED: 1, **({TRITON_KEY_STORED: 1} if triton else {})}
    assert first["held"] == first["computed"]
    second = run_child(tmp_path)
    assert second["counts"] == {TORCH_KEY_LOADED: 1, **({TRITON_KEY_LOADED: 1} if triton else {})}
    assert second["held"] == second["computed"] == first["computed"]  # torch's own value
    # Triton's key reaches torch's system info, as torch would compute it.
    assert second["system"] == second["system_computed"] == first["system_computed"]


def make_tree(root: Path) -> None:
    (root / "nn").mkdir(parents=True)
    (root / "__init__.py").write_text("version = 1\n")
    (root / "nn" / "functional.py").write_text("def relu(x): ...\n")
    (root / "_C.so").write_bytes(b"\0" * 16)
    (root / "README.txt").write_text("not a module\n")


def test_the_fingerprint_follows_module_files_only(tmp_path: Path) -> None:
    make_tree(tmp_path)
    base = source_keys.fingerprint(str(tmp_path), "1.0")
    assert source_keys.fingerprint(str(tmp_path), "1.0") == base
    assert source_keys.fingerprint(str(tmp_path), "1.1") != base  # another version
    (tmp_path / "README.txt").write_text("edited\n")  # not a module: no change
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.py").write_text("cached\n")
    assert source_keys.fingerprint(str(tmp_path), "1.0") == base
    module = tmp_path / "nn" / "functional.py"
    module.write_text("def relu(x): return x\n")  # an edit changes the size
    edited = source_keys.fingerprint(str(tmp_path), "1.0")
    assert edited != base
    stat = module.stat()
    os.utime(module, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # same size, touched
    assert source_keys.fingerprint(str(tmp_path), "1.0") not in (base, edited)
    (tmp_path / "_C.so").write_bytes(b"\1" * 17)  # an extension module counts too
    assert source_keys.fingerprint(str(tmp_path), "1.0") != edited


def _walked_fingerprint(root: str, version: str) -> str:
    """The fingerprint as its first version computed it, with os.walk: keys
    stored then must still be found."""
    hasher = hashlib.sha256(f"{version}|{root}".encode())
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(source_keys._MODULE_SUFFIXES):
                path = os.path.join(dirpath, name)
                stat = os.stat(path)
                relative = os.path.relpath(path, root)
                hasher.update(f"{relative}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    return hasher.hexdigest()


def test_the_fingerprint_is_the_walked_one(tmp_path: Path) -> None:
    make_tree(tmp_path)
    (tmp_path / "nn" / "sub").mkdir()
    (tmp_path / "nn" / "sub" / "a.py").write_text("a = 1\n")
    (tmp_path / "linked").symlink_to(tmp_path / "nn")  # a linked folder is not walked
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.py").write_text("cached\n")
    assert source_keys.fingerprint(str(tmp_path), "1.0") == _walked_fingerprint(
        str(tmp_path), "1.0"
    )
    torch_root = os.path.dirname(torch.__file__)
    assert source_keys.fingerprint(torch_root, "v") == _walked_fingerprint(torch_root, "v")


@pytest.fixture
def fake_torch_key(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """codecache.torch_key as a one-slot cache over a known digest (so no
    test reads torch's sources here), no Triton key to prime; returns the
    computation count."""
    computed = [0]

    def compute() -> bytes:
        computed[0] += 1
        return bytes(range(32))

    monkeypatch.setattr(codecache, "torch_key", codecache.torch_key_cache(compute))
    monkeypatch.setattr(source_keys, "_primed", False)
    monkeypatch.setattr(source_keys, "torch_fingerprint", lambda: "f" * 64)
    monkeypatch.setattr(source_keys, "_prime_triton_key", lambda folder: None)
    return computed


def torch_key_file(folder: Path) -> Path:
    return source_keys.key_file("torch", "f" * 64, str(folder))


def test_a_stored_value_that_is_no_digest_is_ignored_and_replaced(
    tmp_path: Path, fake_torch_key: list[int]
) -> None:
    path = torch_key_file(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"truncated")
    before = counts().get(TORCH_KEY_STORED, 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        source_keys.prime(str(tmp_path))
    assert any("not the form of its key" in str(w.message) for w in caught)
    assert fake_torch_key[0] == 1  # computed
    assert counts().get(TORCH_KEY_STORED, 0) == before + 1
    assert path.read_bytes() == bytes(range(32))  # stored anew


def test_prime_runs_once_a_process(tmp_path: Path, fake_torch_key: list[int]) -> None:
    source_keys.prime(str(tmp_path))
    torch_key_file(tmp_path).unlink()
    source_keys.prime(str(tmp_path))
    assert fake_torch_key[0] == 1
    assert not torch_key_file(tmp_path).exists()


def test_a_key_torch_already_holds_is_kept(tmp_path: Path, fake_torch_key: list[int]) -> None:
    path = torch_key_file(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\xff" * 32)
    held = codecache.torch_key()  # torch computed it before mybackend's first compile
    before = counts().get(TORCH_KEY_LOADED, 0)
    source_keys.prime(str(tmp_path))
    assert codecache.torch_key() == held
    assert counts().get(TORCH_KEY_LOADED, 0) == before
