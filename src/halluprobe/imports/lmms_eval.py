"""lmms-eval's ``--log_samples`` output of its POPE tasks (``pope``, ``pope_random``,
``pope_pop``, ``pope_adv``), in the three layouts its versions wrote:

- v0.2: one JSON document per task (``<task>.json``), ``{"args", "model_configs", "logs": [...],
  "time"}``; each log has ``doc_id``, ``target``, ``doc`` (the dataset row without its image:
  ``question_id``, ``question``, ``answer``, ``category``...), ``arguments``, ``resps``,
  ``filtered_resps`` and the metric entries;
- v0.3: JSON Lines (``<date>_samples_<task>.jsonl``), one such log per line;
- v0.4 and later: JSON Lines without ``doc`` (``input`` holds the prompt): the question id
  survives only in the metric entries (``pope_accuracy.question_id``), the answer in
  ``filtered_resps``, the label in ``target``.

The split comes from the task (``model_configs.task``, or the file name) or, for the pooled
``pope`` task, from ``doc.category``; a document whose category contradicts its file's task is
refused. The pooled task's v0.4+ logs reuse ids 1..3000 in every split and carry no category:
with ``--labels`` (one per split) each sample is paired with its question by image and question
text (:mod:`halluprobe.imports.lmms_pooled`), without them they are refused. lmms-eval's own parse
(``pope_process_results``: lower-case, strip, compare) is kept as ``lmms-eval:exact`` from the
stored ``prediction``; it equals ``text:exact``. With ``--labels``, each answer is paired with
its labelled question by split and id and its question text checked (this gives image names);
without, the log's own ``target`` is the label and each question its own bootstrap cluster.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from halluprobe.benchmarks.versions import normalise_question
from halluprobe.errors import InputError
from halluprobe.imports.common import Imported, ImportResult, InputFiles, LabelIndex, as_int_id, labelled_answer
from halluprobe.imports.lmms_pooled import PooledSample, image_of_media, pair_pooled
from halluprobe.jsonl import iter_objects, loads
from halluprobe.records import Decision

__all__ = ["TASK_SPLITS", "LMMS_MAX_NEW_TOKENS", "TOOL_READOUT", "read_lmms_eval", "task_of_file", "looks_like_lmms_eval"]

TASK_SPLITS = {"pope_random": "random", "pope_pop": "popular", "pope_adv": "adversarial", "pope": None}
LMMS_MAX_NEW_TOKENS = 128  # the POPE tasks' generation_kwargs
TOOL_READOUT = "lmms-eval:exact"
_METRIC = "pope_accuracy"
_TASK_IN_NAME = re.compile(r"(?:^|_)(?:samples_)?(pope(?:_random|_pop|_adv)?)\.jsonl?$")


def task_of_file(path: Path) -> str | None:
    """``pope_random`` from ``pope_random.json`` or ``20240101_samples_pope_random.jsonl``."""
    m = _TASK_IN_NAME.search(path.name)
    return m.group(1) if m else None


def looks_like_lmms_eval(obj: dict[str, Any]) -> bool:
    return "doc_id" in obj and "filtered_resps" in obj


def _logs(path: Path, inputs: InputFiles) -> tuple[str, list[tuple[int | None, dict[str, Any]]], str | None]:
    """(layout, [(line, log)], task named inside the file)."""
    text = inputs.text(path, "lmms-eval samples file")
    if text.lstrip().startswith("{") and '"logs"' in text:  # v0.2: one document (JSON Lines fail to parse whole)
        try:
            doc = loads(text)
        except json.JSONDecodeError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("logs"), list):
            config = doc.get("model_configs") if isinstance(doc.get("model_configs"), dict) else {}
            logs = doc["logs"]
            for i, log in enumerate(logs):
                if not isinstance(log, dict):
                    raise InputError(f"logs[{i}] is not an object", path)
            return "v0.2", [(None, log) for log in logs], config.get("task")
    logs_lines = list(iter_objects(text, path))
    layout = "v0.3" if logs_lines and "doc" in logs_lines[0][1] else "v0.4+"
    return layout, logs_lines, None


def _first_string(value: Any) -> str | None:
    # filtered_resps is ["answer"] (v0.4+ after sanitising) or [["answer"]] in some versions
    while isinstance(value, list) and value:
        value = value[0]
    return value if isinstance(value, str) else None


def read_lmms_eval(
    files: list[Path], labels: LabelIndex | None = None, split_override: str | None = None, *, inputs: InputFiles | None = None
) -> ImportResult:
    """Every logged POPE answer of ``files`` (see the module docstring)."""
    inputs = inputs or InputFiles()
    result = ImportResult(
        format="lmms-eval",
        answers=[],
        sources=list(files),
        inputs=inputs,
        **(labels.recorded() if labels is not None else {}),
        max_new_tokens=LMMS_MAX_NEW_TOKENS,
        tool_rules={TOOL_READOUT: "lmms-eval's pope_process_results prediction: lower-cased, stripped, compared with yes/no"},
    )
    layouts = set()
    pooled: list[PooledSample] = []
    for path in files:
        layout, logs, inner_task = _logs(path, inputs)
        layouts.add(layout)
        task = inner_task or task_of_file(path)
        file_split = split_override or (TASK_SPLITS.get(task) if task else None)
        for index, (line, log) in enumerate(logs):
            label_where = f"logs[{index}]: " if line is None else ""
            metric = log.get(_METRIC)
            doc = log.get("doc") if isinstance(log.get("doc"), dict) else {}
            if not isinstance(metric, dict) and not doc:
                raise InputError(f"{label_where}not a POPE log: no {_METRIC!r} entry and no 'doc'", path, line)
            raw_id = (metric or {}).get("question_id", doc.get("question_id"))
            qid = as_int_id(raw_id, f"{label_where}question_id", path, line, digits_ok=True)
            category = str(doc["category"]) if doc.get("category") else None
            if file_split is not None and category is not None and category != file_split:
                named = f"--split {split_override}" if split_override else f"the {task} task ({file_split})"
                raise InputError(f"{label_where}document of category {category!r} in a file of {named}: which split is it?", path, line)
            split = file_split or category
            if split is None and labels is None:
                raise InputError(
                    f"{label_where}cannot tell the split of question {qid}: the pooled 'pope' task reuses ids in every split "
                    "and this log has no doc.category (lmms-eval v0.4+); pass --labels, one per split (coco_pope_random.json, "
                    "coco_pope_popular.json, coco_pope_adversarial.json), to pair each sample with its split by question "
                    "text and id (and image, where the log names one), or import the per-split tasks (pope_random, pope_pop, pope_adv)",
                    path,
                    line,
                )
            answer = _first_string(log.get("filtered_resps"))
            if answer is None:
                raise InputError(f"{label_where}'filtered_resps' holds no answer string", path, line)
            target = str(log.get("target", (metric or {}).get("ground_truth", ""))).strip().lower()
            if target not in ("yes", "no"):
                raise InputError(f"{label_where}'target' must be yes or no, got {log.get('target')!r}", path, line)
            question = doc.get("question") if isinstance(doc.get("question"), str) else log.get("input")
            prompt = question if isinstance(question, str) else ""
            prediction = (metric or {}).get("prediction", answer.lower().strip())
            if split is None:  # the pooled task: paired after every log is read
                pooled.append(PooledSample(
                    source=f"{path}:{line}" if line is not None else f"{path}:logs[{index}]", file=str(path),
                    doc_id=log["doc_id"] if isinstance(log.get("doc_id"), int) and not isinstance(log.get("doc_id"), bool) else None,
                    question_id=qid, prompt=prompt, image=image_of_media(log.get("input_media")), answer=answer,
                    target=target, prediction=str(prediction),
                ))  # fmt: skip
                continue
            image, obj = f"lmms-eval:{split}:{qid}", None
            if labels is not None:
                if split not in labels.files:
                    result.skipped.append({"source": f"{path}:{line or index}", "reason": f"no labels file for split {split!r} was given"})
                    continue
                labelled = labels.by_id(split, qid)
                if labelled is None or (prompt and normalise_question(prompt) != normalise_question(labelled.text)):
                    found = "is not in" if labelled is None else f"has another question text ({prompt!r}) than"
                    raise InputError(f"{label_where}{split} question {qid} {found} the labels {labels.files[split]}", path, line)
                if labelled.label != target:
                    raise InputError(f"{label_where}{split} question {qid}: target {target!r} but the labels say {labelled.label!r}", path, line)
                image, obj = labelled.image, labelled.object
            result.answers.append(
                Imported(
                    split=split,
                    question_id=qid,
                    image=image,
                    prompt=prompt,
                    text=answer,
                    label=target,  # type: ignore[arg-type]
                    object=obj,
                    source=f"{path}:{line}" if line is not None else f"{path}:logs[{index}]",
                    tool_readouts=_tool_readout(prediction),
                )
            )
    if pooled and labels is not None:
        _add_pooled(result, pooled, labels)
    if labels is not None:
        result.unanswered = labels.unanswered(result.answers)
    result.notes.append(f"lmms-eval log layout: {', '.join(sorted(layouts))}")
    if labels is None:
        result.notes.append("no --labels: labels are the logs' targets; no image names, so CIs resample questions, not images")
    return result


def _tool_readout(prediction: object) -> dict[str, Decision]:
    """lmms-eval's stored prediction as the tool readout: taken as written (lmms-eval folded it
    already), anything but yes or no is unknown."""
    return {TOOL_READOUT: prediction if prediction in ("yes", "no") else "unknown"}  # type: ignore[dict-item]


def _add_pooled(result: ImportResult, pooled: list[PooledSample], labels: LabelIndex) -> None:
    """The pooled task's samples, each under the split of the label file its question is in."""
    pairing = pair_pooled(pooled, labels)
    for sample, question in pairing.matched:
        result.answers.append(
            labelled_answer(
                question, prompt=sample.prompt, text=sample.answer, source=sample.source, tool_readouts=_tool_readout(sample.prediction)
            )
        )
    result.skipped.extend(pairing.skipped)
    named = sum(sample.image is not None for sample in pooled)
    # lmms-eval 0.7 names no image for a POPE row (its image is decoded, its image_source has no
    # extension), so a real log pairs by question text and id: say which key did the pairing
    how = "image and question text" if named == len(pooled) else "question text and id (the log names no image)" if not named else (
        f"image and question text ({named} samples), else question text and id"
    )
    result.notes.append(f"pooled 'pope' task: {len(pairing.matched)} of {len(pooled)} samples paired with their split by {how}")
    result.notes.extend(pairing.notes)
    if pairing.skipped:
        result.notes.append(
            f"{len(pairing.skipped)} pooled samples not imported (listed under skipped): --compat lmms-eval then covers the "
            "imported ones only, not every sample lmms-eval counted"
        )
