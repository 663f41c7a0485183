"""halluprobe: measure object hallucination in vision-language models, and audit the measurement."""

from __future__ import annotations

from halluprobe.errors import InputError, RuntimeFailure
from halluprobe.records import Question, ReadoutResult, Request, Response, RunHeader, Sample, TokenLogprob, TokenSets
from halluprobe.records_scores import Metrics, ScoreReport

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "InputError",
    "RuntimeFailure",
    "Metrics",
    "Question",
    "ReadoutResult",
    "Request",
    "Response",
    "RunHeader",
    "Sample",
    "ScoreReport",
    "TokenLogprob",
    "TokenSets",
]
