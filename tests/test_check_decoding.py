"""`check` on the decoding table (`halluprobe decoding --markdown/--latex`): every cell under the
`halluprobe-decoding-provenance` comment recomputed from the run dirs it names."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from _decoding_runs import GREEDY, METHOD, SAMPLED, chair_wordnet, decoding_run, fixture_nltk, write_truth  # noqa: F401 (autouse fixtures)
from typer.testing import CliRunner

from halluprobe.cli import app

runner = CliRunner()


def _runs(root: Path) -> list[Path]:
    return [decoding_run(root / "greedy", GREEDY), decoding_run(root / "vcd", METHOD), decoding_run(root / "sampled", SAMPLED)]


def _paper(tmp_path: Path, runs: list[Path], fmt: str, *extra: str) -> Path:
    truth = write_truth(tmp_path)
    written = runner.invoke(app, ["decoding", str(runs[0]), str(runs[1]), "--sampled-baseline", str(runs[2]), "--ground-truth", str(truth),
                                  "--bootstrap", "40", f"--{fmt}", *extra])  # fmt: skip
    assert written.exit_code == 0, written.output
    paper = tmp_path / ("paper.tex" if fmt == "latex" else "paper.md")
    paper.write_text("# Results\n\nSome prose.\n\n" + written.stdout + "\n## Next section\n\n| not | ours |\n|---|---|\n| 1 | 2 |\n")
    return paper


def _check(*args: str) -> Any:
    return runner.invoke(app, ["check", *args, "--json"])


def _edit_digit(paper: Path, marker: str) -> int:
    """Change the last digit of the first number after ``marker`` on its line; the line number."""
    lines = paper.read_text().split("\n")
    number = next(i for i, line in enumerate(lines) if marker in line)
    head, tail = lines[number].split(marker, 1)
    match = re.search(r"\d+\.(\d)", tail)
    assert match is not None
    digit = str((int(match.group(1)) + 1) % 10)
    lines[number] = head + marker + tail[: match.end() - 1] + digit + tail[match.end() :]
    paper.write_text("\n".join(lines))
    return number + 1


@pytest.mark.parametrize("fmt", ["markdown", "latex"])
def test_every_cell_recomputed_and_one_digit_caught(tmp_path: Path, fmt: str) -> None:
    runs = _runs(tmp_path)
    paper = _paper(tmp_path, runs, fmt)
    clean = _check(str(paper))
    assert clean.exit_code == 0, clean.output
    report = json.loads(clean.stdout)
    # per run 3 x 8, paired 3 x 8 and the header-less count of the length bins (Markdown); LaTeX: per run and paired
    print(fmt, report["cells"])
    assert report["tables"] == 1 and report["cells"] >= 48 and report["findings"] == []
    line = _edit_digit(paper, "| vcd | sampled |" if fmt == "markdown" else "vcd & sampled &")
    edited = _check(str(paper))
    assert edited.exit_code == 1, edited.output
    findings = json.loads(edited.stdout)["findings"]
    assert [(f["kind"], f["path"], f["line"]) for f in findings] == [("differs", str(paper), line)]
    assert findings[0]["message"].startswith("vcd / ")


def test_a_changed_run_is_reported(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    paper = _paper(tmp_path, runs, "markdown")
    with (runs[1] / "samples.jsonl").open("a") as f:
        f.write("\n")
    changed = _check(str(paper))
    assert changed.exit_code == 1
    findings = json.loads(changed.stdout)["findings"]
    assert [f["kind"] for f in findings] == ["run-changed"] and "vcd" in findings[0]["message"]
    shutil.rmtree(runs[2])
    missing = _check(str(paper))
    assert {f["kind"] for f in json.loads(missing.stdout)["findings"]} == {"run-changed", "run-missing"}


def test_moved_runs_are_found_through_runs(tmp_path: Path) -> None:
    runs = _runs(tmp_path / "then")
    paper = _paper(tmp_path, runs, "latex")
    shutil.move(tmp_path / "then", tmp_path / "now")
    lost = _check(str(paper))
    assert lost.exit_code == 1 and {f["kind"] for f in json.loads(lost.stdout)["findings"]} == {"run-missing"}
    found = _check(str(paper), *(x for r in ("greedy", "vcd", "sampled") for x in ("--runs", str(tmp_path / "now" / r))))
    assert found.exit_code == 0, found.output


def test_prove_scores_are_pinned(tmp_path: Path) -> None:
    greedy, method = decoding_run(tmp_path / "greedy", GREEDY), decoding_run(tmp_path / "vcd", METHOD)
    folders = []
    for run, h in ((greedy, 0.5), (method, 0.75)):
        folder = tmp_path / f"prove-{run.name}"
        folder.mkdir()
        rows = [{"question_id": q, "image": f"{q}.jpg", "question": "q?", "response": "r", "hscore": h, "tscore": 0.5} for q in "abc"]
        (folder / "scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (folder / "summary.json").write_text(json.dumps({"settings": {"responses": str(run)}}))
        folders.append(folder)
    written = runner.invoke(app, ["decoding", str(greedy), str(method), "--no-chair", "--markdown", "--bootstrap", "20",
                                  *(x for f in folders for x in ("--prove-scores", str(f)))])  # fmt: skip
    assert written.exit_code == 0, written.output
    paper = tmp_path / "prove.md"
    paper.write_text(written.stdout)
    clean = _check(str(paper))
    assert clean.exit_code == 0, clean.output
    assert json.loads(clean.stdout)["cells"] == 2 * 5 + 1 * 4  # per run (2 runs x 5 cells), one paired row
    (folders[1] / "scores.jsonl").write_text((folders[1] / "scores.jsonl").read_text().replace("0.75", "0.25"))
    changed = _check(str(paper))
    assert changed.exit_code == 1 and [f["kind"] for f in json.loads(changed.stdout)["findings"]] == ["file-changed"]


def test_bad_comments_and_missing_tables_are_bad_input(tmp_path: Path) -> None:
    runs = _runs(tmp_path)
    paper = _paper(tmp_path, runs, "markdown")
    text = paper.read_text()
    comment_line = text.split("\n").index(next(line for line in text.split("\n") if "halluprobe-decoding-provenance" in line)) + 1
    cut = paper.with_name("cut.md")  # the paired-differences table left out
    lines = text.split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("### Paired"))
    end = next(i for i in range(start + 2, len(lines)) if not lines[i].startswith("|"))
    cut.write_text("\n".join(lines[:start] + lines[end:]))
    shape = runner.invoke(app, ["check", str(cut)])
    assert shape.exit_code == 2 and f"cut.md:{comment_line}" in shape.output
    broken = paper.with_name("broken.md")
    broken.write_text(text.replace('"n_resamples": 40', '"n_resamples": 10000000'))
    bounds = runner.invoke(app, ["check", str(broken)])
    assert bounds.exit_code == 2 and f"broken.md:{comment_line}" in bounds.output and "out of bounds" in bounds.output
    garbled = paper.with_name("garbled.md")
    garbled.write_text(text.replace("halluprobe-decoding-provenance {", "halluprobe-decoding-provenance {{"))
    assert runner.invoke(app, ["check", str(garbled)]).exit_code == 2


def test_report_of_a_decoding_comparison_has_the_section_and_check_verifies_it(tmp_path: Path) -> None:
    pytest.importorskip("jinja2")
    pytest.importorskip("matplotlib")
    from halluprobe.benchmarks.chair.groundtruth import shipped_ground_truth

    ids = sorted(shipped_ground_truth("chair@lemmatizer").objects)[:8]
    texts = ["a dog and a cat", "a cat with a dog and a car", "a bus", "a person and a dog"]
    greedy = decoding_run(tmp_path / "greedy", {i: texts[k % 4] for k, i in enumerate(ids)})
    vcd = decoding_run(tmp_path / "vcd", {i: texts[(k + 1) % 4] for k, i in enumerate(ids)}, decode="vcd:alpha=1,beta=0.1")
    sampled = decoding_run(tmp_path / "sampled", {i: texts[(k + 2) % 4] for k, i in enumerate(ids)}, sample=True, temperature=1.0, seed=0)
    out = tmp_path / "report.html"
    made = runner.invoke(app, ["report", str(greedy), str(vcd), str(sampled), "--out", str(out), "--resamples", "30"])
    assert made.exit_code == 0, made.output
    page, twin = out.read_text(encoding="utf-8"), out.with_suffix(".md").read_text(encoding="utf-8")
    assert "<h2>Decoding methods on free-form answers</h2>" in page and "<td>vcd:alpha=1,beta=0.1</td>" in page
    section = page.split("<h2>Decoding methods on free-form answers</h2>", 1)[1].split("</section>", 1)[0]
    # 3 per-run rows, 3 paired rows, 3 runs' length bins, and no Markdown separator line as a row
    assert "---" not in section and section.count("<table") == 3 and section.count("<tr>") >= 3 + 3 + 3 + 3
    assert "<tr><td>vcd:alpha=1,beta=0.1</td><td>method</td><td>8</td>" in section
    assert twin.count("halluprobe-decoding-provenance") == 1 and "| vcd:alpha=1,beta=0.1 | greedy |" in twin
    # the twin's decoding tables are the verb's, cell for cell, and check recomputes them
    verb = runner.invoke(app, ["decoding", str(greedy), str(vcd), "--sampled-baseline", str(sampled), "--markdown", "--bootstrap", "30"])
    assert verb.exit_code == 0, verb.output
    assert [line for line in verb.stdout.split("\n") if line.startswith("|")] == [
        line for line in twin.split("## Decoding methods on free-form answers", 1)[1].split("\n") if line.startswith("|")
    ]
    checked = _check(str(out.with_suffix(".md")))
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["tables"] == 4  # 3 CHAIR tables and the decoding one
    line = _edit_digit(out.with_suffix(".md"), "| vcd:alpha=1,beta=0.1 | sampled |")
    edited = _check(str(out.with_suffix(".md")))
    assert edited.exit_code == 1 and [f["line"] for f in json.loads(edited.stdout)["findings"]] == [line]
    # runs that are no comparison (two plain greedy runs) get the CHAIR page alone
    other = decoding_run(tmp_path / "other", {i: texts[(k + 3) % 4] for k, i in enumerate(ids)})
    plain = runner.invoke(app, ["report", str(greedy), str(other), "--out", str(tmp_path / "plain.html"), "--resamples", "0"])
    assert plain.exit_code == 0, plain.output
    assert "halluprobe-decoding-provenance" not in (tmp_path / "plain.md").read_text(encoding="utf-8")
    assert "Decoding methods" not in (tmp_path / "plain.html").read_text(encoding="utf-8")
