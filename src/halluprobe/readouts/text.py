"""Named text-parse rules: a model's free-text answer -> ``"yes" | "no" | "unknown"``.

Each rule is a pure function ``str -> Decision``. Three reproduce what other tools do, so that a
stored run can be re-scored the way each of them would score it; the fourth is halluprobe's own.

- ``pope``: the original POPE ``evaluate.py`` (RUCAIBox/POPE), read in the verbatim copies that
  downstream repositories carry (Osprey's ``osprey/eval/pope/evaluate.py``, with POPE's own
  argument defaults; LLaVA-RLHF's ``Eval/summarize_eval_pope.py``). It never answers unknown:
  anything without a negation word is yes.
- ``exact``: lmms-eval's ``pope_process_results`` (``lmms_eval/tasks/pope/utils.py``):
  lowercase-and-strip equality.
- ``yorn``: VLMEvalKit's ``YOrN_Extraction`` (``vlmeval/dataset/utils/yorn.py``) with the VQA
  ``process_punctuation`` it calls (``vlmeval/smp/misc.py``), i.e. VLMEvalKit without a judge
  model (``model='exact_matching'``), as it is since 2025-05-13 (commit 928a95b); ``yorn@2024``
  as it was from 2024-01 to then (see :func:`yorn_2024`). ``yorn@2024`` is an alternative
  version (:data:`TEXT_RULE_VERSIONS`): any run with text can be scored with it, but it is not
  in the default rule list a run records.
- ``strict``: halluprobe's own; see :func:`strict`.
- ``vcd``, ``pai``, ``marine``, ``dashb``, ``repope``: the decoding-method literature's POPE
  scripts (:mod:`halluprobe.readouts.literature`), applied on request like ``yorn@2024``;
  ``vcd`` is label-dependent (:data:`LABEL_DEPENDENT_RULES`): :func:`parse_text` needs the
  question's label for it, and :func:`label_dependence_note` says so wherever it is shown.
- ``mme``, ``mme@lmms-eval``, ``hallusionbench@vlmevalkit`` and the label-dependent
  ``hallusionbench@evalscope``: the parsers of MME's and HallusionBench's own tools
  (:mod:`halluprobe.readouts.benchmark_rules`), applied on request like the literature's.

How each tool then *counts* a non-yes/no answer is a metric question (``--unknown`` policy in
:mod:`halluprobe.metrics.binary`), not a parsing one; the notes on each rule say what the tool does.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from halluprobe.readouts.benchmark_rules import BENCHMARK_LABEL_RULES, BENCHMARK_RULE_NOTES, BENCHMARK_RULES
from halluprobe.readouts.literature import LABEL_DEPENDENT_RULES, LITERATURE_RULES
from halluprobe.records import Decision, Label

__all__ = [
    "TEXT_RULES",
    "TEXT_RULE_VERSIONS",
    "ALL_TEXT_RULES",
    "BENCHMARK_TEXT_RULES",
    "is_label_dependent",
    "LabelDependentRuleError",
    "UnknownTextRuleError",
    "exact",
    "label_dependence_note",
    "parse_text",
    "pope",
    "strict",
    "yorn",
    "yorn_2024",
]


class UnknownTextRuleError(ValueError, KeyError):
    """An unknown text-rule name. A ``ValueError`` (bad input) that is also a ``KeyError``
    (a failed lookup), so callers may catch either."""

    def __str__(self) -> str:
        # KeyError.__str__ would repr() the message (quotes); keep it a plain line.
        return str(self.args[0]) if self.args else ""


class LabelDependentRuleError(ValueError):
    """A label-dependent rule (``text:vcd``) applied without the question's label."""


# ---------------------------------------------------------------------------------------------
# pope: the original POPE evaluate.py


_POPE_NEGATIONS = ("No", "not", "no")


def pope(text: str) -> Decision:
    """The original POPE ``evaluate.py`` rule, behaviour for behaviour.

    Keep the text before the first ``'.'`` (the whole text when there is none), delete commas,
    split on single spaces (``str.split(' ')``, so newlines and tabs do not separate words and
    ``"no!"`` is one word), and answer no when any word is exactly ``No``, ``not`` or ``no``;
    otherwise yes. Consequences, all faithful to the script:

    - never unknown: ``""``, ``"I cannot tell."`` and ``"Nope"`` are yes;
    - ``"Not sure"`` is yes: ``Not`` (capitalised) is not in the list, only ``not`` is;
    - ``"NO"`` and ``"no!"`` are yes (case and punctuation are not normalised);
    - ``"Yes\\nNo"`` is yes (one word, ``'Yes\\nNo'``); ``"Yes, but no cat"`` is no.
    """
    if "." in text:  # evaluate.py: `if text.find('.') != -1: text = text.split('.')[0]`
        text = text.split(".")[0]
    words = text.replace(",", "").split(" ")
    if any(word in _POPE_NEGATIONS for word in words):
        return "no"
    return "yes"


# ---------------------------------------------------------------------------------------------
# exact: lmms-eval


def exact(text: str) -> Decision:
    """lmms-eval's POPE rule: ``text.lower().strip()`` equal to ``"yes"`` or ``"no"``.

    lmms-eval keeps any other string as the prediction; it then equals neither ground truth, so
    its accuracy counts it wrong, its precision and recall skip it (neither TP, FP nor FN: it
    leaves the recall denominator), and its ``pope_yes_ratio`` is computed from the ground
    truth, not the predictions. Here such an answer is ``unknown``; ``"yes."`` and ``"no!"`` are
    unknown too (no punctuation is removed).
    """
    answer = text.lower().strip()
    if answer == "yes":
        return "yes"
    if answer == "no":
        return "no"
    return "unknown"


# ---------------------------------------------------------------------------------------------
# yorn: VLMEvalKit without a judge

# The VQA-eval punctuation list VLMEvalKit's process_punctuation uses, in its order.
_VQA_PUNCT = (";", "/", "[", "]", '"', "{", "}", "(", ")", "=", "+", "\\", "_", "-", ">", "<", "@", "`", ",", "?", "!")
_DIGIT_COMMA = re.compile(r"(\d)(,)(\d)")
# Since 2025-05-13: a period neither after nor before a digit ("1." of a numbered list stays).
_PERIOD = re.compile(r"(?<!\d)\.(?!\d)")
# 2024-01 to 2025-05 the source wrote `(?!<=\d)(\.)(?!\d)`: a lookahead for the text "<=digit"
# (a mistyped lookbehind) that never matches at a '.', so every '.' not before a digit went.
_PERIOD_2024 = re.compile(r"\.(?!\d)")
# The source calls `periodStrip.sub('', outText, re.UNICODE)`: re.UNICODE (32) lands in the
# `count` argument, so at most 32 periods are removed.
_PERIOD_COUNT = 32


def _vqa_process_punctuation(text: str, period: re.Pattern[str] = _PERIOD) -> str:
    out = text
    has_digit_comma = _DIGIT_COMMA.search(text) is not None
    for p in _VQA_PUNCT:
        # The test looks at the input, not the partly processed output, as in the source.
        if (p + " " in text) or (" " + p in text) or has_digit_comma:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    return period.sub("", out, count=_PERIOD_COUNT)


def yorn(text: str) -> Decision:
    """VLMEvalKit's ``YOrN_Extraction`` (no judge model): word-level yes xor no.

    Lowercase, apply the VQA ``process_punctuation`` (each of ``; / [ ] " { } ( ) = + \\ _ - > <
    @ ` , ? !`` becomes a space, or is deleted when it touches a space anywhere in the text or
    the text has a digit-comma-digit; periods neither after nor before a digit are deleted, at
    most 32 (VLMEvalKit since 2025-05-13; :func:`yorn_2024` for the earlier period rule); the
    apostrophe and ``:`` are kept), split on whitespace, then yes when the words contain
    ``yes`` and not ``no``, no when they contain ``no`` and not ``yes``, else unknown. So
    ``"Yes\\nNo"`` and ``"Yes, but no cat"`` are unknown, ``"Nope"``, ``"Not sure"`` and
    ``"There isn't one"`` are unknown (``not``/``isn't`` are not ``no``).

    VLMEvalKit then scores accuracy as ``answer == extracted`` (unknown is wrong) but computes
    precision/recall/F1 with ``y_pred = extracted == 'Yes'`` (unknown counts as no).
    """
    return _yes_xor_no(_vqa_process_punctuation(text.lower()).split())


def yorn_2024(text: str) -> Decision:
    """:func:`yorn` as VLMEvalKit had it from 2024-01 to 2025-05-13: every period not before a
    digit is deleted, so the period after a list number ("1.") is deleted too and counts
    toward the 32. An answer with a long numbered list ending "So the answer is no." keeps
    its last "no." there (unknown) and loses the period under :func:`yorn` (no)."""
    return _yes_xor_no(_vqa_process_punctuation(text.lower(), _PERIOD_2024).split())


def _yes_xor_no(words: list[str]) -> Decision:
    has_yes = "yes" in words
    has_no = "no" in words
    if has_yes and not has_no:
        return "yes"
    if has_no and not has_yes:
        return "no"
    return "unknown"


# ---------------------------------------------------------------------------------------------
# strict: halluprobe's own

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = "<think>"
_THINK_CLOSE = "</think>"
# Markdown emphasis/headings/quotes/bullets and quotation marks before the answer.
_LEADING_JUNK = re.compile(r"^[\s*_#>`\"'\u201c\u201d\u2018\u2019\-\u2022]+")
_ANSWER_PREFIX = re.compile(r"^(?:the\s+)?(?:final\s+)?answer\b\s*(?:is\b)?\s*[:\-]?\s*")
# Clause separators: punctuation, line breaks, and "or"/"and" between answers ("yes or no").
_SEPARATOR = re.compile(r"[\n\r.,;:!?/|()\[\]]+|\s+(?:or|and)\s+")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")

_YES_WORDS = frozenset({"yes", "yeah", "yep", "yup", "correct", "true"})
_NO_WORDS = frozenset({"no", "nope", "nah", "not", "none", "incorrect", "false"})
_BE = frozenset({"is", "are", "was", "were"})
_NEGATIONS = frozenset({"no", "not", "none", "nothing"})
_QUALIFIERS = frozenset({"probably", "possibly", "maybe", "perhaps", "likely", "unlikely"})
# Hedges that would otherwise start like a "no" answer ("not ...", "no ..."). Every other hedge
# ("I cannot tell", "maybe", "unclear", "I don't know") matches no answer pattern and is unknown.
_NOT_HEDGES = frozenset({"sure", "certain", "clear", "possible", "able", "enough"})
_NO_HEDGES: tuple[tuple[str, ...], ...] = (("idea",), ("way", "to"), ("way", "of"))


def _expand(word: str) -> list[str]:
    # Contractions, so that "isn't" reads like "is not" and "there's" like "there is".
    if word.endswith("n't"):
        stem = word[:-3]
        return [{"ca": "can", "wo": "will", "sha": "shall"}.get(stem, stem), "not"]
    if word == "cannot":
        return ["can", "not"]
    if "'" in word:
        stem, _, tail = word.partition("'")
        return [stem, {"s": "is", "m": "am", "re": "are", "ve": "have", "ll": "will", "d": "would"}.get(tail, tail)]
    return [word]


def _words(clause: str) -> list[str]:
    return [w for token in _WORD.findall(clause) for w in _expand(token)]


def _head_polarity(words: list[str]) -> Decision:
    """Polarity of the first clause, from its leading words only."""
    first = words[0]
    rest = words[1:]
    if first == "not" and rest and rest[0] in _NOT_HEDGES:
        return "unknown"
    if first == "no" and any(tuple(rest[: len(h)]) == h for h in _NO_HEDGES):
        return "unknown"
    if first in _YES_WORDS:
        return "yes"
    if first in _NO_WORDS:
        return "no"
    if first == "there" and rest and rest[0] in _BE:
        after = rest[1:]
        if after and after[0] in _NEGATIONS:
            return "no"  # there is no / there isn't / there are none / there is nothing
        if after and after[0] in _QUALIFIERS:
            return "unknown"  # there is probably a ...
        return "yes"  # there is a ... / there are two ...
    return "unknown"


def _polarity_of_bare_answer(words: list[str]) -> Decision | None:
    if len(words) != 1:
        return None
    if words[0] in _YES_WORDS:
        return "yes"
    if words[0] in _NO_WORDS:
        return "no"
    return None


def strict(text: str) -> Decision:
    """halluprobe's rule: the answer must come first, be clear, and never default to yes.

    1. Reasoning: complete ``<think>...</think>`` blocks are removed; an unterminated
       ``<think>`` means the answer never came (unknown); a lone ``</think>`` (templates that
       open the block in the prompt) keeps only the text after it.
    2. Leading whitespace, markdown (``* _ # > ` -`` bullets), quotes and an ``Answer:`` /
       ``The answer is`` prefix are dropped; case is folded; contractions are expanded.
    3. The text is cut into clauses at punctuation, line breaks and ``or``/``and``; the first
       clause decides from its leading words:
       yes / yeah / yep / yup / correct / true, or "there is/are ..." -> yes;
       no / nope / nah / not / none / incorrect / false, or "there is/are no / not / none /
       nothing" (``there isn't``, ``there's no``) -> no;
       anything else -> unknown: hedges ("not sure", "no idea", "I cannot tell", "unclear",
       "maybe", "I don't know", "there is probably ..."), answers that do not start with an
       answer ("The image shows a cat", "In the image, there is a cat"), and the empty string.
    4. Conflicts: the leading answer word decides ("Yes, but no cat" -> yes: the rest is
       elaboration of a yes), except when the very next clause is itself a bare answer word of
       the other polarity ("Yes\\nNo", "Yes or no", "No. Yes.") -> unknown.
    """
    body = _THINK_BLOCK.sub(" ", text)
    folded = body.lower()
    if _THINK_OPEN in folded:
        return "unknown"  # reasoning that never closed: no answer was given
    close = folded.rfind(_THINK_CLOSE)
    if close != -1:
        folded = folded[close + len(_THINK_CLOSE) :]
    folded = folded.replace("\u2019", "'").replace("\u2018", "'")
    folded = _LEADING_JUNK.sub("", folded)
    folded = _LEADING_JUNK.sub("", _ANSWER_PREFIX.sub("", folded, count=1))

    clauses = [w for w in (_words(c) for c in _SEPARATOR.split(folded)) if w]
    if not clauses:
        return "unknown"
    head = _head_polarity(clauses[0])
    if head == "unknown":
        return "unknown"
    if len(clauses) > 1:
        nxt = _polarity_of_bare_answer(clauses[1])
        if nxt is not None and nxt != head:
            return "unknown"  # "Yes\nNo": two contradicting bare answers
    return head


# ---------------------------------------------------------------------------------------------

TEXT_RULES: dict[str, Callable[[str], Decision]] = {
    "pope": pope,
    "exact": exact,
    "yorn": yorn,
    "strict": strict,
}
# Earlier versions of a tool's rule, named RULE@VERSION: applied at score time like any rule,
# but not in the list a new run records (its audit columns stay those of TEXT_RULES).
TEXT_RULE_VERSIONS: dict[str, Callable[[str], Decision]] = {
    "yorn@2024": yorn_2024,
    # VLMEvalKit scores HallusionBench with YOrN_Extraction (then a judge for Unknown only)
    "hallusionbench@vlmevalkit": yorn,
}


def _label_needed(rule: str) -> Callable[[str], Decision]:
    def needs_label(text: str) -> Decision:
        raise LabelDependentRuleError(f"text rule {rule!r} is label-dependent: it needs the question's label (parse_text(..., label=))")

    return needs_label


# Every rule score/audit/report apply on request: the default list, earlier versions, the
# literature's scripts; a label-dependent rule is listed by name and applied by parse_text
ALL_TEXT_RULES: dict[str, Callable[[str], Decision]] = {
    **TEXT_RULES,
    **TEXT_RULE_VERSIONS,
    **LITERATURE_RULES,
    **BENCHMARK_RULES,
    **{rule: _label_needed(rule) for rule in (*LABEL_DEPENDENT_RULES, *BENCHMARK_LABEL_RULES)},
}


# The rules of one benchmark's own tools (MME, HallusionBench): applied on request, and left out
# of the lists shown for every run (the text-rule comparison of audit and report keeps its columns)
BENCHMARK_TEXT_RULES: tuple[str, ...] = (*BENCHMARK_RULES, "hallusionbench@vlmevalkit", *BENCHMARK_LABEL_RULES)


def is_label_dependent(rule: str) -> bool:
    """Whether the text rule ``rule`` decides from the answer and the question's label."""
    return rule in LABEL_DEPENDENT_RULES or rule in BENCHMARK_LABEL_RULES


def label_dependence_note(readout: str) -> str | None:
    """The line every output of a label-dependent readout carries (None for any other)."""
    rule = readout.removeprefix("text:")
    if rule in BENCHMARK_RULE_NOTES:
        return BENCHMARK_RULE_NOTES[rule]
    if rule not in LABEL_DEPENDENT_RULES:
        return None
    return (
        f"note: text:{rule} is label-dependent (VCD's eval_pope.py): each decision depends on the question's label, "
        "not on the answer alone ('yes' found in the answer of a yes question, 'no' in the answer of a no question)"
    )


def parse_text(rule: str, text: str, *, label: Label | None = None) -> Decision:
    """Apply the text rule named ``rule`` to ``text`` (and ``label``, which a label-dependent
    rule needs: :class:`LabelDependentRuleError` without it).

    Raises :class:`UnknownTextRuleError` (a ``ValueError`` and a ``KeyError``) naming the valid
    rules when ``rule`` is not one of them.
    """
    label_rule = LABEL_DEPENDENT_RULES.get(rule) or BENCHMARK_LABEL_RULES.get(rule)
    if label_rule is not None:
        if label is None:
            return ALL_TEXT_RULES[rule](text)  # raises, naming the rule
        return label_rule(text, label)
    try:
        fn = ALL_TEXT_RULES[rule]
    except KeyError:
        valid = ", ".join(ALL_TEXT_RULES)
        raise UnknownTextRuleError(f"unknown text rule {rule!r}; valid rules: {valid}") from None
    return fn(text)
