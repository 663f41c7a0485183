"""How many answers change class between every pair of text rules on one run (issue 22, item 2).

The same stored answers get a different yes / no / unknown from each tool's parser; a published
number is only comparable with another when both used the same rule. :func:`rule_changes`
applies every text rule (halluprobe's four, the earlier versions and the literature's scripts)
to a run's stored text and counts, for each pair, the answers they classify differently;
``audit RUN --rule-changes`` prints it. Nothing is written: ``audit.json`` keeps its shape.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from halluprobe.errors import InputError
from halluprobe.readouts.apply import apply
from halluprobe.readouts.text import ALL_TEXT_RULES, BENCHMARK_TEXT_RULES, is_label_dependent
from halluprobe.readouts.value import TEXT_PREFIX, Readout
from halluprobe.scoring import read_run_samples

__all__ = ["RuleChanges", "render_rule_changes", "rule_changes", "rule_changes_of_run"]


@dataclass(frozen=True)
class RuleChanges:
    """Per rule, its yes / no / unknown counts; per ordered pair of rules, the answers whose
    class differs (symmetric: ``changed[(a, b)] == changed[(b, a)]``)."""

    rules: list[str]
    answers: int
    classes: dict[str, dict[str, int]]
    changed: dict[tuple[str, str], int]


def rule_changes(decisions: Mapping[str, Sequence[str]]) -> RuleChanges:
    """The table for ``decisions`` (rule -> one class per answer, the same answers in order)."""
    rules = list(decisions)
    lengths = {len(d) for d in decisions.values()}
    if len(lengths) > 1:
        raise ValueError("every rule must classify the same answers")
    n = lengths.pop() if lengths else 0
    classes = {r: {c: sum(d == c for d in decisions[r]) for c in ("yes", "no", "unknown")} for r in rules}
    changed = {(a, b): sum(x != y for x, y in zip(decisions[a], decisions[b])) for a in rules for b in rules}
    return RuleChanges(rules=rules, answers=n, classes=classes, changed=changed)


def rule_changes_of_run(path: str | Path, rules: Sequence[str] | None = None) -> RuleChanges:
    """Every text rule (or ``rules``) applied to the stored text of the run at ``path``;
    errored samples and samples without text are left out."""

    rundir, header, samples = read_run_samples(path)
    names = list(rules) if rules is not None else [r for r in ALL_TEXT_RULES if r not in BENCHMARK_TEXT_RULES]
    unknown = [r for r in names if r not in ALL_TEXT_RULES]
    if unknown:
        raise InputError(f"unknown text rule {unknown[0]!r}; known: {', '.join(ALL_TEXT_RULES)}", rundir.header_path)
    kept = [s for s in samples if s.error is None and s.text is not None]
    if not kept:
        raise InputError("this run stored no answer text: text rules have nothing to classify", rundir.samples_path)
    decisions: dict[str, list[str]] = {}
    for rule in names:
        readout = Readout.parse(TEXT_PREFIX + rule)
        results = [apply(readout, s, header.token_sets) for s in kept]
        decisions[rule] = [r.decision if r is not None else "unknown" for r in results]
    return rule_changes(decisions)


def render_rule_changes(table: RuleChanges, title: str) -> str:
    """Markdown: the class counts per rule, then the pairwise matrix of changed answers."""
    head = "| rule | yes | no | unknown | " + " | ".join(table.rules) + " |"
    lines = [f"## {title}", "", f"Answers classified differently by each pair of text rules ({table.answers} answers).", "", head]
    lines.append("|" + "---|" * (4 + len(table.rules)))
    for a in table.rules:
        name = f"text:{a}" + (" (label-dependent)" if is_label_dependent(a) else "")
        counts = table.classes[a]
        cells = " | ".join("" if a == b else str(table.changed[(a, b)]) for b in table.rules)
        lines.append(f"| {name} | {counts['yes']} | {counts['no']} | {counts['unknown']} | {cells} |")
    if any(is_label_dependent(r) for r in table.rules):
        lines += ["", "A label-dependent rule decides from the answer and the question's label, not from the answer alone."]
    return "\n".join(lines) + "\n"
