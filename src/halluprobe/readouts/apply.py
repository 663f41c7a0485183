"""Readouts applied at score time: every metric is a pure function of the stored raw outputs.

A run stores what the model gave (first-token log-probabilities of every candidate id or
piece, the greedy text); :func:`apply` turns one stored sample into one readout's decision
when ``score``, ``audit`` or ``report`` asks for it. So a run made with one text rule can be
scored with any other, and a corrected rule needs no new model run.

Readout names:

- ``legacy_2tok``, ``legacy_8tok``, ``dynamic``: :mod:`halluprobe.readouts.logits` over the
  stored ``candidates`` and the run's token sets;
- ``text:RULE``: :mod:`halluprobe.readouts.text` over the stored ``text``;
- any other name: a decision that exists only as stored (a rule of another tool, recorded
  beside the text when its answers were imported); it cannot be recomputed.

Run dirs written before this module stored each readout's decision beside the raw outputs.
Those are still read, as a cross-check: :func:`cross_check` counts stored decisions that the
recomputation does not reproduce.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from halluprobe.corrections import (
    CORRECTIONS,
    apply_correction,
    is_correction,
    parse_correction,
    recorded_signals,
    required_signals,
)
from halluprobe.errors import InputError
from halluprobe.readouts.logits import LEGACY_READOUTS, LOGIT_READOUTS
from halluprobe.readouts.text import ALL_TEXT_RULES, TEXT_RULES, parse_text
from halluprobe.records import ReadoutResult, RunHeader, Sample, TokenSets

__all__ = [
    "TEXT_PREFIX",
    "apply",
    "apply_all",
    "available_readouts",
    "check_readout",
    "cross_check",
    "CrossCheck",
    "is_recomputable",
]

TEXT_PREFIX = "text:"


def is_recomputable(readout: str) -> bool:
    """Whether ``readout`` is computed from raw outputs (else it can only be read as stored)."""
    return (
        readout in LOGIT_READOUTS
        or (readout.startswith(TEXT_PREFIX) and readout[len(TEXT_PREFIX):] in ALL_TEXT_RULES)
        or is_correction(readout)
    )


def apply(readout: str, sample: Sample, token_sets: TokenSets | None) -> ReadoutResult | None:
    """One readout of one stored sample, computed from its raw outputs.

    A sample without the raw outputs the readout reads (no candidates or token sets, no text)
    gives the decision stored for it, if any (a hand-made or imported sample); None when there
    is nothing to read (an errored sample too), which scoring counts as unknown."""
    if sample.error is not None:
        return None
    if is_correction(readout):  # a correction over stored signals (halluprobe.corrections)
        return apply_correction(readout, sample, token_sets)
    if readout in LOGIT_READOUTS and token_sets is not None and sample.candidates:
        return LOGIT_READOUTS[readout](sample.candidates, token_sets)
    if readout.startswith(TEXT_PREFIX) and readout[len(TEXT_PREFIX):] in ALL_TEXT_RULES and sample.text is not None:
        # a label-dependent rule (text:vcd) reads the label too
        return ReadoutResult(decision=parse_text(readout[len(TEXT_PREFIX):], sample.text, label=sample.label))
    return sample.readouts.get(readout)


def apply_all(sample: Sample, header: RunHeader) -> dict[str, ReadoutResult]:
    """Every readout the run allows, applied to one sample (those it can read)."""
    results = {name: apply(name, sample, header.token_sets) for name in available_readouts(header, [sample])}
    return {name: result for name, result in results.items() if result is not None}


def available_readouts(header: RunHeader, samples: Iterable[Sample] = ()) -> list[str]:
    """Every readout this run can be scored with: the logit readouts when it has token sets,
    every text rule when it stored greedy text, and any stored-only decision in its samples.

    The readouts the run's header lists come first, in its order (older runs list the text
    rules they were made with), so tables keep their column order.
    """
    names: list[str] = list(header.readouts)
    if header.open_ended:  # free-form answers to open questions: no yes/no readout
        return list(dict.fromkeys(name for s in samples for name in s.readouts))
    if header.token_sets is not None:
        names += list(LOGIT_READOUTS)
    if _stores_text(header):
        names += [TEXT_PREFIX + rule for rule in TEXT_RULES]
    for s in samples:
        names += list(s.readouts)
    return list(dict.fromkeys(names))


def _stores_text(header: RunHeader) -> bool:
    # a run generates greedy text when it was asked for any text rule (max_new_tokens > 0)
    return bool(header.text_rules) and header.max_new_tokens > 0


def check_readout(readout: str, header: RunHeader, samples: Sequence[Sample], *, force_invalid: bool, source: object) -> None:
    """Refuse a readout this run cannot give, or a legacy readout its vocabulary makes invalid."""
    if is_correction(readout):
        parse_correction(readout)  # an unknown parameter is one line
        recorded = set().union(*(recorded_signals(s) for s in samples))
        for signal in required_signals(readout):
            if signal not in recorded:
                flag = "layers" if signal == "layer:*" else signal
                how = f"--signals {flag}" + (" --clip-model PATH" if flag == "clip" else "")
                raise InputError(
                    f"{readout} reads the {flag!r} signal, which this run did not record: "
                    f"run the model with `halluprobe run {how}`",
                    source,  # type: ignore[arg-type]
                )
        return
    available = available_readouts(header, samples)
    # an alternative rule version (text:yorn@2024) is not listed, but applies wherever text is stored
    other_version = readout.startswith(TEXT_PREFIX) and readout[len(TEXT_PREFIX):] in ALL_TEXT_RULES and _stores_text(header)
    if readout not in available and not other_version:
        if readout.startswith(TEXT_PREFIX) and readout[len(TEXT_PREFIX):] not in ALL_TEXT_RULES:
            reason = f"unknown text rule {readout[len(TEXT_PREFIX):]!r}; known: {', '.join(ALL_TEXT_RULES)}"
        elif readout.startswith(TEXT_PREFIX):
            reason = "this run stored no text (it was run with --text-rules ''): text rules need its greedy answers"
        else:
            reason = f"readout {readout!r} is not in this run"
        raise InputError(
            f"{reason}; it has: {', '.join(available)}, and the corrections {', '.join(CORRECTIONS)} over recorded signals",
            source,  # type: ignore[arg-type]
        )
    sets = header.token_sets
    if readout in LEGACY_READOUTS and sets is not None and not sets.legacy_valid and not force_invalid:
        raise InputError(
            f"readout {readout} reads LLaMA-2 ids that are not yes/no in this model's vocabulary "
            "(see `halluprobe tokens`); pass --force-invalid to see what it would score",
            source,  # type: ignore[arg-type]
        )


@dataclass
class CrossCheck:
    """Stored decisions (run dirs of earlier halluprobe versions) against their recomputation."""

    compared: int = 0
    differ: int = 0
    examples: list[str] = field(default_factory=list)


def cross_check(readout: str, samples: Sequence[Sample], results: Sequence[ReadoutResult | None]) -> CrossCheck:
    """Compare the decisions and p_yes a run stored for ``readout`` with ``results``."""
    check = CrossCheck()
    if not is_recomputable(readout):
        return check
    for sample, result in zip(samples, results):
        stored = sample.readouts.get(readout)
        if stored is None:
            continue
        check.compared += 1
        now = result.decision if result is not None else "unknown"
        now_p = result.p_yes if result is not None else None
        if stored.decision != now or not _same_p(stored.p_yes, now_p):
            check.differ += 1
            if len(check.examples) < 3:
                check.examples.append(f"{sample.split}/{sample.question_id}: stored {stored.decision}, now {now}")
    return check


def _same_p(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return abs(a - b) <= 1e-9
