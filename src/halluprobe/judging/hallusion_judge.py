"""HallusionBench's judge pass: a run's stored answers judged correct / incorrect / unclear with the
official prompt (tianyi-lab/HallusionBench utils.py, read by benchmarks.hallusionbench), one
ledger line per question. The item id is ``<split>:<question id>`` (the split names category and
subcategory, the id packs set, figure and question), stable across runs and judges."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from halluprobe.benchmarks.hallusionbench import fill_hallusion_prompt, hallusion_key
from halluprobe.errors import InputError
from halluprobe.files import resolve_image
from halluprobe.judging.judge import JudgeItem
from halluprobe.records import RunHeader, Sample
from halluprobe.rundir import sha256_file
from halluprobe.scoring import read_run_samples

__all__ = ["HALLUSION_TEMPLATE_NAME", "hallusion_answers", "hallusion_item_id", "hallusion_judge_items"]

HALLUSION_TEMPLATE_NAME = "hallusionbench-official"  # evaluate_by_chatgpt's prompt in utils.py (or --prompt-script's), by its sha256


def hallusion_item_id(split: str, question_id: int) -> str:
    return f"{split}:{question_id}"


def hallusion_answers(run: Path) -> tuple[RunHeader, list[Sample], str]:
    """A HallusionBench run's header, samples and the sha256 of its samples file; every sample must
    be a HallusionBench question with an answer text (a logits-only or unfinished run is refused)."""
    rundir, header, samples = read_run_samples(run)
    for s in samples:
        try:
            hallusion_key(s.split, s.question_id)
        except ValueError as err:
            raise InputError(f"not a HallusionBench run: {err}", rundir.samples_path) from None
        if s.error is not None or s.text is None:
            why = s.error or "no answer text (run with --text)"
            raise InputError(f"{s.split} question {s.question_id} has no answer to judge: {why}", rundir.samples_path)
    if not samples:
        raise InputError("no samples to judge", rundir.samples_path)
    return header, samples, sha256_file(rundir.samples_path)


def hallusion_judge_items(
    samples: Sequence[Sample], details: dict[tuple[str, int], tuple[str, str]], images: Path, template: str, *, source: Path
) -> list[JudgeItem]:
    """One judge item per answer; ``details``: (question, gt_answer_details) by (split, id) from the
    question file the run was built from (benchmarks.hallusionbench.answer_details)."""
    items = []
    for s in samples:
        found = details.get((s.split, s.question_id))
        if found is None:
            raise InputError(f"{s.split} question {s.question_id} is not in the HallusionBench question file {source}", source)
        question, reference = found
        items.append(JudgeItem(item_id=hallusion_item_id(s.split, s.question_id), image_path=str(resolve_image(s.image, images, source=source)),
                               prompt=fill_hallusion_prompt(template, question, reference, s.text or "")))  # fmt: skip
    return items


