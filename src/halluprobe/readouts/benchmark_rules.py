"""Yes/no parsers that other benchmarks' own scripts use: MME's and HallusionBench's.

Registered in :mod:`halluprobe.readouts.text` as ``text:mme`` and ``text:mme@lmms-eval``
(``text:hallusionbench@vlmevalkit`` is VLMEvalKit's ``YOrN_Extraction``, the rule ``text:yorn``
already is, registered there under the name a HallusionBench figure cites); EvalScope's HallusionBench rule decides from the answer and
the label, so it sits with the label-dependent rules (``text:hallusionbench@evalscope``,
:data:`BENCHMARK_LABEL_RULES`). All are applied on request, not in the list a new run records.

MME's parser never sees anything but one line of text: its eval tool reads a results file line by
line and its readme asks for newlines to be deleted from the answers. A stored answer is therefore
read as :func:`one_line` makes it, which is what the official file would hold.
"""

from __future__ import annotations

from collections.abc import Callable

from halluprobe.records import Decision, Label

__all__ = [
    "BENCHMARK_LABEL_RULES",
    "BENCHMARK_RULES",
    "BENCHMARK_RULE_NOTES",
    "hallusionbench_evalscope",
    "mme",
    "mme_lmms_eval",
    "one_line",
]


def one_line(text: str) -> str:
    """An answer as MME's results file holds it: newlines deleted (the tool's readme asks for it),
    a tab a space (a tab would split the line into more columns than the tool reads)."""
    return text.replace("\r", "").replace("\n", "").replace("\t", " ")


def _prefix_rule(answer: str) -> Decision:
    # the official fallback: look for "yes", then "no", in the first four characters only
    head = answer[:4]
    if "yes" in head:
        return "yes"
    if "no" in head:
        return "no"
    return "unknown"


def mme(text: str) -> Decision:
    """MME's ``eval_tool/calculation.py`` ``parse_pred_ans`` (BradyFU's ``tools/eval_tool.zip``).

    The answer is lower-cased (nothing stripped: the tool's line keeps its trailing newline,
    which only the exact comparison sees); exactly ``yes`` or ``no`` is that answer; otherwise
    ``yes`` anywhere in the first four characters is yes, else ``no`` there is no, else
    "other" (``unknown`` here, counted wrong as the tool's accuracy counts it). So ``"Not
    sure"`` and ``"None"`` are no, ``"  yes"`` (two leading spaces) and ``"The answer is
    yes"`` are other, and ``"Yes, but no"`` is yes.
    """
    answer = one_line(text).lower()
    if answer in ("yes", "no"):
        return answer  # type: ignore[return-value]
    return _prefix_rule(answer)


def mme_lmms_eval(text: str) -> Decision:
    """lmms-eval's ``parse_pred_ans`` (``lmms_eval/tasks/mme/utils.py``, "brought from Otter"):
    MME's rule after lower-casing, stripping and deleting every ``'.'``, with one more case: a
    one-character answer is yes for ``y``, no for ``n``, other otherwise. ``"Yes."`` and
    ``"  yes"`` are yes here, other (and yes) under :func:`mme`."""
    answer = text.lower().strip().replace(".", "")
    if answer in ("yes", "no"):
        return answer  # type: ignore[return-value]
    if len(answer) == 1:
        return {"y": "yes", "n": "no"}.get(answer, "unknown")  # type: ignore[return-value]
    return _prefix_rule(answer)


def hallusionbench_evalscope(text: str, label: Label) -> Decision:
    """EvalScope's ``HallusionBenchAdapter.match_score`` (modelscope/evalscope,
    ``evalscope/benchmarks/hallusion_bench/hallusion_bench_adapter.py``). LABEL-DEPENDENT.

    An answer is right when the label's word, ``YES`` or ``NO``, is a substring of the answer
    stripped and upper-cased. So on a no question "I don't know" ("DON'T K-NO-W"), "Not sure"
    and "None" are right, and on a yes question "Yes, there is no cat" is. As a decision: the
    label's word when found, the other word when not, so accuracy is the script's exactly.
    Never unknown."""
    answer = text.strip().upper()
    if label == "yes":
        return "yes" if "YES" in answer else "no"
    return "no" if "NO" in answer else "yes"


BENCHMARK_RULES: dict[str, Callable[[str], Decision]] = {
    "mme": mme,
    "mme@lmms-eval": mme_lmms_eval,
}
BENCHMARK_LABEL_RULES: dict[str, Callable[[str, Label], Decision]] = {
    "hallusionbench@evalscope": hallusionbench_evalscope,
}
# What the label-dependent note says for each (text:vcd's note is text.py's own)
BENCHMARK_RULE_NOTES: dict[str, str] = {
    "hallusionbench@evalscope": (
        "note: text:hallusionbench@evalscope is label-dependent (EvalScope's HallusionBench match_score): each decision "
        "depends on the question's label, not on the answer alone ('YES' found in the answer of a yes question, 'NO' in "
        "the answer of a no question, so 'I don't know' is right on every no question)"
    ),
}
