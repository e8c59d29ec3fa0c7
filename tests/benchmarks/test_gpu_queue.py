"""benchmarks/gpu_queue.py: steps spread over GPUs, never two on one GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.gpu_queue import pack, run_queue, step_folder

# Stands in for gpu_run.sh: records which GPU ran which step, and when.
FAKE_STEP = """\
set -e
name=$(echo "$@" | tr ' ' '-')
echo "start $(date +%s.%N) gpu=$CUDA_VISIBLE_DEVICES limit=$STEP_SECONDS" >"$OUT/$name.trace"
sleep 0.6
echo "end $(date +%s.%N)" >>"$OUT/$name.trace"
"""


def _spans(out: Path) -> dict[str, tuple[float, float, str]]:
    spans = {}
    for trace in out.glob("*.trace"):
        start, end = trace.read_text().splitlines()
        words = start.split()
        spans[trace.stem] = (float(words[1]), float(end.split()[1]), words[2])
    return spans


def test_steps_run_one_per_gpu(tmp_path: Path) -> None:
    script = tmp_path / "fake.sh"
    script.write_text(FAKE_STEP)
    steps = ["infer a", "infer b", "train a"]
    never = run_queue(steps, [0, 1], tmp_path, deadline_s=300, script=script)
    assert never == []
    spans = _spans(tmp_path)
    assert set(spans) == {"infer-a", "infer-b", "train-a"}
    assert {gpu for _, _, gpu in spans.values()} == {"gpu=0", "gpu=1"}
    # Two GPUs, three steps: the third starts only after one of the first two ended.
    first_end = min(spans["infer-a"][1], spans["infer-b"][1])
    assert spans["train-a"][0] >= first_end


def test_deadline_leaves_steps_unstarted(tmp_path: Path) -> None:
    script = tmp_path / "fake.sh"
    script.write_text(FAKE_STEP)
    # Under a minute left: nothing may start (a step needs time to be useful).
    assert run_queue(["micro"], [0], tmp_path, deadline_s=30, script=script) == ["micro"]


def test_step_folder_and_pack(tmp_path: Path) -> None:
    assert step_folder("infer resnet50 --batch 1") == "infer-resnet50"
    assert step_folder("tests") == "tests"
    work = tmp_path / "work"
    (work / "infer-mlp").mkdir(parents=True)
    (work / "infer-mlp" / "results.md").write_text("| x |")
    pack(work, tmp_path / "q.tgz")
    assert (tmp_path / "q.tgz").stat().st_size > 0


# A step that writes a report as gpu_run.sh's steps do.
REPORTING_STEP = """\
set -e
folder="$OUT/$(echo "$@" | tr ' ' '-')"
mkdir -p "$folder"
{
  echo "# Benchmark results"; echo "| summary |"
  echo "## All measurements"; echo "| model | ms |"; echo "|---|---|"; echo "| $2 | 1.5 |"
  echo "## Warnings"; echo "| w |"
} >"$folder/results.md"
"""


def test_finished_rows_are_printed_when_their_step_ends(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = tmp_path / "fake.sh"
    script.write_text(REPORTING_STEP)
    assert run_queue(["model m1", "model m2", "micro"], [0], tmp_path, 300, script) == []
    printed = capsys.readouterr().out
    assert "| m1 | 1.5 |" in printed and "| m2 | 1.5 |" in printed
    # Each printed before the next step starts; only the measurement table.
    assert printed.index("| m1 | 1.5 |") < printed.index("model m2 (limit")
    assert "| summary |" not in printed and "| w |" not in printed
