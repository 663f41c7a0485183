"""MME answers other tools wrote, imported as run dirs the `mme` verb scores with every text rule.

- ``mme``: the official eval tool's results files (``<subtask>.txt``: image, question, answer,
  response, tab-separated; :func:`halluprobe.benchmarks.mme.read_eval_tool_file`), one file per
  subtask; question ids in line order, as the tool pairs them.
- ``lmms-eval-mme``: lmms-eval's ``--log_samples`` JSON Lines of its ``mme`` task. Every version
  keeps the metric entry (``mme_perception_score`` or ``mme_cognition_score``: the document's
  ``question_id``, which in lmms-lab's copy is the image path, and its ``category``), the label
  as ``target`` and the answer in ``filtered_resps``; the question is ``doc.question`` where the
  log kept the document, else the prompt in ``input`` or ``arguments``. Question ids number each
  category's samples in ``doc_id`` order.

Neither stores a decision that the text cannot give back (``text:mme`` is calculation.py's parse,
``text:mme@lmms-eval`` lmms-eval's), so no ``<tool>:<rule>`` readout is stored.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from halluprobe.benchmarks.mme import COGNITION, PERCEPTION, read_eval_tool_file
from halluprobe.errors import InputError
from halluprobe.imports.common import Imported, ImportResult, InputFiles
from halluprobe.jsonl import iter_objects

__all__ = ["MME_FORMATS", "read_lmms_eval_mme", "read_mme_results"]

MME_FORMATS = ("mme", "lmms-eval-mme")
_METRICS = ("mme_perception_score", "mme_cognition_score")
_SUBTASKS = frozenset((*PERCEPTION, *COGNITION))


def read_mme_results(files: list[Path], *, inputs: InputFiles | None = None) -> ImportResult:
    """The eval tool's results files, one subtask each (named ``<subtask>.txt``)."""
    result = ImportResult(format="mme", answers=[], sources=list(files), inputs=inputs or InputFiles())
    for path in files:
        if path.stem not in _SUBTASKS:
            raise InputError(f"{path.name!r} is no MME subtask's results file (<subtask>.txt, e.g. existence.txt)", path)
        result.inputs.text(path, "MME results file")  # hashed for the header
        for i, line in enumerate(read_eval_tool_file(path, results=True)):
            result.answers.append(
                Imported(split=line.subtask, question_id=i, image=line.image, prompt=line.question, text=line.response or "",
                         label=line.answer, object=None, source=f"{path}:{line.line}")  # fmt: skip
            )
    return result


def _prediction(log: dict[str, Any]) -> str:
    resps = log.get("filtered_resps")
    while isinstance(resps, list) and resps:
        resps = resps[0]
    return resps if isinstance(resps, str) else ""


def _question(log: dict[str, Any]) -> str:
    doc = log.get("doc")
    if isinstance(doc, dict) and isinstance(doc.get("question"), str):
        return str(doc["question"])
    for key in ("input", "arguments"):
        value = log.get(key)
        while isinstance(value, list) and value:
            value = value[0]
        if isinstance(value, str):
            return value
    return ""


def read_lmms_eval_mme(files: list[Path], *, inputs: InputFiles | None = None) -> ImportResult:
    """lmms-eval's ``mme`` sample logs (JSON Lines)."""
    result = ImportResult(format="lmms-eval-mme", answers=[], sources=list(files), inputs=inputs or InputFiles(), max_new_tokens=16)
    found: list[tuple[str, int, Imported]] = []
    for path in files:
        text = result.inputs.text(path, "lmms-eval samples file")
        for line, log in iter_objects(text, path):
            entry = next((log[m] for m in _METRICS if isinstance(log.get(m), dict)), None)
            if entry is None:
                raise InputError(f"no {' or '.join(_METRICS)} entry: not a log of lmms-eval's mme task", path, line)
            category, image = entry.get("category"), entry.get("question_id")
            if category not in _SUBTASKS or not isinstance(image, str) or not image:
                raise InputError(f"category {category!r} / question_id {image!r} is no MME subtask and image", path, line)
            target = str(log.get("target", "")).strip().lower().replace(".", "")
            if target not in ("yes", "no"):
                raise InputError(f"target {log.get('target')!r} is not Yes or No", path, line)
            doc_id = log.get("doc_id")
            order = doc_id if isinstance(doc_id, int) and not isinstance(doc_id, bool) else len(found)
            found.append((category, order, Imported(split=category, question_id=0, image=image, prompt=_question(log),
                                                    text=_prediction(log), label=target, object=None, source=f"{path}:{line}")))  # type: ignore[arg-type]  # fmt: skip
    counters: dict[str, int] = {}
    for category, _, answer in sorted(found, key=lambda f: (f[0], f[1])):
        counters[category] = counters.get(category, 0) + 1
        result.answers.append(replace(answer, question_id=counters[category] - 1))
    return result
