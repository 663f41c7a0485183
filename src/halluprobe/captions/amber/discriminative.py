"""AMBER's own discriminative numbers (``inference.py`` at commit 5e1fd52f8ea6), reproduced as
the compatibility mode ``amber``, quirks included:

- a response counts only as the exact string ``Yes`` or ``No`` (``"yes"``, ``"No."``: neither);
- "No" is the positive class: precision = correct "No" / answered "No", recall = correct "No"
  / truth "no";
- every denominator starts at 0.001 (``data/metrics.txt``; the pooled attribute numbers add
  three such counters, so theirs start at 0.003), every number is a percentage
  rounded to one decimal, and F1 is computed from the *rounded* precision and recall with
  0.0001 added to the denominator (0.001 for existence).

Dimensions: ``overall`` (all discriminative types), ``existence``, ``attribute`` (state, number
and action together), ``state``, ``number``, ``action``, ``relation``.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ConfigDict, Field

from halluprobe.records import FrozenRecord

__all__ = ["AMBER_GROUPS", "AmberDimension", "AmberDiscriminative", "AmberDiscriminativeResult", "amber_discriminative_numbers"]

# dimension -> the AMBER types it pools
AMBER_GROUPS: dict[str, tuple[str, ...]] = {
    "overall": ("discriminative-hallucination", "discriminative-attribute-state", "discriminative-attribute-number",
                "discriminative-attribute-action", "discriminative-relation", "relation"),
    "existence": ("discriminative-hallucination",),
    "attribute": ("discriminative-attribute-state", "discriminative-attribute-number", "discriminative-attribute-action"),
    "state": ("discriminative-attribute-state",),
    "number": ("discriminative-attribute-number",),
    "action": ("discriminative-attribute-action",),
    "relation": ("discriminative-relation", "relation"),
}  # fmt: skip
_START = 0.001  # every *_num of data/metrics.txt


class AmberDimension(FrozenRecord):
    """AMBER's numbers of one dimension, written under AMBER's own names (``Accuracy``, ...)."""

    model_config = ConfigDict(populate_by_name=True, serialize_by_alias=True)

    accuracy: float = Field(alias="Accuracy")
    precision: float = Field(alias="Precision")
    recall: float = Field(alias="Recall")
    f1: float = Field(alias="F1")
    n: int


class AmberDiscriminative(FrozenRecord):
    """AMBER's discriminative numbers per dimension, in ``inference.py``'s order."""

    overall: AmberDimension
    existence: AmberDimension
    attribute: AmberDimension
    state: AmberDimension
    number: AmberDimension
    action: AmberDimension
    relation: AmberDimension

    def dimensions(self) -> dict[str, AmberDimension]:
        return {name: getattr(self, name) for name in AMBER_GROUPS}


class AmberDiscriminativeResult(FrozenRecord):
    """What ``amber score --json`` prints: the compatibility mode, AMBER's commit and the numbers."""

    compat: str = "amber"
    commit: str = "5e1fd52f8ea6"
    numbers: AmberDiscriminative


def amber_discriminative_numbers(rows: Iterable[tuple[str, str, str]]) -> AmberDiscriminative:
    """(AMBER type, truth, response) rows -> AMBER's Accuracy/Precision/Recall/F1 per dimension."""
    rows = list(rows)
    out: dict[str, AmberDimension] = {}
    for dimension, types in AMBER_GROUPS.items():
        picked = [(truth, response) for t, truth, response in rows if t in types]
        correct = sum((truth == "yes" and r == "Yes") or (truth == "no" and r == "No") for truth, r in picked)
        truth_no = sum(truth == "no" for truth, _ in picked)
        correct_no = sum(truth == "no" and r == "No" for truth, r in picked)
        answered_no = sum(r == "No" for _, r in picked)
        start = _START * (3 if dimension == "attribute" else 1)  # the pooled counters' starts add up
        accuracy = round(correct / (len(picked) + start) * 100, 1)
        precision = round(correct_no / (answered_no + start) * 100, 1)
        recall = round(correct_no / (truth_no + start) * 100, 1)
        eps = 0.001 if dimension == "existence" else 0.0001
        f1 = round(2 * (precision / 100) * (recall / 100) / ((precision / 100) + (recall / 100) + eps) * 100, 1)
        out[dimension] = AmberDimension(accuracy=accuracy, precision=precision, recall=recall, f1=f1, n=len(picked))
    return AmberDiscriminative(**out)
