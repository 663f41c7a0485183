"""Which published POPE version a set of questions comes from, and matching questions by text.

The COCO POPE files changed four times (:data:`halluprobe.benchmarks.sources.POPE_VERSIONS`,
``docs/pope-versions.md``). Answers made on one version and scored on another pair wrong
questions with wrong labels, so questions are matched by image and *normalised* text, never by
position or id: case and spacing folded, the 2023 misspelling "imange" read as "image", and the
instruction LLaVA and lmms-eval append ("Answer the question using a single word or phrase.")
removed. A split's question set is told by the digest of its sorted ``image<TAB>text`` lines.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping

from halluprobe.benchmarks.sources import POPE_VERSIONS

__all__ = ["ANSWER_SUFFIX", "normalise_question", "questions_digest", "detect_versions", "describe_versions", "versions_of_file"]

# What LLaVA's question file and lmms-eval's POPE prompt add after the question.
ANSWER_SUFFIX = "answer the question using a single word or phrase."
_SPACES = re.compile(r"\s+")


def normalise_question(text: str) -> str:
    """The text questions are matched on: lower case, single spaces, "imange" -> "image",
    without the short-answer instruction."""
    folded = _SPACES.sub(" ", text.lower()).strip()
    if folded.endswith(ANSWER_SUFFIX):
        folded = folded[: -len(ANSWER_SUFFIX)].rstrip()
    return folded.replace("imange", "image")


def questions_digest(pairs: Iterable[tuple[str, str]]) -> str:
    """sha256 of the sorted distinct ``image<TAB>normalised text`` lines of one split."""
    lines = sorted({f"{image}\t{normalise_question(text)}" for image, text in pairs})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def detect_versions(split: str, pairs: Iterable[tuple[str, str]]) -> list[str]:
    """The published versions whose ``split`` holds exactly these (image, question) pairs
    (several when versions share the split up to spelling; none for a subset or other questions)."""

    digest = questions_digest(pairs)
    return [name for name, v in POPE_VERSIONS.items() if v.questions_digest.get(split) == digest]


def versions_of_file(sha256: str) -> list[str]:
    """The published versions that include a file with this sha256 (none for any other file)."""

    return [name for name, v in POPE_VERSIONS.items() if sha256 in v.files.values()]


def describe_versions(found: Mapping[str, list[str]]) -> str:
    """``random: 2023-08-10; popular: 2023-08-10, 2023-10-09, ...`` for messages; "none" per
    split that matches no published version in full."""
    return "; ".join(f"{split}: {', '.join(names) if names else 'no published version in full'}" for split, names in found.items())
