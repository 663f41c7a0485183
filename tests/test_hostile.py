"""The verbs that read or write the user's files under hostile input (issue 25): nothing of the
user's replaced without --overwrite, nothing written outside --out, no export of a run that does
not pair, detection that cannot read a label as an answer, bounds on work taken from flags and
files, and one line (exit 2) for every bad input: never a traceback, never exit 0 with a wrong number."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.cli import app
from test_imports import OFFSET, make_labels, make_llava, score_json, write_lines
from test_imports_tools import vlmeval_rows
from test_pipeline import _make_world, _run_args

runner = CliRunner()
DEEP = "[" * 200_000
LONG_INT = "9" * 5000  # beyond Python's 4,300-digit conversion limit


def refused(args: list[str], *fragments: str, code: int = 2) -> str:
    """The command exits ``code`` with one line that holds every fragment."""
    result = runner.invoke(app, args)
    lines = result.output.strip().splitlines()
    assert result.exit_code == code and len(lines) == 1 and lines[0].startswith("error: "), (result.exit_code, result.output)
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result.output


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture()
def sheet(tmp_path: Path) -> Path:
    """A VLMEvalKit sheet (JSON): an import needs no labels file."""
    rows = vlmeval_rows(make_labels(tmp_path / "labels"), extracted=False)
    path = tmp_path / "m_POPE.json"
    path.write_text(json.dumps(rows))
    return path


@pytest.fixture()
def imported(tmp_path: Path, sheet: Path) -> Path:
    ok(["import", str(sheet), "--out", str(tmp_path / "run")])
    return tmp_path / "run"


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Path]]:
    """A complete scripted run (72 samples over two splits) and its world; tests copy the run."""
    root = tmp_path_factory.mktemp("scripted")
    world = _make_world(root)
    ok(_run_args(world, root / "run"))
    return root / "run", world


def copy_run(run: Path, to: Path) -> Path:
    to.mkdir(parents=True)
    for f in run.iterdir():
        (to / f.name).write_bytes(f.read_bytes())
    return to


# -- nothing of the user's replaced -------------------------------------------------------------


def test_per_question_refuses_an_existing_file_and_never_a_run_file(imported: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine.jsonl"
    mine.write_text("my notes\n")
    score = ["score", str(imported), "--readout", "text:pope", "--resamples", "0"]
    refused([*score, "--per-question", str(mine)], "mine.jsonl", "--per-question exists", "--overwrite")
    assert mine.read_text() == "my notes\n"
    before = snapshot(imported)
    for name in ("samples.jsonl", "run.json", "manifest.json", "metrics.json"):
        refused([*score, "--per-question", str(imported / name), "--overwrite"], "would replace a file of the run dir")
    link = tmp_path / "link.jsonl"
    link.symlink_to(imported / "samples.jsonl")
    refused([*score, "--per-question", str(link), "--overwrite"], "would replace a file of the run dir")
    assert snapshot(imported) == before  # not even metrics.json was written: refused before scoring
    ok([*score, "--per-question", str(mine), "--overwrite"])
    assert len(mine.read_text().splitlines()) == len((imported / "samples.jsonl").read_text().splitlines())
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to(tmp_path / "nowhere" / "x.jsonl")
    refused([*score, "--per-question", str(dangling)], "symbolic link to nothing")
    refused([*score, "--per-question", str(tmp_path)], "must be a file, not a folder")


def test_import_out_must_be_new_or_empty_and_overwrite_clears_only_its_files(sheet: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "samples.jsonl").write_text('{"left": "over"}\n' * 3)
    (out / "manifest.json").write_text('{"mine": true}\n')
    (out / "notes.txt").write_text("keep me\n")
    before = snapshot(out)
    refused(["import", str(sheet), "--out", str(out)], "--out is not empty", "--overwrite")
    assert snapshot(out) == before
    ok(["import", str(sheet), "--out", str(out), "--overwrite"])
    rows = json.loads(sheet.read_text())
    samples = (out / "samples.jsonl").read_text().splitlines()
    assert len(samples) == sum(len(r["category"].split(",")) for r in rows)  # nothing appended to the leftover
    assert json.loads((out / "manifest.json").read_text())["format"] == "vlmevalkit"
    assert (out / "notes.txt").read_text() == "keep me\n"
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    refused(["import", str(sheet), "--out", str(a_file)], "must be a folder, not a file")
    assert a_file.read_text() == "x"
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "gone")
    refused(["import", str(sheet), "--out", str(dangling), "--overwrite"], "symbolic link to nothing")
    assert not (tmp_path / "gone").exists()


def test_bad_input_leaves_an_existing_run_whole_even_with_overwrite(imported: Path, tmp_path: Path) -> None:
    before = snapshot(imported)
    bad = tmp_path / "bad_POPE.json"
    bad.write_text(json.dumps([{"index": 1, "question": "Is there a cat?", "answer": "Maybe", "category": "random", "prediction": "yes"}]))
    refused(["import", str(bad), "--out", str(imported), "--overwrite"], "'answer' must be Yes or No")
    assert snapshot(imported) == before


def test_export_out_must_be_new_or_empty_and_overwrite_replaces_only_its_files(imported: Path, tmp_path: Path) -> None:
    out = tmp_path / "exp"
    out.mkdir()
    (out / "random_answers.json").write_text("the user's own POPE answers\n")
    (out / "keep.txt").write_text("keep\n")
    refused(["export", str(imported), "--format", "pope", "--out", str(out)], "--out is not empty")
    assert (out / "random_answers.json").read_text() == "the user's own POPE answers\n"
    printed = ok(["export", str(imported), "--format", "pope", "--out", str(out), "--overwrite"])
    assert "question texts: the samples' prompts" in printed
    assert (out / "random_answers.json").read_text() != "the user's own POPE answers\n"
    assert (out / "keep.txt").read_text() == "keep\n"
    a_file = tmp_path / "f"
    a_file.write_text("x")
    refused(["export", str(imported), "--format", "pope", "--out", str(a_file)], "must be a folder, not a file")


def test_report_replaces_its_own_report_but_not_the_users_file(imported: Path, tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text("<html>the user's page</html>")
    args = ["report", str(imported), "--headline", "text:pope", "--resamples", "0"]
    refused([*args, "--out", str(page)], "page.html", "--overwrite")
    assert page.read_text() == "<html>the user's page</html>"
    twin = tmp_path / "new.md"
    twin.write_text("my markdown\n")
    refused([*args, "--out", str(tmp_path / "new.html")], "new.md")
    assert not (tmp_path / "new.html").exists() and twin.read_text() == "my markdown\n"
    ours = tmp_path / "ours.html"
    ok([*args, "--out", str(ours)])
    ok([*args, "--out", str(ours)])  # a report halluprobe wrote is replaced without a word
    before = snapshot(imported)
    refused([*args, "--out", str(imported / "run.json"), "--overwrite"], "would replace a file of the run dir")
    assert snapshot(imported) == before


# -- nothing written outside --out --------------------------------------------------------------


@pytest.mark.parametrize("split", ["../../escape", "/tmp/halluprobe-absolute-split", "..", "a\\b", "tab\there"])
def test_a_split_that_is_no_plain_name_is_refused_at_import(tmp_path: Path, split: str) -> None:
    rows = [{"index": 1, "question": "Is there a cat in the image?", "answer": "Yes", "category": split, "prediction": "yes"}]
    path = tmp_path / "m_POPE.json"
    path.write_text(json.dumps(rows))
    refused(["import", str(path), "--out", str(tmp_path / "run")], "split", "cannot name a file", "m_POPE.json")
    assert not (tmp_path / "run").exists()
    assert not Path("/tmp/halluprobe-absolute-split_answers.json").exists()


def test_a_hand_edited_split_is_refused_again_at_export(imported: Path, tmp_path: Path) -> None:
    samples = imported / "samples.jsonl"
    samples.write_text(samples.read_text().replace('"split":"random"', '"split":"../../outside"'))
    refused(["export", str(imported), "--format", "pope", "--out", str(tmp_path / "a" / "b" / "exp")], "cannot name a file")
    assert not (tmp_path / "outside_answers.json").exists() and not (tmp_path / "a").exists()


# -- export only what pairs -----------------------------------------------------------------------


def test_export_refuses_a_run_missing_one_question_in_the_middle(scripted: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    run = copy_run(scripted[0], tmp_path / "run")
    lines = (run / "samples.jsonl").read_text().splitlines(keepends=True)
    gone = json.loads(lines[10])
    (run / "samples.jsonl").write_text("".join(lines[:10] + lines[11:]))
    line = refused(["export", str(run), "--format", "pope", "--out", str(tmp_path / "exp")], "have no answer")
    assert f"question {gone['question_id']}" in line and f"{gone['split']} questions" in line
    assert not (tmp_path / "exp").exists()


def test_export_takes_question_texts_only_from_the_benchmark_run_json_names(scripted: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    run, world = scripted
    printed = ok(["export", str(run), "--format", "pope", "--out", str(tmp_path / "exp")])
    assert "random question texts: " + str(world["random"]) + " (sha256 as recorded in run.json)" in printed
    exported = [json.loads(l) for l in (tmp_path / "exp" / "random_answers.json").read_text().splitlines()]
    asked = [json.loads(l) for l in world["random"].read_text().splitlines()]
    assert [e["question"] for e in exported] == [q["text"] for q in asked]
    # the benchmark edited after the run: its texts are not used (they were never asked)
    copy = copy_run(run, tmp_path / "copy")
    original = world["random"].read_text()
    try:
        world["random"].write_text(original.replace("Is there", "Was there ever"))
        printed = ok(["export", str(copy), "--format", "pope", "--out", str(tmp_path / "exp2")])
        assert "changed since the run" in printed
        texts = (tmp_path / "exp2" / "random_answers.json").read_text()
        assert "Was there ever" not in texts
        (copy / "complete.json").unlink()  # a killed run: nothing says every question was asked
        refused(["export", str(copy), "--format", "pope", "--out", str(tmp_path / "exp3")], "not complete")
        assert not (tmp_path / "exp3").exists()
    finally:
        world["random"].write_text(original)


def test_export_refuses_an_import_with_unanswered_labelled_questions(tmp_path: Path) -> None:
    """LLaVA-1.5's answers to 2,910 of the 3,000 random questions import (listed as unanswered),
    but their export would pair every later answer with another label."""
    splits = make_labels(tmp_path / "labels")
    answers, questions = make_llava(tmp_path, splits)
    kept = [l for l in answers.read_text().splitlines() if json.loads(l)["question_id"] != OFFSET["random"] + 3]
    answers.write_text("\n".join(kept) + "\n")
    labels = [a for s in splits for a in ("--labels", str(tmp_path / "labels" / f"coco_pope_{s}.json"))]
    ok(["import", "llava", str(answers), "--questions", str(questions), *labels, "--out", str(tmp_path / "run")])
    refused(["export", str(tmp_path / "run"), "--format", "pope", "--out", str(tmp_path / "exp")], "1 of the 8 random questions have no answer")


# -- format detection ---------------------------------------------------------------------------


def test_a_vlmevalkit_sheet_as_json_lines_is_not_read_as_generic_answers(tmp_path: Path) -> None:
    from halluprobe.imports import detect_format

    splits = make_labels(tmp_path / "labels")
    rows = vlmeval_rows(splits, extracted=False)
    path = write_lines(tmp_path / "sheet.jsonl", rows)
    assert detect_format(path) == "vlmevalkit"
    # its 'answer' is the label: with --labels the generic rule would score the labels (accuracy 1.0)
    refused(["import", str(path), "--labels", str(tmp_path / "labels" / "coco_pope_random.json"), "--out", str(tmp_path / "r")],
            "drop --labels")  # fmt: skip
    ok(["import", str(path), "--out", str(tmp_path / "run")])
    report = score_json(tmp_path / "run", "text:yorn")
    from halluprobe.readouts.text import yorn

    for split in splits:
        sub = [r for r in rows if split in r["category"].split(",")]
        right = sum(yorn(r["prediction"]) == r["answer"].lower() for r in sub)
        assert report["splits"][split]["accuracy"] == pytest.approx(right / len(sub)) != 1.0


# -- bounds on work -----------------------------------------------------------------------------


def test_corrections_bounds_are_one_line_before_any_work(scripted: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    run = scripted[0]
    refused(["corrections", str(run), "--folds", str(10**8)], "--folds 100000000 is over the limit")
    refused(["corrections", str(run), "--draws", str(10**8)], "--draws 100000000 is over the limit")
    refused(["corrections", str(run), "--resamples", str(10**9)], "--resamples 1000000000 is over the limit")
    grid = tmp_path / "grid.toml"
    values = ", ".join(str(v / 1000) for v in range(1, 1001))
    grid.write_text(f"[vcd]\nalpha = [{values}]\nbeta = [{values}]\n")
    refused(["corrections", str(run), "--grid", str(grid)], "grid.toml", "1,000,000 settings, over the limit")
    small = tmp_path / "small.toml"
    small.write_text("[bias]\nb = [0.5, 1]\n")
    refused(["corrections", str(run), "--grid", str(small), "--folds", "50", "--resamples", "0"], "more than the run's 6 images")


def test_an_xlsx_declaring_a_million_rows_reads_its_filled_rows(tmp_path: Path) -> None:
    openpyxl = pytest.importorskip("openpyxl")
    import zipfile

    rows = vlmeval_rows(make_labels(tmp_path / "labels"), extracted=False)
    book = openpyxl.Workbook()
    sheet = book.active
    columns = ["index", "question", "answer", "category", "prediction"]
    sheet.append(columns)
    for r in rows:
        sheet.append([r[c] for c in columns])
    sheet.append([None] * 5)  # formatting rows after the data: not answers
    plain = tmp_path / "plain.xlsx"
    book.save(plain)
    declared = tmp_path / "m_POPE.xlsx"
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(declared, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename.startswith("xl/worksheets/sheet"):
                text = data.decode()
                start = text.index("<dimension ref=\"")
                end = text.index("\"", start + 16)
                text = text[:start] + '<dimension ref="A1:XFD1048576' + text[end:]
                # one formatted empty cell in the sheet's last row and column: read as declared, every
                # row would be 16,384 cells wide and a million rows long (the import never ended)
                far = '<row r="1048576"><c r="XFD1048576" t="inlineStr"><is><t></t></is></c></row>'
                data = text.replace("</sheetData>", far + "</sheetData>").encode()
            dst.writestr(item, data)
    ok(["import", str(declared), "--out", str(tmp_path / "run")])
    assert len((tmp_path / "run" / "samples.jsonl").read_text().splitlines()) == sum(len(r["category"].split(",")) for r in rows)


# -- one reader each: long integers, Unicode digits, deep nesting, huge cells ------------------------


def test_long_integers_are_one_line_in_every_json_reader(tmp_path: Path, sheet: Path) -> None:
    make_labels(tmp_path / "labels")
    answers = tmp_path / "answers.jsonl"
    answers.write_text('{"question_id": ' + LONG_INT + ', "question": "Is there a cat?", "answer": "yes"}\n')
    labels = ["--labels", str(tmp_path / "labels" / "coco_pope_random.json")]
    refused(["import", "answers", str(answers), *labels, "--out", str(tmp_path / "r1")], "answers.jsonl:1", "too long")
    refused(["score", "--answers", str(answers), *labels], "answers.jsonl:1", "too long")
    refused(["import", str(answers), *labels, "--out", str(tmp_path / "r2")], "cannot tell the answers format")
    doc = tmp_path / "pope_random.json"
    doc.write_text('{"model_configs": {"task": "pope_random"}, "logs": [{"doc_id": ' + LONG_INT + "}]}")
    refused(["import", "lmms-eval", str(doc), *labels, "--out", str(tmp_path / "r3")])
    huge_id = tmp_path / "m2_POPE.json"
    huge_id.write_text('[{"index": ' + LONG_INT + ', "question": "q", "answer": "Yes", "category": "random", "prediction": "yes"}]')
    refused(["import", str(huge_id), "--out", str(tmp_path / "r4")], "m2_POPE.json", "too long")
    assert not any((tmp_path / f"r{i}").exists() for i in range(1, 5))


@pytest.mark.parametrize("index", ["²", "١٢", "1" * 5000, "-3", "1.5"], ids=["superscript", "arabic-indic", "5000-digits", "negative", "float"])
def test_ids_that_are_no_ascii_integer_are_one_line(tmp_path: Path, index: str) -> None:
    path = tmp_path / "m_POPE.tsv"
    path.write_text('"index"\t"question"\t"answer"\t"category"\t"prediction"\n' f'"{index}"\t"Is there a cat?"\t"Yes"\t"random"\t"yes"\n')
    refused(["import", str(path), "--out", str(tmp_path / "run")], "m_POPE.tsv:2", "index must be an integer id")


def test_deep_nesting_is_one_line_where_the_json_and_toml_readers_were_bypassed(imported: Path, tmp_path: Path) -> None:
    first = tmp_path / "deep.jsonl"
    first.write_text('{"a": ' + DEEP + "\n")
    refused(["import", str(first), "--out", str(tmp_path / "r")], "cannot tell the answers format")
    doc = tmp_path / "pope_random.json"
    doc.write_text('{"model_configs": {}, "logs": ' + DEEP + "}")
    refused(["import", "lmms-eval", str(doc), "--out", str(tmp_path / "r")])
    grid = tmp_path / "grid.toml"
    grid.write_text("[vcd]\nalpha = " + "[" * 5000 + "1" + "]" * 5000 + "\n")
    refused(["corrections", str(imported), "--grid", str(grid)], "grid.toml", "nested too deeply")
    grid.write_text("[vcd]\nalpha = " + LONG_INT + "\n")
    refused(["corrections", str(imported), "--grid", str(grid)], "grid.toml", "too long")
    table = tmp_path / "table.md"
    table.write_text("<!-- halluprobe-provenance " + DEEP + " -->\n| a |\n|---|\n| 1 |\n")
    refused(["check", str(table)], "table.md:1", "malformed provenance comment")
    table.write_text('<!-- halluprobe-provenance {"provenance": ' + LONG_INT + "} -->\n| a |\n|---|\n| 1 |\n")
    refused(["check", str(table)], "table.md:1", "malformed provenance comment")


def test_a_sheet_cell_over_128_kb_is_read_whole(tmp_path: Path) -> None:
    long_answer = "Yes, " + "and there is more to say " * 8000  # 200 kB: a long generated answer
    path = tmp_path / "m_POPE.tsv"
    path.write_text('"index"\t"question"\t"answer"\t"category"\t"prediction"\n' f'"1"\t"Is there a cat?"\t"Yes"\t"random"\t"{long_answer}"\n')
    ok(["import", str(path), "--out", str(tmp_path / "run")])
    stored = json.loads((tmp_path / "run" / "samples.jsonl").read_text().splitlines()[0])
    assert stored["text"] == long_answer


# -- options that do not combine are refused, not dropped ------------------------------------------


def test_options_that_do_not_combine_are_refused(imported: Path, tmp_path: Path) -> None:
    per_question = tmp_path / "pq.jsonl"
    refused(["score", str(imported), "--readout", "text:pope", "--compat", "lmms-eval", "--per-question", str(per_question)], "--compat")
    assert not per_question.exists()
    labels = tmp_path / "alt.json"
    labels.write_text("{}\n")
    refused(["audit", str(imported), "--table", "--labels", str(labels)], "--table", "--labels")
    refused(["score", str(imported), "--readout", "text:pope", "--overwrite"], "--overwrite is for --per-question")
    result = runner.invoke(app, ["score", str(imported), "--seed", "-1"])
    assert result.exit_code == 2 and "Traceback" not in result.output


def test_no_verb_wrote_outside_its_out(tmp_path: Path, sheet: Path) -> None:
    """A whole import, score, export, report round: every file written is under the folders named."""
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        before = set(tmp_path.rglob("*"))
        ok(["import", str(sheet), "--out", "run"])
        ok(["score", "run", "--readout", "text:pope", "--resamples", "0", "--per-question", "pq.jsonl"])
        ok(["export", "run", "--format", "lmms-eval", "--out", "exp"])
        ok(["report", "run", "--headline", "text:pope", "--resamples", "0", "--out", "rep.html"])
        new = {p.relative_to(tmp_path).parts[0] for p in set(tmp_path.rglob("*")) - before}
        assert new == {"run", "pq.jsonl", "exp", "rep.html", "rep.md"}
    finally:
        os.chdir(cwd)


# -- every verb that writes into --out: a file or a dangling link there is one line -----------------


def _out_verbs(run: Path, world: dict[str, Path]) -> dict[str, list[str]]:
    return {
        "run": _run_args(world, Path("OUT"))[:-2] + ["--out"],
        "merge": ["merge", str(run), "--out"],
        "demo": ["demo", "--out"],
        "import": ["import", "vlmevalkit", "no-such-sheet.tsv", "--out"],
        "export": ["export", str(run), "--format", "pope", "--out"],
        "prove score": ["prove", "score", "--data", "x", "--responses", str(run), "--out"],
        "prove build": ["prove", "build", "--model", "m", "--captions", "c", "--images", "i", "--out"],
        "probe build": ["probe", "build", "--model", "m", "--images", "i", "--detector", "d", "--out"],
        "probe induce": ["probe", "induce", "--model", "m", "--images", "i", "--prompts", "p", "--out"],
        "report": ["report", str(run), "--resamples", "0", "--out"],
    }


FILE_VERBS = ("report", "probe induce")  # their --out is a file: the wrong thing there is a folder


@pytest.mark.parametrize("verb", ["run", "merge", "demo", "import", "export", "prove score", "prove build", "probe build", *FILE_VERBS])
@pytest.mark.parametrize("what", ["the wrong kind", "dangling link"])
def test_the_wrong_kind_or_a_dangling_link_at_out_is_one_line(scripted: tuple[Path, dict[str, Path]], tmp_path: Path, verb: str, what: str) -> None:
    run, world = scripted
    target = tmp_path / "target"
    if what == "dangling link":
        target.symlink_to(tmp_path / "missing" / "place")
    elif verb in FILE_VERBS:
        target.mkdir()
        (target / "mine.txt").write_text("the user's file\n")
    else:
        target.write_text("the user's file\n")
    before = snapshot(run)
    line = refused([*_out_verbs(run, world)[verb], str(target)])
    assert "target" in line or "no-such-sheet" in line
    assert snapshot(run) == before
    if what == "dangling link":
        assert not (tmp_path / "missing").exists()
    else:
        kept = target / "mine.txt" if target.is_dir() else target
        assert kept.read_text() == "the user's file\n"


@pytest.mark.parametrize("verb", ["score", "audit", "report", "corrections"])
def test_resamples_beyond_the_limit_are_one_line_in_every_verb(imported: Path, verb: str) -> None:
    before = snapshot(imported)
    refused([verb, str(imported), "--resamples", str(10**9)], "--resamples 1000000000 is over the limit of 100,000")
    assert snapshot(imported) == before


@pytest.mark.parametrize(("cell", "finding"), [(LONG_INT, "differs"), ("²", "unparseable")], ids=["5000-digits", "superscript"])
def test_check_reads_a_count_cell_it_cannot_convert_as_a_finding(imported: Path, tmp_path: Path, cell: str, finding: str) -> None:
    table = ok(["score", str(imported), "--readout", "text:pope", "--resamples", "0", "--markdown"])
    lines = table.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("| random"))
    cells = lines[row].split("|")
    cells[2] = f" {cell} "  # the n column: a count
    lines[row] = "|".join(cells)
    path = tmp_path / "table.md"
    path.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["check", str(path)])
    assert result.exit_code == 1 and "Traceback" not in result.output and f"table.md:{row + 1}: {finding}" in result.output, result.output


def test_a_category_that_is_no_string_is_refused_not_named_by_its_repr(tmp_path: Path) -> None:
    path = tmp_path / "m_POPE.json"
    path.write_text(json.dumps([{"index": 1, "question": "Is there a cat?", "answer": "Yes", "category": ["random"], "prediction": "yes"}]))
    refused(["import", str(path), "--out", str(tmp_path / "run")], "'category' must be a string")
    assert not (tmp_path / "run").exists()


def test_half_an_emoji_in_an_imported_answer_is_stored_as_a_replacement_character(tmp_path: Path) -> None:
    path = tmp_path / "m_POPE.json"
    path.write_text('[{"index": 1, "question": "Is there a cat?", "answer": "Yes", "category": "random", "prediction": "yes \\ud83d"}]')
    ok(["import", str(path), "--out", str(tmp_path / "run")])
    stored = json.loads((tmp_path / "run" / "samples.jsonl").read_text())
    assert stored["text"] == "yes \ufffd"


def test_run_into_a_folder_with_a_leftover_samples_file_is_refused_not_appended_to(scripted: tuple[Path, dict[str, Path]], tmp_path: Path) -> None:
    run, world = scripted
    out = tmp_path / "out"
    out.mkdir()
    leftover = (run / "samples.jsonl").read_text().splitlines(keepends=True)[:5]
    (out / "samples.jsonl").write_text("".join(leftover))
    refused(_run_args(world, out), "samples.jsonl", "without its run.json", "--overwrite")
    assert (out / "samples.jsonl").read_text() == "".join(leftover) and not (out / "run.json").exists()
    ok(_run_args(world, out, "--overwrite"))
    assert len((out / "samples.jsonl").read_text().splitlines()) == 72  # the new run's own, nothing appended


def test_export_follows_the_labels_file_line_order_not_the_id_order(tmp_path: Path) -> None:
    """The tools pair answers with the labels file by line: a file whose ids are not ascending
    must be exported in its own order."""
    world = _make_world(tmp_path)
    lines = world["random"].read_text().splitlines()
    world["random"].write_text("\n".join(reversed(lines)) + "\n")
    ok(_run_args(world, tmp_path / "run"))
    ok(["export", str(tmp_path / "run"), "--format", "lmms-eval", "--out", str(tmp_path / "exp")])
    exported = [json.loads(l) for l in (tmp_path / "exp" / "samples_pope_random.jsonl").read_text().splitlines()]
    asked = [json.loads(l) for l in reversed(lines)]
    assert [e["input"].split("\n")[0] for e in exported] == [q["text"] for q in asked]
    assert [e["target"] for e in exported] == [q["label"] for q in asked]
