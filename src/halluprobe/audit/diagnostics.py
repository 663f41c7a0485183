"""The audit's diagnostics of one run: agreement between readouts, the first token, F1 as
questions accumulate, which absent objects get "yes", calibration of p(yes)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from halluprobe.audit.table import AuditedRun, question_object
from halluprobe.metrics.binary import N_RAW, categorize, counts_from_raw, metrics_from_counts
from halluprobe.metrics.stats import convergence, expected_calibration_error, stable_after
from halluprobe.readouts.logits import LOGIT_READOUTS
from halluprobe.readouts.tokensets import greedy_answer
from halluprobe.records import UnknownPolicy
from halluprobe.records_audit import (
    Calibration,
    CalibrationBin,
    CurvePoint,
    GreedyAgreement,
    HallucinationProfile,
    ObjectRate,
    PairRate,
    PieceCount,
    PieceShare,
    TextDynamicDisagreement,
)

__all__ = [
    "CALIBRATION_BINS",
    "CONVERGENCE_STEP",
    "STABLE_TOL",
    "UNKNOWN_OBJECT",
    "TokenDiagnostics",
    "agreement",
    "calibration",
    "convergence_curves",
    "frac",
    "greedy",
    "hallucination_profile",
    "text_vs_dynamic",
    "token_diagnostics",
]

CONVERGENCE_STEP = 100
STABLE_TOL = 0.005
CALIBRATION_BINS = 10  # the binning of stats.expected_calibration_error's default
UNKNOWN_OBJECT = "(unknown object)"  # a question whose object neither the file nor its text names


def frac(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def _ranked(counter: Counter[str], top: int) -> list[tuple[str, int]]:
    return sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:top]


@dataclass(frozen=True)
class TokenDiagnostics:
    """The first-token fields of the audit (flat in ``audit.json``)."""

    offset_rate: float | None
    offset_pieces: list[PieceCount]
    first_pieces: list[PieceShare]
    first_pieces_total: int
    first_pieces_distinct: int


def agreement(t: AuditedRun) -> dict[str, dict[str, float | None]]:
    ans = t.answered
    n = int(ans.sum())
    return {
        a: {b: frac(int(np.sum(t.table.decisions[a][ans] == t.table.decisions[b][ans])), n) for b in t.readouts}
        for a in t.readouts
    }


def token_diagnostics(t: AuditedRun, top: int) -> TokenDiagnostics:
    answered = [s for s in t.samples if s.error is None]
    offset = Counter(s.offset_argmax for s in answered if s.offset_argmax is not None)
    with_token = [s for s in answered if s.first_token]
    first = Counter(s.first_token[0].piece for s in with_token)
    return TokenDiagnostics(
        # None when no sample stored first-token outputs (an imported or text-only run)
        offset_rate=frac(sum(offset.values()), len(answered)) if with_token or offset else None,
        offset_pieces=[PieceCount(piece, count) for piece, count in _ranked(offset, top)],
        first_pieces=[PieceShare(piece, count, count / len(with_token)) for piece, count in _ranked(first, top)],
        first_pieces_total=len(with_token),
        first_pieces_distinct=len(first),
    )


def greedy(t: AuditedRun) -> dict[str, GreedyAgreement]:
    """Each logit readout against the greedy first token (its id in the run's yes / no set).

    ``offset``: the argmax is in neither set (no greedy yes/no to compare); ``disagree``: the
    argmax is in a set and the readout decides otherwise (for ``dynamic``, the other set's
    variants together outweigh it: a near tie).
    """
    sets = t.header.token_sets
    if sets is None:
        return {}
    greedy_first = [
        greedy_answer(s.first_token[0], sets) if (s.error is None and s.first_token) else None for s in t.samples
    ]
    out: dict[str, GreedyAgreement] = {}
    for r in t.readouts:
        if r not in LOGIT_READOUTS:
            continue
        in_set = agree = offset = 0
        for i, g in enumerate(greedy_first):
            if t.table.errors[i]:
                continue
            if g is None:
                offset += 1
                continue
            in_set += 1
            agree += int(t.table.decisions[r][i] == g)
        out[r] = GreedyAgreement(in_set=in_set, agree=agree, disagree=in_set - agree, offset=offset)
    return out


def text_vs_dynamic(t: AuditedRun) -> dict[str, TextDynamicDisagreement]:
    if "dynamic" not in t.table.decisions:
        return {}
    ans = t.answered
    dyn = t.table.decisions["dynamic"][ans]
    out: dict[str, TextDynamicDisagreement] = {}
    for r in t.readouts:
        if not r.startswith("text:"):
            continue
        txt = t.table.decisions[r][ans]
        txt_known, dyn_known = txt != "unknown", dyn != "unknown"
        out[r.removeprefix("text:")] = TextDynamicDisagreement(
            n=int(ans.sum()),
            differ=int(np.sum(txt_known & dyn_known & (txt != dyn))),
            text_unknown=int(np.sum(~txt_known & dyn_known)),
            dynamic_unknown=int(np.sum(txt_known & ~dyn_known)),
            both_unknown=int(np.sum(~txt_known & ~dyn_known)),
        )
    return out


def convergence_curves(t: AuditedRun, policy: UnknownPolicy) -> tuple[dict[str, list[CurvePoint]], dict[str, int | None]]:
    """Pooled F1 after the first k samples in run order (k = 100, 200, ..., n)."""
    labels = np.where(t.table.labels_yes, "yes", "no")
    curves: dict[str, list[CurvePoint]] = {}
    stable: dict[str, int | None] = {}
    for r in t.readouts:
        cats = categorize(labels, t.table.decisions[r], t.table.errors)
        cum = np.cumsum(np.eye(N_RAW, dtype=np.int64)[cats], axis=0)  # raw counts after each sample

        def f1_after(k: int, cum: np.ndarray = cum) -> float | None:
            return metrics_from_counts(counts_from_raw(cum[k - 1], policy))["f1"]

        curve = convergence(f1_after, t.n, step=CONVERGENCE_STEP)
        curves[r] = [CurvePoint(k, value) for k, value in curve]
        stable[r] = stable_after(curve, curve[-1][1], tol=STABLE_TOL)
    return curves, stable


def hallucination_profile(t: AuditedRun, readout: str, top: int) -> HallucinationProfile:
    """Which absent objects get "yes" from ``readout``; adversarial negatives by their positive."""
    dec = t.table.decisions[readout]
    yes: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for i, s in enumerate(t.samples):
        if s.label == "no" and s.error is None:
            obj = question_object(s) or UNKNOWN_OBJECT
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
        obj = question_object(s) or UNKNOWN_OBJECT
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


def calibration(labels_yes: np.ndarray, p: np.ndarray) -> Calibration:
    have = ~np.isnan(p)
    y, q = labels_yes[have], p[have]
    bins = np.minimum((q * CALIBRATION_BINS).astype(np.int64), CALIBRATION_BINS - 1)
    out: list[CalibrationBin] = []
    for b in range(CALIBRATION_BINS):
        inside = bins == b
        count = int(inside.sum())
        out.append(
            CalibrationBin(
                lo=b / CALIBRATION_BINS,
                hi=(b + 1) / CALIBRATION_BINS,
                count=count,
                mean_p=float(q[inside].mean()) if count else None,
                frac_yes=float(y[inside].mean()) if count else None,
            )
        )
    return Calibration(n=int(have.sum()), bins=out, ece=expected_calibration_error(y, q, n_bins=CALIBRATION_BINS))
