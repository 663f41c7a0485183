"""A run's answers written in other tools' formats, so they can rescore halluprobe's runs.

- ``llava``: ``answers.jsonl`` (``question_id``, ``prompt``, ``text``, ``answer_id``,
  ``model_id``, ``metadata``) and the question file ``llava_pope_test.jsonl`` (``question_id``,
  ``image``, ``text``, ``category``), ids offset per split as LLaVA-1.5's file; lines in each
  split's question order, which is what LLaVA's ``eval_pope.py`` pairs with the labels files by.
- ``pope``: ``<split>_answers.json`` per split, ``{"question", "answer"}`` lines in question
  order (POPE's ``evaluate.py`` pairs them with ``coco_pope_<split>.json`` by line).
- ``lmms-eval``: ``samples_pope_<task>.jsonl`` per split in the v0.4+ layout (``doc_id``,
  ``target``, ``filtered_resps``, the five ``pope_*`` metric entries, ``input``).

The question text comes from the run's benchmark file where it still reads as POPE questions,
else from each sample's prompt. Errored samples and samples without text are not exported;
the count is returned.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from halluprobe.errors import InputError
from halluprobe.files import write_atomic
from halluprobe.imports.llava import SPLIT_ID_OFFSET
from halluprobe.records import RunHeader, Sample
from halluprobe.rundir import RunDir

__all__ = ["EXPORT_FORMATS", "Export", "export_run"]

EXPORT_FORMATS = ("llava", "pope", "lmms-eval")
_LMMS_TASK = {"random": "pope_random", "popular": "pope_pop", "adversarial": "pope_adv"}
_LMMS_METRICS = ("pope_accuracy", "pope_precision", "pope_recall", "pope_f1_score", "pope_yes_ratio")
_LLAVA_SUFFIX = "\nAnswer the question using a single word or phrase."


@dataclass
class Export:
    files: list[Path] = field(default_factory=list)
    written: int = 0


def _question_texts(header: RunHeader) -> dict[tuple[str, int], str]:
    from halluprobe.benchmarks.pope import read_questions

    texts: dict[tuple[str, int], str] = {}
    for split, path in header.benchmark_paths.items():
        try:
            texts.update({q.key: q.text for q in read_questions(path, split=split)})
        except InputError:
            continue  # not a questions file (an imported sheet): the prompts stand in
    return texts


def _by_split(samples: list[Sample]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for s in sorted(samples, key=lambda s: s.question_id):
        out.setdefault(s.split, []).append(s)
    return out


def export_run(rundir: str | Path, fmt: str, out: str | Path) -> Export:
    """Write the run's answers as ``fmt`` into the folder ``out`` (see the module docstring)."""
    if fmt not in EXPORT_FORMATS:
        raise InputError(f"unknown export format {fmt!r}; known: {', '.join(EXPORT_FORMATS)}")
    run = RunDir(rundir)
    header = run.read_yes_no_header()
    samples = run.read_samples()
    kept = [s for s in samples if s.error is None and s.text is not None]
    if not kept:
        raise InputError("the run stored no answer text to export (run it with a text rule)", run.samples_path)
    if len(kept) < len(samples):
        # the three formats pair answers with questions by position: a gap would shift every later answer
        first = next(s for s in samples if s.error is not None or s.text is None)
        raise InputError(
            f"{len(samples) - len(kept)} sample(s) have no answer text (errors, e.g. {first.split}/{first.question_id}): "
            "their formats pair answers by position, so the run must be complete (`halluprobe run --resume`)",
            run.samples_path,
        )
    texts = _question_texts(header)
    result = Export()
    target = Path(out)
    if target.exists() and not target.is_dir():
        raise InputError("--out must be a folder", target)
    target.mkdir(parents=True, exist_ok=True)
    splits = _by_split(kept)
    if fmt == "llava":
        unknown = [s for s in splits if s not in SPLIT_ID_OFFSET]
        if unknown:
            raise InputError(f"LLaVA's question ids are offset for the three POPE splits only, not {', '.join(unknown)}", run.path)
        answers, questions = [], []
        for split, group in splits.items():
            for s in group:
                qid = SPLIT_ID_OFFSET[split] + s.question_id
                prompt = texts.get(s.key, s.prompt) + _LLAVA_SUFFIX
                questions.append({"question_id": qid, "image": s.image, "text": prompt, "category": split})
                answers.append(
                    {"question_id": qid, "prompt": prompt, "text": s.text, "answer_id": f"{split}-{s.question_id}",
                     "model_id": header.model, "metadata": {}}
                )  # fmt: skip
        result.files += [_write(target / "answers.jsonl", answers), _write(target / "llava_pope_test.jsonl", questions)]
    elif fmt == "pope":
        for split, group in splits.items():
            lines = [{"question": texts.get(s.key, s.prompt), "answer": s.text} for s in group]
            result.files.append(_write(target / f"{split}_answers.json", lines))
    else:
        for split, group in splits.items():
            lines = []
            for doc_id, s in enumerate(group):
                pred = (s.text or "").lower().strip()
                entry = {"question_id": str(s.question_id), "score": float(pred == s.label), "prediction": pred, "ground_truth": s.label}
                lines.append(
                    {"doc_id": doc_id, "target": s.label, "filtered_resps": [s.text], **{m: entry for m in _LMMS_METRICS},
                     "input": texts.get(s.key, s.prompt) + _LLAVA_SUFFIX}
                )  # fmt: skip
            result.files.append(_write(target / f"samples_{_LMMS_TASK.get(split, 'pope_' + split)}.jsonl", lines))
    result.written = len(kept)
    return result


def _write(path: Path, lines: list[dict[str, object]]) -> Path:
    return write_atomic(path, "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
