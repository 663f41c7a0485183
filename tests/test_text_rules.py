"""Golden table of awkward answers for every text rule.

Every row lists what each rule must return, worked out by hand from the rule's source:
pope = RUCAIBox/POPE evaluate.py, exact = lmms-eval pope_process_results, yorn = VLMEvalKit
YOrN_Extraction + process_punctuation, strict = halluprobe's own (docstring of text.strict).
"""

from __future__ import annotations

import pytest

from halluprobe.readouts.text import TEXT_RULES, UnknownTextRuleError, exact, parse_text, pope, strict, yorn

RULES = ("pope", "exact", "yorn", "strict")

# answer, pope, exact, yorn, strict
GOLDEN: list[tuple[str, str, str, str, str]] = [
    ("Yes", "yes", "yes", "yes", "yes"),
    ("No", "no", "no", "no", "no"),
    ("yes.", "yes", "unknown", "yes", "yes"),  # exact does not strip punctuation
    ("NO", "yes", "no", "no", "no"),  # pope: "NO" is not one of No/not/no -> default yes
    ("no!", "yes", "unknown", "no", "no"),  # pope: the word is "no!"; yorn: "!" -> space
    ("Not sure", "yes", "unknown", "unknown", "unknown"),  # pope: "Not" is not in its list
    ("There isn't one", "yes", "unknown", "unknown", "no"),  # yorn: "isn't" is not "no"
    ("", "yes", "unknown", "unknown", "unknown"),  # pope defaults to yes
    ("Yes, but no cat", "no", "unknown", "unknown", "yes"),  # strict: the leading answer decides
    ("<think>...</think>Yes", "yes", "unknown", "yes", "yes"),  # pope: first sentence "<think>"
    ("<think>there is no cat</think>No", "no", "unknown", "no", "no"),
    ("There is a cat in the image.", "yes", "unknown", "unknown", "yes"),
    ("There is no cat in the image.", "no", "unknown", "no", "no"),
    ("No, there is not.", "no", "unknown", "no", "no"),
    ("I cannot tell.", "yes", "unknown", "unknown", "unknown"),
    ("Yes\nNo", "yes", "unknown", "unknown", "unknown"),  # pope: split(' ') keeps "Yes\nNo" one word
    (" yes", "yes", "yes", "yes", "yes"),
    ("Nope", "yes", "unknown", "unknown", "no"),
    ("**Yes**", "yes", "unknown", "unknown", "yes"),  # yorn: '*' is not in the VQA punctuation list
    ("Answer: No", "no", "unknown", "no", "no"),
    ("The answer is yes.", "yes", "unknown", "yes", "yes"),
    ("<think>the cat is on the mat", "yes", "unknown", "unknown", "unknown"),  # unterminated think
    ("it is hidden</think>\nNo", "yes", "unknown", "no", "no"),  # think opened by the template
    ("Maybe.", "yes", "unknown", "unknown", "unknown"),
    ("Probably yes", "yes", "unknown", "yes", "unknown"),
    ("Yesterday there was a cat", "yes", "unknown", "unknown", "unknown"),  # no substring matches
    ("Not", "yes", "unknown", "unknown", "no"),
    ("not", "no", "unknown", "unknown", "no"),
    ("None", "yes", "unknown", "unknown", "no"),
    ("yes and no", "no", "unknown", "unknown", "unknown"),
    ("No idea", "no", "unknown", "no", "unknown"),
    ("YES!", "yes", "unknown", "yes", "yes"),
    ("There's no cat.", "no", "unknown", "no", "no"),
    ("There are two cats.", "yes", "unknown", "unknown", "yes"),
    ("The image shows a cat.", "yes", "unknown", "unknown", "unknown"),
    ("Yes. No.", "yes", "unknown", "unknown", "unknown"),
    ("No, no.", "no", "unknown", "no", "no"),
    ("\u201cYes\u201d", "yes", "unknown", "unknown", "yes"),  # yorn: curly quotes are not VQA punctuation
]


@pytest.mark.parametrize("answer,expected_pope,expected_exact,expected_yorn,expected_strict", GOLDEN, ids=[repr(g[0]) for g in GOLDEN])
def test_golden_table(answer: str, expected_pope: str, expected_exact: str, expected_yorn: str, expected_strict: str) -> None:
    expected = dict(zip(RULES, (expected_pope, expected_exact, expected_yorn, expected_strict)))
    got = {rule: parse_text(rule, answer) for rule in RULES}
    assert got == expected


def test_rule_names_exactly() -> None:
    assert set(TEXT_RULES) == {"pope", "exact", "yorn", "strict"}
    assert TEXT_RULES["pope"] is pope and TEXT_RULES["exact"] is exact
    assert TEXT_RULES["yorn"] is yorn and TEXT_RULES["strict"] is strict


def test_unknown_rule_lists_valid_ones() -> None:
    with pytest.raises(ValueError) as info:
        parse_text("fuzzy", "yes")
    message = str(info.value)
    assert "fuzzy" in message
    for rule in RULES:
        assert rule in message
    with pytest.raises(KeyError):  # also catchable as a failed lookup
        parse_text("fuzzy", "yes")
    assert isinstance(info.value, UnknownTextRuleError)


def test_yorn_removes_at_most_32_periods() -> None:
    # VLMEvalKit passes re.UNICODE (32) as re.sub's count: 33+ trailing periods leave some behind.
    assert yorn("yes" + "." * 32) == "yes"
    assert yorn("yes" + "." * 33) == "unknown"  # the word is "yes."
    assert yorn("no" + "." * 40) == "unknown"


def test_yorn_punctuation_touching_space_is_deleted_not_spaced() -> None:
    # "(" touches a space somewhere in the text, so every "(" is deleted, gluing "(yes" -> "yes"
    # but "yes(no" -> "yesno".
    assert yorn("maybe (yes") == "yes"
    assert yorn("x (y yes(no") == "unknown"  # words: x, y, yesno
    assert yorn("yes(no") == "unknown"  # no space: "(" -> " " -> yes, no


def test_yorn_digit_comma_deletes_all_punctuation() -> None:
    # A digit-comma-digit anywhere switches every punctuation mark to deletion.
    assert yorn("1,2 yes!maybe") == "unknown"  # words: 12, yesmaybe
    assert yorn("yes!maybe") == "yes"  # words: yes, maybe


def test_pope_first_sentence_only() -> None:
    assert pope("Yes. There is no cat.") == "yes"
    assert pope("There is a cat, not a dog.") == "no"


@pytest.mark.parametrize(
    "answer",
    [
        "",
        "   ",
        "The image shows a cat.",
        "I think so",
        "It is possible that there is a cat",
        "Sure",
        "Affirmative",
        "There might be a cat",
        "There is probably a cat",
        "In the picture, yes",
        "I can't tell",
        "I don't know",
        "It's unclear",
        "Unclear",
        "not sure, yes",
        "Yes or no",
        "Yes/No",
        "<think>yes",
    ],
)
def test_strict_never_defaults_to_yes(answer: str) -> None:
    assert strict(answer) == "unknown"


def test_strict_contractions_and_curly_apostrophes() -> None:
    assert strict("There isn\u2019t a cat.") == "no"
    assert strict("There aren't any cats") == "no"
    assert strict("There's a dog") == "yes"
