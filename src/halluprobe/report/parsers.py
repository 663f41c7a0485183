"""The Parsers section of a report of imported runs: how many answers change class between the
text rules (``rule_changes``), and which rule a published number of the imported file needs
(issue 22, item 2): where the file's sha256 is an answers file of the literature registry, the
authors' parser of that entry, with the figures it produced; else that the authors' own rule
decides, and the table shows how much the choice moves.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from halluprobe.errors import InputError
from halluprobe.literature.registry import load_registry
from halluprobe.rule_changes import RuleChanges, rule_changes_of_run

__all__ = ["NeededRule", "ParsersView", "parsers_lines", "parsers_view"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NeededRule:
    """A registry entry whose answers file this run was imported from: the rule its figures need."""

    entry: str
    rule: str  # a halluprobe readout, ``text:<rule>``
    source: str  # where the authors' rule is
    unknown: str  # how the authors count an unreadable answer
    figures: list[str] = field(default_factory=list)  # "F1 85.9 (README.md)"


@dataclass(frozen=True)
class ParsersView:
    changes: RuleChanges
    needs: list[NeededRule]
    pairs: list[tuple[str, str, int]]  # the pairs of rules that disagree most: (a, b, answers)


def _needed_rules(sha256s: set[str]) -> list[NeededRule]:

    needs = []
    for entry in load_registry().entries:
        if not any(f.sha256 in sha256s for f in entry.answers):
            continue
        figures = [f"{f.metric} {f.value:.{f.decimals}f} ({f.where})" for f in entry.published]
        rule = entry.parser.rule if entry.parser.rule.startswith("text:") else f"text:{entry.parser.rule}"
        needs.append(NeededRule(entry.name, rule, entry.parser.source, entry.parser.unknown, figures))
    return needs


def parsers_view(path: str | Path, imported: Any) -> ParsersView | None:
    """The section of an imported run (``imported``: the audit's ``ImportedFrom``); None when the
    run stored no text to classify."""
    try:
        changes = rule_changes_of_run(path)
    except InputError as err:
        log.info("no parsers section for %s: %s", path, err)
        return None
    try:
        needs = _needed_rules({f.sha256 for f in imported.files})
    except InputError as err:  # the packaged registry unreadable: the table still stands
        log.warning("the literature registry cannot be read: %s", err)
        needs = []
    rules = changes.rules
    pairs = sorted(((a, b, changes.changed[(a, b)]) for i, a in enumerate(rules) for b in rules[i + 1 :]), key=lambda p: -p[2])
    return ParsersView(changes=changes, needs=needs, pairs=[p for p in pairs if p[2]][:5])


def parsers_lines(views: Sequence[tuple[str, ParsersView]], headline: str) -> list[str]:
    """The Markdown of the section (without its heading): per run, which rule a published number
    needs, then the class counts per rule and the pairs that disagree most."""
    lines: list[str] = []
    for label, view in views:
        if label:
            lines += [f"**{label}**", ""]
        if view.needs:
            for need in view.needs:
                figures = "; ".join(need.figures) if need.figures else "no figure recorded"
                lines.append(
                    f"- The imported file is the registry entry `{need.entry}`: its published numbers ({figures}) need "
                    f"`{need.rule}` with unknown answers counted as {need.unknown} ({need.source}), not the headline `{headline}`."
                )
        else:
            lines.append(
                "- The imported file is in no literature registry entry: a published number from it needs the rule its "
                "authors' evaluator applies (`halluprobe literature list` names the rules known); the counts below show what the choice moves."
            )
        lines.append("")
        c = view.changes
        lines += ["| rule | yes | no | unknown |", "|---|---|---|---|"]
        lines += [f"| `text:{r}` | {c.classes[r]['yes']} | {c.classes[r]['no']} | {c.classes[r]['unknown']} |" for r in c.rules]
        if view.pairs:
            moved = ", ".join(f"`{a}` / `{b}` {n}" for a, b, n in view.pairs)
            lines += ["", f"Answers classified differently, the pairs that disagree most (of {c.answers}): {moved}."]
        lines.append("")
    return lines
