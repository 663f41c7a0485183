"""HallusionBench answers in the official result layout, imported as a run dir.

The official ``evaluation.py`` reads ``HallusionBench_result.json``: the question file's records
with the model's answer added as ``model_prediction`` (and, once judged, the judge's verdict per
question: ``gpt4v_output_gpt_check``, "1" correct, "0" incorrect, "2" uncertain). Each record is
keyed by category, subcategory, set, figure and question id, split and id as
:mod:`halluprobe.benchmarks.hallusionbench` writes them; the label is the record's
``gt_answer``, or, where the result file lacks it (the repository's own sample does), that of the
question file given with ``--labels``. Questions asked without a figure are imported too (their
answers were made by a tool that asks text alone), so aAcc and qAcc cover the whole benchmark.

A judged file's verdicts are kept as the readout ``hallusionbench:judge`` (correct: the label;
incorrect: the other answer; uncertain: unknown), so the official judged aAcc / fAcc / qAcc are
recomputed from it beside every rule-based reading of the same answers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from halluprobe.benchmarks.hallusionbench import pack_id
from halluprobe.errors import InputError
from halluprobe.imports.common import Imported, ImportResult, InputFiles
from halluprobe.jsonl import loads, type_name
from halluprobe.records import Decision, Label

__all__ = ["JUDGE_ENTRY", "JUDGE_READOUT", "read_hallusionbench_results"]

JUDGE_ENTRY = "gpt4v_output_gpt_check"  # evaluation.py's model_correctness_entry
JUDGE_READOUT = "hallusionbench:judge"
_KEYS = ("category", "subcategory", "set_id", "figure_id", "question_id")


def _records(path: Path, inputs: InputFiles) -> list[dict[str, Any]]:
    text = inputs.text(path, "HallusionBench result file")
    try:
        data = loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"malformed JSON (truncated?): {e.msg} (column {e.colno})", path, e.lineno) from e
    if not isinstance(data, list) or not all(isinstance(r, dict) for r in data):
        raise InputError(f"expected a JSON array of records, got {type_name(data)}", path)
    return data


def _key(rec: dict[str, Any], path: Path, number: int) -> tuple[str, int]:
    missing = [k for k in _KEYS if k not in rec]
    if missing:
        raise InputError(f"record {number} lacks {', '.join(missing)}", path)
    ids = [str(rec[k]) for k in ("set_id", "figure_id", "question_id")]
    if rec["category"] not in ("VD", "VS") or not all(i.isdigit() and len(i) <= 6 for i in ids) or int(ids[1]) >= 100 or int(ids[2]) >= 100:
        raise InputError(f"record {number}: not a HallusionBench question key ({', '.join(f'{k}={rec[k]!r}' for k in _KEYS)})", path)
    return f"{rec['category']}_{rec['subcategory']}", pack_id(*(int(i) for i in ids))


def _label(value: object) -> Label | None:
    return {"1": "yes", "0": "no"}.get(str(value))  # type: ignore[return-value]


def read_hallusionbench_results(files: list[Path], questions: Path | None, *, inputs: InputFiles | None = None) -> ImportResult:
    """The result files (``model_prediction`` per record); ``questions``: HallusionBench.json, for labels the results lack."""
    inputs = inputs or InputFiles()
    labels: dict[tuple[str, int], Label] = {}
    if questions is not None:
        for number, rec in enumerate(_records(questions, inputs)):
            label = _label(rec.get("gt_answer"))
            if label is not None:
                labels[_key(rec, questions, number)] = label
    result = ImportResult(format="hallusionbench", answers=[], sources=list(files), inputs=inputs, max_new_tokens=512)
    judged = False
    for path in files:
        for number, rec in enumerate(_records(path, inputs)):
            split, qid = _key(rec, path, number)
            label = _label(rec.get("gt_answer")) or labels.get((split, qid))
            if label is None:
                raise InputError(f"record {number}: no gt_answer, and none in the question file (give HallusionBench.json with --labels)", path)
            prediction = rec.get("model_prediction")
            if not isinstance(prediction, str):
                raise InputError(f"record {number}: 'model_prediction' must be the model's answer (a string), got {type_name(prediction)}", path)
            tool: dict[str, Decision] = {}
            verdict = rec.get(JUDGE_ENTRY)
            if verdict is not None:
                if str(verdict) not in ("0", "1", "2"):
                    raise InputError(f"record {number}: {JUDGE_ENTRY} must be 0, 1 or 2, got {verdict!r}", path)
                other: Label = "no" if label == "yes" else "yes"
                tool[JUDGE_READOUT] = {"1": label, "0": other, "2": "unknown"}[str(verdict)]  # type: ignore[assignment]
                judged = True
            category, _, sub = split.partition("_")
            rest = qid // 100  # set_id * 100 + figure_id
            image = f"{category}/{sub}/{rest // 100}_{rest % 100}.png"
            result.answers.append(
                Imported(split=split, question_id=qid, image=image, prompt=str(rec.get("question") or ""), text=prediction,
                         label=label, object=None, source=f"{path}:record {number}", tool_readouts=tool)  # fmt: skip
            )
    if judged:
        result.tool_rules[JUDGE_READOUT] = f"the official judge's verdict ({JUDGE_ENTRY}: correct, incorrect, uncertain) as a decision"
    return result
