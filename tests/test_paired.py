"""metrics.paired: the one paired test (McNemar, ΔF1 with its paired image-bootstrap CI) that the
audit and the corrections table share, checked against hand-computed figures and against the
row-index reference bootstrap (``stats.paired_bootstrap_diff``) draw for draw."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from halluprobe.metrics.paired import ImageBootstrap, SampleTable, paired_test
from halluprobe.metrics.stats import paired_bootstrap_diff

SPLITS = ("random", "popular")


def _world(seed: int = 3, n_images: int = 40) -> tuple[list[str], list[str], list[str], list[bool], list[str], list[str]]:
    """Two splits over the same images, some errors and unknowns; two readouts that differ."""
    rng = np.random.default_rng(seed)
    splits, images, labels, errors, a, b = [], [], [], [], [], []
    for split in SPLITS:
        for img in range(n_images):
            for q in range(4):
                label = "yes" if q % 2 == 0 else "no"
                other = "no" if label == "yes" else "yes"
                splits.append(split)
                images.append(f"img{img:03d}")
                labels.append(label)
                errors.append(bool(rng.uniform() < 0.03))
                a.append(str(rng.choice([label, other, "unknown"], p=[0.8, 0.15, 0.05])))
                b.append(str(rng.choice([label, other, "unknown"], p=[0.7, 0.25, 0.05])))
    return splits, images, labels, errors, a, b


def _f1(labels: list[str], decisions: list[str], errors: list[bool], policy: str) -> float | None:
    """F1 by hand: 2TP / (2TP + FP + yes labels not answered yes), unknown by the policy."""
    tp = fp = missed = 0
    for label, d, err in zip(labels, decisions, errors):
        if err:
            if policy == "drop":
                continue
            d = "error"
        elif d == "unknown":
            if policy == "drop":
                continue
            d = policy if policy in ("yes", "no") else "unknown"
        tp += label == "yes" and d == "yes"
        fp += label == "no" and d == "yes"
        missed += label == "yes" and d != "yes"
    return 2 * tp / (2 * tp + fp + missed) if 2 * tp + fp + missed else None


def _macro(idx: list[int], world: tuple, decisions: list[str], policy: str) -> float | None:
    splits, _, labels, errors, _, _ = world
    values = []
    for split in SPLITS:
        at = [i for i in idx if splits[i] == split]
        f1 = _f1([labels[i] for i in at], [decisions[i] for i in at], [errors[i] for i in at], policy)
        if f1 is None:
            return None
        values.append(f1)
    return sum(values) / len(values)


def _table(world: tuple) -> SampleTable:
    splits, images, labels, errors, a, b = world
    table = SampleTable.build(splits, images, labels, errors)
    table.add("a", a)
    table.add("b", b)
    return table


@pytest.mark.parametrize("policy", ["wrong", "no", "yes"])
def test_paired_test_equals_hand_figures_and_the_reference_bootstrap(policy: str) -> None:
    world = _world()
    splits, images, labels, errors, a, b = world
    table = _table(world)
    result = paired_test(ImageBootstrap(table, n_resamples=150, seed=7), table.decisions["a"], table.decisions["b"], policy)  # type: ignore[arg-type]

    every = list(range(len(labels)))
    assert result.delta_f1 == pytest.approx(_macro(every, world, a, policy) - _macro(every, world, b, policy))  # type: ignore[operator]
    pooled = _f1(labels, a, errors, policy) - _f1(labels, b, errors, policy)  # type: ignore[operator]
    assert result.delta_f1_pooled == pytest.approx(pooled)

    def right(d: str, label: str, err: bool) -> bool:
        read = policy if (d == "unknown" and policy in ("yes", "no")) else d
        return not err and read == label

    ra = [right(d, label, e) for d, label, e in zip(a, labels, errors)]
    rb = [right(d, label, e) for d, label, e in zip(b, labels, errors)]
    n_b = sum(x and not y for x, y in zip(ra, rb))
    n_c = sum(y and not x for x, y in zip(ra, rb))
    assert (result.n, result.b, result.c) == (len(labels), n_b, n_c)
    assert result.mcnemar_p == pytest.approx(binomtest(n_b, n_b + n_c, 0.5).pvalue)

    # the CI: the same draws as the row-index reference with a hand-coded macro F1
    reference = paired_bootstrap_diff(
        images,
        lambda idx: _macro(list(idx), world, a, policy),
        lambda idx: _macro(list(idx), world, b, policy),
        n_resamples=150,
        seed=7,
    )
    assert reference is not None and result.delta_f1_ci == pytest.approx(reference, abs=1e-12)
    assert result.delta_f1_pooled_ci is not None


def test_drop_compares_both_sides_over_the_same_questions() -> None:
    world = _world(seed=5)
    _, _, labels, errors, a, b = world
    table = _table(world)
    result = paired_test(ImageBootstrap(table, n_resamples=0, seed=0), table.decisions["a"], table.decisions["b"], "drop")
    kept = [i for i in range(len(labels)) if not errors[i] and a[i] != "unknown" and b[i] != "unknown"]
    assert 0 < len(kept) < len(labels) and result.n == len(kept)
    assert result.delta_f1 == pytest.approx(_macro(kept, world, a, "drop") - _macro(kept, world, b, "drop"))  # type: ignore[operator]
    assert result.delta_f1_ci is None and result.delta_f1_pooled_ci is None  # no resamples, no interval


def test_identical_sides_differ_by_zero_and_macro_f1_of_a_subset() -> None:
    world = _world(seed=8)
    table = _table(world)
    same = paired_test(ImageBootstrap(table, n_resamples=50, seed=1), table.decisions["a"], table.decisions["a"], "wrong")
    assert (same.b, same.c, same.mcnemar_p, same.delta_f1, same.delta_f1_ci) == (0, 0, 1.0, 0.0, (0.0, 0.0))
    rows = np.arange(0, table.n, 2)
    assert table.macro_f1(table.decisions["b"], "wrong", rows) == pytest.approx(_macro(rows.tolist(), world, world[5], "wrong"))
    only_random = np.flatnonzero(table.split_code == 0)
    assert table.macro_f1(table.decisions["b"], "wrong", only_random) is None  # a split without rows: undefined


def test_subset_keeps_every_column_aligned() -> None:
    world = _world(seed=9, n_images=5)
    table = _table(world)
    mask = ~table.errors
    sub = table.subset(mask)
    assert sub.n == int(mask.sum()) and sub.splits == table.splits
    assert list(sub.decisions["a"]) == [d for d, keep in zip(world[4], mask) if keep]
    assert list(sub.images) == [i for i, keep in zip(world[1], mask) if keep]
