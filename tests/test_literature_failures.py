"""`literature audit` that fails leaves nothing it created and keeps what was there.

Failures without a network (tests/_literature.py's file:// mirror): a pinned file the mirror
lacks (HTTP 404's twin), a file whose sha256 is not the pin, a closed port on 127.0.0.1
(offline), answers that are not the pinned questions (a failure after the run was imported).
"""

from __future__ import annotations

# ruff: noqa: F811  (toy_coco is a fixture imported from _literature, then requested by name)

import socket
from pathlib import Path

import pytest
from _literature import (
    POPE_COMMIT,
    POPE_REPO,
    literature_cache,  # noqa: F401 - fixture, used by every test below
    llava_entry,
    toy_coco,  # noqa: F401 - fixture
    write_registry,
)
from typer.testing import CliRunner

from halluprobe.cli import app
from halluprobe.errors import RuntimeFailure
from halluprobe.literature.audit import fetch_entry_files
from halluprobe.literature.registry import load_registry

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("literature_cache")


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


def _outside(tmp_path: Path) -> list[str]:
    """Everything under tmp_path but the mirror and the cache (which keeps verified downloads)."""
    return [p for p in _tree(tmp_path) if not p.startswith(("mirror", "cache"))]


def _audit(registry: Path, out: Path, *extra: str) -> tuple[int, str]:
    result = runner.invoke(app, ["literature", "audit", *extra, "--out", str(out), "--registry", str(registry), "--resamples", "20"])
    return result.exit_code, result.output


def test_a_last_file_missing_from_the_mirror_leaves_no_copy_of_the_first(tmp_path: Path, toy_coco: Path) -> None:
    entry, _ = llava_entry(toy_coco)
    (toy_coco / POPE_REPO / POPE_COMMIT / entry["labels"][-1]["path"]).unlink()  # the last of five files
    reg = write_registry(tmp_path, [entry])
    before = _outside(tmp_path)
    out = tmp_path / "new" / "audit"
    code, output = _audit(reg, out, "llava-toy")
    assert code == 1 and output.count("\n") == 1 and "coco_pope_popular.json: download failed" in output
    assert not (tmp_path / "new").exists()  # no --out, no parent it made, no answers copy in it
    assert _outside(tmp_path) == before  # nothing outside --out either
    # no cache folder for the failed file; the four verified ones stay cached
    fetched = [entry["answers"][0], entry["questions"], *entry["labels"][:-1]]
    assert sorted(p.name for p in (tmp_path / "cache" / "github").iterdir()) == sorted(f["sha256"] for f in fetched)

def test_a_digest_mismatch_in_a_users_out_folder_keeps_only_the_users_files(tmp_path: Path, toy_coco: Path) -> None:
    entry, _ = llava_entry(toy_coco)
    entry["labels"][-1]["sha256"] = "b" * 64  # the registry and the last file disagree
    reg = write_registry(tmp_path, [entry])
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("the user's\n")
    code, output = _audit(reg, out, "llava-toy")
    assert code == 2 and output.count("\n") == 1 and "sha256 mismatch" in output
    assert _tree(out) == ["notes.txt"] and (out / "notes.txt").read_text() == "the user's\n"


def test_offline_leaves_no_out_and_no_cache_folder(tmp_path: Path, toy_coco: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connection refused, as offline
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", f"http://127.0.0.1:{port}/")
    entry, _ = llava_entry(toy_coco)
    reg = write_registry(tmp_path, [entry])
    code, output = _audit(reg, tmp_path / "out", "llava-toy")
    assert code == 1 and output.count("\n") == 1 and "(offline?)" in output
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_answers_refused_after_import_leave_no_run_dir(tmp_path: Path, toy_coco: Path) -> None:
    entry, _ = llava_entry(toy_coco)
    drift = write_registry(tmp_path, [{**entry, "dataset": "coco", "version": None, "fingerprint": "0" * 64}])
    before = _outside(tmp_path)
    code, output = _audit(drift, tmp_path / "out", "llava-toy")
    assert code == 2 and "match no fingerprint the registry pins" in output
    assert not (tmp_path / "out").exists() and _outside(tmp_path) == before


def test_all_drops_only_the_failed_entry_and_keeps_the_others(tmp_path: Path, toy_coco: Path) -> None:
    good, _ = llava_entry(toy_coco)
    bad = {**good, "name": "llava-bad", "dataset": "coco", "version": None, "fingerprint": "0" * 64}
    reg = write_registry(tmp_path, [good, bad])
    out = tmp_path / "out"
    code, output = _audit(reg, out, "--all")
    assert code == 0, output
    assert "llava-bad: not audited: " in output and "llava-toy: audited" in output
    assert sorted(p.name for p in out.iterdir()) == ["literature.json", "literature.md", "llava-toy"]
    assert (out / "llava-toy" / "run" / "complete.json").is_file()


def test_a_changed_copy_in_out_is_refused_not_replaced(tmp_path: Path, toy_coco: Path) -> None:
    entry, _ = llava_entry(toy_coco)
    reg = write_registry(tmp_path, [entry])
    out = tmp_path / "out"
    assert _audit(reg, out, "llava-toy")[0] == 0
    copy = out / "llava-toy" / "files" / "labels" / "coco_pope_random.json"
    copy.write_text("my edits\n")
    before = _tree(out)
    code, output = _audit(reg, out, "llava-toy", "--overwrite")  # --overwrite: the user asked for it
    assert code == 0, output
    assert copy.read_bytes() == (toy_coco / POPE_REPO / POPE_COMMIT / "output/coco/coco_pope_random.json").read_bytes()
    copy.write_text("my edits\n")
    (out / "llava-toy" / "run").rename(tmp_path / "kept-run")  # so only the edited copy stands in the way
    for table in ("literature.md", "literature.json"):
        (out / table).rename(tmp_path / table)
    code, output = _audit(reg, out, "llava-toy")
    assert code == 2 and output.count("\n") == 1 and "differs from the pinned file" in output
    assert copy.read_text() == "my edits\n"
    assert _tree(out) == sorted(p for p in before if not p.startswith("llava-toy/run") and not p.startswith("literature."))


def test_fetch_entry_files_alone_removes_what_it_copied(tmp_path: Path, toy_coco: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Called without a record (library use), a copy that fails takes the earlier copies with it."""
    from halluprobe.benchmarks import download

    entry, _ = llava_entry(toy_coco)
    loaded = load_registry(write_registry(tmp_path, [entry])).entries[0]
    real = download.copy_pinned
    calls = []

    def disk_full_at_the_third(cached: Path, dest: Path, sha256: str, *, overwrite: bool) -> Path:
        calls.append(dest)
        if len(calls) == 3:
            raise RuntimeFailure("cannot write: No space left on device")
        return real(cached, dest, sha256, overwrite=overwrite)

    from halluprobe.literature import audit as literature_audit

    monkeypatch.setattr(literature_audit, "copy_pinned", disk_full_at_the_third)  # where fetch_entry_files calls it
    with pytest.raises(RuntimeFailure, match="No space left"):
        fetch_entry_files(loaded, tmp_path / "dest")
    assert len(calls) == 3 and not (tmp_path / "dest").exists()
