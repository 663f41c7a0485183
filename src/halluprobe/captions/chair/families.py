"""The two CHAIR normaliser families: caption -> the COCO objects it mentions.

Both follow ``caption_to_words`` of the evaluators: lower-case, NLTK ``word_tokenize``,
normalise each token (family-specific), merge double words left to right, drop ``seat`` when
``toilet`` is also there, keep the words of the synonym table and map each to its category.

- ``chair@lemmatizer`` (shikiw/OPERA ``chair.py``, 2023-11-30): ``pos_tag`` the tokens, then the
  WordNet lemmatizer with the tag's WordNet part of speech (noun when the tag maps to none).
- ``chair@singularize`` (LisaAnne/Hallucination, Maxlinn/CHAIR-metric-standalone): pattern's
  ``singularize`` on every token (:mod:`.singularize`).

The NLTK pieces (tokenizer, tagger) come through :class:`TextTools` so that tests can supply
what a fixture writes down; :class:`NltkTools` is the real one, reading NLTK's standard data
locations and WordNet from Debian's ``wordnet-base`` (as Auto-Probe does).

``word_tokenize`` first splits sentences with punkt (``punkt_tab`` data), then runs the
Treebank word tokenizer on each. :class:`NltkLineTools` (tokenizer ``line``) skips the sentence
split (``word_tokenize(text, preserve_line=True)``) and so needs no punkt data: the same tokens
for a one-sentence caption; on several sentences only a full stop ending a non-final sentence
stays attached to its word (which then matches no object). Its identity says so, so a table
records which tokenizer counted.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from halluprobe.benchmarks.autoprobe.wordnet import load_wordnet
from halluprobe.captions.chair.singularize import singularize
from halluprobe.captions.chair.vocabulary import merge_double_words, vocabulary
from halluprobe.errors import InputError, RuntimeFailure

__all__ = [
    "counting_options",
    "FAMILIES",
    "FAMILY_SOURCES",
    "NLTK_DOWNLOAD",
    "TOKENIZERS",
    "CaptionObjects",
    "ChairFamily",
    "NltkLineTools",
    "NltkTools",
    "TextTools",
    "family_named",
]

FAMILIES: tuple[str, ...] = ("chair@lemmatizer", "chair@singularize")
FAMILY_SOURCES: dict[str, str] = {
    "chair@lemmatizer": "shikiw/OPERA chair.py (2023-11-30): nltk word_tokenize + pos_tag + WordNet lemmatizer",
    "chair@singularize": "LisaAnne/Hallucination utils/chair.py, Maxlinn/CHAIR-metric-standalone: nltk word_tokenize + pattern singularize",
}
NLTK_DOWNLOAD = (
    "python -m nltk.downloader punkt_tab averaged_perceptron_tagger_eng wordnet"
)
# how captions are split into words: NLTK's word_tokenize (punkt sentences, then Treebank
# words; the evaluators' way) or the Treebank words on the whole caption (no punkt data needed)
TOKENIZERS: tuple[str, ...] = ("punkt", "line")


class TextTools(Protocol):
    """What the families need of NLTK."""

    identity: str

    def tokenize(self, text: str) -> list[str]: ...

    def tag(self, words: list[str]) -> list[str]: ...

    def lemmatize(self, word: str, wordnet_pos: str) -> str: ...


def _import_nltk() -> None:
    try:
        import nltk  # noqa: F401
    except ImportError:
        raise RuntimeFailure("CHAIR reads captions with nltk, which is not installed: pip install 'halluprobe[probe]'") from None


def _need_nltk_data(resource: str, what: str) -> None:
    import nltk

    try:
        nltk.data.find(resource)
    except LookupError:
        raise RuntimeFailure(
            f"NLTK's {what} ({resource}) is missing; get it with: {NLTK_DOWNLOAD}"
        ) from None


@functools.lru_cache(maxsize=1)
def _wordnet() -> object:

    return load_wordnet()


def wordnet_lemmatize(word: str, wordnet_pos: str) -> str:
    """NLTK's ``WordNetLemmatizer.lemmatize``: the shortest of WordNet's morphy lemmas, else the word."""
    lemmas = _wordnet()._morphy(word, wordnet_pos)  # type: ignore[attr-defined]
    return min(lemmas, key=len) if lemmas else word


class NltkTools:
    """NLTK's ``word_tokenize`` (punkt_tab) and ``pos_tag`` (averaged_perceptron_tagger_eng), read
    from NLTK's standard data locations; WordNet from Debian's files. Missing data is one line
    naming what is missing and how to get it."""

    tokenizer = "punkt"  # the name in TOKENIZERS (a table's provenance records it)

    def __init__(self, need_tagger: bool = True) -> None:
        _import_nltk()
        import nltk

        _need_nltk_data("tokenizers/punkt_tab/english/", "tokenizer")
        if need_tagger:
            _need_nltk_data(
                "taggers/averaged_perceptron_tagger_eng/", "part-of-speech tagger"
            )
        self.identity = f"nltk {nltk.__version__}"

    def tokenize(self, text: str) -> list[str]:
        import nltk

        return list(nltk.word_tokenize(text))

    def tag(self, words: list[str]) -> list[str]:
        import nltk

        return [tag for _, tag in nltk.pos_tag(words)]

    def lemmatize(self, word: str, wordnet_pos: str) -> str:
        return wordnet_lemmatize(word, wordnet_pos)


class NltkLineTools(NltkTools):
    """:class:`NltkTools` with ``word_tokenize(text, preserve_line=True)``: no punkt sentence
    split, so no punkt data (the tagger, for the lemmatizer family, is still NLTK's)."""

    tokenizer = "line"

    def __init__(self, need_tagger: bool = True) -> None:
        _import_nltk()
        import nltk

        if need_tagger:
            _need_nltk_data("taggers/averaged_perceptron_tagger_eng/", "part-of-speech tagger")
        self.identity = f"nltk {nltk.__version__} word_tokenize(preserve_line=True): Treebank words, no punkt sentence split"

    def tokenize(self, text: str) -> list[str]:
        import nltk

        return list(nltk.word_tokenize(text, preserve_line=True))


@dataclass(frozen=True)
class CaptionObjects:
    """What a family reads in one caption, as the evaluator's ``caption_to_words`` returns it.

    ``words``: the synonym-table words found; ``objects``: their COCO categories; ``positions``:
    the evaluator's word index of each (``hallucination_idxs``; after a dropped ``seat`` they are
    shifted exactly as in the original); ``tokens``: the normalised words after double-word
    merging (their count is the caption length CHAIR reports)."""

    words: tuple[str, ...]
    objects: tuple[str, ...]
    positions: tuple[int, ...]
    tokens: tuple[str, ...]


def _wordnet_pos(tag: str) -> str:
    # OPERA's get_wordnet_pos, with its "or wordnet.NOUN"
    if tag.startswith("J"):
        return "a"
    if tag.startswith("V"):
        return "v"
    if tag.startswith("N"):
        return "n"
    if tag.startswith("R"):
        return "r"
    return "n"


class ChairFamily:
    """One normaliser family (``name`` in :data:`FAMILIES`) over ``tools``."""

    def __init__(self, name: str, tools: TextTools) -> None:
        if name not in FAMILIES:
            raise ValueError(f"unknown CHAIR family {name!r}")
        self.name = name
        self.tools = tools
        self._normalise: Callable[[list[str]], list[str]] = (
            self._lemmatize
            if name == "chair@lemmatizer"
            else lambda words: [singularize(w) for w in words]
        )

    @property
    def tokenizer(self) -> str:
        """The tools' tokenizer, a name in :data:`TOKENIZERS` (tools that name none: punkt's)."""
        return str(getattr(self.tools, "tokenizer", "punkt"))

    @property
    def identity(self) -> dict[str, str]:
        return {
            "family": self.name,
            "rules": FAMILY_SOURCES[self.name],
            "tools": self.tools.identity,
        }

    def _lemmatize(self, words: list[str]) -> list[str]:
        tags = self.tools.tag(words)
        return [
            self.tools.lemmatize(word, _wordnet_pos(tag))
            for word, tag in zip(words, tags)
        ]

    def caption_objects(self, caption: str) -> CaptionObjects:
        vocab = vocabulary()
        words = self._normalise(self.tools.tokenize(caption.lower()))
        merged, starts = merge_double_words(words, vocab.double_words)
        kept = merged
        if "toilet" in kept and "seat" in kept:  # "the seat of the toilet" is no chair
            kept = [w for w in kept if w != "seat"]
        # enumerate the seat-less list against the unfiltered starts, as the original does
        positions = tuple(starts[k] for k, w in enumerate(kept) if w in vocab.objects)
        found = tuple(w for w in kept if w in vocab.objects)
        return CaptionObjects(
            found, tuple(vocab.node_of[w] for w in found), positions, tuple(merged)
        )


def counting_options(family: str, tokenizer: str, *, allow_both: bool) -> tuple[tuple[str, ...], str]:
    """``--family`` and ``--tokenizer`` of the verbs that count CHAIR (chair, decoding, report),
    read alike: (full family names, tokenizer); one line for anything else. ``family`` may be
    ``lemmatizer``, ``singularize``, their ``chair@`` names, or ``both`` where ``allow_both``."""
    short = family.removeprefix("chair@")
    if allow_both and short == "both":
        names: tuple[str, ...] = FAMILIES
    elif f"chair@{short}" in FAMILIES:
        names = (f"chair@{short}",)
    else:
        choices = "lemmatizer, singularize or both" if allow_both else "lemmatizer or singularize"
        raise InputError(f"--family must be {choices}, not {family!r}")
    if tokenizer not in TOKENIZERS:
        raise InputError(f"--tokenizer must be {' or '.join(TOKENIZERS)}, not {tokenizer!r}")
    return names, tokenizer


def family_named(name: str, tools: TextTools | None = None, *, tokenizer: str = "punkt") -> ChairFamily:
    """The family ``name`` (``lemmatizer``/``singularize`` accepted for ``chair@...``) on
    ``tools`` (default: the real NLTK tools with ``tokenizer`` from :data:`TOKENIZERS`; the
    singularize family needs no tagger)."""
    full = name if name.startswith("chair@") else f"chair@{name}"
    if full not in FAMILIES:
        raise ValueError(f"unknown CHAIR family {name!r}; known: {', '.join(FAMILIES)}")
    if tokenizer not in TOKENIZERS:
        raise ValueError(f"unknown CHAIR tokenizer {tokenizer!r}; known: {', '.join(TOKENIZERS)}")
    if tools is None:
        kind = NltkTools if tokenizer == "punkt" else NltkLineTools
        tools = kind(need_tagger=full == "chair@lemmatizer")
    return ChairFamily(full, tools)
