"""CHAIR of one set of captions in several normaliser families: the results the ``chair`` verb
prints, the report's CHAIR section shows and ``check`` recomputes, computed in one place so the
three cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import (
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from halluprobe.captions.chair.families import family_named
from halluprobe.captions.chair.groundtruth import GroundTruth
from halluprobe.captions.chair.scoring import (
    Caption,
    CaptionScore,
    ChairPaired,
    ChairSettings,
    ChairSummary,
    score_captions,
    summarize,
)
from halluprobe.errors import InputError
from halluprobe.records import FrozenRecord

__all__ = ["ChairFamilyResult", "ChairResults", "chair_results", "refuse_unknown_images"]


def _is_none(value: Any) -> bool:
    return value is None


class ChairFamilyResult(FrozenRecord):
    """One family's result: the summary, and with ``--against`` the paired comparison."""

    summary: ChairSummary
    paired: ChairPaired | None = Field(default=None, exclude_if=_is_none)  # absent from the JSON without --against


class ChairResults(FrozenRecord):
    """Family name -> its result, in the order the families were asked. Written as that mapping
    (``chair_summary.json``, ``chair --json``), as every earlier version wrote it."""

    families: dict[str, ChairFamilyResult]

    @model_validator(mode="before")
    @classmethod
    def _from_mapping(cls, value: Any) -> Any:
        # chair_summary.json holds the mapping itself
        return value if isinstance(value, Mapping) and set(value) == {"families"} else {"families": value}

    @model_serializer(mode="wrap")
    def _as_mapping(self, handler: SerializerFunctionWrapHandler) -> Any:
        return handler(self)["families"]

    @property
    def first(self) -> ChairSummary:
        """The first family's summary (the settings every family shares but its own identity)."""
        return next(iter(self.families.values())).summary

    def with_paired(self, paired: Mapping[str, ChairPaired]) -> ChairResults:
        """These results with ``paired[family]`` added to each family named there."""
        return ChairResults(families={name: ChairFamilyResult(summary=r.summary, paired=paired.get(name, r.paired))
                                      for name, r in self.families.items()})  # fmt: skip


def chair_results(
    captions: Sequence[Caption],
    settings: ChairSettings,
    families: Sequence[str],
    truth_for: Callable[[str], GroundTruth],
    *,
    truncate: bool = False,
    n_resamples: int = 1000,
    seed: int = 0,
    tokenizer: str = "punkt",
) -> tuple[ChairResults, dict[str, list[CaptionScore]]]:
    """(the results per family, family -> per-caption scores). ``truth_for(family)`` is the
    ground truth each family scores against; the settings recorded with every result are
    ``settings``, the family's identity, the ground truth's description, ``truncate`` and, when
    it is not punkt's, the ``tokenizer`` (families.TOKENIZERS) that split the captions."""
    results: dict[str, ChairFamilyResult] = {}
    per_caption: dict[str, list[CaptionScore]] = {}
    for name in families:
        family = family_named(name, tokenizer=tokenizer)
        truth = truth_for(name)
        scores = score_captions(captions, truth, family, truncate=truncate)
        recorded = settings.with_counting(family, truth.describe(), truncate)
        summary = summarize(scores, name, settings=recorded, n_resamples=n_resamples, seed=seed)
        results[name] = ChairFamilyResult(summary=summary)
        per_caption[name] = scores
    return ChairResults(families=results), per_caption


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
