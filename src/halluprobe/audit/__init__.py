"""Audit a run: how the measurement itself moves the numbers (readouts, tokens, labels, order).

``audit_run`` reads a run directory (``run.json`` + ``samples.jsonl``) and never the model. It
puts every readout side by side (invalid legacy readouts computed anyway, marked as forced),
tests each against the headline readout on the same questions, measures agreement between
readouts, diagnoses the first token, follows F1 as questions accumulate, profiles which absent
objects get "yes", and rescores the stored answers against alternative label files.
``compare_runs`` does the paired comparison between runs over the same questions. The results are
typed records (``records.AuditReport``, ``records.RunComparison``); ``RunDir.write_audit``
stores the audit as ``audit.json``.

Nothing here computes a metric of its own: per-split / pooled / macro metrics and their CIs come
from :func:`halluprobe.metrics.score.score_rows`; McNemar, percentile CIs, ECE, convergence and
``stable_after`` from :mod:`halluprobe.metrics.stats`; a replicate's F1 from the same count
folding (:mod:`halluprobe.metrics.binary`) that ``score_rows`` uses. The paired F1-difference
bootstrap is vectorised (per-image counts times a replicate's image weights) and draws images
through the same seeded generator as every other bootstrap here, so it equals
:func:`halluprobe.metrics.stats.paired_bootstrap_diff` with a macro-F1 statistic.

Conventions (the design note ``docs/design/audit.md`` says why):

- "answered" = a sample without ``error``; a readout missing from an answered sample is
  ``unknown`` (as ``score``).
- Paired comparisons are over questions answered by both sides; the unknown policy maps an
  unknown decision before "correct" is decided (``wrong``: never correct; ``drop``: a question
  either side leaves unknown is dropped from that pair). ``b`` = the readout (or run) right and
  the reference wrong, ``c`` the reverse; ``delta_f1`` = readout minus reference. The headline
  is not compared with itself (absent from ``paired``).
- Label files for ``relabel`` are POPE-format; ``*_pope_{split}.json`` and
  ``*_repope_{split}.json`` (RePOPE) give ``{split}``, ``SPLIT=FILE`` names it explicitly.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from halluprobe.benchmarks.pope import read_questions, refuse_open_questions, split_name
from halluprobe.errors import InputError
from halluprobe.formatting import format_ci, format_ratio
from halluprobe.metrics.binary import (
    N_RAW,
    METRIC_NAMES,
    UnknownPolicy,
    categorize,
    check_policy,
    counts_from_raw,
    fold_counts,
    ratio_arrays,
    metrics_from_counts,
)
from halluprobe.metrics.score import ScoreRow, score_rows
from halluprobe.metrics.stats import (
    draw_blocks,
    draw_weights,
    convergence,
    expected_calibration_error,
    mcnemar_exact,
    percentile_ci,
    stable_after,
)
from halluprobe.readouts.logits import LEGACY_READOUTS, LOGIT_READOUTS
from halluprobe.readouts.tokensets import greedy_answer
from halluprobe.records import Question, QuestionKey, RunHeader, Sample, ScoreReport
from halluprobe.records_audit import (
    AUDIT_SCHEMA_VERSION,
    AuditReport,
    BootstrapSettings,
    Calibration,
    CalibrationBin,
    ComparedRun,
    ConfusionCounts,
    ConvergenceRule,
    CurvePoint,
    GreedyAgreement,
    HallucinationProfile,
    MetricShift,
    ObjectRate,
    PairedTest,
    PairRate,
    PieceCount,
    PieceShare,
    PYesByLabel,
    ReadoutScores,
    Relabel,
    RunComparison,
    RunDifferences,
    RunInfo,
    ScoreTables,
    TextDynamicDisagreement,
)
from halluprobe.rundir import AUDIT, RunDir
from halluprobe.scoring import readout_results

__all__ = [
    "AUDIT_FILE",
    "AUDIT_SCHEMA_VERSION",
    "audit_run",
    "compare_runs",
    "summarise_audit",
    "write_audit",
]

log = logging.getLogger(__name__)

AUDIT_FILE = AUDIT  # kept for callers that import it from here

_LEVEL = 0.95
_CONVERGENCE_STEP = 100
_STABLE_TOL = 0.005
_CALIBRATION_BINS = 10  # the binning of stats.expected_calibration_error's default
_P_DECIMALS = 4
# shift reports these (ratio metrics plus the p_yes ones)
_SHIFT_METRICS: tuple[str, ...] = (*METRIC_NAMES, "auroc", "ece")
_LABELS_SPLIT_RE = re.compile(r"^.+_(?:re)?pope_(\w[\w-]*)\.jsonl?$")


# ---------------------------------------------------------------------------------------------
# the per-sample table


@dataclass(frozen=True)
class _Table:
    """One run's samples as columns, in run order (samples.jsonl order)."""

    header: RunHeader
    samples: list[Sample]
    readouts: list[str]  # readouts present in at least one sample, header order
    splits: list[str]  # order of first appearance
    split_code: np.ndarray
    labels_yes: np.ndarray
    errors: np.ndarray
    decisions: dict[str, np.ndarray]  # readout -> object array of "yes" / "no" / "unknown"
    p_yes: dict[str, np.ndarray]  # readout -> float array, NaN where missing or errored

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def answered(self) -> np.ndarray:
        return ~self.errors

    def valid(self, readout: str) -> bool:
        sets = self.header.token_sets
        return not (readout in LEGACY_READOUTS and sets is not None and not sets.legacy_valid)


def _load(path: str | Path) -> _Table:
    rundir = RunDir(path)
    header = rundir.read_yes_no_header()
    samples = rundir.read_samples()
    if not samples:
        raise InputError("the run has no samples yet", rundir.samples_path)
    if not rundir.complete_path.exists():
        log.warning("%s is not complete: auditing the %d samples present", rundir.path, len(samples))
    return _table(header, samples)


def _table(header: RunHeader, samples: list[Sample]) -> _Table:
    # readouts applied at score time (readouts.apply), cross-checked against stored decisions
    results = {r: readout_results(r, header, samples) for r in _audited_readouts(header, samples)}
    readouts = [r for r, res in results.items() if any(x is not None for x in res)]
    missing = [r for r in header.readouts if r not in readouts]
    if missing:
        log.info("readouts listed in run.json but in no sample (left out): %s", ", ".join(missing))
    splits = list(dict.fromkeys(s.split for s in samples))
    index = {name: i for i, name in enumerate(splits)}
    decisions: dict[str, np.ndarray] = {}
    p_yes: dict[str, np.ndarray] = {}
    for r in readouts:
        dec = np.empty(len(samples), dtype=object)
        prob = np.full(len(samples), np.nan)
        for i, (s, result) in enumerate(zip(samples, results[r])):
            dec[i] = result.decision if result is not None else "unknown"
            if result is not None and result.p_yes is not None and s.error is None:
                prob[i] = result.p_yes
        decisions[r] = dec
        p_yes[r] = prob
    return _Table(
        header=header,
        samples=samples,
        readouts=readouts,
        splits=splits,
        split_code=np.array([index[s.split] for s in samples], dtype=np.int64),
        labels_yes=np.array([s.label == "yes" for s in samples], dtype=bool),
        errors=np.array([s.error is not None for s in samples], dtype=bool),
        decisions=decisions,
        p_yes=p_yes,
    )


def _audited_readouts(header: RunHeader, samples: list[Sample]) -> list[str]:
    """The readouts the run was made for (its header's list, in order), then stored-only ones
    (another tool's rule kept with imported answers). Every text rule can be scored with
    ``score``; the audit keeps the run's own list so its tables do not change shape."""
    stored = [r for r in dict.fromkeys(name for s in samples for name in s.readouts) if r not in header.readouts]
    return [*header.readouts, *sorted(stored)]


def _rows(samples: Sequence[Sample], decisions: np.ndarray, p_yes: np.ndarray, labels: Sequence[str] | None = None) -> list[ScoreRow]:
    """ScoreRows of one readout (``labels`` replaces the samples' labels when relabelling)."""
    probs = p_yes.tolist()  # plain floats: per-element numpy scalars cost more than the rows
    return [
        ScoreRow(
            split=s.split,
            question_id=s.question_id,
            image=s.image,
            label=(labels[i] if labels is not None else s.label),  # type: ignore[arg-type]
            decision=decisions[i],
            p_yes=None if probs[i] != probs[i] else probs[i],  # NaN != NaN: missing
            error=s.error is not None,
        )
        for i, s in enumerate(samples)
    ]


def _tables(report: ScoreReport) -> ScoreTables:
    return ScoreTables(splits=report.splits, pooled=report.pooled, macro=report.macro)


def _bootstrap(n_resamples: int, seed: int) -> BootstrapSettings:
    return BootstrapSettings(n_resamples=n_resamples, seed=seed, level=_LEVEL, unit="image", method="percentile")


# ---------------------------------------------------------------------------------------------
# paired comparisons


def _effective(decisions: np.ndarray, policy: UnknownPolicy) -> np.ndarray:
    """Decisions after the policy maps unknowns (``wrong`` / ``drop`` keep them unknown)."""
    if policy in ("yes", "no"):
        return np.where(decisions == "unknown", policy, decisions)
    return decisions


def _correct(decisions: np.ndarray, labels_yes: np.ndarray, policy: UnknownPolicy) -> np.ndarray:
    dec = _effective(decisions, policy)
    return ((dec == "yes") & labels_yes) | ((dec == "no") & ~labels_yes)


class _PairedBootstrap:
    """Paired macro/pooled F1 differences over one set of rows, images resampled once.

    ``rows`` selects the rows (answered by both sides); the clusters are their images. The
    replicate weights are drawn once, through the same ``draw_blocks`` as every bootstrap in
    halluprobe, and reused for every pair compared on these rows.
    """

    def __init__(
        self,
        images: Sequence[str],
        split_code: np.ndarray,
        labels_yes: np.ndarray,
        *,
        policy: UnknownPolicy,
        n_resamples: int,
        seed: int,
    ) -> None:
        _, codes = np.unique(np.asarray(images, dtype=str), return_inverse=True)
        self.image_code = codes.reshape(-1).astype(np.int64)
        self.n_images = int(self.image_code.max()) + 1 if self.image_code.size else 0
        self.split_code = split_code
        self.labels = np.where(labels_yes, "yes", "no")
        self.policy = policy
        self.weights: list[np.ndarray] = []
        if n_resamples > 0 and self.n_images > 0:
            rng = np.random.default_rng(seed)
            self.weights = [draw_weights(d, self.n_images) for d in draw_blocks(rng, self.n_images, n_resamples)]

    def _per_image(self, decisions: np.ndarray, keep: np.ndarray) -> dict[int, np.ndarray]:
        cats = categorize(self.labels[keep], decisions[keep], None)
        cells = self.image_code[keep] * N_RAW + cats
        codes = self.split_code[keep]
        return {
            int(s): np.bincount(cells[codes == s], minlength=self.n_images * N_RAW).reshape(self.n_images, N_RAW)
            for s in np.unique(codes)
        }

    def _f1(self, raw: np.ndarray) -> np.ndarray:
        return ratio_arrays(fold_counts(raw, self.policy), self.policy)["f1"]

    def _macro_pooled(self, per_image: dict[int, np.ndarray], weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # macro: the mean over splits, NaN (so skipped by percentile_ci) where a split's F1 is undefined
        by_split = [self._f1(weights @ counts) for counts in per_image.values()]
        pooled = self._f1(weights @ np.sum(list(per_image.values()), axis=0))
        return np.mean(by_split, axis=0), pooled

    def diff(self, dec_a: np.ndarray, dec_b: np.ndarray, keep: np.ndarray) -> dict[str, Any]:
        """A minus B: delta macro / pooled F1 with percentile CIs, over the rows in ``keep``
        (the ``delta_*`` fields of a ``PairedTest``)."""
        if not keep.any():
            return {"delta_f1": None, "delta_f1_ci": None, "delta_f1_pooled": None, "delta_f1_pooled_ci": None}
        a, b = self._per_image(dec_a, keep), self._per_image(dec_b, keep)
        ones = np.ones((1, self.n_images))
        (ma, pa), (mb, pb) = self._macro_pooled(a, ones), self._macro_pooled(b, ones)
        macro_reps, pooled_reps = [], []
        for w in self.weights:
            (ra, qa), (rb, qb) = self._macro_pooled(a, w), self._macro_pooled(b, w)
            macro_reps.append(ra - rb)
            pooled_reps.append(qa - qb)

        def ci(reps: list[np.ndarray]) -> tuple[float, float] | None:
            return percentile_ci(np.concatenate(reps), _LEVEL) if reps else None

        return {
            "delta_f1": _num(ma[0] - mb[0]),
            "delta_f1_ci": ci(macro_reps),
            "delta_f1_pooled": _num(pa[0] - pb[0]),
            "delta_f1_pooled_ci": ci(pooled_reps),
        }


def _paired_entry(
    boot: _PairedBootstrap,
    dec_a: np.ndarray,
    dec_b: np.ndarray,
    labels_yes: np.ndarray,
    policy: UnknownPolicy,
    forced: bool | None = None,
) -> PairedTest:
    keep = np.ones(dec_a.shape, dtype=bool)
    if policy == "drop":  # over the same questions: one side's unknown drops the question for both
        keep = (dec_a != "unknown") & (dec_b != "unknown")
    test = mcnemar_exact(_correct(dec_a[keep], labels_yes[keep], policy), _correct(dec_b[keep], labels_yes[keep], policy))
    return PairedTest(
        forced=forced, n=test.n, mcnemar_p=test.p_value, b=test.b, c=test.c, **boot.diff(dec_a, dec_b, keep)
    )


# ---------------------------------------------------------------------------------------------
# diagnostics


def _num(value: Any) -> float | None:
    """A plain float, or None for NaN / None (JSON has no NaN)."""
    if value is None:
        return None
    value = float(value)
    return None if np.isnan(value) else value


def _frac(num: int, den: int) -> float | None:
    return num / den if den else None


def _ranked(counter: Counter[str], top: int) -> list[tuple[str, int]]:
    return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:top]


@dataclass(frozen=True)
class _TokenDiagnostics:
    """The first-token fields of the audit (flat in ``audit.json``)."""

    offset_rate: float | None
    offset_pieces: list[PieceCount]
    first_pieces: list[PieceShare]
    first_pieces_total: int
    first_pieces_distinct: int


def _agreement(t: _Table) -> dict[str, dict[str, float | None]]:
    ans = t.answered
    n = int(ans.sum())
    return {
        a: {b: _frac(int(np.sum(t.decisions[a][ans] == t.decisions[b][ans])), n) for b in t.readouts}
        for a in t.readouts
    }


def _token_diagnostics(t: _Table, top: int) -> _TokenDiagnostics:
    answered = [s for s in t.samples if s.error is None]
    offset = Counter(s.offset_argmax for s in answered if s.offset_argmax is not None)
    with_token = [s for s in answered if s.first_token]
    first = Counter(s.first_token[0].piece for s in with_token)
    return _TokenDiagnostics(
        # None when no sample stored first-token outputs (an imported or text-only run)
        offset_rate=_frac(sum(offset.values()), len(answered)) if with_token or offset else None,
        offset_pieces=[PieceCount(piece, count) for piece, count in _ranked(offset, top)],
        first_pieces=[PieceShare(piece, count, count / len(with_token)) for piece, count in _ranked(first, top)],
        first_pieces_total=len(with_token),
        first_pieces_distinct=len(first),
    )


def _greedy(t: _Table) -> dict[str, GreedyAgreement]:
    """Each logit readout against the greedy first token (its id in the run's yes / no set).

    ``offset``: the argmax is in neither set (no greedy yes/no to compare); ``disagree``: the
    argmax is in a set and the readout decides otherwise (for ``dynamic``, the other set's
    variants together outweigh it: a near tie).
    """
    sets = t.header.token_sets
    if sets is None:
        return {}
    greedy = [
        greedy_answer(s.first_token[0], sets) if (s.error is None and s.first_token) else None for s in t.samples
    ]
    out: dict[str, GreedyAgreement] = {}
    for r in t.readouts:
        if r not in LOGIT_READOUTS:
            continue
        in_set = agree = offset = 0
        for i, g in enumerate(greedy):
            if t.errors[i]:
                continue
            if g is None:
                offset += 1
                continue
            in_set += 1
            agree += int(t.decisions[r][i] == g)
        out[r] = GreedyAgreement(in_set=in_set, agree=agree, disagree=in_set - agree, offset=offset)
    return out


def _text_vs_dynamic(t: _Table) -> dict[str, TextDynamicDisagreement]:
    if "dynamic" not in t.decisions:
        return {}
    ans = t.answered
    dyn = t.decisions["dynamic"][ans]
    out: dict[str, TextDynamicDisagreement] = {}
    for r in t.readouts:
        if not r.startswith("text:"):
            continue
        txt = t.decisions[r][ans]
        txt_known, dyn_known = txt != "unknown", dyn != "unknown"
        out[r.removeprefix("text:")] = TextDynamicDisagreement(
            n=int(ans.sum()),
            differ=int(np.sum(txt_known & dyn_known & (txt != dyn))),
            text_unknown=int(np.sum(~txt_known & dyn_known)),
            dynamic_unknown=int(np.sum(txt_known & ~dyn_known)),
            both_unknown=int(np.sum(~txt_known & ~dyn_known)),
        )
    return out


def _convergence(t: _Table, policy: UnknownPolicy) -> tuple[dict[str, list[CurvePoint]], dict[str, int | None]]:
    """Pooled F1 after the first k samples in run order (k = 100, 200, ..., n)."""
    labels = np.where(t.labels_yes, "yes", "no")
    curves: dict[str, list[CurvePoint]] = {}
    stable: dict[str, int | None] = {}
    for r in t.readouts:
        cats = categorize(labels, t.decisions[r], t.errors)
        cum = np.cumsum(np.eye(N_RAW, dtype=np.int64)[cats], axis=0)  # raw counts after each sample

        def f1_after(k: int, cum: np.ndarray = cum) -> float | None:
            return metrics_from_counts(counts_from_raw(cum[k - 1], policy))["f1"]

        curve = convergence(f1_after, t.n, step=_CONVERGENCE_STEP)
        curves[r] = [CurvePoint(k, value) for k, value in curve]
        stable[r] = stable_after(curve, curve[-1][1], tol=_STABLE_TOL)
    return curves, stable


def _profile(t: _Table, readout: str, top: int) -> HallucinationProfile:
    """Which absent objects get "yes" from ``readout``; adversarial negatives by their positive."""
    dec = t.decisions[readout]
    yes: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for i, s in enumerate(t.samples):
        if s.label == "no" and s.error is None:
            obj = s.object or "(unknown object)"
            total[obj] += 1
            yes[obj] += int(dec[i] == "yes")
    objects = [
        ObjectRate(object=o, yes=yes[o], n=total[o], rate=yes[o] / total[o])
        for o in sorted(total, key=lambda o: (-yes[o] / total[o], -yes[o], o))
    ][:top]

    # adversarial: each negative pairs with the positive asked just before it about the same image
    pair_yes: Counter[tuple[str, str]] = Counter()
    pair_n: Counter[tuple[str, str]] = Counter()
    unpaired = 0
    adversarial = sorted((s.question_id, i) for i, s in enumerate(t.samples) if s.split == "adversarial")
    last_positive: dict[str, str] = {}
    for _, i in adversarial:
        s = t.samples[i]
        obj = s.object or "(unknown object)"
        if s.label == "yes":
            last_positive[s.image] = obj
            continue
        if s.error is not None:
            continue
        positive = last_positive.get(s.image)
        if positive is None:
            unpaired += 1
            continue
        pair_n[(positive, obj)] += 1
        pair_yes[(positive, obj)] += int(dec[i] == "yes")
    pairs = [
        PairRate(positive=p, negative=q, yes=pair_yes[(p, q)], n=pair_n[(p, q)], rate=pair_yes[(p, q)] / pair_n[(p, q)])
        # by yes count first: a pair seen once and answered yes once is not the top finding
        for p, q in sorted(pair_n, key=lambda k: (-pair_yes[k], -pair_yes[k] / pair_n[k], k))
    ][:top]
    return HallucinationProfile(
        readout=readout,
        absent_questions=sum(total.values()),
        absent_yes=sum(yes.values()),
        objects=objects,
        adversarial_pairs=pairs,
        adversarial_unpaired=unpaired,
    )


def _calibration(labels_yes: np.ndarray, p: np.ndarray) -> Calibration:
    have = ~np.isnan(p)
    y, q = labels_yes[have], p[have]
    bins = np.minimum((q * _CALIBRATION_BINS).astype(np.int64), _CALIBRATION_BINS - 1)
    out: list[CalibrationBin] = []
    for b in range(_CALIBRATION_BINS):
        inside = bins == b
        count = int(inside.sum())
        out.append(
            CalibrationBin(
                lo=b / _CALIBRATION_BINS,
                hi=(b + 1) / _CALIBRATION_BINS,
                count=count,
                mean_p=float(q[inside].mean()) if count else None,
                frac_yes=float(y[inside].mean()) if count else None,
            )
        )
    return Calibration(n=int(have.sum()), bins=out, ece=expected_calibration_error(y, q, n_bins=_CALIBRATION_BINS))


# ---------------------------------------------------------------------------------------------
# relabelling


def _labels_spec(item: str | Path) -> tuple[str, Path, str]:
    """(split, path, name as given) from ``FILE`` or ``SPLIT=FILE``."""
    text = str(item)
    if "=" in text and not Path(text).exists():
        split, _, file = text.partition("=")
        if split and file:
            return split, Path(file), text
    path = Path(text)
    match = _LABELS_SPLIT_RE.match(path.name)
    return (match.group(1) if match else split_name(path)), path, text


def _relabel(
    t: _Table,
    files: list[tuple[str, Path, str, dict[int, Question]]],
    readouts: list[str],
    base: dict[str, ReadoutScores],
    *,
    policy: UnknownPolicy,
    n_resamples: int,
    seed: int,
    file: str | None = None,
    split: str | None = None,
    names: list[str] | None = None,
) -> Relabel:
    """Rescore the stored answers with the splits of ``files`` relabelled (other splits as stored).

    ``file`` and ``split`` name the one file of a per-file entry, ``names`` the files of the
    combined entry."""
    relabelled = {split: new for split, _, _, new in files}
    keep = np.ones(t.n, dtype=bool)
    labels = [s.label for s in t.samples]
    matched = removed = flipped = to_yes = to_no = images = 0
    for i, s in enumerate(t.samples):
        new = relabelled.get(s.split)
        if new is None:
            continue
        q = new.get(s.question_id)
        if q is None:
            keep[i] = False
            removed += 1
            continue
        matched += 1
        images += int(q.image != s.image)
        if q.label != s.label:
            flipped += 1
            to_yes += int(q.label == "yes")
            to_no += int(q.label == "no")
            labels[i] = q.label
    in_run = {s.key for s in t.samples}
    added = sum(1 for split, _, _, new in files for qid in new if (split, qid) not in in_run)
    if images:
        log.warning("%d relabelled questions name another image than the run's (matched by id anyway)", images)
    idx = np.flatnonzero(keep)
    samples = [t.samples[i] for i in idx]
    kept_labels = [labels[i] for i in idx]
    metrics: dict[str, ScoreTables] = {}
    shift: dict[str, MetricShift] = {}
    if samples:
        for r in readouts:
            report = score_rows(
                _rows(samples, t.decisions[r][idx], t.p_yes[r][idx], kept_labels),
                readout=r, policy=policy, n_resamples=n_resamples, seed=seed,
            )  # fmt: skip
            metrics[r] = _tables(report)
            shift[r] = MetricShift(
                macro={m: _delta(getattr(report.macro, m), getattr(base[r].macro, m)) for m in _SHIFT_METRICS},
                pooled={m: _delta(getattr(report.pooled, m), getattr(base[r].pooled, m)) for m in _SHIFT_METRICS},
            )
    return Relabel(
        file=file,
        split=split,
        files=names,
        splits=sorted(relabelled),
        matched=matched,
        removed=removed,
        flipped=flipped,
        flipped_to_yes=to_yes,
        flipped_to_no=to_no,
        added=added,
        image_mismatches=images,
        metrics=metrics,
        shift=shift,
    )


def _delta(new: float | None, old: float | None) -> float | None:
    return None if new is None or old is None else new - old


# ---------------------------------------------------------------------------------------------
# the audit


def audit_run(
    rundir: str | Path,
    *,
    headline: str = "dynamic",
    labels: Sequence[str | Path] = (),
    policy: UnknownPolicy = "wrong",
    n_resamples: int = 1000,
    seed: int = 0,
    top: int = 20,
) -> AuditReport:
    """The audit of one run directory (see the module docstring, ``records.AuditReport`` and
    ``docs/design/audit.md`` for every field). Deterministic: the same arguments and run give
    the same record, and ``RunDir.write_audit`` the same bytes. Raises InputError on a missing or empty run, an unknown or invalid headline,
    or a labels file that cannot be read or names a split the run does not have."""
    policy = check_policy(policy)
    if n_resamples < 0:
        raise InputError(f"n_resamples must be >= 0, got {n_resamples}")
    if top < 1:
        raise InputError(f"top must be >= 1, got {top}")
    path = Path(rundir)
    t = _load(path)
    header = t.header
    if headline not in t.readouts:
        raise InputError(f"headline readout {headline!r} is not in this run; it has: {', '.join(t.readouts)}", path)
    if not t.valid(headline):
        raise InputError(
            f"headline readout {headline} reads LLaMA-2 ids that are not yes/no in this model's vocabulary; "
            "choose another headline (the audit shows it anyway, marked as forced)",
            path,
        )
    label_files: list[tuple[str, Path, str, dict[int, Question]]] = []
    for item in labels:
        split, file, name = _labels_spec(item)
        if split not in t.splits:
            raise InputError(f"labels split {split!r} is not in the run (its splits: {', '.join(t.splits)})", file)
        questions = read_questions(file, split=split)
        refuse_open_questions(questions, file)
        label_files.append((split, file, name, {q.question_id: q for q in questions}))

    log.info("auditing %s: %d samples, %d readouts", path, t.n, len(t.readouts))
    readouts: dict[str, ReadoutScores] = {}
    confusion: dict[str, dict[str, ConfusionCounts]] = {}
    for r in t.readouts:
        report = score_rows(
            _rows(t.samples, t.decisions[r], t.p_yes[r]), readout=r, policy=policy, n_resamples=n_resamples, seed=seed
        )
        valid = t.valid(r)
        readouts[r] = ReadoutScores(valid=valid, forced=not valid, splits=report.splits, pooled=report.pooled, macro=report.macro)
        confusion[r] = {
            split: ConfusionCounts(tp=m.tp, fp=m.fp, tn=m.tn, fn=m.fn, unknown=m.unknown) for split, m in report.splits.items()
        }

    ans = t.answered
    samples_ans = [s for s in t.samples if s.error is None]
    boot = _PairedBootstrap(
        [s.image for s in samples_ans], t.split_code[ans], t.labels_yes[ans],
        policy=policy, n_resamples=n_resamples, seed=seed,
    )  # fmt: skip
    paired: dict[str, PairedTest] = {}
    for r in t.readouts:
        if r == headline:
            continue
        paired[r] = _paired_entry(
            boot, t.decisions[r][ans], t.decisions[headline][ans], t.labels_yes[ans], policy, forced=not t.valid(r)
        )

    curves, stable = _convergence(t, policy)
    p_yes: dict[str, PYesByLabel] = {}
    calibration: dict[str, Calibration] = {}
    for r in t.readouts:
        if r not in LOGIT_READOUTS:
            continue
        p = t.p_yes[r]
        have = ~np.isnan(p)
        if not have.any():
            continue
        p_yes[r] = PYesByLabel(
            yes=[round(float(v), _P_DECIMALS) for v in p[have & t.labels_yes]],
            no=[round(float(v), _P_DECIMALS) for v in p[have & ~t.labels_yes]],
        )
        calibration[r] = _calibration(t.labels_yes, p)

    relabel: dict[str, Relabel] = {}
    combined: Relabel | None = None
    if label_files:
        rescore = [r for r in t.readouts if t.valid(r)]
        for split, file, name, new in label_files:
            relabel[name] = _relabel(
                t, [(split, file, name, new)], rescore, readouts,
                policy=policy, n_resamples=n_resamples, seed=seed, file=str(file), split=split,
            )  # fmt: skip
        splits = [split for split, _, _, _ in label_files]
        if len(label_files) > 1 and len(set(splits)) == len(splits):  # RePOPE: one file per split, together
            combined = _relabel(
                t, label_files, rescore, readouts,
                policy=policy, n_resamples=n_resamples, seed=seed, names=[name for _, _, name, _ in label_files],
            )  # fmt: skip

    sets = header.token_sets
    tokens = _token_diagnostics(t, top)
    return AuditReport(
        run=RunInfo(
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
            answered=int(ans.sum()),
            errors=int(t.errors.sum()),
            splits={name: int(np.sum(t.split_code == i)) for i, name in enumerate(t.splits)},
            complete=RunDir(path).complete_path.exists(),
            readouts=list(t.readouts),
            missing_readouts=[r for r in header.readouts if r not in t.readouts],
        ),
        headline=headline,
        policy=policy,
        bootstrap=_bootstrap(n_resamples, seed),
        readouts=readouts,
        paired=paired,
        agreement=_agreement(t),
        offset_rate=tokens.offset_rate,
        offset_pieces=tokens.offset_pieces,
        first_pieces=tokens.first_pieces,
        first_pieces_total=tokens.first_pieces_total,
        first_pieces_distinct=tokens.first_pieces_distinct,
        greedy=_greedy(t),
        text_dynamic_disagreements=_text_vs_dynamic(t),
        convergence=curves,
        stable_after=stable,
        convergence_rule=ConvergenceRule(step=_CONVERGENCE_STEP, metric="pooled f1", tol=_STABLE_TOL),
        hallucination_profile=_profile(t, headline, top),
        confusion=confusion,
        p_yes=p_yes,
        calibration=calibration,
        relabel=relabel,
        relabel_combined=combined,
    )


def write_audit(rundir: str | Path, audit: AuditReport) -> Path:
    """Write ``RUNDIR/audit.json`` atomically: ``RunDir(rundir).write_audit(audit)`` for callers
    that hold a path (the CLI)."""
    return RunDir(rundir).write_audit(audit)


# ---------------------------------------------------------------------------------------------
# several runs


def _run_labels(headers: list[RunHeader], paths: list[Path]) -> tuple[list[str], RunDifferences]:
    """Short distinguishing names: what differs (model, template, both), else the dir name."""
    models = [h.model for h in headers]
    templates = [h.template for h in headers]
    differs = RunDifferences(model=len(set(models)) > 1, template=len(set(templates)) > 1)
    names = []
    for h, p in zip(headers, paths):
        parts = []
        if differs.model:
            parts.append(Path(h.model).name or h.model)
        if differs.template:
            parts.append(h.template)
        names.append(" | ".join(parts) or p.name or str(p))
    if len(set(names)) < len(names):  # e.g. two models with the same folder name
        names = [f"{n} ({p.name or p})" if names.count(n) > 1 and n != (p.name or str(p)) else n for n, p in zip(names, paths)]
    if len(set(names)) < len(names):
        names = [f"{n} #{i + 1}" for i, n in enumerate(names)]
    return names, differs


def compare_runs(
    rundirs: Sequence[str | Path],
    *,
    readout: str = "dynamic",
    policy: UnknownPolicy = "wrong",
    n_resamples: int = 1000,
    seed: int = 0,
) -> RunComparison:
    """Several runs over the same questions (differing in prompt template or model), one readout.

    ``table``: each run's metrics over the questions every run has; ``paired``: each later run
    against the first over the questions both answered (McNemar, delta F1 = run minus first with
    a paired image bootstrap). Raises InputError for fewer than two runs, a readout a run lacks,
    runs that share no question, or runs that disagree on a shared question's label.
    """
    policy = check_policy(policy)
    paths = [Path(p) for p in rundirs]
    if len(paths) < 2:
        raise InputError("compare needs at least two run directories")
    tables = [_load(p) for p in paths]
    for p, t in zip(paths, tables):
        if readout not in t.readouts:
            raise InputError(f"readout {readout!r} is not in this run; it has: {', '.join(t.readouts)}", p)
    headers = [t.header for t in tables]
    names, differs = _run_labels(headers, paths)
    index = [{s.key: i for i, s in enumerate(t.samples)} for t in tables]
    common: list[QuestionKey] = [k for k in index[0] if all(k in other for other in index[1:])]
    if not common:
        raise InputError(f"the runs share no question ({', '.join(str(p) for p in paths)})")
    first = tables[0]
    for p, t, idx in zip(paths[1:], tables[1:], index[1:]):
        for k in common:
            if t.samples[idx[k]].label != first.samples[index[0][k]].label:
                raise InputError(f"the runs disagree on the label of question {k}: not the same benchmark", p)

    table: dict[str, ScoreTables] = {}
    for name, t, idx in zip(names, tables, index):
        rows_at = np.array([idx[k] for k in common], dtype=np.int64)
        samples = [t.samples[i] for i in rows_at]
        report = score_rows(
            _rows(samples, t.decisions[readout][rows_at], t.p_yes[readout][rows_at]),
            readout=readout, policy=policy, n_resamples=n_resamples, seed=seed,
        )  # fmt: skip
        table[name] = _tables(report)

    paired: dict[str, PairedTest] = {}
    ref_idx = index[0]
    for name, t, idx in zip(names[1:], tables[1:], index[1:]):
        both = [k for k in common if not first.errors[ref_idx[k]] and not t.errors[idx[k]]]
        a_at = np.array([idx[k] for k in both], dtype=np.int64)
        b_at = np.array([ref_idx[k] for k in both], dtype=np.int64)
        labels_yes = first.labels_yes[b_at]
        boot = _PairedBootstrap(
            [first.samples[i].image for i in b_at], first.split_code[b_at], labels_yes,
            policy=policy, n_resamples=n_resamples, seed=seed,
        )  # fmt: skip
        paired[name] = _paired_entry(boot, t.decisions[readout][a_at], first.decisions[readout][b_at], labels_yes, policy)

    kind: dict[tuple[bool, bool], Literal["both", "model", "template", "neither"]] = {
        (True, True): "both", (True, False): "model", (False, True): "template", (False, False): "neither"
    }  # fmt: skip
    return RunComparison(
        readout=readout,
        policy=policy,
        bootstrap=_bootstrap(n_resamples, seed),
        runs=[
            ComparedRun(
                path=str(p),
                label=name,
                model=h.model,
                template=h.template,
                n=t.n,
                errors=int(t.errors.sum()),
                valid=t.valid(readout),
                forced=not t.valid(readout),
            )
            for p, name, h, t in zip(paths, names, headers, tables)
        ],
        differ_in=kind[(differs.model, differs.template)],
        differs=differs,
        common_questions=len(common),
        reference=names[0],
        table=table,
        paired=paired,
    )


# ---------------------------------------------------------------------------------------------
# terminal lines


_NOT_AVAILABLE = "n/a"  # an undefined number in the terminal summary


def summarise_audit(audit: AuditReport) -> list[str]:
    """A few plain lines for the terminal: headline F1 with CI, each readout's delta and p,
    the off-set rate, and where F1 settles."""
    run = audit.run
    head = audit.headline
    macro = audit.readouts[head].macro
    lines = [
        f"{run.path}: {run.n} questions, {run.errors} errors; model {run.model}, template {run.template}",
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
    return lines


def _macro_f1_shift(entry: Relabel, readout: str) -> float | None:
    shift = entry.shift.get(readout)
    return None if shift is None else shift.macro.get("f1")
