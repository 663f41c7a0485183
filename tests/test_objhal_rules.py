"""Object HalBench judge-free: halluprobe's counting equals a transcription of RLAIF-V's script."""

from __future__ import annotations

from pathlib import Path

import pytest
from _chair import FixtureTools, wordnet_or_skip, write_coco
from _objhal import SYNONYMS_TEXT, transcribe_script

from halluprobe.captions.chair.families import wordnet_lemmatize
from halluprobe.captions.chair.groundtruth import coco_annotation_files
from halluprobe.captions.objhal.rules import (
    RuleExtractor,
    caption_objects,
    extracted_objects,
    parse_synonyms,
)
from halluprobe.captions.objhal.scoring import (
    ObjhalResponse,
    objhal_ground_truth,
    score_responses,
    summarize,
)


@pytest.fixture(autouse=True, scope="module")
def _wordnet() -> None:
    wordnet_or_skip()


VOCAB = parse_synonyms(SYNONYMS_TEXT)
TOOLS = FixtureTools()

ANSWERS = [
    (1, "Assistant: a man and two dogs near a toilet seat ."),
    (1, "the seat of the toilet and a chair"),
    (2, "two buses and a motor bike on the road , a passenger jet above"),
    (2, "a baby bear and a teddy bear with a bow tie"),
    (3, "nothing to see here  at all"),
    (3, "wine glasses , a mug , a mug and skis"),
    (4, "people in a taxi next to a train track and a locomotive"),
    (4, "a dog a dog a dog"),
]
INSTANCES = {1: ["person", "toilet"], 2: ["bus"], 3: ["cup"], 4: ["person", "car"]}
COCO_CAPTIONS = {1: ["a man sits"], 2: ["a baby bear"], 3: ["glasses of wine"], 4: ["a dog in a taxi"]}


def test_parse_quirks() -> None:
    # RLAIF-V strips every entry: the double-spaced entry matches here (CHAIR's table keeps the space)
    assert "motor bike" in VOCAB.objects and VOCAB.double_words["motor bike"] == "motor bike"
    assert VOCAB.node_of["teddy"] == "teddy bear"  # the later line wins
    assert "" in VOCAB.objects  # the blank line, kept as the script keeps it
    assert VOCAB.double_words["home plate"] == "home plate" and VOCAB.double_words["bow tie"] == "tie"


@pytest.mark.parametrize(
    "caption,objects",
    [
        ("two buses", ["bus"]),  # noun lemmas: no pattern 'bu'
        ("wine glasses", ["wine glass"]),  # glass -> glass, then the double word
        ("a man tied a knot", ["person"]),  # no tagger: 'tied' is read as a noun and stays
        ("the seat of the toilet", ["toilet"]),
        ("a baby bear", ["bear"]),
        ("a passenger jet", ["airplane"]),
        ("two men", []),  # WordNet's noun morphy keeps 'men'
    ],
)
def test_words(caption: str, objects: list[str]) -> None:
    assert list(caption_objects(VOCAB, TOOLS, caption).objects) == objects


def test_seat_positions_shift_as_the_script() -> None:
    found = caption_objects(VOCAB, TOOLS, "a seat and a toilet and a dog")
    # 'seat' (word 1) dropped: the script enumerates the shorter list against the old starts,
    # so toilet (word 4) and dog (word 7) are recorded one word early
    assert found.words == ("toilet", "dog") and found.positions == (3, 6)


def test_scores_equal_the_transcription(tmp_path: Path) -> None:
    coco = write_coco(tmp_path / "coco", "2014", INSTANCES, COCO_CAPTIONS)
    instances, captions = coco_annotation_files(coco, "2014")
    extractor = RuleExtractor(VOCAB, TOOLS)
    truth, files = objhal_ground_truth(extractor, VOCAB, instances, captions, {i for i, _ in ANSWERS})
    responses = [ObjhalResponse(image_id=i, question="q", caption=t.replace("Assistant:", "").strip()) for i, t in ANSWERS]
    assert len(files) == 4  # val and train, instances and captions, each with its sha256
    summary = summarize(score_responses(responses, truth, extractor), extractor.identity, n_resamples=50)
    want = transcribe_script(SYNONYMS_TEXT, str.split, lambda w: wordnet_lemmatize(w, "n"), ANSWERS, INSTANCES, COCO_CAPTIONS)
    assert summary.response_hallucination == pytest.approx(want["CHAIRs_refine"])
    assert summary.mention_hallucination == pytest.approx(want["CHAIRi"])
    assert summary.chair_s == pytest.approx(want["CHAIRs"])
    assert summary.object_recall == pytest.approx(want["obj_rec"])
    assert summary.avg_length == pytest.approx(want["avg_word_len"])
    assert summary.n_responses_with_objects == want["coco_sentence_num"] == 7
    # the share of hallucinated responses differs by which responses it divides by
    assert summary.response_hallucination != summary.chair_s
    assert summary.ci.mention_hallucination is not None


def test_extractor_seam() -> None:
    # the judge path's last step: words an extractor listed, mapped to COCO categories
    found = extracted_objects(VOCAB, ["toilet", "seat", "puppy", "lamp"])
    assert found.objects == ("toilet", "dog") and found.positions == (0, 1)
