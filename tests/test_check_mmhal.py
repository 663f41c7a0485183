"""`check` verifies MMHal-Bench's judged tables: `mmhal score --markdown/--latex` writes the table
under a ``halluprobe-mmhal-provenance`` comment (the template, the judgment dir and its sha256, the
ledger, the policy, compat, the bootstrap); `check` recomputes every cell from the stored verdicts
(no model, no judge) and names an edited cell or a changed judgment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _table_files import assert_table_outputs_kept
from typer.testing import CliRunner

from halluprobe.check.mmhal import extract_mmhal_tables
from halluprobe.cli import app
from halluprobe.provenance import read_marked
from halluprobe.provenance_judged import MMHAL_PROVENANCE_MARK, MMHalProvenance
from test_mmhal import REPLIES, _fixture, _judge, _judge_script

runner = CliRunner()


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A 96-item template judged by a scripted judge (some replies out of format)."""
    tmp = tmp_path_factory.mktemp("mmhal")
    template, images, _ = _fixture(tmp)
    _judge(tmp, template, images, _judge_script(tmp, "judge.json", REPLIES), tmp / "j")
    return template, tmp / "j"


def _write(template: Path, judgments: Path, out: Path, *extra: str) -> Path:
    option = "--latex" if out.suffix == ".tex" else "--markdown"
    result = runner.invoke(app, ["mmhal", "score", "--template", str(template), "--judgments", str(judgments), "--bootstrap", "50", option, str(out), *extra])
    assert result.exit_code == 0, result.output
    return out


def _check(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["check", *args])
    return result.exit_code, result.output


@pytest.mark.parametrize("suffix", [".md", ".tex"])
@pytest.mark.parametrize("extra", [(), ("--unparseable", "drop"), ("--unparseable", "wrong"), ("--compat",)])
def test_the_table_carries_the_ledger_and_checks(judged: tuple[Path, Path], tmp_path: Path, suffix: str, extra: tuple[str, ...]) -> None:
    template, judgments = judged
    out = _write(template, judgments, tmp_path / f"mmhal{suffix}", *extra)
    text = out.read_text(encoding="utf-8")
    first = text.splitlines()[0]
    assert MMHAL_PROVENANCE_MARK in first
    parsed = read_marked(first, out, 1)
    assert parsed is not None
    prov = parsed[0]
    assert isinstance(prov, MMHalProvenance)
    header = json.loads((judgments / "judge.json").read_text())
    assert prov.judge == f"scripted:{header['model']}" and prov.prompt_sha256 == header["template_sha256"]
    assert prov.compat == ("--compat" in extra) and prov.bootstrap.n_resamples == 50
    assert prov.unparseable == (extra[1] if extra[:1] == ("--unparseable",) else "zero")
    assert header["template_sha256"][:12] in text and "overall" in text
    code, output = _check(str(out))
    assert code == 0, output
    (table,) = extract_mmhal_tables(out, text)
    assert len(table.rows) == 9  # eight types and overall


def test_the_compat_table_shows_the_official_figures(judged: tuple[Path, Path], tmp_path: Path) -> None:
    template, judgments = judged
    official = runner.invoke(app, ["mmhal", "score", "--template", str(template), "--judgments", str(judgments), "--compat"]).output
    average = next(line for line in official.splitlines() if line.startswith("Average score: ")).split(": ")[1]
    text = _write(template, judgments, tmp_path / "c.md", "--compat").read_text(encoding="utf-8")
    overall = next(line for line in text.splitlines() if line.startswith("| overall"))
    assert f"| {average}" in overall


def test_an_edited_cell_is_a_drift_named(judged: tuple[Path, Path], tmp_path: Path) -> None:
    template, judgments = judged
    out = _write(template, judgments, tmp_path / "t.md")
    lines = out.read_text(encoding="utf-8").split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("| attribute"))
    cells = lines[at].split(" | ")
    cells[1] = str(int(cells[1]) + 1)  # n
    lines[at] = " | ".join(cells)
    out.write_text("\n".join(lines), encoding="utf-8")
    code, output = _check(str(out))
    assert code == 1
    assert f"{out}:{at + 1}" in output and "attribute / n" in output


def test_a_changed_judgment_is_a_drift(judged: tuple[Path, Path], tmp_path: Path) -> None:
    template, judgments = judged
    copy = tmp_path / "j"
    copy.mkdir()
    for name in ("judge.json", "judgments.jsonl"):
        (copy / name).write_bytes((judgments / name).read_bytes())
    out = _write(template, copy, tmp_path / "t.tex")
    assert _check(str(out))[0] == 0
    lines = (copy / "judgments.jsonl").read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    assert first["status"] == "parsed"
    first["verdict"] = 0 if first["verdict"] else 6
    lines[0] = json.dumps(first)
    (copy / "judgments.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, output = _check(str(out))
    assert code == 1
    assert "judgments.jsonl changed since this was written" in output and "differs" in output


def test_missing_sources_and_bad_comments(judged: tuple[Path, Path], tmp_path: Path) -> None:
    template, judgments = judged
    out = _write(template, judgments, tmp_path / "t.md")
    text = out.read_text(encoding="utf-8")
    moved = tmp_path / "moved.md"
    moved.write_text(text.replace(str(judgments), str(tmp_path / "nowhere")), encoding="utf-8")
    code, output = _check(str(moved))
    assert code == 1 and "is missing" in output
    bad = tmp_path / "bad.md"
    bad.write_text(text.replace('"compat": false', '"compat": "maybe"'), encoding="utf-8")
    code, output = _check(str(bad))
    assert code == 2 and f"{bad}:1" in output and "malformed MMHal provenance comment: compat" in output
    huge = tmp_path / "huge.md"
    huge.write_text(text.replace('"n_resamples": 50', '"n_resamples": 10000000'), encoding="utf-8")
    code, output = _check(str(huge))
    assert code == 2 and f"{huge}:1" in output and "out of bounds" in output


def test_a_check_comparing_no_cell_fails(judged: tuple[Path, Path], tmp_path: Path) -> None:
    template, judgments = judged
    text = _write(template, judgments, tmp_path / "t.md").read_text(encoding="utf-8")
    comment = text.split("\n")[0]
    empty = tmp_path / "empty.md"
    empty.write_text(comment + "\n\n| type |\n|---|\n", encoding="utf-8")
    code, output = _check(str(empty))
    assert code == 2 and f"{empty}:" in output


def test_moved_sources_are_found_through_runs(judged: tuple[Path, Path], tmp_path: Path) -> None:
    template, judgments = judged
    out = _write(template, judgments, tmp_path / "t.md")
    elsewhere = tmp_path / "ci" / judgments.parent.name
    (elsewhere / "j").mkdir(parents=True)
    for name in ("judge.json", "judgments.jsonl"):
        (elsewhere / "j" / name).write_bytes((judgments / name).read_bytes())
    (elsewhere / template.name).write_bytes(template.read_bytes())
    # the comment's paths only (the scripted judge's model is a path too, in the ledger cells)
    text = out.read_text(encoding="utf-8").replace(f'"path": "{judgments.parent}', f'"path": "/gone/{judgments.parent.name}')
    out.write_text(text, encoding="utf-8")
    assert _check(str(out))[0] == 1  # the paths as written are gone
    code, output = _check(str(out), "--runs", str(elsewhere / "j"), "--runs", str(elsewhere / template.name))
    assert code == 0, output


def test_a_table_path_that_is_a_folder_or_a_file_is_kept(judged: tuple[Path, Path], tmp_path: Path) -> None:
    """A folder at --markdown is one line; a file at --latex (a paper's own .tex) stays as it was
    unless --overwrite."""
    template, judgments = judged
    assert_table_outputs_kept(["mmhal", "score", "--template", str(template), "--judgments", str(judgments), "--bootstrap", "0"], tmp_path)
