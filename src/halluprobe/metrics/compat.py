"""Other tools' printed POPE numbers, reproduced exactly, their quirks included.

No single ``--unknown`` policy gives them: each tool counts an answer that is neither yes nor
no differently in different metrics.

- ``lmms-eval`` (``lmms_eval/tasks/pope/utils.py``, every version from v0.2 to today):
  accuracy counts it wrong (``--unknown wrong``); precision and recall skip it (``drop``), so
  F1 is ``drop``'s; and ``pope_yes_ratio`` counts the *labels* that are yes, not the answers:
  a bug, it is 0.5 on any balanced split whatever the model says. Ratios as fractions.
- ``vlmevalkit`` (``POPE_rating`` in ``vlmeval/dataset/utils/yorn.py``): accuracy counts it
  wrong; precision, recall and F1 (its ``Overall``) count it as no (``y_pred = extracted ==
  'Yes'``). Percentages, as it prints them; a row in several splits counts in each.

Where a denominator is zero both tools print 0, and so does this module.
"""

from __future__ import annotations

from collections.abc import Sequence

from halluprobe.errors import InputError
from halluprobe.metrics.score import ScoreRow

__all__ = ["COMPAT_TOOLS", "tool_numbers"]

COMPAT_TOOLS = ("lmms-eval", "vlmevalkit")


def _ratio(num: float, den: float) -> float:
    return num / den if den else 0.0


def _numbers(rows: Sequence[ScoreRow], tool: str) -> dict[str, float | int]:
    # an errored sample has no answer: both tools would have scored an empty string, i.e. unknown
    decisions = ["unknown" if r.error else r.decision for r in rows]
    labels = [r.label for r in rows]
    n = len(rows)
    correct = sum(d == label for d, label in zip(decisions, labels))
    tp = sum(d == "yes" and label == "yes" for d, label in zip(decisions, labels))
    fp = sum(d == "yes" and label == "no" for d, label in zip(decisions, labels))
    if tool == "lmms-eval":
        fn = sum(d == "no" and label == "yes" for d, label in zip(decisions, labels))  # unknown skipped
        precision, recall = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
        return {
            "n": n,
            "pope_accuracy": _ratio(correct, n),
            "pope_precision": precision,
            "pope_recall": recall,
            "pope_f1_score": _ratio(2 * precision * recall, precision + recall),
            "pope_yes_ratio": _ratio(labels.count("yes"), n),  # lmms-eval's bug: labels, not answers
        }
    fn = sum(d != "yes" and label == "yes" for d, label in zip(decisions, labels))  # unknown is no
    precision, recall = _ratio(tp, tp + fp), _ratio(tp, tp + fn)
    return {
        "n": n,
        "Overall": 100 * _ratio(2 * precision * recall, precision + recall),
        "acc": 100 * _ratio(correct, n),
        "precision": 100 * precision,
        "recall": 100 * recall,
    }


def tool_numbers(rows: Sequence[ScoreRow], tool: str) -> dict[str, dict[str, float | int]]:
    """Per split and pooled (``"pooled"``: all rows together, as the pooled ``pope`` task or
    VLMEvalKit's ``Overall`` row), the numbers ``tool`` prints for these decisions."""
    if tool not in COMPAT_TOOLS:
        raise InputError(f"unknown --compat tool {tool!r}; known: {', '.join(COMPAT_TOOLS)}")
    splits = list(dict.fromkeys(r.split for r in rows))
    out = {s: _numbers([r for r in rows if r.split == s], tool) for s in splits}
    out["pooled"] = _numbers(rows, tool)
    return out
