"""AMBER's generative metrics (``inference.py`` at commit 5e1fd52f8ea6): CHAIR, Cover, Hal and
Cog of captions, with AMBER's annotations (``truth``/``hallu`` objects), its word associations
(``relation.json``) and its safe words, reproduced exactly:

- the response's nouns: NLTK ``word_tokenize`` (no lower-casing), ``pos_tag``, tags starting
  ``NN``, WordNet lemmatizer as a noun; only nouns among the association table's words count;
- a noun that is a safe word is skipped; one among the truth objects or their associations
  marks that truth object covered; otherwise it may mark a hallucination-list object (exactly,
  then by spaCy similarity > 0.8) and is hallucinated unless spaCy finds it similar to a truth
  word (which then counts as covered);
- counters start at 0.001, numbers are rounded percentages; Hal = 100 - non-hallucinated
  captions %; an empty object list reads the whole mark list (Python's ``x[-0:]``), as there.

AMBER's similarity uses spaCy ``en_core_web_lg`` (word vectors); another model changes the
numbers, so the model used is recorded with every result (:class:`SpacySimilarity`).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Protocol

from pydantic import ConfigDict, Field

from halluprobe.captions.amber.data import AmberAnnotation
from halluprobe.captions.chair.families import TextTools
from halluprobe.errors import RuntimeFailure
from halluprobe.records import FrozenRecord

__all__ = [
    "AMBER_SPACY_MODEL", "AmberCaptionResult", "AmberGenerative", "AmberGenerativeNumbers", "AmberGenerativeSettings", "Similarity",
    "SpacySimilarity", "amber_generative", "amber_nouns",
]  # fmt: skip

AMBER_SPACY_MODEL = "en_core_web_lg"
_START = 0.001


class Similarity(Protocol):
    identity: str

    def similar(self, a: str, b: str) -> bool: ...


class SpacySimilarity:
    """``nlp(a).similarity(nlp(b)) > threshold``, as AMBER's ``check_synonyms_word``."""

    def __init__(self, model: str = AMBER_SPACY_MODEL, threshold: float = 0.8) -> None:
        import spacy

        try:
            self._nlp = spacy.load(model)
        except OSError:
            raise RuntimeFailure(f"spaCy model {model!r} is not installed; get it with: python -m spacy download {model}") from None
        self.threshold = threshold
        self.identity = f"spacy {spacy.__version__} {model} {self._nlp.meta.get('version', '?')} (threshold {threshold})"
        self._similar = functools.lru_cache(maxsize=None)(self._compute)

    def _compute(self, a: str, b: str) -> bool:
        return bool(self._nlp(a).similarity(self._nlp(b)) > self.threshold)

    def similar(self, a: str, b: str) -> bool:
        return bool(self._similar(a, b))


class AmberCaptionResult(FrozenRecord):
    """One caption as AMBER reads it."""

    question_id: int
    nouns: tuple[str, ...]  # the association-table nouns read
    hallucinated: tuple[str, ...]
    truth_covered: tuple[int, ...]  # the mark list AMBER sums for Cover
    hallu_covered: tuple[int, ...]  # the mark list AMBER sums for Cog


class AmberGenerativeNumbers(FrozenRecord):
    """AMBER's generative numbers, written under AMBER's names (``CHAIR``, ``Cover``, ...)."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    chair: float = Field(alias="CHAIR")
    cover: float = Field(alias="Cover")
    hal: float = Field(alias="Hal")
    cog: float = Field(alias="Cog")
    n: int


class AmberGenerativeSettings(FrozenRecord):
    """What the numbers were computed with: AMBER's commit, the similarity model, the NLTK tools, the run."""

    commit: str
    similarity: str
    tools: str
    run: str
    max_new_tokens: int


class AmberGenerative(FrozenRecord):
    """``amber generative``'s result: the numbers, the settings and (in ``amber_generative.json``,
    not ``--json``) each caption's reading."""

    numbers: AmberGenerativeNumbers
    settings: AmberGenerativeSettings
    captions: tuple[AmberCaptionResult, ...] = ()


def amber_nouns(text: str, tools: TextTools) -> list[str]:
    words = tools.tokenize(text)
    tags = tools.tag(words)
    return [tools.lemmatize(w, "n") for w, tag in zip(words, tags) if tag.startswith("NN")]


def _mark(marks: list[int], j: int, own: int) -> None:
    # an association hit marks the object it belongs to (stored in marks[j]); a direct hit itself
    if j < len(marks) - own:
        marks[marks[j] + len(marks) - own] = 1
    else:
        marks[j] = 1


def _expand(objects: Sequence[str], association: dict[str, list[str]]) -> tuple[list[str], list[int]]:
    words: list[str] = []
    marks: list[int] = []
    for idx, word in enumerate(objects):
        words += association[word]
        marks += [idx] * len(association[word])
    return words + list(objects), marks + [0] * len(objects)


def score_caption(question_id: int, text: str, record: AmberAnnotation, association: dict[str, list[str]],
                  vocabulary: set[str], safe: set[str], tools: TextTools, similarity: Similarity) -> AmberCaptionResult:  # fmt: skip
    truth = list(record.truth) if isinstance(record.truth, list) else [record.truth]
    nouns = [n for n in amber_nouns(text, tools) if n in vocabulary]
    safe_words, safe_marks = _expand(truth, association)
    ha_words, ha_marks = _expand(record.hallu, association)
    safe_len, ha_len = len(truth), len(record.hallu)
    flags = [0] * len(nouns)
    for idx, noun in enumerate(nouns):
        if noun in safe:
            continue
        if noun in safe_words:
            _mark(safe_marks, safe_words.index(noun), safe_len)
            continue
        if noun in ha_words:
            _mark(ha_marks, ha_words.index(noun), ha_len)
        for j, word in enumerate(ha_words):
            if similarity.similar(noun, word):
                _mark(ha_marks, j, ha_len)
                break
        found = False
        for j, word in enumerate(safe_words):
            if similarity.similar(noun, word):
                found = True
                _mark(safe_marks, j, safe_len)
                break
        if not found:
            flags[idx] = 1
    return AmberCaptionResult(
        question_id=question_id, nouns=tuple(nouns), hallucinated=tuple(n for n, f in zip(nouns, flags) if f),
        truth_covered=tuple(safe_marks[-safe_len:]), hallu_covered=tuple(ha_marks[-ha_len:]),
    )  # fmt: skip


def amber_generative(
    captions: Sequence[tuple[int, str]],
    annotations: Sequence[AmberAnnotation],
    association: dict[str, list[str]],
    safe_words: Sequence[str],
    tools: TextTools,
    similarity: Similarity,
) -> tuple[AmberGenerativeNumbers, list[AmberCaptionResult]]:
    """(AMBER's CHAIR/Cover/Hal/Cog, per caption) of (AMBER id, caption) pairs."""
    vocabulary = set(association) | {w for words in association.values() for w in words}
    safe = set(safe_words)
    results = [score_caption(qid, text, annotations[qid - 1], association, vocabulary, safe, tools, similarity) for qid, text in captions]
    hallucinated = sum(len(r.hallucinated) for r in results)
    nouns = sum(len(r.nouns) for r in results)
    covered = sum(sum(r.truth_covered) for r in results)
    cover_n = sum(len(r.truth_covered) for r in results)
    cog = sum(sum(r.hallu_covered) for r in results)
    cog_n = sum(len(r.hallu_covered) for r in results)
    clean = sum(not r.hallucinated for r in results)
    numbers = AmberGenerativeNumbers(
        chair=round(hallucinated / (nouns + _START) * 100, 1),
        cover=round(covered / (cover_n + _START) * 100, 1),
        hal=round(100 - clean / (len(results) + _START) * 100, 1),
        cog=round(cog / (cog_n + _START) * 100, 1),
        n=len(results),
    )
    return numbers, results
