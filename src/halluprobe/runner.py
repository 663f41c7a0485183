"""Questions -> requests -> backend -> readouts -> samples.jsonl."""

from __future__ import annotations

import datetime as _dt
import logging
import platform
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from halluprobe.backends.base import Backend
from halluprobe.errors import InputError
from halluprobe.readouts.logits import LOGIT_READOUTS
from halluprobe.readouts.text import TEXT_RULES, parse_text
from halluprobe.readouts.tokensets import greedy_answer
from halluprobe.records import (
    Question,
    QuestionKey,
    ReadoutResult,
    Request,
    Response,
    RunHeader,
    Sample,
    TokenSets,
)
from halluprobe.rundir import RunDir, fingerprint_of

__all__ = [
    "RunConfig",
    "RunSummary",
    "run_questions",
    "make_sample",
    "resolve_image",
    "make_header",
    "limit_questions",
    "RequestStatsSource",
]

log = logging.getLogger(__name__)

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class RunConfig:
    model: str
    backend: str = "hf"
    template: str | None = None
    text_rules: tuple[str, ...] = ("pope", "exact", "yorn", "strict")
    max_new_tokens: int = 8
    top_k: int = 10
    limit: int | None = None
    resume: bool = False
    force: bool = False
    overwrite: bool = False
    shard: str | None = None  # "I/N": recorded in the header, not part of the fingerprint
    # Open questions (PROVE): full greedy answers of up to max_new_tokens, no yes/no readouts.
    # The backend must be built for it too (hf: open_ended=True, which drops the '.' stop).
    open_ended: bool = False


@runtime_checkable
class RequestStatsSource(Protocol):
    """A backend that counts its requests (a server backend): written to ``requests.json``."""

    def request_stats(self) -> dict[str, Any]:
        ...


def limit_questions(questions: Sequence[Question], limit: int | None) -> list[Question]:
    """The first ``limit`` questions of each split, in file order (all of them when None)."""
    if limit is None:
        return list(questions)
    kept: list[Question] = []
    per_split: dict[str, int] = {}
    for q in questions:
        if per_split.get(q.split, 0) < limit:
            per_split[q.split] = per_split.get(q.split, 0) + 1
            kept.append(q)
    return kept


@dataclass
class RunSummary:
    answered: int = 0
    skipped: int = 0
    errors: int = 0
    total: int = 0
    by_split: dict[str, int] = field(default_factory=dict)


def resolve_image(image: str, root: Path) -> Path:
    """An image path relative to the images root (which it may not escape), or absolute."""
    path = Path(image)
    if path.is_absolute():
        return path
    resolved = (root / path).resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise InputError(f"image path {image!r} escapes the images root {root}")
    return resolved


def _offset_argmax(response: Response, sets: TokenSets | None) -> str | None:
    if sets is None or not response.first_token:
        return None
    top = response.first_token[0]
    return None if greedy_answer(top, sets) is not None else top.piece


def make_sample(
    question: Question, prompt: str, response: Response, sets: TokenSets | None, text_rules: Sequence[str]
) -> Sample:
    """Apply every readout to one response: all of them read the same forward pass."""
    readouts: dict[str, ReadoutResult] = {}
    if response.error is None:
        if sets is not None and response.candidates:
            for name, read in LOGIT_READOUTS.items():
                readouts[name] = read(response.candidates, sets)
        if response.text is not None:
            for rule in text_rules:
                readouts[f"text:{rule}"] = ReadoutResult(decision=parse_text(rule, response.text))
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
        readouts=readouts,
        latency_s=response.latency_s,
        error=response.error,
    )


def _package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("halluprobe", "torch", "transformers", "pydantic", "numpy"):
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def make_header(
    config: RunConfig,
    backend: Backend,
    benchmarks: dict[str, tuple[Path, str]],
    images_root: Path,
) -> RunHeader:
    """The header: written before the first sample. ``benchmarks``: split -> (path, sha256)."""
    from halluprobe import __version__

    info = backend.info()
    sets = backend.token_sets()
    template = config.template or "chat"
    # What may not change between a run and its resume: a change here is refused.
    fingerprint = fingerprint_of(
        {
            "backend": config.backend,
            "model": config.model,
            "dtype": info.get("dtype"),
            "template": template,
            "text_rules": list(config.text_rules),
            "max_new_tokens": config.max_new_tokens,
            "tokenizer": sets.tokenizer_fingerprint if sets else None,
            "benchmarks": {split: sha for split, (_, sha) in sorted(benchmarks.items())},
            # only when set, so the fingerprints of existing yes/no runs do not change
            **({"open_ended": True} if config.open_ended else {}),
        }
    )
    return RunHeader(
        halluprobe_version=__version__,
        created_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        fingerprint=fingerprint,
        backend=config.backend,
        backend_info=info,
        model=config.model,
        template=template,
        readouts=[] if config.open_ended else list(LOGIT_READOUTS) + [f"text:{r}" for r in config.text_rules],
        text_rules=[] if config.open_ended else list(config.text_rules),
        max_new_tokens=config.max_new_tokens,
        token_sets=sets,
        benchmarks={split: sha for split, (_, sha) in benchmarks.items()},
        benchmark_paths={split: str(path) for split, (path, _) in benchmarks.items()},
        images_root=str(images_root),
        limit=config.limit,
        shard=config.shard,
        open_ended=config.open_ended,
        packages=_package_versions(),
    )


def run_questions(
    backend: Backend,
    questions: Sequence[Question],
    images_root: Path,
    rundir: RunDir,
    config: RunConfig,
    header: RunHeader,
    progress: ProgressFn | None = None,
) -> RunSummary:
    """Answer every question not yet in the run dir, appending samples batch by batch."""
    for rule in config.text_rules:
        if rule not in TEXT_RULES:
            raise InputError(f"unknown text rule {rule!r}; known: {', '.join(TEXT_RULES)}")
    if not config.open_ended:
        # an open question's label is a placeholder: a yes/no run over it would score nonsense
        q_open = next((q for q in questions if q.is_open), None)
        if q_open is not None:
            raise InputError(
                f"question {q_open.question_id} (split {q_open.split!r}) is an open question (kind 'open'): "
                "answer open questions with `halluprobe run --open-ended`",
                header.benchmark_paths.get(q_open.split),
            )
    if config.resume and rundir.exists() and not config.force:
        old_shard = rundir.read_header().shard
        if old_shard != header.shard:
            raise InputError(
                f"refusing to resume: the run dir holds shard {old_shard or 'none (all questions)'}, "
                f"not {header.shard or 'none (all questions)'}",
                rundir.header_path,
            )
    done = rundir.start(header, resume=config.resume, force=config.force, overwrite=config.overwrite)
    todo = [q for q in questions if q.key not in done]
    summary = RunSummary(skipped=len(questions) - len(todo), total=len(questions))
    if done:
        log.info("resuming: %d of %d questions already answered", summary.skipped, len(questions))

    by_key: dict[QuestionKey, Question] = {q.key: q for q in todo}
    prompts: dict[str, str] = {}  # question text -> rendered prompt (18 questions share few texts)
    requests: list[Request] = []
    for q in todo:
        prompt = prompts.get(q.text)
        if prompt is None:
            prompt = prompts[q.text] = backend.render_prompt(q.text, config.template)
        requests.append(
            Request(split=q.split, question_id=q.question_id, image_path=str(resolve_image(q.image, images_root)), prompt=prompt)
        )
    prompt_of = {r.key: r.prompt for r in requests}

    sets = None if config.open_ended else header.token_sets
    rules: tuple[str, ...] = () if config.open_ended else config.text_rules
    max_new = config.max_new_tokens if (rules or config.open_ended) else 0
    if progress:
        progress(summary.skipped, summary.total)
    try:
        for batch in backend.answer(requests, max_new_tokens=max_new, top_k=config.top_k):
            samples = [make_sample(by_key[r.key], prompt_of[r.key], r, sets, rules) for r in batch]
            rundir.append(samples)
            summary.answered += len(samples)
            summary.errors += sum(1 for s in samples if s.error)
            for s in samples:
                summary.by_split[s.split] = summary.by_split.get(s.split, 0) + 1
            if progress:
                progress(summary.skipped + summary.answered, summary.total)
    finally:  # a failed or interrupted run still records what its requests did
        stats = backend.request_stats() if isinstance(backend, RequestStatsSource) and requests else None
        if stats:
            rundir.add_request_stats(stats)
    if summary.skipped + summary.answered == summary.total:
        stored = rundir.read_samples()  # count over the whole run, resumed parts included
        rundir.mark_complete(
            {
                "questions": len(stored),
                "errors": sum(1 for s in stored if s.error),
                "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            }
        )
    return summary
