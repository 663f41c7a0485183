"""A run's answers written in other tools' formats, so they can rescore halluprobe's runs.

- ``llava``: ``answers.jsonl`` (``question_id``, ``prompt``, ``text``, ``answer_id``,
  ``model_id``, ``metadata``) and the question file ``llava_pope_test.jsonl`` (``question_id``,
  ``image``, ``text``, ``category``), ids offset per split as LLaVA-1.5's file; lines in each
  split's question order, which is what LLaVA's ``eval_pope.py`` pairs with the labels files by.
- ``pope``: ``<split>_answers.json`` per split, ``{"question", "answer"}`` lines in question
  order (POPE's ``evaluate.py`` pairs them with ``coco_pope_<split>.json`` by line).
- ``lmms-eval``: ``samples_pope_<task>.jsonl`` per split in the v0.4+ layout (``doc_id``,
  ``target``, ``filtered_resps``, the five ``pope_*`` metric entries, ``input``).

The three formats pair answers with labels by position, so only a whole run is exported: every
sample has its answer text, and every question of each split has its sample. The question set
and texts come from the run's benchmark file only when its sha256 is still the one ``run.json``
recorded (else an edited file would put questions never asked into the export); otherwise from
the samples themselves (their prompts), and then the run must be complete (``complete.json``;
for an import, no labelled question left unanswered). :attr:`Export.texts_from` says which.

File names built from data (splits) are checked to be one plain name, and ``--out`` must be a
new or empty folder, or (``overwrite``) the files this export writes are replaced there and
nothing else.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from halluprobe.benchmarks.question_file import read_questions
from halluprobe.errors import InputError
from halluprobe.files import fresh_out_dir, plain_component, write_atomic
from halluprobe.imports.llava import SPLIT_ID_OFFSET
from halluprobe.jsonl import loads, read_text
from halluprobe.records import RunHeader, Sample
from halluprobe.rundir import MANIFEST, RunDir, sha256_file

__all__ = ["EXPORT_FORMATS", "Export", "export_run"]

EXPORT_FORMATS = ("llava", "pope", "lmms-eval")
_LMMS_TASK = {"random": "pope_random", "popular": "pope_pop", "adversarial": "pope_adv"}
_LMMS_METRICS = ("pope_accuracy", "pope_precision", "pope_recall", "pope_f1_score", "pope_yes_ratio")
_LLAVA_SUFFIX = "\nAnswer the question using a single word or phrase."


@dataclass
class Export:
    files: list[Path] = field(default_factory=list)
    written: int = 0
    texts_from: dict[str, str] = field(default_factory=dict)  # split -> where its question texts came from


def _benchmark_questions(header: RunHeader, split: str) -> tuple[dict[int, str] | None, str]:
    """(question id -> text, where from) from the split's benchmark file when its sha256 is the
    one run.json recorded; (None, why not) otherwise."""

    path = header.benchmark_paths.get(split)
    if not path:
        return None, "run.json names no benchmark file"
    try:
        digest = sha256_file(path)
    except OSError as err:  # gone, or a folder in its place
        return None, f"{path} cannot be read: {err.strerror or err}"
    if digest != header.benchmarks.get(split):
        return None, f"{path} changed since the run: its sha256 differs from run.json's"
    try:
        questions = read_questions(path, split=split)
    except InputError:
        return None, f"{path} is not a POPE questions file"  # an imported sheet
    return {q.question_id: q.text for q in questions}, f"{path} (sha256 as recorded in run.json)"


def _refuse_partial(run: RunDir, header: RunHeader, splits: dict[str, list[Sample]], result: Export) -> dict[tuple[str, int], str]:
    """The question texts to export; InputError unless every question of each split is answered.
    Where the benchmark file is the one asked, each split's samples are put in its line order."""
    texts: dict[tuple[str, int], str] = {}
    for split, group in splits.items():
        questions, source = _benchmark_questions(header, split)
        result.texts_from[split] = source if questions is not None else f"the samples' prompts ({source})"
        answered = {s.question_id for s in group}
        if questions is not None:
            missing = [qid for qid in questions if qid not in answered]
            if missing:
                raise InputError(
                    f"{len(missing)} of the {len(questions)} {split} questions have no answer (e.g. question {missing[0]}): "
                    "their formats pair answers with labels by position, so only a whole split is exported",
                    run.samples_path,
                )
            texts.update({(split, qid): text for qid, text in questions.items()})
            line_of = {qid: i for i, qid in enumerate(questions)}
            group.sort(key=lambda s: line_of.get(s.question_id, len(line_of)))  # the labels file's line order: what the tools pair by
            continue
        if not header.backend.startswith("import:"):  # its prompts are rendered ("USER: <image>..."), not the questions
            raise InputError(
                f"the {split} question texts cannot be recovered ({source}): "
                "this run's samples hold rendered prompts, not the questions: restore the benchmark file run.json names to export it",
                header.benchmark_paths.get(split) or run.header_path,
            )
        if not run.complete_path.exists():
            raise InputError("the run is not complete (no complete.json): finish it (`halluprobe run --resume`) before exporting", run.path)
        unanswered = _manifest_unanswered(run).get(split, 0)
        if unanswered:
            raise InputError(
                f"{unanswered} labelled {split} questions have no answer (manifest.json): "
                "their formats pair answers with labels by position, so only a whole split is exported",
                run.path / MANIFEST,
            )
    return texts


def _manifest_unanswered(run: RunDir) -> dict[str, int]:
    path = run.path / MANIFEST
    if not path.is_file():
        return {}
    try:
        data = loads(read_text(path, "manifest")[1])
    except json.JSONDecodeError as err:
        raise InputError(f"invalid manifest: {err.msg}", path, err.lineno) from None
    found = data.get("unanswered") if isinstance(data, dict) else None
    return {k: v for k, v in found.items() if isinstance(v, int)} if isinstance(found, dict) else {}


def _file_names(fmt: str, splits: list[str]) -> list[str]:
    """The names this export writes into --out (each split checked to be one plain file name)."""
    for split in splits:
        plain_component(split, "split")
    if fmt == "llava":
        return ["answers.jsonl", "llava_pope_test.jsonl"]
    if fmt == "pope":
        return [f"{split}_answers.json" for split in splits]
    return [f"samples_{_LMMS_TASK.get(split, 'pope_' + split)}.jsonl" for split in splits]


def _by_split(samples: list[Sample]) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for s in sorted(samples, key=lambda s: s.question_id):
        out.setdefault(s.split, []).append(s)
    return out


def export_run(rundir: str | Path, fmt: str, out: str | Path, *, overwrite: bool = False) -> Export:
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
    result = Export()
    splits = _by_split(kept)
    if fmt == "llava":
        unknown = [s for s in splits if s not in SPLIT_ID_OFFSET]
        if unknown:
            raise InputError(f"LLaVA's question ids are offset for the three POPE splits only, not {', '.join(unknown)}", run.path)
    names = _file_names(fmt, list(splits))
    texts = _refuse_partial(run, header, splits, result)
    target = fresh_out_dir(out, overwrite=overwrite, owned=lambda name: name in names)
    if fmt == "llava":
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
