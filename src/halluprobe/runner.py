"""Questions -> requests -> backend (through :func:`halluprobe.ask.ask`) -> samples.jsonl: a run's
plan (:mod:`halluprobe.run_setup`, every check made before any model loads) executed.

A sample stores what the backend gave: the first token's log-probabilities over every candidate
id (or piece), the top-k first tokens and the greedy text. Readouts are applied when scoring
(:mod:`halluprobe.readouts.apply`), so the run does not depend on which readouts or text rules
are asked later.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from halluprobe.ask import ask
from halluprobe.backends.base import Backend, CountsRequests
from halluprobe.clip_signal import ClipScorer
from halluprobe.files import resolve_image
from halluprobe.readouts.tokensets import greedy_answer
from halluprobe.records import (
    ClipSimilarity,
    Question,
    QuestionKey,
    Request,
    Response,
    RunHeader,
    Sample,
    TokenSets,
)
from halluprobe.run_setup import _TEXT_FINGERPRINT, RunConfig, RunPlan, check_backend, plan_questions, run_fingerprint
from halluprobe.rundir import RunDir

__all__ = ["RunSummary", "execute_plan", "run_questions", "make_sample"]  # the run's set-up lives in run_setup.py, re-exported here where callers have always found it

log = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]


@dataclass
class RunSummary:
    answered: int = 0
    skipped: int = 0
    errors: int = 0
    total: int = 0
    errors_left: int = 0  # errored samples in the whole run dir once every question has one
    by_split: dict[str, int] = field(default_factory=dict)


def _offset_argmax(response: Response, sets: TokenSets | None) -> str | None:
    if sets is None or not response.first_token:
        return None
    top = response.first_token[0]
    return None if greedy_answer(top, sets) is not None else top.piece


def make_sample(question: Question, prompt: str, response: Response, sets: TokenSets | None) -> Sample:
    """One response as stored: raw outputs only; readouts are applied when scoring."""
    return Sample(
        split=question.split,
        question_id=question.question_id,
        image=question.image,
        object=question.object,
        label=question.label,
        prompt=prompt,
        first_token=response.first_token,
        candidates=response.candidates,
        offset_argmax=None if response.error else _offset_argmax(response, sets),
        text=response.text,
        signals=response.signals,
        latency_s=response.latency_s,
        error=response.error,
    )


def _with_clip(clip: ClipScorer, samples: list[Sample], image_paths: list[str]) -> list[Sample]:
    """The samples with their clip signal; a question whose image CLIP cannot read is an error
    (never a sample that a clip correction would silently read as its base pass)."""
    todo = [i for i, s in enumerate(samples) if s.error is None and s.object]
    try:
        found: list[ClipSimilarity | str] = clip.similarities([(image_paths[i], samples[i].object or "") for i in todo])
    except Exception as err:  # a failed CLIP pass (out of memory, a NaN): the batch's answers are kept as errors
        log.exception("clip signal failed")
        found = [f"clip signal: {type(err).__name__}: {err}"] * len(todo)
    out = list(samples)
    for i, similarity in zip(todo, found):
        update = {"error": similarity} if isinstance(similarity, str) else {"clip": similarity}
        out[i] = samples[i].model_copy(update=update)
    return out


def run_questions(
    backend: Backend,
    questions: Sequence[Question],
    images_root: Path,
    rundir: RunDir,
    config: RunConfig,
    header: RunHeader,
    progress: ProgressFn | None = None,
    clip: ClipScorer | None = None,
) -> RunSummary:
    """Answer every question not yet in the run dir, for a caller that holds a loaded model
    already (the demo, tests): planned here (:func:`~halluprobe.run_setup.plan_questions`, over
    the header's benchmark files), then executed. ``clip``: the scorer of the ``clip`` signal."""
    benchmarks = {split: (Path(path), header.benchmarks.get(split, "")) for split, path in header.benchmark_paths.items()}
    plan = plan_questions(config, questions, benchmarks, images_root, rundir, clip=clip is not None)
    return execute_plan(plan, backend, header, progress=progress, clip=clip)


def execute_plan(
    plan: RunPlan, backend: Backend, header: RunHeader, *, progress: ProgressFn | None = None, clip: ClipScorer | None = None
) -> RunSummary:
    """Answer every question of ``plan`` not yet in its run dir, appending samples batch by batch.
    The loaded model is asked what only it can say once (:func:`~halluprobe.run_setup.check_backend`)
    before the run dir is written. ``clip``: the scorer of the ``clip`` signal (``plan.clip``)."""
    if (clip is None) != (header.clip is None) or (clip is None) == plan.clip:
        raise ValueError("execute_plan: give the clip scorer to make_header and execute_plan alike, as planned")
    check_backend(plan, backend)
    config, questions, rundir, images_root = plan.config, plan.questions, plan.rundir, plan.images_root
    # run dirs of halluprobe 0.1: their fingerprint held the rule list as given, which for an
    # open-ended run was the default list although its header stored none
    old_fingerprints = {
        run_fingerprint(header, legacy=True),
        run_fingerprint(header.model_copy(update={"text_rules": list(_TEXT_FINGERPRINT)}), legacy=True),
    }
    if config.resume and rundir.exists():
        # 0.1's form over the rule list that run was given (--text-rules pope): the list does not
        # change what is stored, only whether text is
        old_rules = rundir.read_header().text_rules
        if bool(old_rules) == bool(header.text_rules):
            old_fingerprints.add(run_fingerprint(header.model_copy(update={"text_rules": list(old_rules)}), legacy=True))
    done = rundir.start(
        header, resume=config.resume, force=config.force, overwrite=config.overwrite,
        also_accept=old_fingerprints, retry_errors=config.retry_errors,
    )  # fmt: skip
    todo = [q for q in questions if q.key not in done]
    summary = RunSummary(skipped=len(questions) - len(todo), total=len(questions))
    if done:
        log.info("resuming: %d of %d questions already answered", summary.skipped, len(questions))

    by_key: dict[QuestionKey, Question] = {q.key: q for q in todo}
    prompts: dict[tuple[str, bool], str] = {}  # (question text, with image) -> rendered prompt: few distinct texts

    def render(text: str, image: bool = True) -> str:
        if (text, image) not in prompts:
            prompts[(text, image)] = backend.render_prompt(text, config.template, image=image)
        return prompts[(text, image)]

    requests: list[Request] = []
    for q in todo:
        variants: dict[str, str] = {}
        if "instruction" in plan.variants:
            variants["instruction"] = render(f"{config.instruction} {q.text}")
        if "no-image" in plan.variants:
            variants["no-image"] = render(q.text, image=False)
        requests.append(
            Request(
                split=q.split,
                question_id=q.question_id,
                image_path=str(resolve_image(q.image, images_root, source=plan.sources.get(q.split))),
                prompt=render(q.text),
                variants=variants,
            )
        )
    prompt_of = {r.key: r.prompt for r in requests}

    sets = None if config.open_ended else header.token_sets
    request_of = {r.key: r for r in requests}
    if clip is not None:  # each image embedded once, whatever order the backend answers in
        clip.expect([(r.image_path, by_key[r.key].object or "") for r in requests])
    if progress:
        progress(summary.skipped, summary.total)
    try:
        for batch in ask(backend, requests, plan.generate):
            samples = [make_sample(by_key[r.key], prompt_of[r.key], r, sets) for r in batch]
            if clip is not None:
                samples = _with_clip(clip, samples, [request_of[r.key].image_path for r in batch])
            rundir.append(samples)
            summary.answered += len(samples)
            summary.errors += sum(1 for s in samples if s.error)
            for s in samples:
                summary.by_split[s.split] = summary.by_split.get(s.split, 0) + 1
            if progress:
                progress(summary.skipped + summary.answered, summary.total)
    finally:  # a failed or interrupted run still records what its requests did
        stats = backend.request_stats() if isinstance(backend, CountsRequests) and requests else None
        if stats:
            rundir.add_request_stats(stats)
    if summary.skipped + summary.answered == summary.total:
        stored = rundir.read_samples()  # count over the whole run, resumed parts included
        summary.errors_left = sum(1 for s in stored if s.error)
        if summary.errors_left and not config.accept_errors:
            log.warning(
                "%d sample(s) are errors: the run is not marked complete; `--resume` asks them again, "
                "`--accept-errors` marks it complete with them (scored as wrong)",
                summary.errors_left,
            )
        else:
            rundir.mark_complete(
                {
                    "questions": len(stored),
                    "errors": summary.errors_left,
                    "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                }
            )
    return summary
