"""No test reads a clock or sets its own time limit (Note [Tests assert
behaviour, never time] in tests/testing.py): speed is the benchmarks' to
prove, and a test that fails because CI was busy proves nothing."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# Clock reads, and literal time limits on waits and subprocesses.
_CLOCK = re.compile(
    r"time\.(perf_counter|perf_counter_ns|monotonic|monotonic_ns|time)\(|"
    r"\btimeout\s*=\s*[0-9]"
)


def offenders(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        if path.name == "testing.py" and path.parent == root:
            continue  # the one hang guard lives there
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if _CLOCK.search(line):
                found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    return found


def test_tests_read_no_clock_and_set_no_time_limit() -> None:
    found = offenders(TESTS)
    assert not found, "use tests.testing.wait_until / HANG_GUARD_S instead:\n" + "\n".join(found)


def test_the_scan_finds_a_clock(tmp_path: Path) -> None:
    clock, limit = "time." + "perf_counter()", "timeout" + "=60"  # not matched here
    (tmp_path / "test_x.py").write_text(f"start = {clock}\nrun(cmd, {limit})\nok = 1\n")
    assert [line.split(":")[1] for line in offenders(tmp_path)] == ["1", "2"]
