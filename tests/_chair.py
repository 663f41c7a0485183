"""Shared CHAIR test helpers: the fixture's NLTK stand-in (tokens split on spaces, the tags the
fixture writes down, WordNet from Debian's files as in the real path) and COCO-shaped files."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from halluprobe.captions.chair.families import ChairFamily, wordnet_lemmatize
from halluprobe.captions.chair.vocabulary import COCO_CATEGORIES

# tags a tagger would give these words in the fixture's captions; every other word is NN
FIXTURE_TAGS = {
    "a": "DT", "the": "DT", "two": "CD", "of": "IN", "on": "IN", "in": "IN", "with": "IN", "and": "CC",
    "is": "VBZ", "are": "VBP", "red": "JJ", "hot": "JJ", "baby": "NN", "sitting": "VBG", "skiing": "VBG",
    "seating": "VBG", "training": "VBG", "tied": "VBN", "wearing": "VBG", "parked": "VBN", "dining": "VBG",
    "glasses": "NNS", "ties": "NNS", "skis": "NNS", "buses": "NNS", "bears": "NNS", "dogs": "NNS", "men": "NNS",
    "people": "NNS", "phones": "NNS", ".": ".",
}  # fmt: skip


class FixtureTools:
    """The NLTK pieces, as a fixture writes them down (the real tokenizer and tagger need data
    no test can download)."""

    identity = "fixture"

    def __init__(self, tags: dict[str, str] | None = None) -> None:
        self.tags = FIXTURE_TAGS if tags is None else tags

    def tokenize(self, text: str) -> list[str]:
        return text.split()

    def tag(self, words: list[str]) -> list[str]:
        return [self.tags.get(w, "NN") for w in words]

    def lemmatize(self, word: str, wordnet_pos: str) -> str:
        return wordnet_lemmatize(word, wordnet_pos)


def wordnet_or_skip() -> None:
    """Skip where Debian's WordNet (the lemmatizer family's) is not installed, as Auto-Probe's tests do."""
    import pytest

    from halluprobe.captions.chair.families import wordnet_lemmatize
    from halluprobe.errors import RuntimeFailure

    pytest.importorskip("nltk", reason="the probe extra (nltk) is not installed: pip install -e '.[probe]'")
    try:
        wordnet_lemmatize("dogs", "n")
    except RuntimeFailure as err:
        pytest.skip(f"WordNet unavailable ({err}); scripts/setup.sh installs wordnet-base")


def families(tags: dict[str, str] | None = None) -> dict[str, ChairFamily]:
    tools = FixtureTools(tags)
    return {
        name: ChairFamily(name, tools)
        for name in ("chair@lemmatizer", "chair@singularize")
    }


def write_coco(
    folder: Path,
    year: str,
    instances: dict[int, Iterable[str]],
    captions: dict[int, Iterable[str]],
) -> Path:
    """COCO-shaped instances/captions files (val holds every image, train none)."""
    folder.mkdir(parents=True, exist_ok=True)
    cats = [
        {"id": i + 1, "name": name, "supercategory": "x"}
        for i, name in enumerate(COCO_CATEGORIES)
    ]
    ids = {c["name"]: c["id"] for c in cats}
    images = sorted({*instances, *captions})
    inst = {"images": [{"id": i} for i in images], "categories": cats,
            "annotations": [{"id": k, "image_id": i, "category_id": ids[n]}
                            for k, (i, n) in enumerate((i, n) for i, ns in instances.items() for n in ns)]}  # fmt: skip
    caps = {"images": [{"id": i} for i in images],
            "annotations": [{"id": k, "image_id": i, "caption": c}
                            for k, (i, c) in enumerate((i, c) for i, cs in captions.items() for c in cs)]}  # fmt: skip
    (folder / f"instances_val{year}.json").write_text(json.dumps(inst))
    (folder / f"captions_val{year}.json").write_text(json.dumps(caps))
    empty = {"images": [], "annotations": [], "categories": cats}
    (folder / f"instances_train{year}.json").write_text(json.dumps(empty))
    (folder / f"captions_train{year}.json").write_text(
        json.dumps({"images": [], "annotations": []})
    )
    return folder
