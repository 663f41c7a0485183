"""RLAIF-V's Object HalBench word reader, judge-free (``eval/eval_gpt_obj_halbench.py`` without
``--use_gpt``), transcribed rule for rule.

How it differs from the CHAIR families (``captions/chair/families.py``):

- the synonym table is ``synonyms_refine.txt`` (pinned, :mod:`.sources`), and every entry is
  stripped after the ``", "`` split, so no entry keeps a leading space;
- every synonym of two or more words is a double word (plus ``home plate`` and ``train track``),
  then the same baby/adult animal, passenger jet/train, bow tie, toilet seat and ``wine glas``
  rules as CHAIR;
- every token is lemmatized by WordNet as a noun (``WordNetLemmatizer().lemmatize(w)``: no
  part-of-speech tagger), so no tagger data is needed.

The word extractor is a seam (:class:`WordExtractor`): the judge-free one reads the caption;
``--use_gpt``'s role (a language model lists the objects, :func:`extracted_objects` maps them) is
the judge path (:mod:`.extract`, ``judging/objhal_judge.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from halluprobe.captions.chair.families import CaptionObjects
from halluprobe.captions.chair.vocabulary import merge_double_words, with_modifier_words
from halluprobe.errors import InputError

__all__ = [
    "EXTRA_DOUBLE_WORDS",
    "ObjhalVocabulary",
    "RuleExtractor",
    "WordExtractor",
    "WordTools",
    "caption_objects",
    "extracted_objects",
    "parse_synonyms",
    "read_synonyms",
]

EXTRA_DOUBLE_WORDS: tuple[str, ...] = ("home plate", "train track")


@dataclass(frozen=True)
class ObjhalVocabulary:
    """``objects``: every synonym; ``node_of``: synonym -> its line's first entry (a later line
    wins, as the script's dict); ``double_words``: two-word string -> the word it is read as."""

    objects: frozenset[str]
    node_of: dict[str, str]
    double_words: dict[str, str]


def parse_synonyms(text: str) -> ObjhalVocabulary:
    """The script's parse of ``synonyms_refine.txt``, quirks kept (an empty line adds ``""``)."""
    objects: set[str] = set()
    node_of: dict[str, str] = {}
    for line in text.splitlines():
        entries = [s.strip() for s in line.strip().split(", ")]
        objects.update(entries)
        for word in entries:
            node_of[word] = entries[0]
    doubles = [w for w in node_of if len(w.strip().split(" ")) >= 2] + list(EXTRA_DOUBLE_WORDS)
    double_words = with_modifier_words({w: w for w in doubles})
    return ObjhalVocabulary(frozenset(objects), node_of, double_words)


def read_synonyms(path: Path) -> ObjhalVocabulary:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the synonym table: {e}", path) from None
    if not text.strip():
        raise InputError("the synonym table is empty", path)
    return parse_synonyms(text)


class WordTools(Protocol):
    """The NLTK pieces the reader needs (``captions.chair.families.NltkTools`` is one)."""

    identity: str

    def tokenize(self, text: str) -> list[str]: ...

    def lemmatize(self, word: str, wordnet_pos: str) -> str: ...


def _coco_words(vocab: ObjhalVocabulary, kept: list[str], starts: list[int], merged: list[str]) -> CaptionObjects:
    if "toilet" in kept and "seat" in kept:  # "the seat of the toilet" is no chair
        kept = [w for w in kept if w != "seat"]
    # positions enumerate the seat-less list against the unfiltered starts, as the script does
    positions = tuple(starts[k] for k, w in enumerate(kept) if w in vocab.objects)
    found = tuple(w for w in kept if w in vocab.objects)
    return CaptionObjects(found, tuple(vocab.node_of[w] for w in found), positions, tuple(merged))


def caption_objects(vocab: ObjhalVocabulary, tools: WordTools, caption: str) -> CaptionObjects:
    """The script's ``caption_to_words``: lower-case, tokenize, noun lemmas, double words."""
    words = [tools.lemmatize(w, "n") for w in tools.tokenize(caption.lower())]
    merged, starts = merge_double_words(words, vocab.double_words)
    return _coco_words(vocab, merged, starts, merged)


def extracted_objects(vocab: ObjhalVocabulary, words: list[str]) -> CaptionObjects:
    """The script's ``caption_objects_to_coco_objects``: words an extractor listed (after its
    own normalisation) -> COCO objects; the judge path's last step."""
    return _coco_words(vocab, list(words), list(range(len(words))), list(words))


class WordExtractor(Protocol):
    """Caption -> the COCO objects it mentions; ``identity`` is recorded with every result."""

    identity: dict[str, str]

    def objects(self, question: str, caption: str) -> CaptionObjects: ...


class RuleExtractor:
    """The judge-free extractor (the script without ``--use_gpt``)."""

    def __init__(self, vocab: ObjhalVocabulary, tools: WordTools) -> None:
        self.vocab = vocab
        self.tools = tools
        self.identity = {"extractor": "rules", "rules": "RLAIF-V eval_gpt_obj_halbench.py without --use_gpt", "tools": tools.identity}

    def objects(self, question: str, caption: str) -> CaptionObjects:
        return caption_objects(self.vocab, self.tools, caption)
