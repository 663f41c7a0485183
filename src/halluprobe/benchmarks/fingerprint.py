"""The content fingerprint of a question file: what it asks, whatever its bytes.

The sha256 of a file changes when the same questions are re-saved as JSON lines instead of a
pretty-printed array, or with other line endings (VCD re-saved POPE's A-OKVQA and GQA files so).
The fingerprint reads only each record's ``question_id``, ``image``, ``text`` and ``label``
(lower-cased, as read), in file order, as canonical JSON (sorted keys, no spaces, UTF-8), so
those copies share it, and any change to a question, its order or its label changes it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from halluprobe.benchmarks.datasets import counts_hint, identify_fingerprint
from halluprobe.benchmarks.question_file import read_questions
from halluprobe.errors import InputError
from halluprobe.records import Question

__all__ = ["FINGERPRINT_FIELDS", "content_fingerprint", "fingerprint_info"]

FINGERPRINT_FIELDS = ("question_id", "image", "text", "label")


def content_fingerprint(questions: Iterable[Question]) -> str:
    """sha256 (hex) of the questions' fingerprint fields in order, as canonical JSON."""
    records = [{"image": q.image, "label": q.label, "question_id": q.question_id, "text": q.text} for q in questions]
    canonical = json.dumps(records, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def fingerprint_info(files: Mapping[str, Path]) -> dict[str, dict[str, Any]]:
    """What an import records of its labels files (split -> path): each file's content
    fingerprint, the pinned question files it is (``dataset@version:file``; empty: none) and,
    for one that is none, which pinned versions share its counts (``question_hints``)."""

    prints: dict[str, str] = {}
    hints: dict[str, str] = {}
    for split, path in files.items():
        try:
            questions = read_questions(path, split=split)
        except InputError:  # a format's own labels file (MARINE's keyed by id) has no POPE questions to fingerprint
            continue
        prints[split] = content_fingerprint(questions)
        if not identify_fingerprint(prints[split]):
            hints[split] = counts_hint(split, len(questions), sum("imange" in q.text for q in questions))
    return {
        "question_fingerprints": prints,
        "question_datasets": {split: identify_fingerprint(fp) for split, fp in prints.items()},
        **({"question_hints": hints} if hints else {}),
    }
