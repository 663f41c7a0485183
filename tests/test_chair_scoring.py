"""CHAIR scores: per caption and overall, hand-computed, with CIs and paired differences."""

from __future__ import annotations

import pytest
from _chair import wordnet_or_skip, families


@pytest.fixture(autouse=True, scope="module")
def _wordnet() -> None:
    wordnet_or_skip()

from halluprobe.captions.chair.groundtruth import GroundTruth
from halluprobe.captions.chair.scoring import (
    Caption,
    paired_comparison,
    paired_differences,
    score_captions,
    summarize,
    truncate_incomplete,
)
from halluprobe.errors import InputError

GT = GroundTruth(
    family="chair@singularize",
    source="objects",
    objects={1: ["dog", "person"], 2: ["cat"], 3: ["car", "bus"]},
)


def _caps(*texts: str) -> list[Caption]:
    return [
        Caption(image_id=i + 1, text=t, source=f"caps.jsonl:{i + 1}")
        for i, t in enumerate(texts)
    ]


def test_scores_match_a_hand_computation() -> None:
    fam = families()["chair@singularize"]
    scores = score_captions(
        _caps("a man with a dog and a cat", "a cat", "a car . a truck and a truck"),
        GT,
        fam,
    )
    assert [s.hallucinated for s in scores] == [["cat"], [], ["truck", "truck"]]
    assert scores[0].hallucinated_positions == [7] and scores[0].recalled == [
        "dog",
        "person",
    ]
    s = summarize(scores, fam.name, settings={"family": fam.name}, n_resamples=200)
    # CHAIR_s 2/3; CHAIR_i 3 hallucinated of 3+1+3 mentions; recall (2+1+1)/(2+1+2); length (8+2+8)/3
    assert s.chair_s == pytest.approx(2 / 3) and s.chair_i == pytest.approx(3 / 7)
    assert s.recall == pytest.approx(4 / 5) and s.length == pytest.approx(6.0)
    assert s.ci.chair_s is not None
    lo, hi = s.ci.chair_s
    assert 0 <= lo <= s.chair_s <= hi <= 1


def test_truncate_incomplete_is_operas_rfind() -> None:
    assert truncate_incomplete("A dog. A cat on a") == "A dog."
    assert (
        truncate_incomplete("no full stop") == ""
    )  # as OPERA's cap[:cap.rfind('.') + 1]
    fam = families()["chair@singularize"]
    [score] = score_captions(_caps("a cat . a truck"), GT, fam, truncate=True)
    assert score.caption == "a cat ." and score.hallucinated == ["cat"]


def test_unknown_image_names_the_caption() -> None:
    fam = families()["chair@singularize"]
    with pytest.raises(
        InputError, match=r"caps.jsonl:4: image 4 is not in the ground truth"
    ):
        score_captions(
            [
                *_caps("a", "b", "c"),
                Caption(image_id=4, text="x", source="caps.jsonl:4"),
            ],
            GT,
            fam,
        )


def test_paired_differences() -> None:
    fam = families()["chair@singularize"]
    a = score_captions(_caps("a truck", "a cat", "a car"), GT, fam)
    b = score_captions(_caps("a dog", "a cat", "a car"), GT, fam)
    paired = paired_comparison(a, b, "b", n_resamples=200)
    assert paired.chair_s.diff == pytest.approx(1 / 3) and paired.chair_s.ci is not None
    # the decoding comparison's view: the same Difference records
    assert paired_differences(a, b, n_resamples=200)["chair_s"] == paired.chair_s
    with pytest.raises(InputError, match="different images"):
        paired_comparison(a, b[:2], "b", n_resamples=10)
