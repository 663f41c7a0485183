"""Readouts applied at score time: every metric is a pure function of the stored raw outputs.

A run stores what the model gave (first-token log-probabilities of every candidate id or
piece, the greedy text); :func:`apply` turns one stored sample into one readout's decision
when ``score``, ``audit`` or ``report`` asks for it. So a run made with one text rule can be
scored with any other, and a corrected rule needs no new model run.

A readout is a :class:`~halluprobe.readouts.value.Readout` (a name parsed once):

- a logit readout: :mod:`halluprobe.readouts.logits` over the stored ``candidates`` and the
  run's token sets;
- a text rule: :mod:`halluprobe.readouts.text` over the stored ``text``;
- a correction: :mod:`halluprobe.readouts.corrections` over the stored signals;
- a run-level rule (``threshold``): reads every sample at once, so only :func:`apply_run`
  applies it;
- a stored decision (a rule of another tool, recorded beside the text when its answers were
  imported): read as stored; it cannot be recomputed.

:func:`apply_run` is the one whole-run entry point (score, audit, tables, corrections, report).

Run dirs written before this module stored each readout's decision beside the raw outputs.
Those are still read, as a cross-check: :func:`cross_check` counts stored decisions that the
recomputation does not reproduce.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from halluprobe.errors import InputError
from halluprobe.readouts.corrections import apply_correction, apply_threshold, recorded_signals
from halluprobe.readouts.logits import LOGIT_READOUTS
from halluprobe.readouts.text import TEXT_RULES, parse_text
from halluprobe.readouts.value import TEXT_PREFIX, Readout, unknown_readout
from halluprobe.records import ReadoutResult, RunHeader, Sample, TokenSets

__all__ = [
    "apply",
    "apply_all",
    "apply_run",
    "available_readouts",
    "check_readout",
    "cross_check",
    "CrossCheck",
]

log = logging.getLogger(__name__)


def apply(readout: Readout, sample: Sample, token_sets: TokenSets | None) -> ReadoutResult | None:
    """One readout of one stored sample, computed from its raw outputs.

    A sample without the raw outputs the readout reads (no candidates or token sets, no text)
    gives the decision stored for it, if any (a hand-made or imported sample); None when there
    is nothing to read (an errored sample too), which scoring counts as unknown. A run-level
    rule is refused: it is applied by :func:`apply_run`."""
    if sample.error is not None:
        return None
    if readout.kind == "correction":
        return apply_correction(readout.method, readout.parameters, sample, token_sets)
    if readout.kind == "run_level":
        raise ValueError(f"{readout} reads the whole run: apply it with apply_run")
    if readout.kind == "logit" and token_sets is not None and sample.candidates:
        return LOGIT_READOUTS[readout.method](sample.candidates, token_sets)
    if readout.kind == "text" and sample.text is not None:
        # a label-dependent rule (text:vcd) reads the label too
        return ReadoutResult(decision=parse_text(readout.method, sample.text, label=sample.label))
    return sample.readouts.get(readout.name)


def apply_run(readout: Readout | str, header: RunHeader, samples: Sequence[Sample]) -> list[ReadoutResult | None]:
    """``readout`` applied to every stored sample of a run (run-level rules included),
    cross-checked against the decisions an earlier halluprobe stored beside the raw outputs (a
    difference is logged; the recomputed decisions are returned)."""
    readout = Readout.of(readout)
    if readout.kind == "run_level":  # the threshold: chosen on the run's own p_yes
        return apply_threshold(readout.parameters, samples, header.token_sets)
    results = [apply(readout, s, header.token_sets) for s in samples]
    check = cross_check(readout, samples, results)
    if check.differ:
        log.warning(
            "%s: %d of %d stored decisions differ from the recomputed ones (%s); the recomputed ones are scored",
            readout, check.differ, check.compared, "; ".join(check.examples),
        )  # fmt: skip
    return results


def apply_all(sample: Sample, header: RunHeader) -> dict[str, ReadoutResult]:
    """Every per-sample readout the run allows, applied to one sample (those it can read)."""
    readouts = [Readout.parse(name) for name in available_readouts(header, [sample])]
    results = {str(r): apply(r, sample, header.token_sets) for r in readouts if r.kind != "run_level"}
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
    # a run generates greedy text when it was asked for text (max_new_tokens > 0)
    return bool(header.text_rules) and header.max_new_tokens > 0


def check_readout(
    readout: Readout | str, header: RunHeader, samples: Sequence[Sample], *, force_invalid: bool, source: object
) -> Readout:
    """``readout`` as a value, refused when this run cannot give it (a correction whose signals
    it did not record, text rules on a logits-only run, a stored decision it does not have) or
    when it is a legacy readout its vocabulary makes invalid."""
    parsed = Readout.of(readout)
    if parsed.kind in ("correction", "run_level"):
        recorded = set().union(*(recorded_signals(s) for s in samples))
        for signal in parsed.signals:
            if signal not in recorded:
                flag = "layers" if signal == "layer:*" else signal
                how = f"--signals {flag}" + (" --clip-model PATH" if flag == "clip" else "")
                raise InputError(
                    f"{parsed} reads the {flag!r} signal, which this run did not record: "
                    f"run the model with `halluprobe run {how}`",
                    source,  # type: ignore[arg-type]
                )
        return parsed
    available = available_readouts(header, samples)
    # every text rule (an alternative version too: text:yorn@2024) applies wherever text is stored
    if parsed.name not in available and not (parsed.kind == "text" and _stores_text(header)):
        if parsed.kind == "text":
            reason = "this run stored no text (it was run with --no-text): text rules need its greedy answers"
        else:
            reason = f"readout {parsed.name!r} is not in this run"
        raise InputError(unknown_readout(reason, available), source)  # type: ignore[arg-type]
    sets = header.token_sets
    if parsed.legacy and sets is not None and not sets.legacy_valid and not force_invalid:
        raise InputError(
            f"readout {parsed} reads LLaMA-2 ids that are not yes/no in this model's vocabulary "
            "(see `halluprobe tokens`); pass --force-invalid to see what it would score",
            source,  # type: ignore[arg-type]
        )
    return parsed


@dataclass
class CrossCheck:
    """Stored decisions (run dirs of earlier halluprobe versions) against their recomputation."""

    compared: int = 0
    differ: int = 0
    examples: list[str] = field(default_factory=list)


def cross_check(readout: Readout, samples: Sequence[Sample], results: Sequence[ReadoutResult | None]) -> CrossCheck:
    """Compare the decisions and p_yes a run stored for ``readout`` with ``results``."""
    check = CrossCheck()
    if not readout.recomputable:
        return check
    for sample, result in zip(samples, results):
        stored = sample.readouts.get(readout.name)
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
