"""`literature` under hostile use (issue 32): an earlier audit is never replaced without
--overwrite, a run that audits nothing writes no table, resamples are capped (and 0 works), a
mirror variable may be a plain folder, offline names the variable, `list` shows the source."""

from __future__ import annotations

# ruff: noqa: F811  (toy_coco is a fixture imported from _literature, then requested by name)

import json
import socket
from pathlib import Path

import pytest
from _literature import (
    COMMIT,
    REPO,
    literature_cache,  # noqa: F401 - fixture, used by every test below
    llava_entry,
    toy_coco,  # noqa: F401 - fixture
    write_registry,
)
from typer.testing import CliRunner

from halluprobe.cli import app

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("literature_cache")


def _audit(registry: Path, out: Path, *extra: str, resamples: str = "20") -> tuple[int, str]:
    result = runner.invoke(app, ["literature", "audit", *extra, "--out", str(out), "--registry", str(registry), "--resamples", resamples])
    return result.exit_code, result.output


def _tables(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in ("literature.md", "literature.json")}


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connection refused, as offline
    return int(port)


def test_an_earlier_audit_is_not_replaced_without_overwrite(tmp_path: Path, toy_coco: Path) -> None:
    entry, _ = llava_entry(toy_coco)
    other = {**entry, "name": "llava-other"}
    reg = write_registry(tmp_path, [entry, other])
    out = tmp_path / "out"
    assert _audit(reg, out, "llava-toy")[0] == 0
    before = _tables(out)
    # another entry into the same folder: the tables would be replaced; refused before any fetch
    code, output = _audit(reg, out, "llava-other")
    assert code == 2 and output.count("\n") == 1 and "literature.md: exists" in output and "--overwrite" in output
    assert _tables(out) == before and not (out / "llava-other").exists()
    # a user's own literature.json alone (no earlier audit) is refused too
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "literature.json").write_text('{"mine": true}\n')
    code, output = _audit(reg, mine, "llava-toy")
    assert code == 2 and "literature.json: exists" in output
    assert [p.name for p in mine.iterdir()] == ["literature.json"]
    # a folder, or a dangling link, where a table goes: refused even with --overwrite
    odd = tmp_path / "odd"
    (odd / "literature.md").mkdir(parents=True)
    code, output = _audit(reg, odd, "llava-toy", "--overwrite")
    assert code == 2 and output.count("\n") == 1 and "a folder stands where this command writes a file" in output
    dangling = tmp_path / "dangling"
    dangling.mkdir()
    (dangling / "literature.json").symlink_to(tmp_path / "nowhere.json")
    code, output = _audit(reg, dangling, "llava-toy", "--overwrite")
    assert code == 2 and "symbolic link to nothing" in output and not (tmp_path / "nowhere.json").exists()


def test_all_offline_over_an_earlier_audit_fails_and_keeps_it(tmp_path: Path, toy_coco: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry, _ = llava_entry(toy_coco)
    reg = write_registry(tmp_path, [entry, {**entry, "name": "llava-other"}])
    out = tmp_path / "out"
    assert _audit(reg, out, "--all")[0] == 0
    before = _tables(out)
    code, output = _audit(reg, out, "--all")  # without --overwrite: refused up front
    assert code == 2 and "exists" in output and _tables(out) == before
    (tmp_path / "cache").rename(tmp_path / "old-cache")  # nothing cached: every fetch needs the network
    monkeypatch.delenv("HALLUPROBE_GITHUB_URL")
    monkeypatch.setattr("halluprobe.benchmarks.datasets.SourceFile.url", lambda self, mirror=None: f"http://127.0.0.1:{_closed_port()}/{self.path}")
    code, output = _audit(reg, out, "--all", "--overwrite")
    assert code == 1 and output.count("\n") == 1, output
    assert "no entry could be audited (2 tried)" in output and "was not written" in output
    assert "set HALLUPROBE_GITHUB_URL to a mirror" in output  # the variable that makes it work offline
    assert _tables(out) == before and (out / "llava-toy" / "run" / "complete.json").is_file()


def test_resamples_are_capped_and_zero_gives_no_ci(tmp_path: Path, toy_coco: Path) -> None:
    entry, _ = llava_entry(toy_coco)
    reg = write_registry(tmp_path, [entry])
    code, output = _audit(reg, tmp_path / "big", "llava-toy", resamples="1000000000")
    assert code == 2 and output.count("\n") == 1 and "--resamples 1000000000 is over the limit of 100,000" in output
    assert not (tmp_path / "big").exists()
    code, output = _audit(reg, tmp_path / "zero", "llava-toy", resamples="0")
    assert code == 0, output
    figure = json.loads((tmp_path / "zero" / "literature.json").read_text())["entries"][0]
    assert figure["status"] == "audited" and figure["recomputed_ci"] is None


def test_a_dashb_import_scores_and_audits_with_zero_resamples(tmp_path: Path) -> None:
    from test_imports_published import dashb_entries

    answers = tmp_path / "answers.json"
    answers.write_text(json.dumps(dashb_entries()))
    assert runner.invoke(app, ["import", "dashb", str(answers), "--out", str(tmp_path / "run")]).exit_code == 0
    result = runner.invoke(app, ["score", str(tmp_path / "run"), "--readout", "text:dashb", "--resamples", "0"])
    assert result.exit_code == 0, result.output
    assert "DASH-B: mean of TPR and TNR" in result.output and "Traceback" not in result.output


def test_a_mirror_variable_may_be_a_plain_folder(tmp_path: Path, toy_coco: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry, _ = llava_entry(toy_coco)
    reg = write_registry(tmp_path, [entry])
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", str(toy_coco))  # a path, not a file:// URL
    assert _audit(reg, tmp_path / "a", "llava-toy")[0] == 0
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", "mirror")  # relative to where the command runs
    (tmp_path / "cache").rename(tmp_path / "cache-1")
    assert _audit(reg, tmp_path / "b", "llava-toy")[0] == 0
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", str(tmp_path / "no-such-mirror"))
    (tmp_path / "cache").rename(tmp_path / "cache-2")
    code, output = _audit(reg, tmp_path / "c", "llava-toy")
    assert code == 2 and output.count("\n") == 1 and "HALLUPROBE_GITHUB_URL: no such folder" in output
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", "gopher://example/")
    code, output = _audit(reg, tmp_path / "c", "llava-toy")
    assert code == 2 and output.count("\n") == 1 and "neither an http(s):// or file:// URL nor a folder" in output


def test_pope_mirror_variable_may_be_a_plain_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib

    from halluprobe.benchmarks.sources import fetch_pope

    mirror = tmp_path / "pope"
    mirror.mkdir()
    (mirror / "coco_pope_random.json").write_text('{"question_id": 1}\n')
    pins = {"coco_pope_random.json": hashlib.sha256(b'{"question_id": 1}\n').hexdigest()}
    monkeypatch.setenv("HALLUPROBE_POPE_URL", str(mirror))
    got = fetch_pope(tmp_path / "out", cache_dir=tmp_path / "cache", pins=pins)
    assert [p.read_text() for p in got] == ['{"question_id": 1}\n']
    monkeypatch.setenv("HALLUPROBE_POPE_URL", str(tmp_path / "nothing"))
    result = runner.invoke(app, ["data", "pope", "--out", str(tmp_path / "o2")])
    assert result.exit_code == 2 and result.output.count("\n") == 1 and "HALLUPROBE_POPE_URL: no such folder" in result.output


def test_list_shows_repository_at_commit(tmp_path: Path, toy_coco: Path) -> None:
    entry, _ = llava_entry(toy_coco)
    reg = write_registry(tmp_path, [entry])
    result = runner.invoke(app, ["literature", "list", "--registry", str(reg)])
    assert result.exit_code == 0 and f"| {REPO}@{COMMIT} |" in result.output
