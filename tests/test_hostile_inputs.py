"""The readers of the user's files under hostile input (issue 25): format detection that cannot
read a label as an answer, bounds on work taken from flags and files, and one reader per syntax
(JSON, TOML, ids, sheets) mapping long integers, Unicode digits, deep nesting and huge cells to
one line (exit 2): never a traceback, never exit 0 with a wrong number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _hostile import DEEP, LONG_INT, imported, ok, refused, runner, scripted, snapshot  # noqa: F401 (imported, scripted: fixtures)
from halluprobe.cli import app
from test_imports import make_labels, score_json, write_lines
from test_imports_tools import vlmeval_rows


def test_a_vlmevalkit_sheet_as_json_lines_is_not_read_as_generic_answers(tmp_path: Path) -> None:
    from halluprobe.imports.formats import detect_format

    splits = make_labels(tmp_path / "labels")
    rows = vlmeval_rows(splits, extracted=False)
    path = write_lines(tmp_path / "sheet.jsonl", rows)
    assert detect_format(path) == "vlmevalkit"
    # its 'answer' is the label: with --labels the generic rule would score the labels (accuracy 1.0)
    refused(["import", str(path), "--labels", str(tmp_path / "labels" / "coco_pope_random.json"), "--out", str(tmp_path / "r")],
            "drop --labels")  # fmt: skip
    labels = ["--labels", str(tmp_path / "labels" / "coco_pope_random.json")]
    for forced in (["import", "answers", str(path), *labels, "--out", str(tmp_path / "r")], ["score", "--answers", str(path), *labels]):
        refused(forced, "sheet.jsonl:1", "its 'answer' is the label")  # the generic rule, named by hand, is refused too
    ok(["import", str(path), "--out", str(tmp_path / "run")])
    report = score_json(tmp_path / "run", "text:yorn")
    from halluprobe.readouts.text import yorn

    for split in splits:
        sub = [r for r in rows if split in r["category"].split(",")]
        right = sum(yorn(r["prediction"]) == r["answer"].lower() for r in sub)
        assert report["splits"][split]["accuracy"] == pytest.approx(right / len(sub)) != 1.0


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
    active = book.active
    columns = ["index", "question", "answer", "category", "prediction"]
    active.append(columns)
    for r in rows:
        active.append([r[c] for c in columns])
    active.append([None] * 5)  # formatting rows after the data: not answers
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


def test_long_integers_are_one_line_in_every_json_reader(tmp_path: Path) -> None:
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

