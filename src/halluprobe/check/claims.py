"""Numbers in prose, as a claims file names them, checked by ``halluprobe check --claims``:
a peer of the table checks, on the same findings, comparisons and run dirs.

A claims file is TOML: top-level ``run``, ``readout`` and ``unknown`` are defaults for every
``[[claim]]``; a claim names ``split`` and ``metric`` and gives ``value`` as written, a string
that keeps its rounding: ``"0.858"``, ``"84.5%"``, ``"6.13 points"`` (percentage points),
``"93/360"`` (a ratio written as counts). ``forced = true`` scores a legacy readout that is
invalid for the run's vocabulary anyway (as the audit shows it). ``minus = {split = "adversarial"}`` makes the claim a
difference (the keys it gives replace the claim's own). ``text = "random {}, popular"`` is the
prose around the value in the checked files, ``{}`` where the value stands: every line that
reads so is checked too (numbers in the rest of ``text`` match any number, so an edited one
elsewhere does not hide this one).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from halluprobe.check.compare import MAX_NUMBER_CHARS, compare_number
from halluprobe.check.findings import Finding
from halluprobe.check.sources import RunCache, locate_run, run_findings
from halluprobe.errors import InputError
from halluprobe.provenance_sources import RunSource
from halluprobe.records import UNKNOWN_POLICIES, UnknownPolicy
from halluprobe.tomlfile import loads_toml

__all__ = ["CLAIM_METRICS", "Claim", "Written", "read_claims", "parse_written", "check_claims"]

CLAIM_METRICS = (
    "n", "tp", "fp", "tn", "fn", "unknown", "errors",
    "accuracy", "precision", "recall", "f1", "yes_ratio", "unknown_rate", "htr", "auroc", "ece",
)  # fmt: skip
_CLAIM_KEYS = {"run", "readout", "unknown", "split", "metric", "value", "text", "minus", "forced"}
_TARGET_KEYS = ("run", "readout", "unknown", "split", "metric")


@dataclass(frozen=True)
class Target:
    """One number of one run: what a claim (or the other side of a difference) names."""

    run: str
    readout: str
    unknown: UnknownPolicy
    split: str
    metric: str
    forced: bool = False  # a legacy readout scored although invalid for the vocabulary


@dataclass(frozen=True)
class Claim:
    line: int  # of its `value =` in the claims file (its [[claim]] header without one)
    path: str
    target: Target
    value: str
    text: str | None = None
    minus: Target | None = None


@dataclass(frozen=True)
class Written:
    """A value as written: its number tokens, whether percent (or points), whether counts."""

    tokens: tuple[str, ...]
    percent: bool
    fraction: bool
    suffix: str


_WRITTEN = re.compile(r"^([-+−]?\d+(?:\.\d+)?)(?:/(\d+))?\s*(%|points?|pp)?$")


def parse_written(value: str) -> Written | None:
    """``"0.858"``, ``"84.5%"``, ``"6.13 points"``, ``"93/360"``; None when not a number."""
    match = _WRITTEN.match(value.strip())
    if match is None:
        return None
    number, denominator, suffix = match.groups()
    if denominator is not None and (suffix or "." in number):
        return None
    if max(len(number), len(denominator or "")) > MAX_NUMBER_CHARS:  # int() refuses past 4300 digits
        return None
    tokens = (number,) if denominator is None else (number, denominator)
    return Written(tokens, percent=suffix is not None, fraction=denominator is not None, suffix=suffix or "")


def _matches(value: float | int, written: Written) -> bool:
    if written.fraction:
        numerator, denominator = (int(t) for t in written.tokens)
        return denominator > 0 and abs(numerator / denominator - value) < 1e-12
    return compare_number(value, written.tokens[0], written.percent)


def _expected_like(value: float | int | None, written: Written | None) -> str:
    """The recomputed value written the way the claim writes it (for a report)."""
    if value is None:
        return "undefined"
    if written is None or written.fraction:
        return f"{value:.6g}"
    token = written.tokens[0]
    decimals = len(token.split(".", 1)[1]) if "." in token else 0
    scaled = 100 * value if written.percent else value
    text = f"{scaled:.{decimals}f}"
    return text + ("" if not written.suffix else (written.suffix if written.suffix == "%" else f" {written.suffix}"))


def _claim_lines(text: str) -> list[tuple[int, int | None]]:
    """Per ``[[claim]]``: its header line and its ``value =`` line (tomllib gives no lines)."""
    found: list[tuple[int, int | None]] = []
    for number, line in enumerate(text.split("\n"), start=1):
        stripped = line.strip()
        if stripped.startswith("[[claim]]"):
            found.append((number, None))
        elif found and found[-1][1] is None and re.match(r"value\s*=", stripped):
            found[-1] = (found[-1][0], number)
    return found


def _target(entry: Mapping[str, Any], defaults: Mapping[str, Any], path: str, line: int) -> Target:
    values = {}
    for key in _TARGET_KEYS:
        value = entry.get(key, defaults.get(key, {"readout": "dynamic", "unknown": "wrong"}.get(key)))
        if not isinstance(value, str):
            raise InputError(f"claim key {key!r} must be a string" if value is not None else f"claim has no {key!r}", path, line)
        values[key] = value
    forced = entry.get("forced", False)
    if not isinstance(forced, bool):
        raise InputError("claim key 'forced' must be true or false", path, line)
    if values["metric"] not in CLAIM_METRICS:
        raise InputError(f"unknown metric {values['metric']!r}; known: {', '.join(CLAIM_METRICS)}", path, line)
    if values["unknown"] not in UNKNOWN_POLICIES:
        raise InputError(f"unknown policy {values['unknown']!r}; known: {', '.join(UNKNOWN_POLICIES)}", path, line)
    return Target(**values, forced=forced)


def read_claims(path: str | Path) -> list[Claim]:
    """The claims of a claims file; a malformed one is bad input naming its line."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read the claims file: {err}", path) from None
    data = loads_toml(text, path, "the claims file")
    unknown_top = set(data) - {"run", "readout", "unknown", "claim"}
    if unknown_top:
        raise InputError(f"unknown top-level keys {sorted(unknown_top)} (claims go in [[claim]] tables)", path)
    entries = data.get("claim", [])
    if not isinstance(entries, list) or not entries:
        raise InputError("no [[claim]] tables", path)
    lines = _claim_lines(text)
    claims = []
    for index, entry in enumerate(entries):
        header, value_line = lines[index] if index < len(lines) else (1, None)
        line = value_line or header
        if not isinstance(entry, dict):
            raise InputError("each claim must be a [[claim]] table", path, header)
        extra = set(entry) - _CLAIM_KEYS
        if extra:
            raise InputError(f"unknown claim keys {sorted(extra)}; known: {', '.join(sorted(_CLAIM_KEYS))}", path, header)
        value = entry.get("value")
        if not isinstance(value, str):
            raise InputError("claim 'value' must be a string as written (\"0.858\", \"84.5%\"), so its rounding is kept", path, line)
        if parse_written(value) is None:
            raise InputError(f"cannot read the claimed value {value!r} (forms: 0.858, 84.5%, 6.13 points, 93/360)", path, line)
        target = _target(entry, data, str(path), header)
        minus = entry.get("minus")
        if minus is not None and not (isinstance(minus, dict) and set(minus) <= set(_TARGET_KEYS)):
            raise InputError(f"'minus' is a table of {', '.join(_TARGET_KEYS)}", path, header)
        text_around = entry.get("text")
        if text_around is not None and (not isinstance(text_around, str) or text_around.count("{}") != 1):
            raise InputError("claim 'text' is the prose around the value with one {} where the value stands", path, header)
        claims.append(
            Claim(
                line=line, path=str(path), target=target, value=value, text=text_around,
                minus=_target({**target.__dict__, **minus}, {}, str(path), header) if minus else None,
            )  # fmt: skip
        )
    return claims


def _text_pattern(text: str) -> re.Pattern[str]:
    """The prose around a value as a pattern: ``{}`` captures the value; other numbers in it
    match any number."""
    before, after = text.split("{}")

    def literal(part: str) -> str:
        pieces = re.split(r"(\d+(?:\.\d+)?)", part)
        return "".join(r"\d+(?:\.\d+)?" if i % 2 else re.escape(p) for i, p in enumerate(pieces))

    # greedy: the longest run of non-space before what follows ("0.702" of "0.702.", not "0"),
    # and "points" after a difference's number
    return re.compile(literal(before) + r"(\S+(?:\s+(?:points?|pp)\b)?)" + literal(after))


def check_claims(claims: Sequence[Claim], texts: Mapping[str, str], runs: Sequence[Path], cache: RunCache) -> list[Finding]:
    """Findings for each claim: its value against the recomputed one, and its prose."""

    findings: list[Finding] = []
    for claim in claims:
        values: list[float | int | None] = []
        usable = True
        for target in (claim.target, *([claim.minus] if claim.minus else [])):
            path = locate_run(target.run, runs)
            problems, ok = run_findings(RunSource(path=target.run), path, target.readout, target.unknown, (claim.path, claim.line))
            findings.extend(p for p in problems if p not in findings)
            if not ok:
                usable = False
                break
            report = cache.point_report(path, target.readout, target.unknown, force_invalid=target.forced)
            metrics = {**report.splits, "pooled": report.pooled, "macro": report.macro}
            if target.split not in metrics:
                raise InputError(f"unknown split {target.split!r}; the run has {', '.join(metrics)}", claim.path, claim.line)
            values.append(getattr(metrics[target.split], target.metric))
        if not usable:
            continue
        value: float | int | None = None
        if None not in values:
            value = values[0] if len(values) == 1 else values[0] - values[1]  # type: ignore[operator]
        written = parse_written(claim.value)
        if value is None or written is None or not _matches(value, written):
            findings.append(Finding("differs", claim.path, claim.line, _describe(claim), _expected_like(value, written), claim.value))
        if claim.text is not None:
            findings.extend(_check_text(claim, claim.text, value, texts))
    return findings


def _describe(claim: Claim) -> str:
    t = claim.target
    what = f"{t.metric} of {t.split} ({t.readout}, unknown={t.unknown}, {t.run})"
    if claim.minus is not None:
        m = claim.minus
        what += f" minus {m.metric} of {m.split} ({m.readout}, {m.run})"
    return what


def _check_text(claim: Claim, around: str, value: float | int | None, texts: Mapping[str, str]) -> list[Finding]:
    """Every line of ``texts`` that reads ``around`` (the claim's text, one ``{}``) holds its value."""
    pattern = _text_pattern(around)
    nothing_after = not around.split("{}")[1]  # then punctuation after the value ends the sentence
    findings = []
    seen = False
    for name, text in texts.items():
        for number, line in enumerate(text.split("\n"), start=1):
            for match in pattern.finditer(line):
                seen = True
                found = match.group(1).rstrip(".,;:)") if nothing_after else match.group(1)
                written = parse_written(found)
                if written is None:
                    message = f"cannot read the number of the claim at {claim.path}:{claim.line}"
                    findings.append(Finding("unparseable", name, number, message, claim.value, found))
                elif value is None or not _matches(value, written):
                    findings.append(Finding("differs", name, number, _describe(claim), _expected_like(value, written), found))
    if not seen:
        where = ", ".join(texts) or "the checked files"
        findings.append(Finding("text-not-found", claim.path, claim.line, f"no line of {where} reads {around!r}"))
    return findings
