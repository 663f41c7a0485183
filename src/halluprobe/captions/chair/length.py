"""CHAIR by caption length, the two binnings the tables use (shorter captions name fewer objects
and hallucinate less, so a method that only shortens captions lowers CHAIR):

- :func:`chair_by_baseline_quartiles`: bins cut at the greedy baseline's length quartiles, every
  run of a decoding comparison binned on those same bounds (``halluprobe decoding``'s "CHAIR by
  caption length (bins at the greedy baseline's length quartiles)"), so a method's captions
  moving to the short bins shows in the counts;
- :func:`chair_by_equal_count_groups`: one run's captions in groups of equal counts by length
  order (the CHAIR report's "CHAIR against caption length" table and figure).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from halluprobe.captions.chair.scoring import CaptionScore
from halluprobe.records import FrozenRecord

__all__ = ["LengthGroup", "QuartileBin", "ScoredCaption", "chair_by_baseline_quartiles", "chair_by_equal_count_groups", "quartile_bin", "quartile_bounds"]


class QuartileBin(FrozenRecord):
    """One bin of :func:`chair_by_baseline_quartiles`: its number, its length range (None: open
    below or above), its captions, their mean length, CHAIR_s and CHAIR_i (None: nothing to count)."""

    bin: int
    lengths: tuple[int | None, int | None]
    n: int
    mean_length: float | None
    chair_s: float | None
    chair_i: float | None


def quartile_bounds(lengths: Sequence[int]) -> list[int]:
    """The baseline's quartile bounds: sorted lengths at ranks ceil(k n / 4), k = 1..3, without repeats."""
    ordered = sorted(lengths)
    n = len(ordered)
    return sorted({ordered[math.ceil(k * n / 4) - 1] for k in (1, 2, 3)}) if n else []


def quartile_bin(length: int, bounds: Sequence[int]) -> int:
    """The bin of a caption of ``length`` words: how many bounds are below it."""
    return sum(1 for b in bounds if b < length)


def chair_by_baseline_quartiles(scores: Sequence[CaptionScore], bounds: Sequence[int]) -> list[QuartileBin]:
    """Per bin of ``bounds`` (all len(bounds) + 1 of them, empty ones too)."""
    out = []
    for k in range(len(bounds) + 1):
        part = [s for s in scores if quartile_bin(s.length, bounds) == k]
        mentions = sum(len(s.objects) for s in part)
        out.append(QuartileBin(
            bin=k, lengths=(None if k == 0 else bounds[k - 1] + 1, None if k == len(bounds) else bounds[k]), n=len(part),
            mean_length=sum(s.length for s in part) / len(part) if part else None,
            chair_s=sum(bool(s.hallucinated) for s in part) / len(part) if part else None,
            chair_i=sum(len(s.hallucinated) for s in part) / mentions if mentions else None,
        ))  # fmt: skip
    return out


class LengthGroup(FrozenRecord):
    """One group of :func:`chair_by_equal_count_groups`: the shortest and longest caption length
    in it, its captions, CHAIR_s and CHAIR_i (None: no object mentioned)."""

    lengths: tuple[int, int]
    n: int
    chair_s: float
    chair_i: float | None


class ScoredCaption(Protocol):
    """What the length groups read of a scored caption (CHAIR's ``CaptionScore``, Object
    HalBench's ``ObjhalScore``)."""

    @property
    def length(self) -> int: ...
    @property
    def objects(self) -> Sequence[str]: ...
    @property
    def hallucinated(self) -> Sequence[str]: ...


def chair_by_equal_count_groups(scores: Sequence[ScoredCaption], bins: int = 4) -> list[LengthGroup]:
    """Captions split into ``bins`` groups of caption length (equal counts, by length order):
    each group's length range, CHAIR_s and CHAIR_i (the CHAIR report's table, figure and page;
    Object HalBench's length confound)."""
    ordered = sorted(scores, key=lambda s: s.length)
    out = []
    for k in range(bins):
        part = ordered[k * len(ordered) // bins : (k + 1) * len(ordered) // bins]
        if not part:
            continue
        mentions = sum(len(s.objects) for s in part)
        out.append(LengthGroup(
            lengths=(part[0].length, part[-1].length), n=len(part),
            chair_s=sum(bool(s.hallucinated) for s in part) / len(part),
            chair_i=sum(len(s.hallucinated) for s in part) / mentions if mentions else None,
        ))  # fmt: skip
    return out
