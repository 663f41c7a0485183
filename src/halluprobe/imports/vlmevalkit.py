"""VLMEvalKit's POPE prediction sheet (``<model>_POPE.xlsx``, ``.tsv``, ``.csv`` or ``.json``) and its
``_auxmatch`` sheet.

Columns: ``index``, ``question``, ``answer`` (``Yes``/``No``: the label), ``category`` (the
split, or several comma-separated: VLMEvalKit's POPE file holds a question once when several
splits ask it, and its scorer explodes the row into each), ``prediction`` (the model's answer).
The ``_auxmatch`` sheet adds ``extracted`` (``Yes``/``No``/``Unknown``), VLMEvalKit's parse,
kept here as ``vlmevalkit:auxmatch``: without a judge model it is ``YOrN_Extraction`` (=
``text:yorn``); with one, the judge has replaced the Unknowns, so it is no rule at all.
A row becomes one sample per split it names, its ``index`` the question id. The sheet has no
image names (unless an ``image_path`` column survives), so each question is its own bootstrap
cluster. TSV is read as VLMEvalKit writes it (tab-separated, every field quoted), CSV the same
with commas (a per-split score ``.csv`` has none of these columns and is refused); JSON as a
list of records; xlsx only when ``openpyxl`` is installed (it is not a dependency).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from halluprobe.benchmarks.question_file import object_from_text
from halluprobe.errors import InputError
from halluprobe.imports.common import Imported, ImportResult, InputFiles, as_int_id, yes_no
from halluprobe.jsonl import read_records

__all__ = ["MAX_SHEET_ROWS", "REQUIRED_COLUMNS", "TOOL_READOUT", "read_sheet", "read_vlmevalkit"]

REQUIRED_COLUMNS = ("index", "question", "answer", "category", "prediction")
TOOL_READOUT = "vlmevalkit:auxmatch"
# VLMEvalKit records no generation length for POPE; a nominal positive length says "text stored"
VLMEVALKIT_MAX_NEW_TOKENS = 512
# POPE's three splits are 9,000 questions; a sheet of over a million rows is something else
MAX_SHEET_ROWS = 1_000_000


def read_sheet(path: Path, inputs: InputFiles | None = None) -> list[tuple[int, dict[str, Any]]]:
    """(row number as a spreadsheet shows it, header = 1; or record number for JSON, from 0) and row.
    Any other suffix is read as JSON (a sheet saved as JSON lines, told by its columns)."""
    suffix = path.suffix.lower()
    if suffix in (".tsv", ".csv"):
        return _read_delimited(path, inputs or InputFiles(), "\t" if suffix == ".tsv" else ",")
    if suffix == ".xlsx":
        return _read_xlsx(path)
    return [(r.line if r.line is not None else r.index, r.value) for r in read_records(path, "VLMEvalKit sheet")]


def _read_delimited(path: Path, inputs: InputFiles, delimiter: str) -> list[tuple[int, dict[str, Any]]]:
    text = inputs.text(path, "VLMEvalKit sheet")
    # the csv module's 128 kB default refuses one long generated answer; the text is in memory already
    csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    rows: list[tuple[int, dict[str, Any]]] = []
    try:
        for number, row in enumerate(reader, start=2):  # the row as a spreadsheet numbers it
            rows.append((number, dict(row)))
    except csv.Error as err:
        raise InputError(f"not a readable sheet: {err}", path, reader.line_num) from None
    return rows


def _read_xlsx(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """The non-empty rows of the active sheet, as wide as its header (a blank row, or the empty
    formatted rows after the data, is no answer). The sheet's declared dimensions are ignored (a
    sheet may declare a million rows and 16,384 columns it does not have: read as declared, every
    row would be a dict of 16,384 cells); more than :data:`MAX_SHEET_ROWS` filled rows are refused."""
    try:
        from openpyxl import load_workbook  # optional: not a dependency of halluprobe
    except ImportError:
        raise InputError("reading .xlsx needs openpyxl (pip install openpyxl), or save the sheet as .tsv", path) from None
    try:
        sheet: Any = load_workbook(path, read_only=True).active
        sheet.reset_dimensions()  # read what is there, not what the file's <dimension> declares
        rows_in = sheet.iter_rows(values_only=True)
        header = next(rows_in, None)
        names = [str(c) for c in header or ()]
        while names and names[-1] == "None":  # empty header cells past the last column
            names.pop()
        if not names:
            raise InputError("empty sheet", path)
        rows: list[tuple[int, dict[str, Any]]] = []
        for number, row in enumerate(rows_in, start=2):
            values = tuple(row[: len(names)])
            if all(v is None or v == "" for v in values):
                continue
            if len(rows) == MAX_SHEET_ROWS:
                raise InputError(f"more than {MAX_SHEET_ROWS:,} filled rows: not a POPE prediction sheet", path, number)
            rows.append((number, dict(zip(names, values))))
    except InputError:
        raise
    except Exception as err:  # noqa: BLE001 - openpyxl raises zipfile, KeyError or its own errors for a bad file
        raise InputError(f"not a readable .xlsx workbook ({type(err).__name__}: {err})", path) from None
    return rows


def read_vlmevalkit(path: Path, *, inputs: InputFiles | None = None) -> ImportResult:
    """Every row of a POPE prediction (or ``_auxmatch``) sheet, one sample per split it names."""
    inputs = inputs or InputFiles()
    rows = read_sheet(path, inputs)
    if not rows:
        raise InputError("empty sheet", path)
    columns = set(rows[0][1])
    missing = [c for c in REQUIRED_COLUMNS if c not in columns]
    if missing:
        raise InputError(f"the sheet lacks column(s) {', '.join(missing)} (expected {', '.join(REQUIRED_COLUMNS)})", path, rows[0][0])
    has_extracted = "extracted" in columns
    result = ImportResult(
        format="vlmevalkit",
        answers=[],
        sources=[path],
        inputs=inputs,
        max_new_tokens=VLMEVALKIT_MAX_NEW_TOKENS,
        tool_rules={TOOL_READOUT: "VLMEvalKit's 'extracted' (YOrN_Extraction; a judge model, if one was used, replaced its Unknowns)"}
        if has_extracted
        else {},
        notes=["labels are the sheet's 'answer' column; no image names, so CIs resample questions, not images"],
    )
    for number, row in rows:
        index = as_int_id(row.get("index"), "index", path, number, digits_ok=True)
        label = str(row.get("answer") or "").strip()
        if label not in ("Yes", "No"):
            raise InputError(f"'answer' must be Yes or No, got {row.get('answer')!r}", path, number)
        prediction = row.get("prediction")
        if prediction is None or (isinstance(prediction, float) and prediction != prediction):
            prediction = ""  # pandas writes an empty answer as NaN; VLMEvalKit scores str(x)
        category = row.get("category")
        if not isinstance(category, str):  # a list or a number would become a split named by its repr
            raise InputError(f"'category' must be a string of split names, got {type(category).__name__}", path, number)
        splits = [s.strip() for s in category.split(",") if s.strip()]
        if not splits:
            raise InputError("'category' names no split", path, number)
        tool = {}
        if has_extracted:
            extracted = str(row.get("extracted") or "").strip()
            if extracted not in ("Yes", "No", "Unknown"):
                raise InputError(f"'extracted' must be Yes, No or Unknown, got {row.get('extracted')!r}", path, number)
            tool[TOOL_READOUT] = yes_no(extracted)
        image = row.get("image_path")
        for split in splits:
            result.answers.append(
                Imported(
                    split=split,
                    question_id=index,
                    image=str(image) if isinstance(image, str) and image else f"vlmevalkit:{index}",
                    prompt=str(row.get("question") or ""),
                    text=str(prediction),
                    label=label.lower(),  # type: ignore[arg-type]
                    object=object_from_text(str(row.get("question") or "")),
                    source=f"{path}:{number}",
                    tool_readouts=dict(tool),
                )
            )
    return result
