"""The literature's POPE parsers (text:vcd, pai, marine, dashb, repope) against transcriptions of
their scripts, on a corpus of awkward answers, and through score/audit on an imported run.

Each ``script_*`` function below transcribes the authors' script statement by statement (counts
of TP/FP/TN/FN as the script keeps them), so the rule's decisions are checked against what the
script itself would count, not against the rule's own logic.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.cli import app
from halluprobe.readouts.text import (
    ALL_TEXT_RULES,
    TEXT_RULES,
    LabelDependentRuleError,
    label_dependence_note,
    parse_text,
)

CORPUS = [
    "I don't know", "Not sure", "There isn't any", "No, but there is a dog.", "Yes.", "yes, there is no cat",
    "Nope", "", "   ", "NO", "No!", "no", "Yes", "YES", "not at all", "There is no cat in the image.",
    "Yes\nNo", "I cannot tell.", "nothing", "The answer is: yes", "Unknown", "It's not there, no.",
    "no.Yes", "Cannot say", "Notably, yes", "Yes, there is a cat. No dog.", "a cat,no dog",
]  # fmt: skip


def script_vcd(answers: list[str], labels: list[str]) -> tuple[int, int, int, int]:
    """VCD experiments/eval/eval_pope.py: (true_pos, false_pos, true_neg, false_neg)."""
    true_pos = false_pos = true_neg = false_neg = 0
    for gen_answer, gt_answer in zip(answers, labels):
        gen_answer = gen_answer.lower().strip()
        if gt_answer == "yes":
            if "yes" in gen_answer:
                true_pos += 1
            else:
                false_neg += 1
        elif gt_answer == "no":
            if "no" in gen_answer:
                true_neg += 1
            else:
                false_pos += 1
    return true_pos, false_pos, true_neg, false_neg


def script_pai(line: str) -> int:
    """PAI pope_ans.py recorder(): 1 yes, 0 no."""
    neg_words = ["No", "not", "no", "NO"]
    line = line.replace(".", "")
    line = line.replace(",", "")
    words = line.split(" ")
    if any(word in neg_words for word in words) or any(word.endswith("n't") for word in words):
        return 0
    return 1


def script_marine(ans: str) -> int:
    """MARINE eval/eval_pope.py load_predictions(): 1 yes, 0 no, -1 left out."""
    if not ans.strip():
        return -1
    words = ans.split(".")[0].split()
    return 0 if any(word.lower() in {"no", "not"} for word in words) else 1


def script_dashb(response: str) -> str | None:
    """DASH-B src/eval_utils.py compute_answer()."""
    answer = None
    if "yes" in response.lower():
        answer = "yes"
    elif "no" in response.lower():
        answer = "no"
    return answer


def script_repope(response: str) -> str | None:
    """RePOPE src/eval_utils.py compute_answer()."""
    answer = None
    if "yes" in response.lower():
        answer = "yes"
    elif "no" in response.lower():  # noqa: SIM114 - transcribed as the script has it
        answer = "no"
    elif "not" in response.lower():
        answer = "no"
    return answer


def confusion(decisions: list[str], labels: list[str]) -> tuple[int, int, int, int]:
    tp = sum(d == "yes" and g == "yes" for d, g in zip(decisions, labels))
    fp = sum(d == "yes" and g == "no" for d, g in zip(decisions, labels))
    tn = sum(d == "no" and g == "no" for d, g in zip(decisions, labels))
    fn = sum(d == "no" and g == "yes" for d, g in zip(decisions, labels))
    return tp, fp, tn, fn


@pytest.mark.parametrize("answer", CORPUS)
def test_label_free_rules_match_their_scripts(answer: str) -> None:
    assert parse_text("pai", answer) == ("yes" if script_pai(answer) == 1 else "no")
    assert parse_text("marine", answer) == {1: "yes", 0: "no", -1: "unknown"}[script_marine(answer)]
    assert parse_text("dashb", answer) == (script_dashb(answer) or "unknown")
    assert parse_text("repope", answer) == (script_repope(answer) or "unknown")


def test_vcd_reproduces_the_scripts_counts_on_both_labels() -> None:
    labels = ["yes"] * len(CORPUS) + ["no"] * len(CORPUS)
    answers = CORPUS + CORPUS
    decisions = [parse_text("vcd", a, label=g) for a, g in zip(answers, labels)]  # type: ignore[arg-type]
    assert confusion(decisions, labels) == script_vcd(answers, labels)
    assert "unknown" not in decisions


def test_the_quirks_each_script_has() -> None:
    # VCD: "I don't know" is a correct answer to every no question ("k-no-w"), wrong on yes ones
    assert parse_text("vcd", "I don't know", label="no") == "no"
    assert parse_text("vcd", "I don't know", label="yes") == "no"
    assert parse_text("vcd", "yes, there is no cat", label="no") == "no"
    assert parse_text("vcd", "yes, there is no cat", label="yes") == "yes"
    # PAI: "n't" words are no, "Not" is not in its list, punctuation kept on other words
    assert [parse_text("pai", a) for a in ("There isn't any", "Not sure", "No!", "")] == ["no", "yes", "yes", "yes"]
    # MARINE: first sentence only, the comma stays on the word; blank is left out
    assert [parse_text("marine", a) for a in ("No, but...", "Not sure", "Yes. No.", "  ")] == ["yes", "no", "yes", "unknown"]
    # DASH-B: substrings, yes first
    assert [parse_text("dashb", a) for a in ("Nope", "nothing", "There isn't any", "yes, there is no cat")] == [
        "no", "no", "unknown", "yes",
    ]  # fmt: skip
    # RePOPE's third test ('not') is unreachable: its decisions are DASH-B's on every answer
    assert all(parse_text("repope", a) == parse_text("dashb", a) for a in CORPUS)


def test_vcd_without_a_label_is_refused_and_flagged() -> None:
    with pytest.raises(LabelDependentRuleError, match="label-dependent"):
        parse_text("vcd", "yes")
    with pytest.raises(LabelDependentRuleError):
        ALL_TEXT_RULES["vcd"]("yes")
    assert "label-dependent" in (label_dependence_note("text:vcd") or "")
    assert label_dependence_note("text:dashb") is None


def test_literature_rules_are_on_request_not_in_the_default_list() -> None:
    # a run records TEXT_RULES: the audit's columns of existing runs stay the same
    assert set(TEXT_RULES) == {"pope", "exact", "yorn", "strict"}
    assert {"vcd", "pai", "marine", "dashb", "repope"} <= set(ALL_TEXT_RULES)


def write_lines(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_score_a_run_with_each_literature_rule(tmp_path: Path) -> None:
    """An imported run (generic answers) scored with every literature rule: the confusion counts
    are the scripts', and text:vcd's output says that it is label-dependent."""
    labels, answers = [], []
    for i, answer in enumerate(CORPUS * 2):
        label = "yes" if i % 2 == 0 else "no"
        q = {"question_id": i + 1, "image": f"COCO_val2014_{i // 6:012d}.jpg", "text": f"Is there a thing{i} in the image?", "label": label}
        labels.append(q)
        answers.append({"question_id": i + 1, "question": q["text"], "answer": answer})
    label_file = write_lines(tmp_path / "coco_pope_random.json", labels)
    answers_file = write_lines(tmp_path / "answers.jsonl", answers)
    run = tmp_path / "run"
    done = CliRunner().invoke(app, ["import", "answers", str(answers_file), "--labels", str(label_file), "--out", str(run)])
    assert done.exit_code == 0, done.output
    gold = [q["label"] for q in labels]
    texts = [a["answer"] for a in answers]
    expected = {
        "vcd": script_vcd(texts, gold),
        "pai": confusion(["yes" if script_pai(t) else "no" for t in texts], gold),
        "marine": confusion([{1: "yes", 0: "no", -1: "unknown"}[script_marine(t)] for t in texts], gold),
        "dashb": confusion([script_dashb(t) or "unknown" for t in texts], gold),
        "repope": confusion([script_repope(t) or "unknown" for t in texts], gold),
    }
    for rule, counts in expected.items():
        result = CliRunner().invoke(app, ["score", str(run), "--readout", f"text:{rule}", "--json", "--resamples", "0"])
        assert result.exit_code == 0, result.output
        m = json.loads(result.stdout)["splits"]["random"]
        assert (m["tp"], m["fp"], m["tn"], m["fn"]) == counts, rule
        assert ("label-dependent" in result.stderr) == (rule == "vcd")
    # the third-party path applies them too, with the label for vcd
    direct = CliRunner().invoke(
        app, ["score", "--answers", str(answers_file), "--labels", str(label_file), "--rule", "vcd", "--json", "--resamples", "0"]
    )
    assert direct.exit_code == 0, direct.output
    m = json.loads(direct.stdout)["splits"]["random"]
    assert (m["tp"], m["fp"], m["tn"], m["fn"]) == expected["vcd"]


def test_audit_rule_changes_counts_every_pair(tmp_path: Path) -> None:
    """`audit --rule-changes`: per pair of rules, the answers classified differently, recomputed
    here from the scripts' transcriptions; nothing is written into the run."""
    labels, answers = [], []
    for i, answer in enumerate(CORPUS):
        q = {"question_id": i + 1, "image": f"COCO_val2014_{i // 6:012d}.jpg", "text": f"Is there a thing{i} in the image?",
             "label": "yes" if i % 3 else "no"}  # fmt: skip
        labels.append(q)
        answers.append({"question_id": i + 1, "question": q["text"], "answer": answer})
    label_file = write_lines(tmp_path / "coco_pope_random.json", labels)
    answers_file = write_lines(tmp_path / "answers.jsonl", answers)
    run = tmp_path / "run"
    assert CliRunner().invoke(app, ["import", "answers", str(answers_file), "--labels", str(label_file), "--out", str(run)]).exit_code == 0
    result = CliRunner().invoke(app, ["audit", str(run), "--rule-changes"])
    assert result.exit_code == 0, result.output
    assert not (run / "audit.json").exists()
    header = next(line for line in result.stdout.splitlines() if line.startswith("| rule |"))
    columns = [c.strip() for c in header.strip("|").split("|")][4:]
    rows = {line.split("|")[1].strip().split()[0]: [c.strip() for c in line.strip().strip("|").split("|")] for line in result.stdout.splitlines()
            if line.startswith("| text:")}  # fmt: skip
    gold = [q["label"] for q in labels]
    mine = {
        "pai": ["yes" if script_pai(a) else "no" for a in CORPUS],
        "marine": [{1: "yes", 0: "no", -1: "unknown"}[script_marine(a)] for a in CORPUS],
        "dashb": [script_dashb(a) or "unknown" for a in CORPUS],
        "repope": [script_repope(a) or "unknown" for a in CORPUS],
        # VCD's counts as decisions: the label's word when the script counts it correct
        "vcd": [g if (g in a.lower().strip()) else ("no" if g == "yes" else "yes") for a, g in zip(CORPUS, gold)],
    }
    for a in mine:
        row = rows[f"text:{a}"]
        assert row[1:4] == [str(mine[a].count(c)) for c in ("yes", "no", "unknown")], a
        for b in mine:
            if a != b:
                assert row[4 + columns.index(b)] == str(sum(x != y for x, y in zip(mine[a], mine[b]))), (a, b)
    assert "(label-dependent)" in rows["text:vcd"][0]
