"""Before trusting a readout on a new model or template: run a sample, check where the first
token's probability mass goes.

If the model's most likely first piece is often neither a yes nor a no piece (a leading space
piece, "The", a newline, a chat-format token), every logit readout is reading the tail of the
distribution, and the number it gives is not the model's answer.
"""

from __future__ import annotations

import random
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halluprobe.backends.base import Backend
from halluprobe.records import Question, TokenSets
from halluprobe.run_setup import RunConfig, make_header
from halluprobe.rundir import RunDir
from halluprobe.runner import run_questions

__all__ = ["Diagnosis", "diagnose", "sample_questions"]


@dataclass
class Diagnosis:
    token_sets: TokenSets | None
    n: int
    errors: int
    offset: int
    first_pieces: Counter[str] = field(default_factory=Counter)
    offset_pieces: Counter[str] = field(default_factory=Counter)
    prompt_example: str = ""

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
        }

    def summary_lines(self) -> list[str]:
        """What a person reads in the terminal."""
        sets = self.token_sets
        lines: list[str] = []
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
    result = Diagnosis(token_sets=header.token_sets, n=len(samples), errors=0, offset=0)
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
