"""Two word extractors (judgment dirs) on the same Object HalBench answers: per-item agreement on
the COCO objects each extraction counts, Cohen's kappa, and the paired difference of the
response- and mention-level rates (bootstrap over images, both extractors on the same draws).

An item agrees when both extractions give the same set of COCO objects after normalisation (the
judges' raw lists may differ in words the rules never count); an unparseable or errored
extraction is a category of its own. The rates are compared on the answers both kept.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np

from halluprobe.captions.objhal.extract import Tagger
from halluprobe.captions.objhal.rules import ObjhalVocabulary
from halluprobe.captions.objhal.scoring import ObjhalResponse, ObjhalScore
from halluprobe.judging.agreement import (
    Agreement,
    PairedDifference,
    agreement,
    paired_difference,
)
from halluprobe.judging.ledger import JudgeHeader, Judgment
from halluprobe.judging.objhal_judge import UnparseablePolicy, score_judged
from halluprobe.records import FrozenRecord

__all__ = ["ObjhalComparison", "compare_extractions"]


class ObjhalComparison(FrozenRecord):
    n_both: int  # answers both extractions kept (the paired rates' rows)
    agreement: Agreement
    response_hallucination: PairedDifference
    mention_hallucination: PairedDifference


def _by_objects(judgments: Sequence[Judgment], scores: Sequence[ObjhalScore]) -> list[Judgment]:
    # a parsed extraction's category is its counted COCO objects, not the judge's wording
    objects = {str(s.image_id): json.dumps(sorted(set(s.objects))) for s in scores}
    return [j.model_copy(update={"verdict": objects[j.item_id]}) if j.status == "parsed" and j.item_id in objects else j for j in judgments]


def _ratio(num: np.ndarray, den: np.ndarray, rows: np.ndarray | None) -> float | None:
    picked = slice(None) if rows is None else rows
    d = float(den[picked].sum())
    return float(num[picked].sum()) / d if d else None


def compare_extractions(
    responses: Sequence[ObjhalResponse], truth: dict[int, frozenset[str]], vocab: ObjhalVocabulary, tagger: Tagger,
    a: tuple[JudgeHeader, Sequence[Judgment], str], b: tuple[JudgeHeader, Sequence[Judgment], str], *,
    policy: UnparseablePolicy, n_resamples: int = 1000, seed: int = 0,
) -> ObjhalComparison:  # fmt: skip
    """``a``, ``b``: (header, judgments, where) of each extractor's dir."""
    scored = [score_judged(responses, truth, vocab, tagger, h, js, policy=policy, where=where)[0] for h, js, where in (a, b)]
    agree = agreement(_by_objects(a[1], scored[0]), _by_objects(b[1], scored[1]))
    by_id = [{s.image_id: s for s in scores} for scores in scored]
    both = [r.image_id for r in responses if r.image_id in by_id[0] and r.image_id in by_id[1]]
    rows = [[by_id[k][i] for i in both] for k in (0, 1)]
    hall = [np.array([s.hallucinating for s in r], dtype=float) for r in rows]
    named = [np.array([bool(s.objects) for s in r], dtype=float) for r in rows]
    bad = [np.array([len(s.hallucinated) for s in r], dtype=float) for r in rows]
    mentions = [np.array([len(s.objects) for s in r], dtype=float) for r in rows]

    def diff(num: list[np.ndarray], den: list[np.ndarray]) -> PairedDifference:
        return paired_difference(both, lambda r: _ratio(num[0], den[0], r), lambda r: _ratio(num[1], den[1], r), n_resamples=n_resamples if both else 0, seed=seed)

    return ObjhalComparison(n_both=len(both), agreement=agree, response_hallucination=diff(hall, named), mention_hallucination=diff(bad, mentions))
