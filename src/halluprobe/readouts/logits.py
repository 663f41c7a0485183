"""Logit readouts: pure functions of one response's candidate log-probabilities and token sets.

Every readout is computed from the same forward pass: the backend stores the first-token
log-probability of every id in every readout's token set (``Response.candidates``), and the
readouts below only read that table.

A backend without ids (an OpenAI-compatible server, ``TokenSets.keyed_by == "piece"``) stores
the top-K pieces it was given, keyed by piece; ``dynamic`` then derives the yes / no sets from
those pieces with the same rule (:func:`halluprobe.readouts.tokensets.classify_piece`). A set
with no piece among the top K has a mass below the K-th log-probability that the server did
not report: it counts as empty (score None, so ``p_yes`` is 0 or 1), and both empty is unknown.
The legacy readouts read ids and are unknown (and marked invalid) there.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from halluprobe.readouts.tokensets import (
    LEGACY_2TOK_NO,
    LEGACY_2TOK_YES,
    LEGACY_8TOK_NO,
    LEGACY_8TOK_YES,
    classify_piece,
)
from halluprobe.records import ReadoutResult, TokenSets

__all__ = [
    "LOGIT_READOUTS",
    "LEGACY_READOUTS",
    "candidate_ids",
    "read_legacy_2tok",
    "read_legacy_8tok",
    "read_dynamic",
    "decide",
    "logsumexp",
    "top_choice",
]

Candidates = Mapping[str, float]


def logsumexp(values: Sequence[float]) -> float:
    """log(sum(exp(v))), stable; all -inf (no mass) gives -inf rather than nan; any NaN gives NaN
    (``max`` would drop a NaN or keep it depending on where it stands)."""
    if any(math.isnan(v) for v in values):
        return math.nan
    top = max(values)
    if top == -math.inf:
        return -math.inf
    return top + math.log(sum(math.exp(v - top) for v in values))


def top_choice(scores: Mapping[str, float]) -> str | None:
    """The key with the largest score; None when there is none or an exact tie at the top.

    The one tie rule of the logit readouts (yes/no here, option letters in Auto-Probe): a tie is
    unknown rather than a silent default to whichever key comes first.
    """
    if not scores:
        return None
    best = max(scores.values())
    winners = [key for key, value in scores.items() if value == best]
    return winners[0] if len(winners) == 1 else None


def decide(yes_score: float, no_score: float) -> ReadoutResult:
    """Decision = the larger score (log-mass); an exact tie is unknown rather than a silent default.

    A score that is not a log-mass (NaN, +inf: a broken forward pass) gives unknown, never a
    decision read from the other score alone."""
    if math.isnan(yes_score) or math.isnan(no_score) or math.inf in (yes_score, no_score):
        return _unknown()
    decision = top_choice({"yes": yes_score, "no": no_score}) or "unknown"
    # p_yes = exp(yes) / (exp(yes) + exp(no)), computed stably
    top = max(yes_score, no_score)
    if top == -math.inf:
        p_yes = None
    else:
        ey, en = math.exp(yes_score - top), math.exp(no_score - top)
        p_yes = ey / (ey + en)
    return ReadoutResult(decision=decision, yes_score=yes_score, no_score=no_score, p_yes=p_yes)


def _scores(candidates: Candidates, ids: Iterable[int]) -> list[float] | None:
    values = [candidates.get(str(i)) for i in ids]
    if any(v is None for v in values):
        return None  # the backend could not read these ids (outside the vocabulary)
    return [float(v) for v in values if v is not None]


def _unknown() -> ReadoutResult:
    return ReadoutResult(decision="unknown")


def read_legacy_2tok(candidates: Candidates, sets: TokenSets) -> ReadoutResult:
    """The reference POPE logit evaluator: LLaMA pieces ``yes`` (3582) vs ``no`` (1217)."""
    yes, no = _scores(candidates, [LEGACY_2TOK_YES]), _scores(candidates, [LEGACY_2TOK_NO])
    if yes is None or no is None:
        return _unknown()
    return decide(yes[0], no[0])


def read_legacy_8tok(candidates: Candidates, sets: TokenSets) -> ReadoutResult:
    """Max over the four LLaMA-2 yes variants vs the four no variants."""
    yes, no = _scores(candidates, LEGACY_8TOK_YES), _scores(candidates, LEGACY_8TOK_NO)
    if yes is None or no is None:
        return _unknown()
    return decide(max(yes), max(no))


def _read_pieces(candidates: Candidates) -> ReadoutResult:
    yes = [float(v) for piece, v in candidates.items() if classify_piece(piece) == "yes"]
    no = [float(v) for piece, v in candidates.items() if classify_piece(piece) == "no"]
    if not yes and not no:
        return _unknown()
    # an unreported set counts as no mass: its score is -inf, which ReadoutResult stores as None
    return decide(logsumexp(yes) if yes else -math.inf, logsumexp(no) if no else -math.inf)


def read_dynamic(candidates: Candidates, sets: TokenSets) -> ReadoutResult:
    """Log-sum-exp over the model's own yes set vs its no set."""
    if sets.keyed_by == "piece":
        return _read_pieces(candidates)
    yes, no = _scores(candidates, sets.yes_ids), _scores(candidates, sets.no_ids)
    if not yes or not no:
        return _unknown()
    return decide(logsumexp(yes), logsumexp(no))


LOGIT_READOUTS: dict[str, Callable[[Candidates, TokenSets], ReadoutResult]] = {
    "legacy_2tok": read_legacy_2tok,
    "legacy_8tok": read_legacy_8tok,
    "dynamic": read_dynamic,
}

# Readouts whose ids are fixed LLaMA-2 ids: invalid unless TokenSets.legacy_valid.
LEGACY_READOUTS = frozenset({"legacy_2tok", "legacy_8tok"})


def candidate_ids(sets: TokenSets) -> list[int]:
    """Every id any logit readout reads, restricted to the tokenizer's vocabulary."""
    if sets.keyed_by == "piece":
        return []
    ids = set(sets.yes_ids) | set(sets.no_ids) | set(LEGACY_8TOK_YES) | set(LEGACY_8TOK_NO)
    return sorted(i for i in ids if 0 <= i < sets.vocab_size)
