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

from halluprobe.backends.base import Backend
from halluprobe.records import Question, TokenSets
from halluprobe.rundir import RunDir
from halluprobe.runner import RunConfig, make_header, run_questions

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
