"""The audit's few plain lines for the terminal."""

from __future__ import annotations

from halluprobe.audit.overlap import overlap_lines
from halluprobe.formatting import format_ci, format_ratio
from halluprobe.records_audit import AuditReport, Relabel

__all__ = ["summarise_audit"]

_NOT_AVAILABLE = "n/a"  # an undefined number in the terminal summary


def summarise_audit(audit: AuditReport) -> list[str]:
    """A few plain lines for the terminal: headline F1 with CI, each readout's delta and p,
    the off-set rate, and where F1 settles."""
    run = audit.run
    head = audit.headline
    macro = audit.readouts[head].macro
    lines = [] if audit.headline_note is None else [audit.headline_note]
    lines += [
        f"{run.path}: {run.n} questions, {run.errors} errors; model {run.model}, template {run.template}"
        + (f"; log-probabilities read: {run.logprobs}" if run.logprobs else ""),
        (
            f"headline {head}: macro F1 {format_ratio(macro.f1, missing=_NOT_AVAILABLE)}{format_ci(macro.ci.get('f1'), 4)} "
            f"({audit.bootstrap.n_resamples} image resamples, unknown={audit.policy})"
        ),
    ]
    for name, entry in audit.paired.items():
        forced = " (FORCED: invalid for this vocabulary)" if entry.forced else ""
        delta = entry.delta_f1
        sign = "" if delta is None else ("+" if delta >= 0 else "")
        lines.append(
            f"  {name}{forced}: macro F1 {format_ratio(audit.readouts[name].macro.f1, missing=_NOT_AVAILABLE)}, "
            f"delta {sign}{format_ratio(delta, missing=_NOT_AVAILABLE)}{format_ci(entry.delta_f1_ci, 4)}, McNemar p={entry.mcnemar_p:.3g} "
            f"(b={entry.b}, c={entry.c})"
        )
    rate = audit.offset_rate
    pieces = ", ".join(f"{p.piece!r} {p.count}" for p in audit.offset_pieces[:5])
    if rate is not None:
        lines.append(f"first-token argmax outside both sets: {format_ratio(rate, digits=1, scale=100)}%" + (f" ({pieces})" if pieces else ""))
    stable = ", ".join(f"{name} {'never' if k is None else k}" for name, k in audit.stable_after.items())
    lines.append(f"F1 within ±{audit.convergence_rule.tol} of its final value after k questions: {stable}")
    for name, entry in audit.relabel.items():
        lines.append(
            f"labels {name}: {entry.matched} matched, {entry.flipped} flipped, {entry.removed} removed, "
            f"{entry.added} added; macro F1 shift {format_ratio(_macro_f1_shift(entry, head), missing=_NOT_AVAILABLE)}"
        )
    if audit.relabel_combined is not None:
        lines.append(f"all label files together: macro F1 shift {format_ratio(_macro_f1_shift(audit.relabel_combined, head), missing=_NOT_AVAILABLE)}")
    if audit.training_overlap is not None:  # COCO images only; a run of other images says so on stderr
        lines += overlap_lines(audit.training_overlap)
    return lines


def _macro_f1_shift(entry: Relabel, readout: str) -> float | None:
    shift = entry.shift.get(readout)
    return None if shift is None else shift.macro.get("f1")
