"""benchmarks/ab_env.py: one process compiles a model once per setting of an
environment knob and times each in turn."""

from __future__ import annotations

import argparse
import os

import pytest

from benchmarks import ab_env


def test_the_variable_is_set_inside_and_restored_after(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MYBACKEND_AB_PROBE", raising=False)
    with ab_env.environment("MYBACKEND_AB_PROBE", "0"):
        assert os.environ["MYBACKEND_AB_PROBE"] == "0"
    assert "MYBACKEND_AB_PROBE" not in os.environ
    monkeypatch.setenv("MYBACKEND_AB_PROBE", "keep")
    with ab_env.environment("MYBACKEND_AB_PROBE", "1"):
        assert os.environ["MYBACKEND_AB_PROBE"] == "1"
    assert os.environ["MYBACKEND_AB_PROBE"] == "keep"


@pytest.mark.parametrize("text", ["MYBACKEND_X=1", "MYBACKEND_X", "=1,0", "MYBACKEND_X=1,"])
def test_an_env_argument_names_two_settings_or_more(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        ab_env.parse_env(text)
    assert ab_env.parse_env("MYBACKEND_X=1,0,2") == ("MYBACKEND_X", ["1", "0", "2"])


def test_each_setting_is_compiled_under_its_value(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: list[str | None] = []  # the knob when each backend is made, before its compile
    resolve = ab_env.resolve

    def recording(backend):  # type: ignore[no-untyped-def]
        seen.append(os.environ.get("MYBACKEND_VIEW_REPLAY"))
        return resolve(backend)

    monkeypatch.delenv("MYBACKEND_VIEW_REPLAY", raising=False)
    monkeypatch.setattr(ab_env, "resolve", recording)
    argv = ["--models", "mlp", "--tiny", "--device", "cpu", "--env", "MYBACKEND_VIEW_REPLAY=1,0"]
    assert ab_env.main([*argv, "--rounds", "2", "--steps", "2", "--blocks", "1"]) == 0
    out = capsys.readouterr().out
    order = [line.split(":")[0] for line in out.splitlines() if line.startswith("mlp MYBACKEND")]
    assert order == ["mlp MYBACKEND_VIEW_REPLAY=1", "mlp MYBACKEND_VIEW_REPLAY=0"] * 2
    assert "| mlp | MYBACKEND_VIEW_REPLAY=0 |" in out
    assert seen == ["1", "0", "1", "0"]
    assert "MYBACKEND_VIEW_REPLAY" not in os.environ
