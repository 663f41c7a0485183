"""DASH-B's answers file (YanNeu/DASH-B commit 0ed9a618404c, ``src/eval_utils.py``
``compute_results``), e.g. ``output/Paligemma-3b_answers.json``.

A pretty-printed JSON array with one object per benchmark image, in ``load_benchmark_dictionaries``
order: ``{"img_id", "object_name", "gt", "response", "answer"}`` (later commits add
``question_id``); ``gt`` the label, ``response`` the model's text, ``answer`` DASH-B's own parse
of it (``compute_answer``: yes / no / null). The labels are in the file: no ``--labels``.

Each entry becomes one sample of split ``dashb`` (or ``--split``): its question id the entry's
``question_id`` where it has one, else its 1-based position; its image the key
``object_name/img_id`` (positive file names repeat across objects, so a file name alone does
not name an image); its prompt DASH-B's default query (``get_prompt``, prompt_id 4), which the
file does not store. DASH-B's stored parse is kept as the readout ``dashb:compute_answer`` (null
-> unknown); ``text:dashb`` recomputes it from the response.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from halluprobe.errors import InputError
from halluprobe.imports.common import Imported, ImportResult, InputFiles, as_int_id, yes_no
from halluprobe.jsonl import read_records, type_name
from halluprobe.readouts.literature import dashb

__all__ = ["DASHB_PROMPT", "DASHB_SPLIT", "TOOL_READOUT", "read_dashb"]

DASHB_SPLIT = "dashb"
TOOL_READOUT = "dashb:compute_answer"
# src/data/dash_b.py get_prompt(target_label, prompt_id=4), the default every evaluator uses
DASHB_PROMPT = "Can you see a {object} in this image? Please answer only with yes or no."
# the base evaluator's generation setting (src/vlms/dash_utils/vlm_utils/models/base_model.py);
# its InternVL and Ovis evaluators allow 1024
DASHB_MAX_NEW_TOKENS = 15


def read_dashb(files: Sequence[Path], split: str | None = None, *, inputs: InputFiles | None = None) -> ImportResult:
    """Every entry of DASH-B answers files as a sample (see the module docstring)."""
    inputs = inputs or InputFiles()
    split = split or DASHB_SPLIT
    result = ImportResult(
        format="dashb",
        answers=[],
        sources=list(files),
        inputs=inputs,
        max_new_tokens=DASHB_MAX_NEW_TOKENS,
        tool_rules={TOOL_READOUT: "DASH-B's compute_answer as stored in its answers file ('yes' in the response, then 'no'; null -> unknown)"},
        notes=[
            "DASH-B's prompt is not stored in its answers file: each sample's prompt is its default query (prompt_id 4)",
            "DASH-B reports accuracy, TPR, TNR and their harmonic mean with the stored answer; null counts as wrong",
        ],
    )
    differ = 0
    for path in files:
        for rec in read_records(path, "DASH-B answers"):
            obj, where = rec.value, rec.where
            for key in ("img_id", "object_name", "response"):
                if not isinstance(obj.get(key), str):
                    raise InputError(f"{where}'{key}' must be a string, got {type_name(obj.get(key))} (DASH-B answers: img_id, object_name, gt, response, answer)", path, rec.line)
            gold = str(obj.get("gt", "")).strip().lower()
            if gold not in ("yes", "no"):
                raise InputError(f"{where}'gt' must be yes or no, got {obj.get('gt')!r}", path, rec.line)
            stored = obj.get("answer")
            if stored is not None and yes_no(stored) == "unknown":
                raise InputError(f"{where}'answer' must be yes, no or null, got {stored!r}", path, rec.line)
            decision = yes_no(stored) if stored is not None else "unknown"
            differ += decision != dashb(obj["response"])
            qid = as_int_id(obj["question_id"], f"{where}question_id", path, rec.line, digits_ok=True) if "question_id" in obj else rec.index + 1
            result.answers.append(
                Imported(
                    split=split,
                    question_id=qid,
                    image=f"{obj['object_name']}/{obj['img_id']}",
                    prompt=DASHB_PROMPT.format(object=obj["object_name"]),
                    text=obj["response"],
                    label=gold,  # type: ignore[arg-type]
                    object=obj["object_name"],
                    source=f"{path}:{rec.line}" if rec.line is not None else f"{path}:record {rec.index}",
                    tool_readouts={TOOL_READOUT: decision},
                )
            )
    if differ:
        result.notes.append(f"{differ} stored answers differ from text:dashb on their response (edited or made by another rule)")
    return result
