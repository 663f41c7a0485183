"""Audits -> the report's view model (``report.view``): one ``RunView`` per audit, the
leaderboard of several, and the sections a page of these runs has.

The audit summarises a run; the report also shows the exact prompt, the backend's settings and
the benchmark fingerprints, which only the run directory has (read here, best effort).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from halluprobe import __version__
from halluprobe.errors import InputError
from halluprobe.formatting import fmt_count
from halluprobe.records import RunHeader
from halluprobe.records_audit import AuditReport, Relabel, RunComparison
from halluprobe.records_scores import BootstrapSettings
from halluprobe.report.view import (
    LEADERBOARD,
    LOGIT_SECTIONS,
    RELABEL,
    SECTIONS,
    Leaderboard,
    LeaderboardRow,
    MetricsRow,
    ReadoutRow,
    RelabelRow,
    ReportView,
    RunView,
    TokenView,
)
from halluprobe.rundir import RunDir

__all__ = ["as_audit", "build_view", "text_only"]


# -- reading the run directory for what an audit does not carry -----------------------------


@dataclass(frozen=True)
class _RunFacts:
    header: RunHeader | None = None
    prompt: str | None = None


def _run_facts(rundir: Path) -> _RunFacts:
    """The header and the first stored prompt, read from the run directory.

    The audit summarises the run; the report also shows the exact prompt, the backend's
    settings and the benchmark fingerprints, which only the run directory has. Read failures
    leave them empty: the audit is enough to render.
    """
    run = RunDir(rundir)
    try:
        header = run.read_header()
    except (InputError, OSError):
        header = None
    try:
        first = run.read_first_sample()
    except (InputError, OSError):
        first = None
    return _RunFacts(header=header, prompt=None if first is None else first.prompt)


# -- building the view ---------------------------------------------------------------------


def as_audit(audit: AuditReport | Mapping[str, Any]) -> AuditReport:
    """An ``AuditReport``; a mapping (an ``audit.json`` read as JSON) is validated into one."""
    return audit if isinstance(audit, AuditReport) else AuditReport.model_validate(audit)


def _short_label(audit: AuditReport, index: int) -> str:
    model = audit.run.model or f"run {index + 1}"
    name = Path(model).name or model
    return name.removesuffix(".json")


def _readout_rows(audit: AuditReport) -> list[ReadoutRow]:
    headline = audit.headline
    agreement = audit.agreement.get(headline, {})
    return [
        ReadoutRow(
            name=name,
            headline=name == headline,
            valid=r.valid,
            forced=r.forced,
            m=r.macro,
            pooled=r.pooled,
            paired=audit.paired.get(name),
            agreement=agreement.get(name),
        )
        for name, r in audit.readouts.items()
    ]


def _token_view(audit: AuditReport) -> TokenView:
    sets = audit.run.token_sets
    legacy = {} if sets is None else sets.legacy_pieces
    return TokenView(
        yes=[] if sets is None else list(zip(sets.yes_ids, sets.yes_pieces)),
        no=[] if sets is None else list(zip(sets.no_ids, sets.no_pieces)),
        by_piece=sets is not None and sets.keyed_by == "piece",
        legacy_valid=None if sets is None else sets.legacy_valid,
        legacy=sorted(legacy.items(), key=lambda kv: int(kv[0]) if kv[0].isascii() and kv[0].isdigit() else 0),
        vocab_size=None if sets is None else sets.vocab_size,
        fingerprint=None if sets is None else sets.tokenizer_fingerprint,
        offset_rate=audit.offset_rate,
        offset_pieces=list(audit.offset_pieces),
        first_pieces=list(audit.first_pieces),
        first_total=audit.first_pieces_total,
        text_dynamic=dict(audit.text_dynamic_disagreements),
        greedy=dict(audit.greedy),
    )


def _relabel_view(audit: AuditReport) -> list[RelabelRow]:
    headline = audit.headline
    base = audit.readouts[headline].macro
    entries: list[tuple[str, Relabel, bool]] = [(name, e, False) for name, e in audit.relabel.items()]
    if audit.relabel_combined is not None:
        entries.append(("all files together", audit.relabel_combined, True))
    rows = []
    for name, e, combined in entries:
        after = e.metrics.get(headline)
        shift = e.shift.get(headline)
        rows.append(
            RelabelRow(
                name=name,
                split=e.split or ", ".join(e.splits),
                matched=e.matched,
                removed=e.removed,
                flipped=e.flipped,
                to_yes=e.flipped_to_yes,
                to_no=e.flipped_to_no,
                added=e.added,
                before=base,
                after=None if after is None else after.macro,
                shift={} if shift is None else dict(shift.macro),
                combined=combined,
            )
        )
    return rows


def _run_view(audit: AuditReport, rundir: Path | None, index: int, label: str) -> RunView:
    facts = _run_facts(rundir) if rundir is not None else _RunFacts()
    header = facts.header
    run = audit.run
    headline = audit.headline
    head = audit.readouts[headline]
    profile = audit.hallucination_profile
    return RunView(
        index=index,
        label=label,
        path=run.path or str(rundir or ""),
        model=run.model,
        backend=run.backend,
        backend_info={} if header is None else dict(header.backend_info),
        logprobs=None if header is None else header.logprob_label,
        template=run.template,
        prompt=facts.prompt,
        created_at=run.created_at,
        n=run.n,
        errors=run.errors,
        complete=run.complete,
        split_sizes=dict(run.splits),
        missing_readouts=list(run.missing_readouts),
        packages=dict(run.packages),
        version=run.halluprobe_version or run.packages.get("halluprobe"),
        benchmarks={} if header is None else dict(header.benchmarks),
        benchmark_paths={} if header is None else dict(header.benchmark_paths),
        seed=None if header is None else header.seed,
        headline=headline,
        policy=audit.policy,
        bootstrap=audit.bootstrap,
        headline_rows=[
            *(MetricsRow(name=s, kind="split", m=m) for s, m in head.splits.items()),
            MetricsRow(name="pooled", kind="pooled", m=head.pooled),
            MetricsRow(name="macro", kind="macro", m=head.macro),
        ],
        readouts=_readout_rows(audit),
        confusion=dict(audit.confusion.get(headline, {})),
        curves=dict(audit.convergence),
        stable_after=dict(audit.stable_after),
        convergence_tol=audit.convergence_rule.tol,
        convergence_metric=audit.convergence_rule.metric,
        p_yes=dict(audit.p_yes),
        calibration=dict(audit.calibration),
        profile_objects=list(profile.objects),
        # the audit ranks by rate, where 1 of 1 comes first; a reader wants the frequent ones
        profile_pairs=sorted(profile.adversarial_pairs, key=lambda p: (-p.yes, -p.rate)),
        tokens=_token_view(audit),
        relabel=_relabel_view(audit),
        agreement=dict(audit.agreement),
        imported=run.imported,
        text_only=text_only(audit),
        headline_note=audit.headline_note,
    )


def text_only(audit: AuditReport) -> bool:
    """A run read from answer text alone: no token sets, no p(yes), no first token stored."""
    return audit.run.token_sets is None and not audit.p_yes and audit.first_pieces_total == 0


def build_view(
    audits: Sequence[AuditReport | Mapping[str, Any]],
    rundirs: Sequence[Path | None],
    comparison: RunComparison | Mapping[str, Any] | None = None,
) -> ReportView:
    """The whole page: one run view per audit, and the leaderboard when there are several."""
    typed = [as_audit(a) for a in audits]
    compared = comparison if comparison is None or isinstance(comparison, RunComparison) else RunComparison.model_validate(comparison)
    labels = [_short_label(a, i) for i, a in enumerate(typed)]
    if compared is not None:
        for i, run in enumerate(compared.runs[: len(labels)]):
            if run.label:
                labels[i] = run.label
    runs = [_run_view(a, d, i, label) for i, (a, d, label) in enumerate(zip(typed, rundirs, _dedupe(labels)))]
    board = _leaderboard(runs, compared) if len(runs) > 1 else None
    first = runs[0] if runs else None
    boot = None if first is None else first.bootstrap
    only_text = bool(runs) and all(r.text_only for r in runs)
    sections = [s for s in SECTIONS if not (only_text and s[0] in LOGIT_SECTIONS)]
    return ReportView(
        title="Leaderboard: " + ", ".join(r.label for r in runs) if board else f"Report: {first.label if first else ''}",
        runs=runs,
        leaderboard=board,
        sections=([LEADERBOARD] if board else []) + sections + ([RELABEL] if any(r.relabel for r in runs) else []),
        headline=first.headline if first else "dynamic",
        policy=first.policy if first else "wrong",
        bootstrap=boot,
        bootstrap_text=_bootstrap_text(boot),
        show_errors=any(r.errors for r in runs),
        any_forced=any(r.muted for run in runs for r in run.readouts),
        version=first.version if first else None,
        text_only=only_text,
        imported_only=bool(runs) and all(r.imported is not None for r in runs),
        scored_by=_halluprobe_version(),
    )


def _halluprobe_version() -> str:

    return __version__


def _bootstrap_text(boot: BootstrapSettings | None) -> str:
    if boot is None:
        return ""
    return f"percentile bootstrap over images ({fmt_count(boot.n_resamples)} resamples, seed {boot.seed})"


def _dedupe(labels: list[str]) -> list[str]:
    """Repeated labels get their occurrence number: ``a``, ``a (2)``."""
    seen: dict[str, int] = {}
    out = []
    for label in labels:
        count = seen.get(label, 0)
        seen[label] = count + 1
        out.append(f"{label} ({count + 1})" if count else label)
    return out


def _leaderboard(runs: list[RunView], comparison: RunComparison | None) -> Leaderboard:
    """Rows ranked by macro F1; the paired test of each run against the reference run.

    With a ``compare_runs`` result the numbers are its own (computed on the questions all runs
    share); without one they fall back to each run's own headline macro, unpaired.
    """
    comp_runs = comparison.runs if comparison is not None else []
    rows = []
    for i, run in enumerate(runs):
        key = comp_runs[i].label if i < len(comp_runs) else run.label
        tables = comparison.table.get(key) if comparison is not None else None
        rows.append(
            LeaderboardRow(
                run=run,
                label=run.label,
                macro=tables.macro if tables is not None else run.metrics_row("macro"),
                pooled=tables.pooled if tables is not None else run.metrics_row("pooled"),
                paired=comparison.paired.get(key) if comparison is not None else None,
            )
        )
    reference = rows[0].label if rows else None
    ranked = sorted(rows, key=lambda r: -(r.macro.f1 or -1.0))
    return Leaderboard(
        rows=[replace(row, rank=rank) for rank, row in enumerate(ranked, start=1)],
        reference=reference,
        common_questions=None if comparison is None else comparison.common_questions,
        readout=comparison.readout if comparison is not None else (runs[0].headline if runs else None),
        paired_available=bool(comparison is not None and comparison.paired),
    )
