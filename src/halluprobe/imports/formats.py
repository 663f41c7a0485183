"""Answers other tools made, imported as run dirs (and halluprobe's runs exported for them).

``import_answers(format, files, out, ...)`` reads LLaVA, lmms-eval, VLMEvalKit, POPE or generic
answers (:func:`detect_format` where the format can be told from the file) and writes an
ordinary run dir (:mod:`halluprobe.imports.common`): ``score``, ``audit`` and ``report`` then
apply every text rule at score time, and the importing tool's own stored decision is a readout
named ``<tool>:<rule>``. :mod:`halluprobe.imports.export` writes a run's answers back out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from halluprobe.errors import InputError
from halluprobe.imports.answers import read_answers_format
from halluprobe.imports.captions import CAPTION_FORMATS
from halluprobe.imports.common import ImportResult, InputFiles, LabelIndex, check_import_out, write_imported_run
from halluprobe.imports.dashb import read_dashb
from halluprobe.imports.hallusionbench import read_hallusionbench_results
from halluprobe.imports.llava import read_llava, read_llava_by_labels
from halluprobe.imports.lmms_eval import looks_like_lmms_eval, read_lmms_eval
from halluprobe.imports.marine import read_marine
from halluprobe.imports.mme import MME_FORMATS, read_lmms_eval_mme, read_mme_results
from halluprobe.imports.vlmevalkit import read_vlmevalkit
from halluprobe.jsonl import loads
from halluprobe.rundir import RunDir

__all__ = ["FORMATS", "SHEET_SUFFIXES", "detect_format", "read_import", "import_answers"]

FORMATS = ("llava", "lmms-eval", "vlmevalkit", "pope", "answers", "marine", "dashb", *MME_FORMATS, "hallusionbench")
# VLMEvalKit writes its sheets as .xlsx by default, or .tsv / .csv; no other format uses them
SHEET_SUFFIXES = (".xlsx", ".tsv", ".csv")


def detect_format(path: Path, inputs: InputFiles | None = None) -> str:
    """The format of ``path`` when its suffix (a spreadsheet: VLMEvalKit) or its first record
    tells it unambiguously; else InputError. The text read is kept in ``inputs`` for the reader."""

    if path.suffix.lower() in SHEET_SUFFIXES:
        return "vlmevalkit"
    text = (inputs or InputFiles()).text(path, "answers file")
    head = text.lstrip()
    if head.startswith("{") and '"logs"' in head and '"model_configs"' in head:
        return "lmms-eval"
    if head.startswith("["):
        if all(f'"{key}"' in head[:2000] for key in ("img_id", "object_name", "gt", "response")):
            return "dashb"  # DASH-B's answers array
        return "vlmevalkit"  # a JSON sheet: VLMEvalKit dumps a DataFrame as a list of records
    first_line = head.split("\n", 1)[0]
    try:
        first = loads(first_line)
    except json.JSONDecodeError:
        first = None
    if isinstance(first, dict):
        if looks_like_lmms_eval(first):
            return "lmms-eval"
        if {"question_id", "image_id", "prompt", "text"} <= set(first):
            return "marine"  # LLaVA's fields keyed by image_id, labels in a separate array
        if {"question_id", "prompt", "text"} <= set(first):
            return "llava"  # LLaVA's model_vqa_loader (answer_id) or VCD's lines (image, no answer_id)
        # VLMEvalKit's sheet as JSON lines also has {question, answer}, but its 'answer' is the
        # label: its own columns decide first, or every label would be read as the prediction
        if "prediction" in first and ({"index", "category"} & set(first)):
            return "vlmevalkit"
        if {"question", "answer"} <= set(first):
            return "answers"
    raise InputError("cannot tell the answers format from the first line: pass the format word (" + ", ".join(FORMATS)
                     + "; captions: " + ", ".join(CAPTION_FORMATS) + ")", path, 1)  # fmt: skip


def read_import(
    fmt: str | None,
    files: Sequence[Path],
    *,
    labels: Sequence[Path] = (),
    questions: Path | None = None,
    split: str | None = None,
) -> ImportResult:
    """Read ``files`` as ``fmt`` (detected from the first file when None)."""
    if not files:
        raise InputError("no answers file given")
    inputs = InputFiles()  # detection's read of the first file is the reader's
    if fmt is None:
        fmt = detect_format(files[0], inputs)
        if fmt in ("llava", "marine") and not labels:  # LLaVA-style lines: POPE answers or captions asking a question
            need = "--labels (and --questions for LLaVA's pooled answers)" if fmt == "llava" else "--labels"
            raise InputError(f"read as {fmt} POPE answers, which need {need}; if these are captions (one description per "
                             f"image, scored by `halluprobe chair`), import them with `halluprobe import llava-captions`", files[0])  # fmt: skip
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    if fmt in MME_FORMATS:  # MME's labels are in the answers files themselves (imports.mme)
        if labels or questions is not None or split is not None:
            raise InputError(f"the {fmt} format takes its labels from the answers files: drop --labels, --questions and --split")
        return read_mme_results(list(files), inputs=inputs) if fmt == "mme" else read_lmms_eval_mme(list(files), inputs=inputs)
    if fmt == "hallusionbench":  # labels: the records' gt_answer, else HallusionBench.json (imports.hallusionbench)
        if len(labels) > 1 or questions is not None or split is not None:
            raise InputError("the hallusionbench format takes at most one --labels (HallusionBench.json), and no --questions or --split")
        return read_hallusionbench_results(list(files), labels[0] if labels else None, inputs=inputs)
    if fmt in ("marine", "dashb"):  # their labels are not POPE labels files (imports.marine, imports.dashb)
        return _read_published(fmt, files, labels, questions, split, inputs)
    try:
        index = LabelIndex(labels) if labels else None
    except InputError as e:
        if fmt == "llava" and "question_id" in e.problem:  # MARINE's labels are keyed 'id', not POPE's question_id
            raise InputError(f"{e.problem}; labels keyed 'id' are MARINE's: use `halluprobe import marine`", e.path, e.line) from None
        raise
    if fmt == "llava":

        if index is None:
            raise InputError("the llava format needs --labels (POPE labels, one per split), and --questions for LLaVA's own pooled answers")
        if questions is None:  # one split per file (VCD and its successors): paired by id and text

            return read_llava_by_labels(list(files), index, inputs=inputs)
        return read_llava(list(files), questions, index, inputs=inputs)
    if questions is not None:
        raise InputError(f"--questions is for the llava format, not {fmt}")
    if fmt == "lmms-eval":

        return read_lmms_eval(list(files), index, split, inputs=inputs)
    if split is not None:
        raise InputError(f"--split is for the lmms-eval format, not {fmt}")
    if fmt == "vlmevalkit":

        if index is not None:
            raise InputError("the vlmevalkit format takes its labels from the sheet's 'answer' column: drop --labels")
        if len(files) != 1:
            raise InputError("the vlmevalkit format reads one sheet at a time")
        return read_vlmevalkit(files[0], inputs=inputs)

    if index is None:
        raise InputError(f"the {fmt} format needs --labels (POPE labels files, one per split)")
    return read_answers_format(list(files), index, fmt, inputs=inputs)


def _read_published(
    fmt: str, files: Sequence[Path], labels: Sequence[Path], questions: Path | None, split: str | None, inputs: InputFiles
) -> ImportResult:
    if questions is not None:
        raise InputError(f"--questions is for the llava format, not {fmt}")
    if fmt == "marine":

        if not labels:
            raise InputError("the marine format needs --labels (MARINE's labels file keyed 'id', or a POPE labels file)")
        return read_marine(list(files), [Path(p) for p in labels], split, inputs=inputs)

    if labels:
        raise InputError("the dashb format takes its labels from the answers file's 'gt': drop --labels")
    return read_dashb(list(files), split, inputs=inputs)


def import_answers(
    fmt: str | None,
    files: Sequence[Path],
    out: Path,
    *,
    labels: Sequence[Path] = (),
    questions: Path | None = None,
    split: str | None = None,
    model: str | None = None,
    overwrite: bool = False,
) -> tuple[RunDir, ImportResult]:
    """Read and write: the run dir and what was read (for the CLI's summary). ``out`` is checked
    before anything is read, and written only once everything read is valid."""
    check_import_out(out, overwrite=overwrite)
    result = read_import(fmt, files, labels=labels, questions=questions, split=split)
    if model is not None:
        result.model = model
    return write_imported_run(result, out, overwrite=overwrite), result
