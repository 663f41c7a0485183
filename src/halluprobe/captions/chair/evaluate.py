"""CHAIR of one set of captions in several normaliser families: the results the ``chair`` verb
prints, the report's CHAIR section shows and ``check`` recomputes, computed in one place so the
three cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from halluprobe.captions.chair.families import family_named
from halluprobe.captions.chair.groundtruth import GroundTruth
from halluprobe.captions.chair.scoring import Caption, CaptionScore, score_captions, summarize
from halluprobe.errors import InputError

__all__ = ["chair_results", "refuse_unknown_images"]


def chair_results(
    captions: Sequence[Caption],
    settings: dict[str, Any],
    families: Sequence[str],
    truth_for: Callable[[str], GroundTruth],
    *,
    truncate: bool = False,
    n_resamples: int = 1000,
    seed: int = 0,
    tokenizer: str = "punkt",
) -> tuple[dict[str, Any], dict[str, list[CaptionScore]]]:
    """(family -> ``{"summary": ...}``, family -> per-caption scores). ``truth_for(family)`` is
    the ground truth each family scores against; the settings recorded with every result are
    ``settings``, the family's identity, the ground truth's description, ``truncate`` and, when
    it is not punkt's, the ``tokenizer`` (families.TOKENIZERS) that split the captions."""
    results: dict[str, Any] = {}
    per_caption: dict[str, list[CaptionScore]] = {}
    for name in families:
        family = family_named(name, tokenizer=tokenizer)
        truth = truth_for(name)
        scores = score_captions(captions, truth, family, truncate=truncate)
        recorded = {**settings, **family.identity, "ground_truth": truth.describe(), "truncate_incomplete": truncate}
        if family.tokenizer != "punkt":  # punkt's results (and every older one) name none: their bytes stay
            recorded["tokenizer"] = family.tokenizer
        summary = summarize(scores, name, settings=recorded, n_resamples=n_resamples, seed=seed)
        results[name] = {"summary": summary.model_dump(mode="json")}
        per_caption[name] = scores
    return results, per_caption


def refuse_unknown_images(captions: Sequence[Caption], truth: GroundTruth, hint: str) -> None:
    """Bad input naming the first caption whose image the ground truth lacks, with ``hint``
    (what to do instead) in the one line."""
    for cap in captions:
        if cap.image_id not in truth.objects:
            path, _, line = cap.source.rpartition(":")
            raise InputError(
                f"image {cap.image_id} is not in the {truth.source} CHAIR ground truth ({len(truth.objects)} images): {hint}",
                path or None, int(line) if line.isascii() and line.isdigit() else None,
            )  # fmt: skip
