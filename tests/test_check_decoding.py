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
    return [decoding_run(root / "greedy", GREEDY), decoding_run(root / "vcd", METHOD), decoding_run(root / "sampled", SAMPLED, sample=True, seed=0)]


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
    for tokenizer in ('"spaces"', "7"):  # a tokenizer halluprobe has not: one line at the comment
        other = paper.with_name("tokenizer.md")
        other.write_text(text.replace('"truncate_incomplete"', f'"tokenizer": {tokenizer}, "truncate_incomplete"'))
        result = runner.invoke(app, ["check", str(other)])
        assert result.exit_code == 2 and f"tokenizer.md:{comment_line}" in result.output and "tokenizer" in result.output, result.output


def test_report_of_a_decoding_comparison_has_the_section_and_check_verifies_it(tmp_path: Path) -> None:
    pytest.importorskip("jinja2")
    pytest.importorskip("matplotlib")
    from halluprobe.captions.chair.groundtruth import shipped_ground_truth

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


def _comparison_runs(root: Path) -> list[Path]:
    """The greedy, method and sampled runs of `_runs` with what their run.json says of their roles."""
    return [decoding_run(root / "greedy", GREEDY), decoding_run(root / "vcd", METHOD, decode="vcd:alpha=1,beta=0.1"),
            decoding_run(root / "sampled", SAMPLED, sample=True, temperature=1.0, seed=0)]  # fmt: skip


def _section_tables(text: str, heading: str) -> list[str]:
    return [line for line in text.split(heading, 1)[1].split("\n") if line.startswith("|")]


def test_report_counts_chair_as_its_options_say_and_check_verifies_every_table(tmp_path: Path) -> None:
    """`report --family singularize --tokenizer line --ground-truth FILE`: the CHAIR sections and the
    decoding table count with that family, tokenizer and ground truth; every table checks."""
    pytest.importorskip("jinja2")
    pytest.importorskip("matplotlib")
    runs, truth = _comparison_runs(tmp_path), write_truth(tmp_path)
    out = tmp_path / "report.html"
    shipped = runner.invoke(app, ["report", *map(str, runs), "--out", str(out), "--resamples", "0"])  # images 1-4: not the standard lists
    assert shipped.exit_code == 2 and "report RUNDIR... --ground-truth FILE" in shipped.output and not out.exists()
    options = ["--family", "singularize", "--tokenizer", "line", "--ground-truth", str(truth)]
    made = runner.invoke(app, ["report", *map(str, runs), "--out", str(out), "--resamples", "30", *options])
    assert made.exit_code == 0, made.output
    page, twin = out.read_text(encoding="utf-8"), out.with_suffix(".md").read_text(encoding="utf-8")
    assert "chair@lemmatizer" not in page and "Normaliser family <b><code>chair@singularize</code></b>" in page
    assert "words split by tokenizer <code>line</code>" in page
    assert f"--family singularize --tokenizer line --ground-truth {truth} --out FILE.html" in page  # the footer's command
    comments = [line for line in twin.split("\n") if "-provenance {" in line]
    assert len(comments) == 4 and all('"tokenizer": "line"' in c and "chair@singularize" in c and "lemmatizer" not in c for c in comments)
    assert "tokenizer: line" in twin  # each CHAIR section's note says how its words were split
    verb = runner.invoke(app, ["decoding", str(runs[0]), str(runs[1]), "--sampled-baseline", str(runs[2]), *options, "--markdown",
                               "--bootstrap", "30"])  # fmt: skip
    assert verb.exit_code == 0, verb.output
    heading = "## Decoding methods on free-form answers"
    assert _section_tables(verb.stdout, heading) == _section_tables(twin, heading)
    checked = _check(str(out.with_suffix(".md")))
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["tables"] == 4 and json.loads(checked.stdout)["findings"] == []
    for bad, message in ((["--tokenizer", "spaces"], "--tokenizer must be punkt or line, not 'spaces'"),
                         (["--family", "stemmer"], "--family must be lemmatizer, singularize or both, not 'stemmer'"),
                         (["--ground-truth", str(tmp_path / "none.jsonl")], "none.jsonl: ground truth file not found")):  # fmt: skip
        refused = runner.invoke(app, ["report", *map(str, runs), "--out", str(tmp_path / "bad.html"), *bad])
        assert refused.exit_code == 2 and message in refused.output and len(refused.output.strip().splitlines()) == 1, refused.output
    assert not (tmp_path / "bad.html").exists()


def _yes_no_run(root: Path) -> Path:
    """A small yes/no run (scripted backend, one POPE split of four images)."""
    from PIL import Image

    images = root / "images"
    images.mkdir()
    lines, qid = [], 1
    for i in range(4):
        Image.new("RGB", (8, 8), (60 * i, 40, 90)).save(images / f"img{i}.png")
        for obj, label in (("dog", "yes"), ("cat", "no")):
            lines.append(json.dumps({"question_id": qid, "image": f"img{i}.png", "text": f"Is there a {obj} in the image?", "label": label}))
            qid += 1
    bench = root / "toy_pope_random.json"
    bench.write_text("\n".join(lines) + "\n")
    script = root / "model.json"
    script.write_text(json.dumps({"present": {f"img{i}.png": ["dog"] + (["cat"] if i == 0 else []) for i in range(4)}, "seed": 0}))
    out = root / "pope"
    made = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), "--images", str(images), "--benchmark", str(bench),
                               "--out", str(out)])  # fmt: skip
    assert made.exit_code == 0, made.output
    return out


def test_a_yes_no_report_with_caption_runs_shows_their_decoding_table(tmp_path: Path) -> None:
    """A yes/no run and caption runs that are a decoding comparison: the yes/no page (the caption runs
    never scored as yes/no runs) with the Decoding section; check verifies the headline and decoding tables."""
    pytest.importorskip("jinja2")
    pytest.importorskip("matplotlib")
    runs, truth, pope = _comparison_runs(tmp_path), write_truth(tmp_path), _yes_no_run(tmp_path)
    out = tmp_path / "report.html"
    options = ["--family", "singularize", "--tokenizer", "line", "--ground-truth", str(truth), "--resamples", "30"]
    made = runner.invoke(app, ["report", str(pope), *map(str, runs), "--out", str(out), *options])
    assert made.exit_code == 0, made.output
    page, twin = out.read_text(encoding="utf-8"), out.with_suffix(".md").read_text(encoding="utf-8")
    assert '<section id="headline">' in page and '<a href="#decoding">Decoding</a>' in page and "leaderboard" not in page
    assert page.index('<section id="headline">') < page.index('<section id="decoding" class="run">') < page.index("<footer>")
    assert "<td>vcd:alpha=1,beta=0.1</td><td>method</td>" in page and "halluprobe-chair-provenance" not in twin
    assert f"halluprobe report {pope} {runs[0]} {runs[1]} {runs[2]} --family singularize" in page
    checked = _check(str(out.with_suffix(".md")))
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["tables"] == 2 and json.loads(checked.stdout)["findings"] == []
    line = _edit_digit(out.with_suffix(".md"), "| vcd:alpha=1,beta=0.1 | greedy |")
    edited = _check(str(out.with_suffix(".md")))
    assert edited.exit_code == 1 and [f["line"] for f in json.loads(edited.stdout)["findings"]] == [line]
    # caption runs that are no comparison (two greedy runs) cannot join a yes/no page; CHAIR options on yes/no runs alone are refused
    other = decoding_run(tmp_path / "other", GREEDY)
    mixed = runner.invoke(app, ["report", str(pope), str(runs[0]), str(other), "--out", str(tmp_path / "m.html"), *options])
    assert mixed.exit_code == 2 and "decoding comparison" in mixed.output and not (tmp_path / "m.html").exists()
    alone = runner.invoke(app, ["report", str(pope), "--out", str(tmp_path / "a.html"), "--tokenizer", "line"])
    assert alone.exit_code == 2 and "count CHAIR of captions" in alone.output and not (tmp_path / "a.html").exists()


def test_render_report_refuses_caption_runs_that_are_no_comparison(tmp_path: Path) -> None:
    """`render_report(..., captions=)`: caption runs that are no decoding comparison are bad input, and nothing is written."""
    pytest.importorskip("jinja2")
    pytest.importorskip("matplotlib")
    from halluprobe.errors import InputError
    from halluprobe.report.page import render_report
    from halluprobe.report.decoding_section import ChairCounting

    pope = _yes_no_run(tmp_path)
    greedy, other = decoding_run(tmp_path / "greedy", GREEDY), decoding_run(tmp_path / "other", METHOD)
    out = tmp_path / "report.html"
    with pytest.raises(InputError, match="must be a decoding comparison"):
        render_report([pope], out, captions=[greedy, other], chair=ChairCounting("singularize", "line", write_truth(tmp_path)), n_resamples=0)
    assert not out.exists() and not out.with_suffix(".md").exists()
