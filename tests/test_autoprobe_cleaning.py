"""Auto-Probe cleaning: table tests of hard words on the real WordNet 3.0 (Debian's files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from halluprobe.benchmarks.autoprobe import wordnet as wordnet_module
from halluprobe.errors import RuntimeFailure

pytest.importorskip("nltk", reason="the probe extra (nltk) is not installed: pip install -e '.[probe]'")
pytest.importorskip("inflect", reason="the probe extra (inflect) is not installed: pip install -e '.[probe]'")


@pytest.fixture(scope="module")
def wn() -> Any:
    # the user cache, as the library uses it: one reader per process for every test module
    try:
        return wordnet_module.load_wordnet()
    except RuntimeFailure as err:
        pytest.skip(f"WordNet unavailable ({err}); scripts/setup.sh installs wordnet-base and wordnet-sense-index")


def test_loader_names_the_debian_packages_when_files_are_missing(tmp_path: Path) -> None:
    with pytest.raises(RuntimeFailure, match="wordnet-base and wordnet-sense-index"):
        wordnet_module.wordnet_data_dir(source=tmp_path, cache=tmp_path / "cache")


def test_loader_uses_the_project_cache_dir(wn: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "project-cache"))
    root = wordnet_module.wordnet_data_dir()
    assert root == tmp_path / "project-cache" / "nltk_data"
    assert (root / "corpora" / "wordnet" / "lexnames").is_file()


def test_loader_writes_the_45_lexnames(wn: Any, tmp_path: Path) -> None:
    assert len(wordnet_module.LEXNAMES) == 45
    root = wordnet_module.wordnet_data_dir(cache=tmp_path)
    corpus = root / "corpora" / "wordnet"
    lines = (corpus / "lexnames").read_text().splitlines()
    assert lines[3] == "03\tnoun.Tops\t1" and lines[44] == "44\tadj.ppl\t3"
    assert all((corpus / name).is_file() and not (corpus / name).is_symlink() for name in wordnet_module.REQUIRED_FILES)
    assert wn.synset("umbrella.n.01").lexname() == "noun.artifact"
    assert wn.synset("cat.n.01").lexname() == "noun.animal"


@pytest.mark.parametrize(
    ("word", "kept"),
    [
        ("mood", False),
        ("atmosphere", False),  # its 3rd-5th senses are physical: any-sense would keep it
        ("background", False),
        ("color", False),
        ("detail", False),
        ("umbrella", True),
        ("table", True),  # first sense is a table of data: first-sense-only would drop it
        ("shadow", True),
        ("wine glass", True),  # not in WordNet as a phrase: 'wineglass'
        ("coffee", True),
        ("mug", True),
    ],
)
def test_abstract_concepts_leave(wn: Any, word: str, kept: bool) -> None:
    from halluprobe.benchmarks.autoprobe.cleaning import physical_sense

    sense, reason = physical_sense(word, wn)
    assert (sense is not None) is kept, reason


@pytest.mark.parametrize(
    ("word", "singular"),
    [
        ("bus", "bus"),  # inflect says 'bu', and pluralising 'bu' gives 'bus' back
        ("buses", "bus"),
        ("lens", "lens"),
        ("cactus", "cactus"),
        ("wine glasses", "wine glass"),
        ("people", "person"),
        ("knives", "knife"),
        ("mice", "mouse"),
        ("sheep", "sheep"),
        ("glass", "glass"),
        ("benches", "bench"),
    ],
)
def test_singular_is_guarded(wn: Any, word: str, singular: str) -> None:
    from halluprobe.benchmarks.autoprobe.cleaning import singularize

    assert singularize(word, wn)[0] == singular


def test_clean_mentions_records_every_fate(wn: Any) -> None:
    from halluprobe.benchmarks.autoprobe.cleaning import clean_mentions

    mentions = ["The mood", "atmosphere", "umbrellas", "a sofa", "couch", "motorbike", "Buses", "two wine glasses", "the"]
    out = {c.mention: c for c in clean_mentions(mentions, wn)}
    assert [c.mention for c in clean_mentions(mentions, wn)] == mentions
    assert out["The mood"].name is None and out["The mood"].dropped_by.step == "abstract"
    assert "temper.n.02" in out["The mood"].dropped_by.reason
    assert out["atmosphere"].name is None
    assert out["the"].dropped_by.step == "normalize"
    assert out["umbrellas"].name == "umbrella"
    # sofa and couch share sofa.n.01; the COCO name represents the group
    assert out["a sofa"].name == "couch" and out["couch"].name == "couch"
    assert out["a sofa"].steps[-1].step == "synonym" and "sofa.n.01" in out["a sofa"].steps[-1].reason
    assert out["motorbike"].name == "motorcycle"
    assert out["Buses"].name == "bus"
    assert out["two wine glasses"].name == "wine glass"


def test_a_lone_synonym_of_a_coco_name_takes_the_coco_name(wn: Any) -> None:
    from halluprobe.benchmarks.autoprobe.cleaning import clean_mentions

    assert [c.name for c in clean_mentions(["sofa", "necktie", "automobile", "lamp"], wn)] == ["couch", "tie", "car", "lamp"]


def test_synonyms_without_a_coco_name_take_the_most_mentioned(wn: Any) -> None:
    from halluprobe.benchmarks.autoprobe.cleaning import clean_mentions

    names = [c.name for c in clean_mentions(["automobile", "car", "auto"], wn)]
    assert names == ["car", "car", "car"]  # car is COCO
    names = [c.name for c in clean_mentions(["trash can", "garbage can", "garbage can", "wastebin", "lamp"], wn)]
    assert names == ["garbage can"] * 4 + ["lamp"]
