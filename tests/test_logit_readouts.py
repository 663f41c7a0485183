"""Logit readouts as pure functions of candidate log-probabilities and token sets."""

from __future__ import annotations

import math

import pytest

from halluprobe.readouts.logits import candidate_ids, decide, read_dynamic, read_legacy_2tok, read_legacy_8tok
from halluprobe.records import TokenSets

SETS = TokenSets(
    yes_ids=[3582, 3869, 4874, 8241],
    no_ids=[694, 1217, 1939, 3782],
    yes_pieces=["yes", "▁Yes", "▁yes", "Yes"],
    no_pieces=["▁no", "no", "▁No", "No"],
    legacy_valid=True,
    vocab_size=32000,
    tokenizer_fingerprint="t",
)


def _cands(**by_id: float) -> dict[str, float]:
    base = {str(i): -20.0 for i in SETS.yes_ids + SETS.no_ids}
    base.update({k.removeprefix("i"): v for k, v in by_id.items()})
    return base


def test_legacy_2tok_reads_only_the_two_reference_ids() -> None:
    # ▁Yes dominates, but the reference evaluator reads `yes` (3582) vs `no` (1217) only
    c = _cands(i3869=-0.1, i3582=-6.0, i1217=-5.0)
    assert read_legacy_2tok(c, SETS).decision == "no"
    assert read_legacy_8tok(c, SETS).decision == "yes"
    assert read_dynamic(c, SETS).decision == "yes"


def test_dynamic_is_a_mass_rule_and_legacy_8tok_a_max_rule() -> None:
    # the largest single piece is ▁No, but the four yes variants together outweigh it (a near tie)
    lp = math.log(0.2)
    c = _cands(i3582=lp, i3869=lp, i4874=lp, i8241=lp, i1939=math.log(0.21))
    assert read_legacy_8tok(c, SETS).decision == "no"
    dyn = read_dynamic(c, SETS)
    assert dyn.decision == "yes"
    assert dyn.yes_score == pytest.approx(math.log(0.8), abs=1e-6)
    assert dyn.p_yes == pytest.approx(0.8 / (0.8 + 0.21 + 3 * math.exp(-20)), abs=1e-6)


def test_exact_tie_is_unknown_and_p_yes_half() -> None:
    result = decide(-1.0, -1.0)
    assert result.decision == "unknown" and result.p_yes == pytest.approx(0.5)


def test_missing_ids_make_the_readout_unknown_not_a_guess() -> None:
    c = _cands()
    del c["3582"]
    assert read_legacy_2tok(c, SETS).decision == "unknown"
    assert read_legacy_2tok(c, SETS).p_yes is None


def test_candidate_ids_cover_every_readout_within_the_vocabulary() -> None:
    small = SETS.model_copy(update={"vocab_size": 4000, "yes_ids": [5], "no_ids": [6]})
    assert candidate_ids(small) == [5, 6, 694, 1217, 1939, 3582, 3782, 3869]  # 4874 and 8241 lie outside
