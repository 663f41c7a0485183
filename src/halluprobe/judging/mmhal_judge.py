"""MMHal-Bench's judge pass: its answers (a run dir or a responses file), its questions for a run,
and the judge items and header built from them."""

from __future__ import annotations

from pathlib import Path

from halluprobe.benchmarks.mmhal import (
    MMHalFile,
    fill_judge_prompt,
)
from halluprobe.errors import InputError
from halluprobe.files import resolve_image
from halluprobe.judging.judge import JudgeItem
from halluprobe.records import Question
from halluprobe.rundir import RunDir, sha256_file

__all__ = ["MMHAL_SPLIT", "MMHAL_TEMPLATE_NAME", "mmhal_answers", "mmhal_judge_items", "mmhal_questions"]

MMHAL_SPLIT = "mmhal"
MMHAL_TEMPLATE_NAME = "mmhal-official"  # the prompt of RLAIF-V eval/eval_gpt_mmhal.py (or --prompt-script's), by its sha256


def mmhal_questions(mmhal: MMHalFile) -> list[Question]:
    """Open questions for ``halluprobe run --open-ended`` (question_id = the template index)."""
    return [
        Question(split=MMHAL_SPLIT, question_id=item.index, image=item.image_file, text=item.question, label="yes",
                 kind="open", metadata={"question_type": item.question_type, "image_id": item.image_id})  # fmt: skip
        for item in mmhal.items
    ]


def mmhal_answers(mmhal: MMHalFile, answers: Path) -> tuple[dict[int, str], str]:
    """Each item's answer, and the sha256 of the file they came from. ``answers``: a run dir of
    ``run --open-ended`` over :func:`mmhal_questions` (errored samples refused), or the template
    itself filled in (``model_answer``, the official responses format)."""
    if answers.is_dir():
        run = RunDir(answers)
        found: dict[int, str] = {}
        images = {item.index: item.image_file for item in mmhal.items}
        for sample in run.read_samples():
            # the split is the question file's name: the image tells a run of another benchmark
            if images.get(sample.question_id) != sample.image:
                raise InputError(f"sample {sample.question_id} asks about {sample.image!r}, not MMHal-Bench's "
                                 f"{images.get(sample.question_id)!r}: not a run over `mmhal questions`", run.samples_path)  # fmt: skip
            if sample.error is not None or sample.text is None:
                raise InputError(f"item {sample.question_id} has no answer ({sample.error or 'no text'}): resume the run first", run.samples_path)
            found[sample.question_id] = sample.text
        where, digest = run.samples_path, sha256_file(run.samples_path)
    else:
        found = {item.index: item.model_answer for item in mmhal.items if item.model_answer is not None}
        where, digest = answers, mmhal.sha256
    missing = [item.index for item in mmhal.items if item.index not in found]
    if missing:
        raise InputError(f"{len(missing)} of {len(mmhal.items)} items have no answer (e.g. item {missing[0]})", where)
    return found, digest


def mmhal_judge_items(mmhal: MMHalFile, answers: dict[int, str], images: Path, template: str) -> list[JudgeItem]:
    """One judge item per question (``template``: the judge prompt, benchmarks.mmhal.judge_prompt_template);
    the id is the template index (stable across runs and judges)."""
    text = template
    return [
        JudgeItem(item_id=str(item.index), image_path=str(resolve_image(item.image_file, images, source=mmhal.path)),
                  prompt=fill_judge_prompt(text, item, answers[item.index]))  # fmt: skip
        for item in mmhal.items
    ]


