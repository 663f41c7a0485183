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

from halluprobe.errors import InputError
from halluprobe.benchmarks.pope import object_from_text
from halluprobe.imports.common import Imported, ImportResult, InputFiles, as_int_id, yes_no
from halluprobe.jsonl import read_records

__all__ = ["REQUIRED_COLUMNS", "TOOL_READOUT", "read_sheet", "read_vlmevalkit"]

REQUIRED_COLUMNS = ("index", "question", "answer", "category", "prediction")
TOOL_READOUT = "vlmevalkit:auxmatch"
# VLMEvalKit records no generation length for POPE; a nominal positive length says "text stored"
VLMEVALKIT_MAX_NEW_TOKENS = 512


def read_sheet(path: Path, inputs: InputFiles | None = None) -> list[tuple[int, dict[str, Any]]]:
    """(row number as a spreadsheet shows it, header = 1; or record number for JSON, from 0) and row."""
    suffix = path.suffix.lower()
    if suffix == ".json" or suffix == ".jsonl":
        return [(r.line if r.line is not None else r.index, r.value) for r in read_records(path, "VLMEvalKit sheet")]
    if suffix in (".tsv", ".csv"):
        text = (inputs or InputFiles()).text(path, "VLMEvalKit sheet")
        reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if suffix == ".tsv" else ",")
        return [(number, dict(row)) for number, row in enumerate(reader, start=2)]
    if suffix == ".xlsx":
        try:
            from openpyxl import load_workbook  # optional: not a dependency of halluprobe
        except ImportError:
            raise InputError("reading .xlsx needs openpyxl (pip install openpyxl), or save the sheet as .tsv", path) from None
        try:
            sheet = load_workbook(path, read_only=True).active
        except Exception as err:  # noqa: BLE001 - openpyxl raises zipfile, KeyError or its own errors for a bad file
            raise InputError(f"not a readable .xlsx workbook ({type(err).__name__}: {err})", path) from None
        rows = list(sheet.iter_rows(values_only=True))  # type: ignore[union-attr]
        if not rows:
            raise InputError("empty sheet", path)
        names = [str(c) for c in rows[0]]
        return [(number, dict(zip(names, row))) for number, row in enumerate(rows[1:], start=2)]
    raise InputError(f"unknown sheet type {suffix!r} (expected .xlsx, .tsv, .csv or .json)", path)


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
        splits = [s.strip() for s in str(row.get("category") or "").split(",") if s.strip()]
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
