"""Importing the extension changes nothing in the process (issue 34): with
MYBACKEND_DEBUG_POINTWISE set it used to install SIGSEGV/SIGABRT handlers as
it loaded; its crash handlers now go in with its first trace, at a compile.
"""

from __future__ import annotations

import os

from tests.testing import run_in_fresh_python

CHILD = r"""
import ctypes, signal
libc = ctypes.CDLL(None)
libc.signal.restype = ctypes.c_void_p
libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]

def handler(signum):
    previous = libc.signal(signum, None)
    libc.signal(signum, previous)
    return previous

before = {s: handler(s) for s in (signal.SIGSEGV, signal.SIGABRT)}
import mybackend._C
after = {s: handler(s) for s in (signal.SIGSEGV, signal.SIGABRT)}
print("same" if before == after else f"changed {before} -> {after}")
"""


def test_importing_the_extension_installs_no_signal_handler() -> None:
    env = dict(os.environ, MYBACKEND_DEBUG_POINTWISE="1")
    result = run_in_fresh_python(CHILD, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "same", result.stdout
