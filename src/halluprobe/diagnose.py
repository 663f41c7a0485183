"""Before trusting a readout on a new model or template: run a sample, check where the first
token's probability mass goes; and, against a server, that its prefix cache answers each
question from its own image.

If the model's most likely first piece is often neither a yes nor a no piece (a leading space
piece, "The", a newline, a chat-format token), every logit readout is reading the tail of the
distribution, and the number it gives is not the model's answer.

:func:`prefix_cache_check` asks the same questions twice: all at once in the image-grouped order
a run sends (the server's prefix cache hot, requests concurrent: the load of vLLM issue #20261,
wrong multimodal outputs under prefix caching and concurrency), then one at a time in a
shuffled order; the two answers to a question must agree (every stored log-probability within a
tolerance, the same first token, the same greedy text).
"""

from __future__ import annotations

import math
import random
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halluprobe.ask import ask
from halluprobe.backends.base import Backend
from halluprobe.files import resolve_image
from halluprobe.records import GenerateConfig, Question, QuestionKey, Request, Response, TokenSets
from halluprobe.run_setup import RunConfig, make_header
from halluprobe.rundir import RunDir
from halluprobe.runner import run_questions

__all__ = ["CacheCheck", "CacheDisagreement", "Diagnosis", "diagnose", "prefix_cache_check", "sample_by_image", "sample_questions"]


@dataclass
class Diagnosis:
    token_sets: TokenSets | None
    n: int
    errors: int
    offset: int
    first_pieces: Counter[str] = field(default_factory=Counter)
    offset_pieces: Counter[str] = field(default_factory=Counter)
    prompt_example: str = ""
    logprobs: str | None = None  # a server run's reading: "exact" or "top-K pieces"

    @property
    def answered(self) -> int:
        return self.n - self.errors

    @property
    def offset_rate(self) -> float | None:
        return self.offset / self.answered if self.answered else None

    def failure(self, max_offset: float) -> str | None:
        """Why a logit readout should not be trusted here (None: it can be)."""
        rate = self.offset_rate
        if rate is None:
            return f"no question was answered ({self.errors} errors)"
        if rate <= max_offset:
            return None
        worst = ", ".join(f"{p!r} ({c})" for p, c in self.offset_pieces.most_common(5))
        return (
            f"the first token's argmax lies outside the yes/no sets on {100 * rate:.1f}% of questions "
            f"(limit {100 * max_offset:.1f}%): {worst}; logit readouts would read the tail of the "
            "distribution: fix the template or the token sets"
        )

    def to_json(self, max_offset: float) -> dict[str, Any]:
        sets = self.token_sets
        return {
            "n": self.n,
            "errors": self.errors,
            "offset_rate": self.offset_rate,
            "max_offset": max_offset,
            "ok": self.failure(max_offset) is None,
            "offset_pieces": self.offset_pieces.most_common(),
            "first_pieces": self.first_pieces.most_common(),
            "yes_pieces": sets.yes_pieces if sets else None,
            "no_pieces": sets.no_pieces if sets else None,
            "legacy_valid": sets.legacy_valid if sets else None,
            "prompt": self.prompt_example,
            **({"logprobs": self.logprobs} if self.logprobs else {}),
        }

    def summary_lines(self) -> list[str]:
        """What a person reads in the terminal."""
        sets = self.token_sets
        lines: list[str] = [f"log-probabilities read: {self.logprobs}"] if self.logprobs else []
        if sets is not None and sets.keyed_by == "piece":
            lines.append("yes / no sets: derived per sample from the returned top-logprob pieces (no vocabulary)")
        elif sets is not None:
            lines.append("yes set: " + ", ".join(f"{p!r}={i}" for p, i in zip(sets.yes_pieces, sets.yes_ids)))
            lines.append("no set:  " + ", ".join(f"{p!r}={i}" for p, i in zip(sets.no_pieces, sets.no_ids)))
            lines.append(f"legacy LLaMA ids: {'valid' if sets.legacy_valid else 'INVALID for this vocabulary'}")
        lines.append(f"prompt: {self.prompt_example!r}")
        lines.append("first pieces: " + ", ".join(f"{p!r} {c}" for p, c in self.first_pieces.most_common(8)))
        if self.offset_rate is not None:
            lines.append(f"off-set argmax: {self.offset} of {self.answered} ({100 * self.offset_rate:.1f}%), {self.errors} errors")
        return lines


def sample_questions(questions: Sequence[Question], size: int, seed: int = 0) -> list[Question]:
    """A seeded sample, kept in benchmark order (so the backend still groups by image)."""
    if size >= len(questions):
        return list(questions)
    chosen = set(random.Random(seed).sample(range(len(questions)), size))
    return [q for i, q in enumerate(questions) if i in chosen]


def diagnose(
    backend: Backend,
    questions: Sequence[Question],
    images_root: Path,
    benchmarks: dict[str, tuple[Path, str]],
    *,
    model: str,
    backend_name: str,
    template: str | None,
    progress: Callable[[int, int], None] | None = None,
) -> Diagnosis:
    """Run ``questions`` (first-token readouts only) in a scratch run dir and tally first pieces."""
    config = RunConfig(model=model, backend=backend_name, template=template, text_rules=(), max_new_tokens=0)
    header = make_header(config, backend, benchmarks, images_root)
    with tempfile.TemporaryDirectory(prefix="halluprobe-diagnose-") as tmp:
        rundir = RunDir(Path(tmp) / "run")
        run_questions(backend, questions, images_root, rundir, config, header, progress=progress)
        samples = rundir.read_samples()
    result = Diagnosis(token_sets=header.token_sets, n=len(samples), errors=0, offset=0, logprobs=header.logprob_label)
    for s in samples:
        if s.error:
            result.errors += 1
            continue
        if s.first_token:
            result.first_pieces[s.first_token[0].piece] += 1
        if s.offset_argmax is not None:
            result.offset += 1
            result.offset_pieces[s.offset_argmax] += 1
        result.prompt_example = result.prompt_example or s.prompt
    return result


def sample_by_image(questions: Sequence[Question], images: int, seed: int = 0) -> list[Question]:
    """Every question of ``images`` seeded-chosen images (a prefix cache is shared within an image)."""
    names = sorted({q.image for q in questions})
    chosen = set(random.Random(seed).sample(names, min(images, len(names))))
    return [q for q in questions if q.image in chosen]


@dataclass(frozen=True)
class CacheDisagreement:
    """One question whose two answers differ."""

    split: str
    question_id: int
    image: str
    why: str


@dataclass
class CacheCheck:
    """The two passes compared answer by answer."""

    n: int
    tolerance: float
    compared: int = 0
    errors: int = 0
    max_diff: float = 0.0
    disagreements: list[CacheDisagreement] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.compared > 0 and not self.disagreements

    def verdict(self) -> str:
        if self.compared == 0:
            return f"prefix cache: nothing compared ({self.errors} of {self.n} questions were errors)"
        if not self.disagreements:
            return (
                f"prefix cache: OK: {self.compared} questions answered alike grouped by image (concurrent) and one by one "
                f"(largest log-probability difference {self.max_diff:.2g}, tolerance {self.tolerance:g})"
            )
        first = self.disagreements[0]
        return (
            f"prefix cache: FAILED: {len(self.disagreements)} of {self.compared} questions answered differently grouped by "
            f"image than one by one (e.g. {first.split}/{first.question_id} on {first.image}: {first.why}); the server's "
            "prefix cache may answer from the wrong image (vLLM issue #20261): run it with --no-enable-prefix-caching"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "n": self.n, "compared": self.compared, "errors": self.errors, "max_diff": self.max_diff,
            "tolerance": self.tolerance, "disagreements": [vars(d) for d in self.disagreements], "verdict": self.verdict(),
        }  # fmt: skip


def _difference(a: Response, b: Response, tolerance: float) -> tuple[float, str | None]:
    """(largest log-probability difference, why the two answers disagree or None)."""
    common = set(a.candidates) & set(b.candidates)
    diff = max((abs(a.candidates[k] - b.candidates[k]) for k in common), default=0.0)
    if not common and (a.candidates or b.candidates):
        return math.inf, "no log-probability in common"
    if diff > tolerance:
        key = max(common, key=lambda k: abs(a.candidates[k] - b.candidates[k]))
        return diff, f"log-probability of {key!r}: {a.candidates[key]:.4f} grouped, {b.candidates[key]:.4f} alone"
    first_a = (a.first_token[0].id, a.first_token[0].piece) if a.first_token else None
    first_b = (b.first_token[0].id, b.first_token[0].piece) if b.first_token else None
    if first_a != first_b:
        return diff, f"first token {first_a} grouped, {first_b} alone"
    if a.text != b.text:
        return diff, f"greedy text {a.text!r} grouped, {b.text!r} alone"
    return diff, None


def prefix_cache_check(
    backend: Backend,
    questions: Sequence[Question],
    images_root: Path,
    *,
    template: str | None,
    tolerance: float = 0.02,
    seed: int = 0,
    max_new_tokens: int = 8,
) -> CacheCheck:
    """Ask ``questions`` grouped (one call: the backend's concurrent, image-ordered path) and one
    by one in a seeded shuffled order; compare. ``backend`` should bypass any response cache."""
    requests = [
        Request(split=q.split, question_id=q.question_id, image_path=str(resolve_image(q.image, images_root)),
                prompt=backend.render_prompt(q.text, template))
        for q in questions
    ]  # fmt: skip
    image_of = {(q.split, q.question_id): q.image for q in questions}
    config = GenerateConfig(max_new_tokens=max_new_tokens)
    grouped: dict[QuestionKey, Response] = {r.key: r for batch in ask(backend, requests, config) for r in batch}
    alone: dict[QuestionKey, Response] = {}
    for request in random.Random(seed).sample(requests, len(requests)):
        for batch in ask(backend, [request], config):
            alone.update((r.key, r) for r in batch)
    result = CacheCheck(n=len(requests), tolerance=tolerance)
    for r in requests:
        a, b = grouped[r.key], alone[r.key]
        if a.error or b.error:
            result.errors += 1
            continue
        result.compared += 1
        diff, why = _difference(a, b, tolerance)
        if math.isfinite(diff):
            result.max_diff = max(result.max_diff, diff)
        if why is not None:
            result.disagreements.append(CacheDisagreement(r.split, r.question_id, image_of[r.key], why))
    return result
