"""The POPE parsers of the decoding-method literature, each reproduced exactly, quirks included.

Papers that compare decoding methods on POPE score their answers with their own small scripts,
and the scripts disagree on the same answers ("I don't know" is a correct no under VCD's, a
yes under POPE's). Each rule here transcribes one script at the commit named in its docstring;
:mod:`halluprobe.readouts.text` registers them as ``text:vcd``, ``text:pai``, ``text:marine``,
``text:dashb`` and ``text:repope``, on request only (not in the rule list a run records).

``vcd`` is label-dependent: VCD's script never parses an answer into yes or no, it asks
whether the answer contains the *label's* word. Its decision is therefore a function of the
answer and the label (:data:`LABEL_DEPENDENT_RULES`): the label's word when it is found, the
other word when not, which reproduces the script's TP/FP/TN/FN and yes ratio exactly.
"""

from __future__ import annotations

from collections.abc import Callable

from halluprobe.records import Decision, Label

__all__ = [
    "LABEL_DEPENDENT_RULES",
    "LITERATURE_RULES",
    "dashb",
    "marine",
    "pai",
    "repope",
    "vcd",
]


def vcd(text: str, label: Label) -> Decision:
    """VCD's ``experiments/eval/eval_pope.py`` (DAMO-NLP-SG/VCD, last changed in commit
    039af55ecd68, 2023-11-28; the same at 1bb047819da6 and d6568ff), copied by AGLA and
    LLaVA-Align. LABEL-DEPENDENT.

    The answer is lower-cased and stripped; a question labelled yes counts as a true positive
    iff ``'yes'`` is a substring of it (else a false negative), one labelled no as a true
    negative iff ``'no'`` is a substring (else a false positive). So on a no question "I don't
    know" ("k-no-w"), "Not sure", "nothing" and "Nope" are correct, and "There isn't any" is a
    false positive; on a yes question "Yes, there is no cat" is correct. Never unknown.
    """
    answer = text.lower().strip()
    if label == "yes":
        return "yes" if "yes" in answer else "no"
    return "no" if "no" in answer else "yes"


_PAI_NEGATIONS = ("No", "not", "no", "NO")


def pai(text: str) -> Decision:
    """PAI's ``pope_ans.py`` (LALBJ/PAI commit 4a085d1e39da, 2024-07-31; unchanged at 9bbd8bd).

    Every ``'.'`` and ``','`` is deleted (the whole answer, not its first sentence), the rest
    split on single spaces (``str.split(' ')``: newlines do not separate words), and the answer
    is no when a word is exactly ``No``, ``not``, ``no`` or ``NO`` or ends with ``n't``;
    otherwise yes. Never unknown: "" and "Nope" are yes, "Not sure" is yes (``Not`` is not in
    the list), "I don't know" and "There isn't any" are no, "No!" is yes.
    """
    words = text.replace(".", "").replace(",", "").split(" ")
    if any(word in _PAI_NEGATIONS or word.endswith("n't") for word in words):
        return "no"
    return "yes"


def marine(text: str) -> Decision:
    """MARINE's ``eval/eval_pope.py`` (Linxi-ZHAO/MARINE commit 9c66a6b7d027, 2025-06-02;
    unchanged at 13b91b9), ``load_predictions``.

    An answer that is empty after ``strip()`` is unknown (the script gives it -1 and leaves
    it out of every count: ``--unknown drop``). Otherwise the text before the first ``'.'`` is
    split on whitespace and the answer is no when any word's lower case is ``no`` or ``not``;
    otherwise yes. "Not sure" and "NO" are no, "No, but..." is yes (``No,`` keeps its comma),
    "I don't know", "Nope" and "There isn't any" are yes.
    """
    if not text.strip():
        return "unknown"
    words = text.split(".")[0].split()
    return "no" if any(word.lower() in ("no", "not") for word in words) else "yes"


def dashb(text: str) -> Decision:
    """DASH-B's ``src/eval_utils.py`` ``compute_answer`` (YanNeu/DASH-B commit 0ed9a618404c;
    unchanged at 1538d01): yes when ``'yes'`` is a substring of the lower-cased answer, else no
    when ``'no'`` is, else unknown (``None`` in its answers file, which its accuracy, TPR and
    TNR count as wrong). Substrings, not words: "I don't know" ("k-no-w"), "nothing" and
    "Nope" are no; "yes, there is no cat" is yes; "There isn't any" is unknown.
    """
    answer = text.lower()
    if "yes" in answer:
        return "yes"
    if "no" in answer:
        return "no"
    return "unknown"


def repope(text: str) -> Decision:
    """RePOPE's ``src/eval_utils.py`` ``compute_answer`` (YanNeu/RePOPE commit bcf22e5690d5;
    last changed in 127ad0fa5a2b): DASH-B's rule with a third test, ``'not'`` -> no, after
    ``'no'``. Every text containing ``'not'`` already contains ``'no'``, so the third test never
    decides: the rule gives :func:`dashb`'s decision on every answer. It is kept under its own
    name so that a number can say which script it reproduces.
    """
    answer = text.lower()
    if "yes" in answer:
        return "yes"
    if "no" in answer:
        return "no"
    if "not" in answer:  # unreachable: 'not' contains 'no' (kept as the script has it)
        return "no"
    return "unknown"


LITERATURE_RULES: dict[str, Callable[[str], Decision]] = {
    "pai": pai,
    "marine": marine,
    "dashb": dashb,
    "repope": repope,
}
# Rules that decide from the answer and the question's label (the label is passed by apply)
LABEL_DEPENDENT_RULES: dict[str, Callable[[str, Label], Decision]] = {
    "vcd": vcd,
}
