"""`check` verifies HallusionBench's judged tables: `hallusion score --markdown/--latex` writes the
table under a ``halluprobe-hallusion-provenance`` comment (the run's samples and the judgments with
their sha256, the ledger, the readings shown, the bootstrap); `check` recomputes every cell from
the stored verdicts (no model, no judge) and names an edited cell or a changed judgment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _table_files import assert_table_outputs_kept
from typer.testing import CliRunner

from halluprobe.check.hallusion import extract_hallusion_tables
from halluprobe.cli import app
from halluprobe.provenance import read_marked
from halluprobe.provenance_judged import HALLUSION_PROVENANCE_MARK, HallusionProvenance
from halluprobe.rundir import RunDir, sha256_file
from test_hallusion_judge import _fixture, _judge

runner = CliRunner()


@pytest.fixture(scope="module")
def judged(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A small --text HallusionBench run judged by a scripted judge (some replies unparseable)."""
    tmp = tmp_path_factory.mktemp("hallusion")
    qfile, images, run = _fixture(tmp)
    _judge(tmp, qfile, images, run, tmp / "j")
    return run, tmp / "j"


def _write(run: Path, judgments: Path, out: Path, *extra: str) -> Path:
    option = "--latex" if out.suffix == ".tex" else "--markdown"
    result = runner.invoke(app, ["hallusion", "score", str(run), "--judgments", str(judgments), "--resamples", "30", "--seed", "4", option, str(out), *extra])
    assert result.exit_code == 0, result.output
    return out


def _check(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["check", *args])
    return result.exit_code, result.output


def _copy_judgments(judgments: Path, to: Path) -> Path:
    to.mkdir(parents=True)
    for name in ("judge.json", "judgments.jsonl"):
        (to / name).write_bytes((judgments / name).read_bytes())
    return to


@pytest.mark.parametrize("suffix", [".md", ".tex"])
def test_the_table_carries_its_sources_and_checks(judged: tuple[Path, Path], tmp_path: Path, suffix: str) -> None:
    run, judgments = judged
    out = _write(run, judgments, tmp_path / f"hallusion{suffix}")
    text = out.read_text(encoding="utf-8")
    first = text.splitlines()[0]
    assert HALLUSION_PROVENANCE_MARK in first
    parsed = read_marked(first, out, 1)
    assert parsed is not None
    prov = parsed[0]
    assert isinstance(prov, HallusionProvenance)
    header = json.loads((judgments / "judge.json").read_text())
    assert prov.judge == f"scripted:{header['model']}" and prov.prompt_sha256 == header["template_sha256"]
    assert prov.samples.path == str(run) and prov.samples.sha256 == sha256_file(RunDir(run).samples_path)
    assert prov.judgments.path == str(judgments) and prov.judgments.sha256 == sha256_file(judgments / "judgments.jsonl")
    assert prov.bootstrap.n_resamples == 30 and prov.bootstrap.seed == 4 and "text:strict" in prov.readouts
    code, output = _check(str(out))
    assert code == 0, output
    (table,) = extract_hallusion_tables(out, text)
    assert len(table.rows) == 3 * (1 + len(prov.readouts))  # VD, VS, Overall: the judge and each reading


def test_the_table_shows_the_terminals_numbers(judged: tuple[Path, Path], tmp_path: Path) -> None:
    run, judgments = judged
    args = ["hallusion", "score", str(run), "--judgments", str(judgments), "--resamples", "30", "--seed", "4", "--readout", "text:strict"]
    got = json.loads(runner.invoke(app, [*args, "--json"]).stdout)
    text = _write(run, judgments, tmp_path / "t.md", "--readout", "text:strict").read_text(encoding="utf-8")
    overall = [line for line in text.splitlines() if line.startswith("| Overall")]
    judge, strict = overall
    o = got["judged"]["slices"][-1]
    assert f"| {100 * o['a_acc']:.2f} [{100 * o['a_ci'][0]:.2f}, {100 * o['a_ci'][1]:.2f}] |" in judge
    assert f"| {got['unparseable']} | {got['errors']} |" in judge
    d = got["disagreements"][0]
    assert strict.endswith(f"| {d['verdicts']} | {d['correctness']} |") and "text:strict (rule-based)" in strict


def test_an_edited_cell_is_a_drift_named(judged: tuple[Path, Path], tmp_path: Path) -> None:
    run, judgments = judged
    out = _write(run, judgments, tmp_path / "t.md")
    lines = out.read_text(encoding="utf-8").split("\n")
    at = next(i for i, line in enumerate(lines) if line.startswith("| VD"))
    cells = lines[at].split(" | ")
    cells[2] = str(int(cells[2]) + 1)  # questions
    lines[at] = " | ".join(cells)
    out.write_text("\n".join(lines), encoding="utf-8")
    code, output = _check(str(out))
    assert code == 1
    assert f"{out}:{at + 1}" in output and "VD / questions" in output and output.count("differs from the recomputed value") == 1
    lines[at] = " | ".join([*cells[:2], str(int(cells[2]) - 1), *cells[3:]])  # back as written
    judge = next(i for i, line in enumerate(lines) if line.startswith("| Overall"))
    cells = lines[judge].split(" | ")
    value, _, ci = cells[5].partition(" ")
    cells[5] = f"{float(value) + 0.01:.2f} {ci}"  # aAcc, one in the last written digit
    lines[judge] = " | ".join(cells)
    out.write_text("\n".join(lines), encoding="utf-8")
    code, output = _check(str(out))
    assert code == 1
    assert f"{out}:{judge + 1}" in output and "Overall / aAcc [95% CI]" in output and output.count("differs from the recomputed value") == 1


def test_a_changed_judgment_is_a_drift(judged: tuple[Path, Path], tmp_path: Path) -> None:
    run, judgments = judged
    copy = _copy_judgments(judgments, tmp_path / "j")
    out = _write(run, copy, tmp_path / "t.tex")
    assert _check(str(out))[0] == 0
    lines = (copy / "judgments.jsonl").read_text(encoding="utf-8").splitlines()
    at, first = next((i, json.loads(line)) for i, line in enumerate(lines) if json.loads(line)["verdict"] == "correct")
    first["verdict"] = "incorrect"
    lines[at] = json.dumps(first)
    (copy / "judgments.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, output = _check(str(out))
    assert code == 1
    assert "judgments.jsonl changed since this was written" in output and "differs" in output


def test_missing_sources_and_bad_comments(judged: tuple[Path, Path], tmp_path: Path) -> None:
    run, judgments = judged
    out = _write(run, judgments, tmp_path / "t.md")
    text = out.read_text(encoding="utf-8")
    moved = tmp_path / "moved.md"
    moved.write_text(text.replace(f'"path": "{judgments}"', f'"path": "{tmp_path / "nowhere"}"'), encoding="utf-8")
    code, output = _check(str(moved))
    assert code == 1 and "is missing" in output
    bad = tmp_path / "bad.md"
    bad.write_text(text.replace('"readouts": [', '"readouts": 7, "x": ['), encoding="utf-8")
    code, output = _check(str(bad))
    assert code == 2 and f"{bad}:1" in output and "malformed HallusionBench provenance comment" in output
    assert len(output.strip().splitlines()) == 1
    huge = tmp_path / "huge.md"
    huge.write_text(text.replace('"n_resamples": 30', '"n_resamples": 10000000'), encoding="utf-8")
    code, output = _check(str(huge))
    assert code == 2 and f"{huge}:1" in output and "out of bounds" in output


def test_moved_sources_are_found_through_runs(judged: tuple[Path, Path], tmp_path: Path) -> None:
    run, judgments = judged
    out = _write(run, judgments, tmp_path / "t.md")
    elsewhere = tmp_path / "ci"
    _copy_judgments(judgments, elsewhere / "j")
    text = out.read_text(encoding="utf-8").replace(f'"path": "{judgments}"', '"path": "/gone/j"')
    out.write_text(text, encoding="utf-8")
    assert _check(str(out))[0] == 1
    code, output = _check(str(out), "--runs", str(elsewhere / "j"))
    assert code == 0, output


def test_a_table_path_that_is_a_folder_or_a_file_is_kept(judged: tuple[Path, Path], tmp_path: Path) -> None:
    """A folder at --markdown is one line; a file at --latex (a paper's own .tex) stays as it was
    unless --overwrite."""
    run, judgments = judged
    assert_table_outputs_kept(["hallusion", "score", str(run), "--judgments", str(judgments), "--resamples", "0"], tmp_path)
