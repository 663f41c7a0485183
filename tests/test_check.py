"""Tables that know their source and `halluprobe check` (issue 16), on scripted-backend runs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from test_pipeline import _make_world, _run_args
from typer.testing import CliRunner

from halluprobe.cli import app

runner = CliRunner()
REPO = Path(__file__).resolve().parent.parent


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    world = _make_world(tmp_path)
    out = tmp_path / "runs" / "toy"
    assert runner.invoke(app, _run_args(world, out)).exit_code == 0
    return out


def _score(run: Path, *flags: str) -> str:
    result = runner.invoke(app, ["score", str(run), "--resamples", "50", *flags])
    assert result.exit_code == 0, result.output
    return result.output


def _check(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, ["check", *args])
    return result.exit_code, result.output


def _edit_digit(path: Path, row: str, column: int) -> int:
    """Change the last digit of one cell of one row (a LaTeX or Markdown table); its line."""
    lines = path.read_text().split("\n")
    for index, line in enumerate(lines):
        sep = "&" if "&" in line else "|"
        cells = line.split(sep)
        label = 0 if sep == "&" else 1
        if len(cells) > column and cells[label].strip() == row:
            digits = [m.start() for m in re.finditer(r"\d", cells[column])]
            at = digits[-1]
            cells[column] = cells[column][:at] + str((int(cells[column][at]) + 1) % 10) + cells[column][at + 1 :]
            lines[index] = sep.join(cells)
            path.write_text("\n".join(lines))
            return index + 1
    raise AssertionError(f"no row {row}")


def test_latex_and_markdown_tables_carry_provenance_and_check(run_dir: Path, tmp_path: Path) -> None:
    from halluprobe.rundir import sha256_file

    tex, md = tmp_path / "paper.tex", tmp_path / "paper.md"
    tex.write_text(_score(run_dir, "--latex"))
    md.write_text("# Results\n\n" + _score(run_dir, "--markdown") + "\nmore prose\n")
    latex = tex.read_text()
    assert r"\toprule" in latex and r"\midrule" in latex and r"\bottomrule" in latex
    provenance = json.loads(latex.split("\n")[0].removeprefix("% halluprobe-provenance "))
    assert provenance["runs"][0]["samples_sha256"] == sha256_file(run_dir / "samples.jsonl")
    assert (provenance["readout"], provenance["unknown"], provenance["seed"], provenance["resamples"]) == ("dynamic", "wrong", 0, 50)
    # counts beside ratios, F1 with its CI, as in the Markdown
    adversarial = next(line for line in latex.split("\n") if line.startswith("adversarial &"))
    report = json.loads(_score(run_dir, "--json"))["splits"]["adversarial"]
    lo, hi = report["ci"]["f1"]
    assert f"& {report['tp']} & {report['fp']} &" in adversarial and f"{report['f1']:.4f} [{lo:.4f}, {hi:.4f}]" in adversarial
    assert "<!-- halluprobe-provenance {" in md.read_text()

    code, output = _check(str(tex), str(md))
    assert code == 0 and "checked 2 tables" in output and "everything matches" in output, output

    tex_line = _edit_digit(tex, "adversarial", 2)  # TP
    md_line = _edit_digit(md, "random", 11)  # F1 (the CI's upper bound)
    code, output = _check(str(tex), str(md), "--json")
    assert code == 1, output
    findings = json.loads(output)["findings"]
    assert {(f["path"], f["line"], f["kind"]) for f in findings} == {(str(tex), tex_line, "differs"), (str(md), md_line, "differs")}
    tp = next(f for f in findings if f["path"] == str(tex))
    assert tp["expected"] == str(report["tp"]) and tp["found"] != tp["expected"]

    tex.write_text(_score(run_dir, "--latex"))  # regenerated
    md.write_text(_score(run_dir, "--markdown"))
    assert _check(str(tex), str(md))[0] == 0


def test_a_number_that_cannot_be_read_is_reported(run_dir: Path, tmp_path: Path) -> None:
    tex = tmp_path / "paper.tex"
    lines = _score(run_dir, "--latex").split("\n")
    row = next(i for i, line in enumerate(lines) if line.startswith("random &"))
    cells = lines[row].split(" & ")
    cells[8] = cells[8][:3] + "O" + cells[8][4:]  # accuracy "0.8472" -> "0.8O72"
    lines[row] = " & ".join(cells)
    tex.write_text("\n".join(lines))
    code, output = _check(str(tex))
    assert code == 1 and f"{tex}:{row + 1}: unparseable: random / Acc." in output, output
    # emphasis a writer adds is not a difference
    tex.write_text(_score(run_dir, "--latex").replace("\nrandom & ", "\n\\textbf{random} & "))
    assert _check(str(tex))[0] == 0


def test_claims_in_prose_percent_and_difference(run_dir: Path, tmp_path: Path) -> None:
    report = json.loads(_score(run_dir, "--json"))
    f1_random, f1_adv = report["splits"]["random"]["f1"], report["splits"]["adversarial"]["f1"]
    acc = report["macro"]["accuracy"]
    paper = tmp_path / "paper.md"
    paper.write_text(
        "## Results\n\n"
        f"The model reaches F1 {f1_random:.3f} on random negatives\n"
        f"and {100 * acc:.1f}% macro accuracy, a gain of {100 * (f1_random - f1_adv):.2f} points over adversarial.\n"
    )
    claims = tmp_path / "claims.toml"
    claims.write_text(
        f'run = "{run_dir}"\n\n'
        f'[[claim]]\nsplit = "random"\nmetric = "f1"\nvalue = "{f1_random:.3f}"\ntext = "reaches F1 {{}} on random"\n\n'
        f'[[claim]]\nsplit = "macro"\nmetric = "accuracy"\nvalue = "{100 * acc:.1f}%"\ntext = "and {{}} macro accuracy"\n\n'
        f'[[claim]]\nsplit = "random"\nmetric = "f1"\nminus = {{ split = "adversarial" }}\n'
        f'value = "{100 * (f1_random - f1_adv):.2f} points"\ntext = "a gain of {{}} over"\n'
    )
    code, output = _check(str(paper), "--claims", str(claims))
    assert code == 0 and "3 claims: everything matches" in output, output

    # one digit of the prose: the paper's line is named
    text = paper.read_text()
    gain = f"{100 * (f1_random - f1_adv):.2f}"
    edited = gain[:-1] + str((int(gain[-1]) + 1) % 10)
    paper.write_text(text.replace(f"gain of {gain}", f"gain of {edited}"))
    code, output = _check(str(paper), "--claims", str(claims))
    assert code == 1 and f"{paper}:4: differs" in output and f"expected {gain} points, found {edited}" in output, output
    paper.write_text(text)

    # one digit of the claim: the claims file's value line is named
    value = f"{f1_random:.3f}"
    wrong = value[:-1] + str((int(value[-1]) + 1) % 10)
    claims.write_text(claims.read_text().replace(f'value = "{value}"', f'value = "{wrong}"'))
    code, output = _check(str(paper), "--claims", str(claims))
    value_line = claims.read_text().split("\n").index(f'value = "{wrong}"') + 1
    assert code == 1 and f"{claims}:{value_line}: differs" in output and f"expected {value}, found {wrong}" in output, output


def test_runs_missing_incomplete_or_changed_are_flagged(run_dir: Path, tmp_path: Path) -> None:
    tex = tmp_path / "paper.tex"
    tex.write_text(_score(run_dir, "--latex"))
    (run_dir / "complete.json").unlink()
    code, output = _check(str(tex))
    assert code == 1 and f"{tex}:1: run-incomplete" in output, output

    # the run was redone with other answers: the table is flagged, and so are its cells
    script = json.loads((tmp_path / "script.json").read_text())
    script["hallucinate"] = {"dog": 0.9, "umbrella": 0.9}
    (tmp_path / "script.json").write_text(json.dumps(script))
    world = {k: tmp_path / v for k, v in (("images", "images"), ("script", "script.json"))}
    world |= {"random": tmp_path / "bench" / "toy_pope_random.json", "adversarial": tmp_path / "bench" / "toy_pope_adversarial.json"}
    assert runner.invoke(app, _run_args(world, run_dir, "--overwrite")).exit_code == 0
    code, output = _check(str(tex))
    assert code == 1 and f"{tex}:1: run-changed" in output and "differs from the recomputed value" in output, output

    # --runs serves a run dir that moved: matched by the trailing parts of its path
    moved = tmp_path / "elsewhere" / "runs" / "toy"
    tex.write_text(_score(run_dir, "--latex"))
    shutil.move(str(run_dir), moved)
    code, output = _check(str(tex))
    assert code == 1 and "run-missing" in output, output
    assert _check(str(tex), "--runs", str(moved))[0] == 0

    # scored since with another unknown policy: a note, the numbers still decide
    assert runner.invoke(app, ["score", str(moved), "--unknown", "drop", "--resamples", "0"]).exit_code == 0
    code, output = _check(str(tex), "--runs", str(moved))
    assert code == 0 and "policy: " in output and "unknown=drop" in output, output


def test_bad_input_exits_2_with_file_and_line(run_dir: Path, tmp_path: Path) -> None:
    tex = tmp_path / "paper.tex"
    good = _score(run_dir, "--latex")
    tex.write_text("\\section{Results}\n" + good.replace('"readout": "dynamic"', '"readout": "dynamic",,'))
    code, output = _check(str(tex))
    assert code == 2 and f"error: {tex}:2: malformed provenance comment" in output, output

    tex.write_text(good.replace('"seed": 0', '"seed": "zero"'))
    code, output = _check(str(tex))
    assert code == 2 and f"{tex}:1: malformed provenance comment: seed" in output, output

    # a LaTeX row with a cell less than its source
    lines = good.split("\n")
    row = next(i for i, line in enumerate(lines) if line.startswith("adversarial &"))
    lines[row] = " & ".join(lines[row].split(" & ")[:-1]) + r" \\"
    tex.write_text("\n".join(lines))
    code, output = _check(str(tex))
    assert code == 2 and f"error: {tex}:{row + 1}: the table has 13 cells in this row, its source 14" in output, output

    claims = tmp_path / "claims.toml"
    paper = tmp_path / "paper.md"
    paper.write_text("nothing\n")
    for key, bad, message in (("metric", "f2", "unknown metric 'f2'"), ("split", "popular", "unknown split 'popular'")):
        entry = {"split": "random", "metric": "f1", key: bad}
        claims.write_text(f'run = "{run_dir}"\n\n[[claim]]\nsplit = "{entry["split"]}"\nmetric = "{entry["metric"]}"\nvalue = "0.5"\n')
        code, output = _check(str(paper), "--claims", str(claims))
        line = 3 if key == "metric" else 6
        assert code == 2 and f"error: {claims}:{line}: {message}" in output, output
    claims.write_text(f'run = "{run_dir}"\n\n[[claim]]\nsplit = "random"\nmetric = "f1"\nvalue = 0.5\n')
    code, output = _check(str(paper), "--claims", str(claims))
    assert code == 2 and f"{claims}:6: claim 'value' must be a string" in output, output


def test_bootstrap_bounds_from_a_comment_are_checked_before_any_work(run_dir: Path, tmp_path: Path) -> None:
    """A comment decides how much check computes: resamples and seed out of bounds are bad input
    (one line, file:line), refused before scoring (10**9 resamples used to allocate until out of
    memory, a negative count to traceback)."""
    from halluprobe.check import MAX_RESAMPLES, MAX_SEED

    md = tmp_path / "paper.md"
    good = _score(run_dir, "--markdown")
    assert '"resamples": 50' in good and '"seed": 0' in good
    cases = [
        ('"resamples": 50', '"resamples": -1', "provenance comment: resamples -1 is out of bounds"),
        ('"resamples": 50', '"resamples": 1000000000', "resamples 1000000000 is out of bounds"),
        ('"resamples": 50', f'"resamples": {MAX_RESAMPLES + 1}', f"resamples {MAX_RESAMPLES + 1} is out of bounds"),
        ('"seed": 0', '"seed": -3', "seed -3 is out of bounds"),
        ('"seed": 0', f'"seed": {MAX_SEED + 1}', f"seed {MAX_SEED + 1} is out of bounds"),
        ('"seed": 0', '"seed": Infinity', "malformed provenance comment: seed"),
        ('"seed": 0', '"seed": 1.5', "malformed provenance comment: seed"),
        ('"seed": 0', '"seed": ' + "9" * 5000, "malformed provenance comment: "),  # past Python's int digit limit
    ]
    for old, bad, message in cases:
        md.write_text("# Results\n" + good.replace(old, bad, 1))
        code, output = _check(str(md))
        assert code == 2 and output.startswith(f"error: {md}:2: ") and message in output, (bad[:40], output)
        assert output.count("\n") == 1, output
    # the bounds themselves are accepted: 0 resamples (no CIs) is what `score --resamples 0` writes
    md.write_text(_score(run_dir, "--markdown", "--resamples", "0", "--seed", str(MAX_SEED)))
    code, output = _check(str(md))
    assert code == 0 and "everything matches" in output, output


def test_terminal_table_in_a_code_block(run_dir: Path, tmp_path: Path) -> None:
    """The rich table `score` prints, pasted under a Markdown provenance comment (box and all)."""
    printed = _score(run_dir, "--resamples", "50")
    comment = _score(run_dir, "--markdown").split("\n")[0]
    notes = tmp_path / "notes.md"
    notes.write_text(f"{comment}\n```\n{printed}```\n")
    code, output = _check(str(notes))
    assert code == 0 and "checked 1 table" in output, output
    lines = notes.read_text().split("\n")
    row = next(i for i, line in enumerate(lines) if "pooled" in line)
    lines[row] = re.sub(r"(\d\.\d{3})(\d)", lambda m: m.group(1) + str((int(m.group(2)) + 1) % 10), lines[row], count=1)
    notes.write_text("\n".join(lines))
    code, output = _check(str(notes))
    assert code == 1 and f"{notes}:{row + 1}: differs: pooled / acc" in output, output


@pytest.mark.slow
def test_readme_quotes_what_the_demo_prints(tmp_path: Path) -> None:
    """README.md's demo table and the figures below it, checked against a fresh demo run."""
    pytest.importorskip("torch")
    demo = tmp_path / "halluprobe-demo"
    result = runner.invoke(app, ["demo", "--out", str(demo)])
    assert result.exit_code == 0, result.output
    readme, claims = REPO / "README.md", REPO / "docs" / "readme-claims.toml"
    code, output = _check(str(readme), "--claims", str(claims), "--runs", str(demo / "run"))
    assert code == 0 and "checked 1 table (75 cells)" in output and "everything matches" in output, output
    # and it would notice a drift: one digit of the table, one of the prose
    drifted = tmp_path / "README.md"
    text = readme.read_text()
    drifted.write_text(text.replace(" adversarial  720", " adversarial  721", 1).replace("F1 0.901 vs 0.776", "F1 0.901 vs 0.777", 1))
    code, output = _check(str(drifted), "--claims", str(claims), "--runs", str(demo / "run"))
    table_line = text.split("\n").index(next(line for line in text.split("\n") if line.startswith(" adversarial  720"))) + 1
    prose_line = next(i for i, line in enumerate(text.split("\n"), start=1) if "F1 0.901 vs 0.776" in line)
    assert code == 1 and f"{drifted}:{table_line}: differs" in output and f"{drifted}:{prose_line}: differs" in output, output


def test_readouts_table_side_by_side_checks(run_dir: Path, tmp_path: Path) -> None:
    """The audit's table (every readout side by side), written by the library, checked by `check`."""
    from halluprobe.scoring import readouts_reports
    from halluprobe.provenance import readouts_provenance
    from halluprobe.tables import render_readouts

    reports, forced = readouts_reports(run_dir, n_resamples=30)
    assert {"dynamic", "text:pope", "text:strict"} <= set(reports)
    provenance = readouts_provenance(run_dir, reports, forced, "dynamic")
    tex, md = tmp_path / "readouts.tex", tmp_path / "readouts.md"
    tex.write_text(render_readouts(reports, "every readout", "latex", provenance, forced) + "\n")
    md.write_text(render_readouts(reports, "every readout", "markdown", provenance, forced) + "\n")
    code, output = _check(str(tex), str(md))
    assert code == 0 and "checked 2 tables" in output, output
    f1 = reports["text:pope"].splits["adversarial"].f1
    assert f"text:pope & {reports['text:pope'].splits['random'].f1:.4f} & {f1:.4f} &" in tex.read_text()
    line = _edit_digit(md, "dynamic", 3)
    code, output = _check(str(tex), str(md))
    assert code == 1 and f"{md}:{line}: differs: dynamic / F1 adversarial" in output, output


def test_audit_prints_the_readouts_table_that_check_reads(run_dir: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["audit", str(run_dir), "--resamples", "50", "--markdown"])
    assert result.exit_code == 0, result.output
    table = result.stdout[result.stdout.index("<!-- halluprobe-provenance"):]
    paper = tmp_path / "paper.md"
    paper.write_text(table)
    assert _check(str(paper))[0] == 0
    line = _edit_digit(paper, "dynamic", 6)
    code, output = _check(str(paper))
    assert code == 1 and f"{paper}:{line}" in output


def test_the_corrections_table_carries_provenance_and_checks(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    run = tmp_path / "runs" / "signals"
    assert runner.invoke(app, _run_args(world, run, "--signals", "noised")).exit_code == 0
    result = runner.invoke(app, ["corrections", str(run), "--correction", "vcd", "--correction", "bias:b=1", "--resamples", "40", "--latex"])
    assert result.exit_code == 0, result.output
    paper = tmp_path / "paper.tex"
    paper.write_text(result.stdout)
    assert "halluprobe-provenance" in result.stdout and _check(str(paper))[0] == 0
    line = _edit_digit(paper, "bias:b=1", 5)  # its F1 under sampling
    code, output = _check(str(paper))
    assert code == 1 and f"{paper}:{line}" in output


def test_the_reports_markdown_twin_carries_provenance_and_checks(run_dir: Path, tmp_path: Path) -> None:
    """report.md's headline table (one run, and a leaderboard of two) recomputed by `check`."""
    pytest.importorskip("matplotlib")
    pytest.importorskip("jinja2")
    from halluprobe.report.page import render_report

    other = tmp_path / "runs" / "again"
    shutil.copytree(run_dir, other)
    result = runner.invoke(app, ["report", str(run_dir), "--out", str(tmp_path / "one.html"), "--resamples", "50"])
    assert result.exit_code == 0, result.output
    one = tmp_path / "one.md"
    _, board = render_report([run_dir, other], tmp_path / "board.html", n_resamples=50, seed=3)
    comment = next(line for line in board.read_text().split("\n") if "halluprobe-provenance" in line)
    provenance = json.loads(comment.removeprefix("<!-- halluprobe-provenance ").removesuffix(" -->"))
    assert (provenance["table"], len(provenance["runs"]), len(provenance["names"]), provenance["seed"]) == ("headline", 2, 2, 3)
    code, output = _check(str(one), str(board))
    assert code == 0 and "checked 2 tables" in output and "everything matches" in output, output

    one_line = _edit_digit(one, "random", 11)  # F1 (its CI's upper bound)
    board_line = _edit_digit(board, f"1. {provenance['names'][0]}", 3)  # TP of run 1's first split
    code, output = _check(str(one), str(board), "--json")
    assert code == 1, output
    findings = json.loads(output)["findings"]
    assert {(f["path"], f["line"], f["kind"]) for f in findings} == {(str(one), one_line, "differs"), (str(board), board_line, "differs")}
    assert any(f["message"].startswith("random / F1") for f in findings)


def test_answers_file_tables_name_their_files_and_check(tmp_path: Path) -> None:
    """`score --answers --latex/--markdown`: the answers and labels files with their sha256."""
    from test_imports import answers_lines, make_labels, write_lines

    from halluprobe.rundir import sha256_file

    splits = make_labels(tmp_path / "labels")
    answers = write_lines(tmp_path / "answers.jsonl", [line for s in ("random", "popular") for line in answers_lines(splits[s], split=s)])
    labels = [tmp_path / "labels" / f"coco_pope_{s}.json" for s in ("random", "popular")]
    args = ["score", "--answers", str(answers), "--labels", str(labels[0]), "--labels", str(labels[1]), "--resamples", "40"]

    def table(flag: str) -> str:
        result = runner.invoke(app, [*args, flag])
        assert result.exit_code == 0, result.output
        return result.output

    tex, md = tmp_path / "paper.tex", tmp_path / "paper.md"
    tex.write_text(table("--latex"))
    md.write_text("# Results\n\n" + table("--markdown"))
    provenance = json.loads(tex.read_text().split("\n")[0].removeprefix("% halluprobe-provenance "))
    assert "runs" not in provenance or not provenance["runs"]
    assert provenance["answers"] == {"path": str(answers), "sha256": sha256_file(answers)}
    assert provenance["labels"] == [{"path": str(p), "sha256": sha256_file(p)} for p in labels]
    assert (provenance["readout"], provenance["resamples"]) == ("text:pope", 40)
    code, output = _check(str(tex), str(md))
    assert code == 0 and "checked 2 tables" in output, output

    tex_line = _edit_digit(tex, "popular", 2)  # TP
    md_line = _edit_digit(md, "random", 11)  # F1
    code, output = _check(str(tex), str(md), "--json")
    assert code == 1, output
    findings = json.loads(output)["findings"]
    assert {(f["path"], f["line"], f["kind"]) for f in findings} == {(str(tex), tex_line, "differs"), (str(md), md_line, "differs")}

    # another answer since: the file is flagged (and the numbers compared); a labels file gone: flagged
    tex.write_text(table("--latex"))
    answers.write_text(answers.read_text().replace('"answer": "Yes"', '"answer": "No"', 1))
    code, output = _check(str(tex))
    assert code == 1 and f"{tex}:1: file-changed: {answers} changed" in output, output
    labels[1].unlink()
    code, output = _check(str(tex))
    assert code == 1 and f"{tex}:1: file-missing: {labels[1]} is missing" in output, output

    # a comment naming neither a run dir nor an answers file is bad input
    lines = tex.read_text().split("\n")
    data = json.loads(lines[0].removeprefix("% halluprobe-provenance "))
    del data["answers"]
    tex.write_text("\n".join([f"% halluprobe-provenance {json.dumps(data)}", *lines[1:]]))
    code, output = _check(str(tex))
    assert code == 2 and f"error: {tex}:1: malformed provenance comment: it names run dirs or an answers file" in output, output


def test_a_cell_holding_a_pipe_is_escaped_and_checks(tmp_path: Path) -> None:
    """A split named from a file `rand|om.json`: its cell reads `rand\\|om`, one cell for check."""
    world = _make_world(tmp_path)
    piped = world["random"].with_name("rand|om.json")
    shutil.copy(world["random"], piped)
    world["random"] = piped
    out = tmp_path / "runs" / "piped"
    assert runner.invoke(app, _run_args(world, out)).exit_code == 0
    md = tmp_path / "paper.md"
    md.write_text(_score(out, "--markdown"))
    lines = md.read_text().split("\n")
    index = next(i for i, line in enumerate(lines) if line.startswith("| rand"))
    assert lines[index].startswith("| rand\\|om | 36 | ")
    code, output = _check(str(md))
    assert code == 0 and "everything matches" in output, output
    lines[index] = lines[index].replace("| 36 |", "| 37 |", 1)
    md.write_text("\n".join(lines))
    code, output = _check(str(md))
    assert code == 1 and f"{md}:{index + 1}: differs: rand|om / n" in output, output


def test_markdown_tables_escape_pipes_and_counts_read_with_si_thousands() -> None:
    from halluprobe.check import compare_cell
    from halluprobe.formatting import markdown_table
    from halluprobe.tables import Cell

    assert markdown_table(["a|b", "n"], [["x | y", "1\n2"]]) == ["| a\\|b | n |", "|---|---|", "| x \\| y | 1 ⏎ 2 |"]
    assert markdown_table(["a", "n"], [], align=["l", "r"])[1] == "| :--- | ---: |"
    assert compare_cell(Cell("9\u202f000", (9000,)), "9\u202f000") is None
    assert compare_cell(Cell("9\u202f000", (9000,)), "9\u202f001") == "differs"


def test_readouts_tables_read_the_samples_once_and_score_like_score(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from halluprobe.rundir import RunDir
    from halluprobe.scoring import score_rundir
    from halluprobe.scoring import readouts_reports
    from halluprobe.study_table import study_table

    reads: list[Path] = []
    read_samples = RunDir.read_samples

    def counting(self: RunDir) -> object:
        reads.append(self.path)
        return read_samples(self)

    monkeypatch.setattr(RunDir, "read_samples", counting)
    reports, forced = readouts_reports(run_dir, n_resamples=20, seed=4)
    assert len(reads) == 1 and len(reports) > 3 and forced
    study_table([run_dir], "markdown")
    assert len(reads) == 2
    monkeypatch.undo()
    for name, report in reports.items():
        assert report == score_rundir(run_dir, readout=name, n_resamples=20, seed=4, write=False, force_invalid=name in forced)


@pytest.mark.parametrize("syntax", ["markdown", "latex"])
def test_the_study_table_renders_from_a_grid_that_check_recomputes(run_dir: Path, tmp_path: Path, syntax: str) -> None:
    """`audit --table` (unchanged: no comment) and the same table under a provenance comment,
    which check verifies cell by cell, forced (†) cells included."""
    from halluprobe.study_table import study_provenance, study_table

    printed = runner.invoke(app, ["audit", str(run_dir), "--table", *(["--latex"] if syntax == "latex" else [])]).output
    plain = study_table([run_dir], syntax)  # type: ignore[arg-type]
    assert printed == plain + "\n" and "halluprobe-provenance" not in printed
    provenance = study_provenance([run_dir], policy="wrong", seed=0, resamples=0)
    paper = tmp_path / ("study.tex" if syntax == "latex" else "study.md")
    paper.write_text(study_table([run_dir], syntax, provenance=provenance))  # type: ignore[arg-type]
    assert paper.read_text().split("\n", 1)[1] == plain
    assert "†" in plain or r"$^\dagger$" in plain  # the scripted run's legacy ids are forced
    code, output = _check(str(paper))
    assert code == 0 and "checked 1 table" in output and "everything matches" in output, output
    sep = "&" if syntax == "latex" else "|"
    lines = paper.read_text().split("\n")
    row = next(i for i, line in enumerate(lines) if "macro" in line and sep in line)
    cells = lines[row].split(sep)
    column = 4 if syntax == "latex" else 5  # dynamic (*)
    cells[column] = re.sub(r"\d(?=\D*$)", lambda m: str((int(m.group(0)) + 1) % 10), cells[column])
    lines[row] = sep.join(cells)
    paper.write_text("\n".join(lines))
    code, output = _check(str(paper))
    assert code == 1 and f"{paper}:{row + 1}: differs: " in output and "dynamic (*)" in output, output


def test_hostile_numbers_and_nesting_are_one_line_not_a_traceback(run_dir: Path, tmp_path: Path) -> None:
    """Issue 25's classes where check reads other people's files: a provenance comment nested
    too deep, a claims file nested too deep, a claimed value and a table cell past Python's
    4300-digit integer limit."""
    from halluprobe.check import compare_cell, compare_number
    from halluprobe.tables import Cell

    md = tmp_path / "paper.md"
    md.write_text(_score(run_dir, "--markdown").replace('"seed": 0', '"seed": ' + "[" * 100_000 + "]" * 100_000, 1))
    code, output = _check(str(md))
    assert code == 2 and output.startswith(f"error: {md}:1: malformed provenance comment") and output.count("\n") == 1, output[:300]

    plain = tmp_path / "plain.md"
    plain.write_text("nothing\n")
    claims = tmp_path / "claims.toml"
    claims.write_text(f'run = "{run_dir}"\nx = ' + "[" * 100_000 + "]" * 100_000 + "\n")
    code, output = _check(str(plain), "--claims", str(claims))
    assert code == 2 and output.startswith(f"error: {claims}: the claims file is not valid TOML") and output.count("\n") == 1, output[:300]

    huge = "9" * 5000
    for value in (huge, f"{huge}/360", f"1/{huge}"):
        claims.write_text(f'run = "{run_dir}"\n\n[[claim]]\nsplit = "random"\nmetric = "tp"\nvalue = "{value}"\n')
        code, output = _check(str(plain), "--claims", str(claims))
        assert code == 2 and f"{claims}:6: cannot read the claimed value" in output and output.count("\n") == 1, output[:300]
    assert compare_number(36, huge) is False and compare_cell(Cell("36", (36,)), huge) == "differs"
    assert compare_number(0.5, "0." + "5" * 5000) is False
