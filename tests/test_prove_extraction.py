"""PROVE tuple extraction: spaCy rules, strict LM parsing through a backend, the SQLite cache."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from halluprobe.benchmarks.prove.extraction import (
    LMExtractor,
    SpacyExtractor,
    TupleCache,
    extract_all,
    parse_lm_output,
)
from halluprobe.benchmarks.prove.scene_graph import tuple_key
from halluprobe.records import GenerateConfig, Request, Response

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier


@pytest.fixture(scope="module")
def spacy_extractor() -> SpacyExtractor:
    pytest.importorskip("spacy")
    return SpacyExtractor()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The dog is on the sofa.", {("entity", "dog"), ("entity", "sofa"), ("relation", "dog", "on", "sofa")}),
        (
            "A man holding a white cup stands next to a wooden table.",
            {
                ("entity", "man"), ("entity", "cup"), ("entity", "table"),
                ("attribute", "cup", "white"), ("attribute", "table", "wooden"),
                ("relation", "man", "holding", "cup"), ("relation", "man", "stands next to", "table"),
            },
        ),
        ("The sofa is red.", {("entity", "sofa"), ("attribute", "sofa", "red")}),
        ("There is a coffee table with three books.", {("entity", "coffee table"), ("entity", "book"), ("relation", "coffee table", "with", "book")}),
        ("It is raining.", set()),
        (
            "A dog and a cat are on the sofa.",
            {("entity", "dog"), ("entity", "cat"), ("entity", "sofa"), ("relation", "dog", "on", "sofa"), ("relation", "cat", "on", "sofa")},
        ),
        (
            "The man holds a cup and a plate.",
            {("entity", "man"), ("entity", "cup"), ("entity", "plate"), ("relation", "man", "holds", "cup"), ("relation", "man", "holds", "plate")},
        ),
    ],
)  # fmt: skip
def test_spacy_rules(spacy_extractor: SpacyExtractor, text: str, expected: set[tuple[str, ...]]) -> None:
    [result] = spacy_extractor.extract([text])
    assert result.error is None and {tuple_key(t) for t in result.tuples} == expected


def test_spacy_counts(spacy_extractor: SpacyExtractor) -> None:
    [result] = spacy_extractor.extract(["Two cats sleep on 3 mats."])
    counts = {t.entity: t.count for t in result.tuples if t.kind == "entity"}
    assert counts == {"cat": 2, "mat": 3}


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ('[["dog"], ["dog", "brown"], ["dog", "on", "sofa"]]', None),
        ('  []  ', None),
        ('Sure! [["dog"]]', "not one JSON array"),
        ('[["dog"]] and more', "not one JSON array"),
        ('{"tuples": []}', "a JSON dict, not an array"),
        ('["dog"]', "element 0 is not a list"),
        ('[["a", "b", "c", "d"]]', "element 0: a tuple has 1 (entity), 2 (attribute) or 3 (relation) elements"),
        ('[["dog", 3]]', "element 0: a tuple must be a list of strings"),
        ('[["dog", ""]]', "element 0: empty element"),
    ],
)
def test_strict_lm_parse(raw: str, error: str | None) -> None:
    result = parse_lm_output(raw)
    if error is None:
        assert result.error is None and result.raw == raw
    else:
        assert result.tuples == [] and error in (result.error or "") and result.raw == raw


class _TextBackend:
    """Answers each prompt with scripted text (keyed by the text being extracted)."""

    def __init__(self, answers: dict[str, str | None]) -> None:
        self.answers = answers
        self.calls = 0

    def info(self) -> dict[str, Any]:
        return {"model": "text-table"}

    def token_sets(self) -> None:
        return None

    def render_prompt(self, question: str, template: str | None) -> str:
        return question

    def answer(self, requests: Sequence[Request], config: GenerateConfig) -> Iterator[list[Response]]:
        assert config.stop_strings == ()  # extraction reads whole answers
        self.calls += 1
        out = []
        for r in requests:
            text = r.prompt.rsplit("Text: ", 1)[1].split("\n", 1)[0]
            answer = self.answers[text]
            out.append(Response(split=r.split, question_id=r.question_id, text=answer, error=None if answer is not None else "boom"))
        yield out


def test_lm_extractor_records_errors_and_caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    backend = _TextBackend({"A dog.": '[["dog"]]', "Nonsense.": "I think there is a dog.", "Broken.": None})
    extractor = LMExtractor(backend, image_path=str(tmp_path / "blank.png"), backend_name="table")
    cache = TupleCache()
    assert cache.path == tmp_path / "cache" / "prove_tuples.sqlite"
    texts = ["A dog.", "Nonsense.", "Broken."]
    first = extract_all(texts, extractor, cache)
    assert [tuple_key(t) for t in first[0].tuples] == [("entity", "dog")]
    assert "not one JSON array" in (first[1].error or "") and first[1].raw == "I think there is a dog."
    assert first[2].error == "backend error: boom"
    # a hit needs no model: only the two failures are asked again
    backend.answers["Nonsense."] = '[["dog"], ["dog", "sleeping"]]'
    second = extract_all(texts, extractor, cache)
    assert second[0] == first[0] and second[1].error is None and len(second[1].tuples) == 2
    assert backend.calls == 2
    third = extract_all(texts[:2], extractor, cache)
    assert backend.calls == 2 and third == second[:2]
    # another extractor identity does not share entries
    other = LMExtractor(backend, image_path="x.png", backend_name="table", max_new_tokens=7)
    assert other.identity != extractor.identity and cache.get(other.identity, "A dog.") is None
