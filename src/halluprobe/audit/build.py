"""``audit_run``: one run's audit record, put together from the table, the paired test, the
diagnostics and the relabelling."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from halluprobe.audit.diagnostics import (
    CONVERGENCE_STEP,
    STABLE_TOL,
    agreement,
    calibration,
    convergence_curves,
    greedy,
    hallucination_profile,
    text_vs_dynamic,
    token_diagnostics,
)
from halluprobe.audit.overlap import audit_overlap
from halluprobe.audit.relabel import LabelsFile, labels_spec, relabel
from halluprobe.audit.table import AuditedRun, bootstrap_settings, choose_headline, imported, load_run, score_readout
from halluprobe.benchmarks.question_file import read_questions, refuse_open_questions
from halluprobe.errors import InputError
from halluprobe.metrics.binary import check_policy
from halluprobe.metrics.paired import ImageBootstrap, PairedResult, paired_test
from halluprobe.readouts.logits import LOGIT_READOUTS
from halluprobe.records import RunHeader, UnknownPolicy
from halluprobe.records_audit import (
    AuditReport,
    Calibration,
    ConfusionCounts,
    ConvergenceRule,
    ImportedFile,
    ImportedFrom,
    PairedTest,
    PYesByLabel,
    ReadoutScores,
    Relabel,
    RunInfo,
)
from halluprobe.rundir import RunDir

__all__ = ["P_DECIMALS", "audit_run", "imported_from", "paired_record"]

log = logging.getLogger(__name__)

P_DECIMALS = 4
# the tool whose files each import format reads (the run header records the format)
_FORMAT_TOOLS = {"llava": "LLaVA", "lmms_eval": "lmms-eval", "lmms-eval": "lmms-eval", "vlmevalkit": "VLMEvalKit"}


def paired_record(result: PairedResult, forced: bool | None = None) -> PairedTest:
    """The audit's record of one paired test (``forced`` in the audit only)."""
    return PairedTest(
        forced=forced, n=result.n, mcnemar_p=result.mcnemar_p, b=result.b, c=result.c,
        delta_f1=result.delta_f1, delta_f1_ci=result.delta_f1_ci,
        delta_f1_pooled=result.delta_f1_pooled, delta_f1_pooled_ci=result.delta_f1_pooled_ci,
    )  # fmt: skip


def imported_from(header: RunHeader) -> ImportedFrom | None:
    """What an imported run was made from (``halluprobe import``'s header), else None."""
    if not imported(header):
        return None
    info: dict[str, Any] = header.backend_info
    fmt = str(info.get("format") or header.backend.removeprefix("import:"))
    versions = info.get("pope_version") or {}
    questions = versions.get("questions") if isinstance(versions, dict) else None
    return ImportedFrom(
        format=fmt,
        tool=_FORMAT_TOOLS.get(fmt),
        tool_version=info.get("tool_version") if isinstance(info.get("tool_version"), str) else None,
        files=[ImportedFile(name=Path(path).name, path=path, sha256=str(digest)) for path, digest in (info.get("sources") or {}).items()],
        labels={split: str(path) for split, path in (info.get("labels") or {}).items()},
        pope_versions={split: list(v) for split, v in header.pope_versions.items()},
        question_versions={split: list(v) for split, v in questions.items()} if isinstance(questions, dict) else None,
        tool_readouts={name: str(what) for name, what in (info.get("tool_readouts") or {}).items()},
    )


def _run_info(path: Path, t: AuditedRun) -> RunInfo:
    header = t.header
    sets = header.token_sets
    return RunInfo(
        path=str(path),
        model=header.model,
        backend=header.backend,
        template=header.template,
        halluprobe_version=header.halluprobe_version,
        fingerprint=header.fingerprint,
        created_at=header.created_at,
        packages=dict(header.packages),
        token_sets=sets,
        legacy_valid=None if sets is None else sets.legacy_valid,
        n=t.n,
        answered=int(t.answered.sum()),
        errors=int(t.table.errors.sum()),
        splits={name: int(np.sum(t.table.split_code == i)) for i, name in enumerate(t.splits)},
        complete=RunDir(path).complete_path.exists(),
        readouts=list(t.readouts),
        missing_readouts=[r for r in header.readouts if r not in t.readouts],
        imported=imported_from(header),
        logprobs=header.logprob_label,
    )


def _label_files(t: AuditedRun, labels: Sequence[str | Path]) -> list[LabelsFile]:
    out: list[LabelsFile] = []
    for item in labels:
        split, file, name = labels_spec(item)
        if split not in t.splits:
            raise InputError(f"labels split {split!r} is not in the run (its splits: {', '.join(t.splits)})", file)
        questions = read_questions(file, split=split)
        refuse_open_questions(questions, file)
        out.append(LabelsFile(split, file, name, {q.question_id: q for q in questions}))
    return out


def _p_yes_and_calibration(t: AuditedRun) -> tuple[dict[str, PYesByLabel], dict[str, Calibration]]:
    p_yes: dict[str, PYesByLabel] = {}
    calibrations: dict[str, Calibration] = {}
    labels_yes = t.table.labels_yes
    for r in t.readouts:
        if r not in LOGIT_READOUTS:
            continue
        p = t.table.p_yes[r]
        have = ~np.isnan(p)
        if not have.any():
            continue
        p_yes[r] = PYesByLabel(
            yes=[round(float(v), P_DECIMALS) for v in p[have & labels_yes]],
            no=[round(float(v), P_DECIMALS) for v in p[have & ~labels_yes]],
        )
        calibrations[r] = calibration(labels_yes, p)
    return p_yes, calibrations


def audit_run(
    rundir: str | Path,
    *,
    headline: str | None = None,
    labels: Sequence[str | Path] = (),
    policy: UnknownPolicy = "wrong",
    n_resamples: int = 1000,
    seed: int = 0,
    top: int = 20,
) -> AuditReport:
    """The audit of one run directory (see ``halluprobe.audit``, ``records_audit.AuditReport``
    and ``docs/design/audit.md`` for every field). ``headline`` None: ``dynamic``, or where the
    run has none the readout it names itself (``audit.headline_note`` says which and why).
    Deterministic: the same arguments and run give the same record, and ``RunDir.write_audit``
    the same bytes. Raises InputError on a missing or empty run, an unknown or invalid headline,
    or a labels file that cannot be read or names a split the run does not have."""
    policy = check_policy(policy)
    if n_resamples < 0:
        raise InputError(f"n_resamples must be >= 0, got {n_resamples}")
    if top < 1:
        raise InputError(f"top must be >= 1, got {top}")
    path = Path(rundir)
    t = load_run(path)
    headline, note = choose_headline(t, headline)
    if headline not in t.readouts:
        raise InputError(f"headline readout {headline!r} is not in this run; it has: {', '.join(t.readouts)}", path)
    if not t.valid(headline):
        raise InputError(
            f"headline readout {headline} reads LLaMA-2 ids that are not yes/no in this model's vocabulary; "
            "choose another headline (the audit shows it anyway, marked as forced)",
            path,
        )
    if note is not None:
        log.info("%s: %s", path, note)
    label_files = _label_files(t, labels)

    log.info("auditing %s: %d samples, %d readouts", path, t.n, len(t.readouts))
    table = t.table
    readouts: dict[str, ReadoutScores] = {}
    confusion: dict[str, dict[str, ConfusionCounts]] = {}
    for r in t.readouts:
        report = score_readout(t, r, policy=policy, n_resamples=n_resamples, seed=seed)
        valid = t.valid(r)
        readouts[r] = ReadoutScores(valid=valid, forced=not valid, splits=report.splits, pooled=report.pooled, macro=report.macro)
        confusion[r] = {
            split: ConfusionCounts(tp=m.tp, fp=m.fp, tn=m.tn, fn=m.fn, unknown=m.unknown) for split, m in report.splits.items()
        }

    # the paired tests are over the answered questions; one set of image weights serves them all
    answered = table.subset(t.answered)
    boot = ImageBootstrap(answered, n_resamples=n_resamples, seed=seed)
    paired: dict[str, PairedTest] = {}
    for r in t.readouts:
        if r != headline:
            result = paired_test(boot, answered.decisions[r], answered.decisions[headline], policy)
            paired[r] = paired_record(result, forced=not t.valid(r))

    curves, stable = convergence_curves(t, policy)
    p_yes, calibrations = _p_yes_and_calibration(t)

    relabelled: dict[str, Relabel] = {}
    combined: Relabel | None = None
    if label_files:
        rescore = [r for r in t.readouts if t.valid(r)]
        for split, file, name, new in label_files:
            relabelled[name] = relabel(
                t, [LabelsFile(split, file, name, new)], rescore, readouts,
                policy=policy, n_resamples=n_resamples, seed=seed, file=str(file), split=split,
            )  # fmt: skip
        splits = [split for split, _, _, _ in label_files]
        if len(label_files) > 1 and len(set(splits)) == len(splits):  # RePOPE: one file per split, together
            combined = relabel(
                t, label_files, rescore, readouts,
                policy=policy, n_resamples=n_resamples, seed=seed, names=[name for _, _, name, _ in label_files],
            )  # fmt: skip

    tokens = token_diagnostics(t, top)
    return AuditReport(
        run=_run_info(path, t),
        headline=headline,
        policy=policy,
        bootstrap=bootstrap_settings(n_resamples, seed),
        readouts=readouts,
        paired=paired,
        agreement=agreement(t),
        offset_rate=tokens.offset_rate,
        offset_pieces=tokens.offset_pieces,
        first_pieces=tokens.first_pieces,
        first_pieces_total=tokens.first_pieces_total,
        first_pieces_distinct=tokens.first_pieces_distinct,
        greedy=greedy(t),
        text_dynamic_disagreements=text_vs_dynamic(t),
        convergence=curves,
        stable_after=stable,
        convergence_rule=ConvergenceRule(step=CONVERGENCE_STEP, metric="pooled f1", tol=STABLE_TOL),
        hallucination_profile=hallucination_profile(t, headline, top),
        confusion=confusion,
        p_yes=p_yes,
        calibration=calibrations,
        relabel=relabelled,
        relabel_combined=combined,
        headline_note=note,
        training_overlap=audit_overlap(t, headline, policy=policy, n_resamples=n_resamples, seed=seed),
    )
