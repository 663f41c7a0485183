"""Binary metrics under every unknown policy (hand-counted goldens) and the score report."""

from __future__ import annotations


import numpy as np
import pytest

from halluprobe.metrics.binary import Counts, count, metrics_from_counts
from halluprobe.metrics.score import CI_METRICS, ScoreRow, score_rows
from halluprobe.metrics.stats import auroc, cluster_bootstrap, expected_calibration_error
from halluprobe.records_scores import ScoreReport

# --------------------------------------------------------------------------------------------
# A 10-row table counted by hand.
#   row  label  decision  error   raw category
#    1   yes    yes       -       TP
#    2   yes    yes       -       TP
#    3   yes    no        -       FN
#    4   yes    unknown   -       unknown, yes label
#    5   no     no        -       TN
#    6   no     no        -       TN
#    7   no     yes       -       FP
#    8   no     unknown   -       unknown, no label
#    9   yes    yes       error   errored, yes label (its "yes" is ignored)
#   10   no     unknown   error   errored, no label
# raw: TP 2, FP 1, TN 2, FN 1, unknown 1 yes + 1 no, errors 1 yes + 1 no; 5 yes labels, 5 no.
LABELS = ["yes", "yes", "yes", "yes", "no", "no", "no", "no", "yes", "no"]
DECISIONS = ["yes", "yes", "no", "unknown", "no", "no", "yes", "unknown", "yes", "unknown"]
ERRORS = [False] * 8 + [True, True]

# policy -> (tp, fp, tn, fn, n), metrics
HAND = {
    # wrong: unknowns and errors stay in n, wrong; recall over all 5 yes labels, HTR over all 5 no.
    # acc (2+2)/10; P 2/(2+1); R 2/5; F1 2*(2/3)*(2/5)/(2/3+2/5) = (8/15)/(16/15) = 1/2;
    # yes_ratio (2+1)/10; unknown_rate 2/10; HTR 1/5.
    "wrong": ((2, 1, 2, 1, 10), dict(accuracy=0.4, precision=2 / 3, recall=0.4, f1=0.5, yes_ratio=0.3, unknown_rate=0.2, htr=0.2)),
    # no: row 4 -> FN, row 8 -> TN: TP 2, FP 1, TN 3, FN 2; errors still wrong, n 10.
    # acc (2+3)/10; P 2/3; R 2/(2+2+1 errored yes) = 2/5; F1 1/2; yes_ratio 3/10; HTR 1/(1+3+1).
    "no": ((2, 1, 3, 2, 10), dict(accuracy=0.5, precision=2 / 3, recall=0.4, f1=0.5, yes_ratio=0.3, unknown_rate=0.2, htr=0.2)),
    # yes: row 4 -> TP, row 8 -> FP: TP 3, FP 2, TN 2, FN 1; n 10.
    # acc (3+2)/10; P 3/5; R 3/(3+1+1) = 3/5; F1 3/5; yes_ratio 5/10; HTR 2/(2+2+1).
    "yes": ((3, 2, 2, 1, 10), dict(accuracy=0.5, precision=0.6, recall=0.6, f1=0.6, yes_ratio=0.5, unknown_rate=0.2, htr=0.4)),
    # drop: rows 4, 8 (unknown) and 9, 10 (errors) leave: TP 2, FP 1, TN 2, FN 1, n 6.
    # acc 4/6; P 2/3; R 2/3; F1 2/3; yes_ratio 3/6; unknown_rate over all 10 rows 2/10; HTR 1/3.
    "drop": ((2, 1, 2, 1, 6), dict(accuracy=4 / 6, precision=2 / 3, recall=2 / 3, f1=2 / 3, yes_ratio=0.5, unknown_rate=0.2, htr=1 / 3)),
}


@pytest.mark.parametrize("policy", ["wrong", "no", "yes", "drop"])
def test_hand_counted_table(policy: str) -> None:
    (tp, fp, tn, fn, n), expected = HAND[policy]
    c = count(LABELS, DECISIONS, ERRORS, policy=policy)  # type: ignore[arg-type]
    assert (c.tp, c.fp, c.tn, c.fn, c.n) == (tp, fp, tn, fn, n)
    assert (c.unknown_yes, c.unknown_no, c.unknown) == (1, 1, 2)
    assert (c.errors_yes, c.errors_no, c.errors) == (1, 1, 2)
    assert c.total == 10
    got = metrics_from_counts(c)
    assert set(got) == set(expected)
    for name, value in expected.items():
        assert got[name] == pytest.approx(value, abs=1e-12), name


def test_without_errors_mask_every_row_is_answered_or_unknown() -> None:
    c = count(LABELS, DECISIONS)
    # rows 9 (yes/yes) and 10 (no/unknown) now count: TP 3, unknown_no 2.
    assert (c.tp, c.fp, c.tn, c.fn, c.unknown_yes, c.unknown_no, c.errors, c.n) == (3, 1, 2, 1, 1, 2, 0, 10)
    m = metrics_from_counts(c)
    assert m["accuracy"] == pytest.approx(5 / 10)
    assert m["recall"] == pytest.approx(3 / 5)  # 5 yes labels, the unknown one included
    assert m["htr"] == pytest.approx(1 / 5)  # 5 no labels, both unknowns included


def test_unknown_is_never_a_positive_prediction_under_wrong() -> None:
    m = metrics_from_counts(count(["no", "no", "no", "no"], ["unknown", "unknown", "unknown", "no"]))
    assert m["yes_ratio"] == 0.0
    assert m["htr"] == 0.0
    assert m["accuracy"] == pytest.approx(0.25)
    assert m["unknown_rate"] == pytest.approx(0.75)


def test_yes_ratio_is_from_predictions_not_labels() -> None:
    m = metrics_from_counts(count(["yes"] * 4, ["no"] * 4))
    assert m["yes_ratio"] == 0.0
    assert m["recall"] == 0.0


def test_zero_denominators_are_none() -> None:
    # all-no labels, all-no answers: no predicted yes (precision), no yes label (recall).
    m = metrics_from_counts(count(["no", "no"], ["no", "no"]))
    assert m["precision"] is None and m["recall"] is None and m["f1"] is None
    assert m["accuracy"] == 1.0 and m["htr"] == 0.0 and m["yes_ratio"] == 0.0
    # all-yes labels: HTR undefined.
    assert metrics_from_counts(count(["yes"], ["yes"]))["htr"] is None
    # nothing at all
    empty = metrics_from_counts(count([], []))
    assert all(v is None for v in empty.values())
    # drop with only unknowns: n = 0, but the unknown rate is still defined (1.0)
    c = count(["yes", "no"], ["unknown", "unknown"], policy="drop")
    assert c.n == 0 and c.total == 2
    m = metrics_from_counts(c)
    assert m["accuracy"] is None and m["yes_ratio"] is None and m["recall"] is None
    assert m["unknown_rate"] == 1.0


def test_f1_is_zero_when_precision_and_recall_are_zero() -> None:
    m = metrics_from_counts(count(["yes", "no"], ["no", "yes"]))
    assert m["precision"] == 0.0 and m["recall"] == 0.0
    assert m["f1"] == 0.0


def test_f1_is_zero_not_undefined_when_the_model_never_says_yes() -> None:
    # precision is 0/0, but 2TP / (2TP + FP + FN) = 0 / (0 + 0 + 2): a model that never says yes
    # (or answers only "unknown") scores F1 0 on a split with yes labels, as papers report it
    m = metrics_from_counts(count(["yes", "yes", "no"], ["unknown", "no", "no"]))
    assert m["precision"] is None and m["recall"] == 0.0 and m["f1"] == 0.0


def test_errored_sample_is_never_answered() -> None:
    # A correct-looking decision on an errored sample is ignored; under every policy but drop it is wrong.
    for policy in ("wrong", "no", "yes"):
        c = count(["yes", "no"], ["yes", "no"], [True, True], policy=policy)  # type: ignore[arg-type]
        assert (c.tp, c.tn, c.n, c.errors) == (0, 0, 2, 2)
        m = metrics_from_counts(c)
        assert m["accuracy"] == 0.0 and m["recall"] == 0.0 and m["unknown_rate"] == 0.0
    c = count(["yes", "no"], ["yes", "no"], [True, False], policy="drop")
    assert (c.tp, c.tn, c.n, c.errors) == (0, 1, 1, 1)
    assert metrics_from_counts(c)["accuracy"] == 1.0
    # an errored sample may carry no valid decision at all
    assert count(["yes"], [""], [True]).errors == 1


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="policy"):
        count(["yes"], ["yes"], policy="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="labels"):
        count(["maybe"], ["yes"])
    with pytest.raises(ValueError, match="decisions"):
        count(["yes"], ["Yes"])
    with pytest.raises(ValueError):
        count(["yes", "no"], ["yes"])
    with pytest.raises(ValueError):
        count(["yes"], ["yes"], [True, False])


def test_counts_is_frozen() -> None:
    c = count(["yes"], ["yes"])
    assert isinstance(c, Counts)
    with pytest.raises(AttributeError):
        c.tp = 5  # type: ignore[misc]


# --------------------------------------------------------------------------------------------
# score_rows


def _pope_like(n_images: int = 60, per_image: int = 6, seed: int = 1, p_missing: bool = False) -> list[ScoreRow]:
    """Three splits over the same images; each image has its own difficulty (correlated answers)."""
    rng = np.random.default_rng(seed)
    ease = rng.uniform(0.4, 0.98, size=n_images)
    rows: list[ScoreRow] = []
    for split in ("random", "popular", "adversarial"):
        shift = {"random": 0.0, "popular": 0.05, "adversarial": 0.1}[split]
        qid = 0
        for img in range(n_images):
            for q in range(per_image):
                label = "yes" if q % 2 == 0 else "no"
                u = rng.uniform()
                correct = u < ease[img] - shift
                if u > 0.97:
                    decision = "unknown"
                else:
                    decision = label if correct else ("no" if label == "yes" else "yes")
                p = float(np.clip(rng.normal(0.75 if label == "yes" else 0.3, 0.2), 0.0, 1.0))
                rows.append(ScoreRow(split, qid, f"img{img:04d}.jpg", label, decision, None if p_missing else p, error=False))  # type: ignore[arg-type]
                qid += 1
    return rows


def test_pooled_and_splits_equal_count() -> None:
    rows = _pope_like()
    report = score_rows(rows, readout="dynamic", n_resamples=0)
    assert isinstance(report, ScoreReport)
    assert list(report.splits) == ["random", "popular", "adversarial"]  # first-appearance order
    c = count([r.label for r in rows], [r.decision for r in rows])
    pooled = report.pooled
    assert (pooled.tp, pooled.fp, pooled.tn, pooled.fn, pooled.unknown, pooled.n) == (c.tp, c.fp, c.tn, c.fn, c.unknown, c.n)
    m = metrics_from_counts(c)
    for name in ("accuracy", "precision", "recall", "f1", "yes_ratio", "unknown_rate", "htr"):
        assert getattr(pooled, name) == pytest.approx(m[name]), name
    for split, metrics in report.splits.items():
        sub = [r for r in rows if r.split == split]
        cs = count([r.label for r in sub], [r.decision for r in sub])
        assert (metrics.tp, metrics.n) == (cs.tp, cs.n)
        assert metrics.accuracy == pytest.approx(metrics_from_counts(cs)["accuracy"])
    assert pooled.ci == {}


def test_macro_is_mean_of_splits_and_counts_are_summed() -> None:
    report = score_rows(_pope_like(), readout="dynamic", n_resamples=0)
    splits = list(report.splits.values())
    for name in ("accuracy", "precision", "recall", "f1", "yes_ratio", "unknown_rate", "htr", "auroc", "ece"):
        values = [getattr(s, name) for s in splits]
        assert getattr(report.macro, name) == pytest.approx(sum(values) / 3), name
    for name in ("n", "tp", "fp", "tn", "fn", "unknown", "errors"):
        assert getattr(report.macro, name) == sum(getattr(s, name) for s in splits)
    # the three splits differ, so macro != any single split (the test can fail)
    assert len({s.accuracy for s in splits}) == 3


def test_macro_is_none_when_a_split_is_undefined() -> None:
    rows = [
        ScoreRow("a", 0, "i0", "yes", "yes"),
        ScoreRow("a", 1, "i0", "no", "no"),
        ScoreRow("b", 0, "i0", "no", "no"),  # no yes label: recall undefined in b
    ]
    report = score_rows(rows, readout="x", n_resamples=0)
    assert report.splits["b"].recall is None
    assert report.macro.recall is None
    assert report.macro.accuracy == 1.0


def test_auroc_and_ece_from_p_yes() -> None:
    rows = _pope_like()
    report = score_rows(rows, readout="dynamic", n_resamples=0)
    y = np.array([r.label == "yes" for r in rows])
    p = np.array([r.p_yes for r in rows], dtype=float)
    assert report.pooled.auroc == pytest.approx(auroc(y, p))
    assert report.pooled.ece == pytest.approx(expected_calibration_error(y, p))
    assert 0.5 < report.pooled.auroc < 1.0  # type: ignore[operator]
    # missing p_yes anywhere in a table -> None for that table
    missing = score_rows(_pope_like(p_missing=True), readout="text:strict", n_resamples=0)
    assert missing.pooled.auroc is None and missing.pooled.ece is None and missing.macro.auroc is None
    one = rows[0]
    partial = rows[1:] + [ScoreRow(one.split, one.question_id, one.image, one.label, one.decision, None)]
    assert score_rows(partial, readout="x", n_resamples=0).pooled.auroc is None
    # a single class -> AUROC None, ECE defined
    only_yes = [r for r in rows if r.label == "yes"]
    rep = score_rows(only_yes, readout="x", n_resamples=0)
    assert rep.pooled.auroc is None and rep.pooled.ece is not None


def test_errored_rows_in_score() -> None:
    rows = [
        ScoreRow("s", 0, "a", "yes", "yes", 0.9),
        ScoreRow("s", 1, "a", "no", "no", 0.2),
        ScoreRow("s", 2, "b", "yes", "unknown", None, error=True),
    ]
    wrong = score_rows(rows, readout="x", n_resamples=0)
    assert (wrong.pooled.n, wrong.pooled.errors, wrong.pooled.unknown) == (3, 1, 0)
    assert wrong.pooled.accuracy == pytest.approx(2 / 3)
    assert wrong.pooled.recall == pytest.approx(1 / 2)
    assert wrong.pooled.auroc == 1.0  # ranked over the answered rows; the errored one is counted in errors
    drop = score_rows(rows, readout="x", policy="drop", n_resamples=0)
    assert (drop.pooled.n, drop.pooled.errors) == (2, 1)
    assert drop.pooled.accuracy == 1.0
    assert drop.pooled.auroc == 1.0  # drop removes the errored row from every table
    assert drop.unknown_policy == "drop"


def test_bad_rows_are_refused() -> None:
    with pytest.raises(ValueError, match="no rows"):
        score_rows([], readout="x")
    dup = [ScoreRow("s", 0, "a", "yes", "yes"), ScoreRow("s", 0, "b", "no", "no")]
    with pytest.raises(ValueError, match="duplicate"):
        score_rows(dup, readout="x")
    # the same question_id in two splits is fine
    score_rows([ScoreRow("s", 0, "a", "yes", "yes"), ScoreRow("t", 0, "a", "no", "no")], readout="x", n_resamples=0)
    with pytest.raises(ValueError, match="policy"):
        score_rows(dup[:1], readout="x", policy="skip")  # type: ignore[arg-type]


def test_bootstrap_is_seeded_and_recorded() -> None:
    rows = _pope_like()
    a = score_rows(rows, readout="dynamic", n_resamples=300, seed=7)
    b = score_rows(rows, readout="dynamic", n_resamples=300, seed=7)
    c = score_rows(rows, readout="dynamic", n_resamples=300, seed=8)
    assert a == b
    assert a.pooled.ci != c.pooled.ci
    assert a.bootstrap is not None and a.bootstrap.seed == 7 and a.bootstrap.n_resamples == 300
    assert a.bootstrap.level == 0.95 and a.bootstrap.cluster == "image"
    assert a.bootstrap.n_clusters == 60
    for metrics in (a.pooled, a.macro, *a.splits.values()):
        assert set(metrics.ci) == set(CI_METRICS)


def test_ci_contains_point_estimate() -> None:
    report = score_rows(_pope_like(), readout="dynamic", n_resamples=500, seed=3)
    for metrics in (report.pooled, report.macro, *report.splits.values()):
        for name in CI_METRICS:
            lo_hi = metrics.ci[name]
            assert lo_hi is not None
            lo, hi = lo_hi
            assert lo < hi
            assert lo <= getattr(metrics, name) <= hi, name


def test_vectorised_ci_equals_generic_cluster_bootstrap() -> None:
    # score_rows resamples per-image counts; cluster_bootstrap resamples rows. Same seed, same
    # draws: the intervals must agree exactly (pooled, one split, and the joint macro mean).
    rows = _pope_like(n_images=40)
    report = score_rows(rows, readout="dynamic", n_resamples=200, seed=11)
    images = np.array([r.image for r in rows])
    correct = np.array([r.decision == r.label for r in rows])
    pred_yes = np.array([r.decision == "yes" for r in rows])
    label_yes = np.array([r.label == "yes" for r in rows])
    split = np.array([r.split for r in rows])

    def accuracy(idx: np.ndarray) -> float:
        return float(correct[idx].mean())

    def recall_in(name: str):
        def stat(idx: np.ndarray) -> float | None:
            idx = idx[split[idx] == name]
            pos = label_yes[idx]
            return float((pred_yes[idx] & pos).sum() / pos.sum()) if pos.sum() else None

        return stat

    def precision_in(idx: np.ndarray) -> float | None:
        yes = pred_yes[idx]
        return float((yes & label_yes[idx]).sum() / yes.sum()) if yes.sum() else None

    def macro_precision(idx: np.ndarray) -> float | None:
        values = [precision_in(idx[split[idx] == s]) for s in ("random", "popular", "adversarial")]
        return None if None in values else float(np.mean(values))  # type: ignore[arg-type]

    assert report.pooled.ci["accuracy"] == pytest.approx(cluster_bootstrap(images, accuracy, n_resamples=200, seed=11))
    assert report.splits["popular"].ci["recall"] == pytest.approx(cluster_bootstrap(images, recall_in("popular"), n_resamples=200, seed=11))
    # precision: its denominators differ between splits, so the macro mean is not the pooled value
    assert report.macro.ci["precision"] == pytest.approx(cluster_bootstrap(images, macro_precision, n_resamples=200, seed=11))
    assert report.macro.ci["precision"] != report.pooled.ci["precision"]
