"""mybackend/_files.py: cache files written whole or not at all."""

from __future__ import annotations

from pathlib import Path

from mybackend._files import write_atomically


def test_a_file_is_written_whole_in_a_new_folder(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "entry"
    assert write_atomically(path, b"first") is None
    assert write_atomically(path, b"second") is None  # replaced
    assert path.read_bytes() == b"second"
    assert [p.name for p in path.parent.iterdir()] == ["entry"]  # no temporary left


def test_a_folder_that_cannot_be_made_is_an_error_returned(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("not a folder")
    error = write_atomically(tmp_path / "file" / "entry", b"data")
    assert isinstance(error, OSError)
