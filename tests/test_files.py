"""The one atomic writer (halluprobe.files.write_atomic)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from halluprobe.errors import InputError
from halluprobe.files import write_atomic


def test_write_atomic_replaces_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "out.json"
    assert write_atomic(target, "first\n") == target
    write_atomic(target, b"second\xc3\xa9\n")
    assert target.read_bytes() == "secondé\n".encode()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_failed_rename_keeps_the_old_file_and_removes_the_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.json"
    target.write_text("old\n")

    def fail(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(InputError, match=r"out.json: cannot write: No space left on device$"):
        write_atomic(target, "new\n")
    assert target.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]
