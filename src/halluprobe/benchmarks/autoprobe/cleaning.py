"""Cleaning of extracted object mentions, every step recorded so a reader sees why an object left.

Steps, in order (one :class:`CleaningStep` per step that looked at a mention):

1. ``normalize``: lower case, punctuation and leading determiners ("a", "the", "two") removed.
2. ``singular``: the singular form, guarded. ``inflect`` alone turns "bus" into "bu" and pluralising
   "bu" gives "bus" back, so the round-trip guard is not enough: a singular is accepted only if
   (a) pluralising it gives the word back and (b) its head word is a WordNet noun (or the word
   itself is unknown to WordNet too). Multiword names singularise their head ("wine glasses" ->
   "wine glass").
3. ``abstract``: kept when one of the first two WordNet noun senses (WordNet orders senses by
   tagged frequency) reaches ``physical_entity.n.01`` through hypernyms or instance hypernyms.
   Looked up as the whole name ("dining_table"), joined ("wineglass"), then its head ("glass").
   Any-sense would keep "atmosphere" (its fifth sense is the air around the Earth); first-sense
   only would drop "table" (its first sense is a table of data). COCO category names are kept
   without the check. The deciding sense is recorded. Words for parts of space
   (:data:`SPATIAL_WORDS`: "front" from "in front of", "top", "background") leave here too:
   WordNet files some of them under physical_entity through "side" or "surface".
4. ``synonym``: names whose deciding senses are the same synset ("sofa", "couch": ``sofa.n.01``)
   or that a short alias table maps to a COCO name ("motorbike" -> "motorcycle") form one group,
   and every COCO name's own deciding sense joins the groups (a lone "sofa" becomes "couch");
   its representative is the COCO name in the group, else the most mentioned name (ties: the
   shorter, then alphabetical). Merging is over all mentions given at once, so call
   :func:`clean_mentions` once per benchmark, not per image.
"""

from __future__ import annotations

import functools
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field

from halluprobe.benchmarks.autoprobe.wordnet import load_wordnet
from halluprobe.benchmarks.coco import COCO_CATEGORY_NAMES
from halluprobe.records import FrozenRecord

__all__ = [
    "COCO_ALIASES",
    "SPATIAL_WORDS",
    "CleaningStep",
    "CleanedObject",
    "normalize_mention",
    "singularize",
    "physical_sense",
    "clean_mentions",
]

StepName = Literal["normalize", "singular", "abstract", "synonym"]

# variants WordNet does not put into the COCO name's synset
COCO_ALIASES: dict[str, str] = {
    "motorbike": "motorcycle",
    "aeroplane": "airplane",
    "cellphone": "cell phone",
    "mobile phone": "cell phone",
    "smartphone": "cell phone",
    "hair dryer": "hair drier",
    "doughnut": "donut",
    "hotdog": "hot dog",
    "television": "tv",
}

_DETERMINERS = frozenset(
    "a an the some several many few two three four five six seven eight nine ten one "
    "this that these those his her its their my your our".split()
)
_NON_WORD = re.compile(r"[^a-z0-9 \-]+")
_PHYSICAL = "physical_entity.n.01"
# parts of space, not objects ("in front of", "on top of", "in the background"): WordNet files
# some of them (front.n.01, top.n.01) under physical_entity through "side" / "surface"
SPATIAL_WORDS = frozenset(
    "front back top bottom side middle center centre left right background foreground distance rest "
    "edge corner surroundings area part".split()
)
_SENSES_CONSIDERED = 2


class CleaningStep(FrozenRecord):
    step: StepName
    before: str
    after: str | None  # None: the mention left here
    reason: str


class CleanedObject(FrozenRecord):
    """One mention and its fate: the final name, or None with the step that dropped it."""

    mention: str
    name: str | None
    sense: str | None = None
    steps: list[CleaningStep] = Field(default_factory=list)

    @property
    def kept(self) -> bool:
        return self.name is not None

    @property
    def dropped_by(self) -> CleaningStep | None:
        return next((s for s in self.steps if s.after is None), None)


@functools.lru_cache(maxsize=1)
def _inflect() -> Any:
    import inflect

    return inflect.engine()


def _wordnet() -> Any:

    return load_wordnet()


def normalize_mention(mention: str) -> str:
    """Lower case, punctuation out, whitespace collapsed, leading determiners and numbers removed."""
    words = _NON_WORD.sub(" ", mention.lower().replace("_", " ")).split()
    while words and (words[0] in _DETERMINERS or words[0].isdigit()):
        words = words[1:]
    return " ".join(words)


def _is_noun(wn: Any, word: str) -> bool:
    return bool(wn.synsets(word.replace(" ", "_"), pos="n"))


def singularize(name: str, wn: Any | None = None) -> tuple[str, str]:
    """The guarded singular of ``name`` and the reason (see the module docstring)."""
    wn = wn if wn is not None else _wordnet()
    engine = _inflect()
    head_prefix, _, head = name.rpartition(" ")
    singular_head = engine.singular_noun(head)
    if not singular_head or singular_head == head:
        return name, "already singular"
    if engine.plural_noun(singular_head) != head:
        return name, f"inflect's singular {singular_head!r} does not pluralise back to {head!r}"
    if not _is_noun(wn, singular_head) and _is_noun(wn, head):
        return name, f"inflect's singular {singular_head!r} is not a WordNet noun, {head!r} is"
    singular = f"{head_prefix} {singular_head}" if head_prefix else singular_head
    return singular, f"{head!r} -> {singular_head!r}"


def _lookup_forms(name: str) -> list[str]:
    forms = [name.replace(" ", "_")]
    if " " in name:
        forms += [name.replace(" ", ""), name.rsplit(" ", 1)[1]]
    return forms


def physical_sense(name: str, wn: Any | None = None) -> tuple[str | None, str]:
    """The first of the first two noun senses that reaches ``physical_entity.n.01``, and why.

    Returns ``(synset name or None, reason)``. Forms tried: the whole name, joined, the head.
    """
    wn = wn if wn is not None else _wordnet()
    physical = wn.synset(_PHYSICAL)
    for form in _lookup_forms(name):
        senses = wn.synsets(form, pos="n")
        if not senses:
            continue
        for sense in senses[:_SENSES_CONSIDERED]:
            if physical in sense.closure(lambda s: s.hypernyms() + s.instance_hypernyms()):
                return sense.name(), f"{form!r}: sense {sense.name()} is a physical entity"
        firsts = ", ".join(s.name() for s in senses[:_SENSES_CONSIDERED])
        return None, f"{form!r}: no physical entity among its first senses ({firsts})"
    return None, f"not a WordNet noun (tried {', '.join(repr(f) for f in _lookup_forms(name))})"


def _representative(group: Sequence[str], counts: Counter[str]) -> str:
    coco = sorted(n for n in group if n in COCO_CATEGORY_NAMES)
    if coco:
        return coco[0]
    return min(group, key=lambda n: (-counts[n], len(n), n))


def clean_mentions(mentions: Sequence[str], wn: Any | None = None) -> list[CleanedObject]:
    """Clean every mention (one :class:`CleanedObject` each, in order), merging synonyms across all."""
    wn = wn if wn is not None else _wordnet()
    staged: list[tuple[str, str | None, str | None, list[CleaningStep]]] = []
    for mention in mentions:
        steps: list[CleaningStep] = []
        name = normalize_mention(mention)
        if not name:
            steps.append(CleaningStep(step="normalize", before=mention, after=None, reason="nothing left after normalising"))
            staged.append((mention, None, None, steps))
            continue
        if name != mention:
            steps.append(CleaningStep(step="normalize", before=mention, after=name, reason="lower case, determiners out"))
        singular, why = singularize(name, wn)
        steps.append(CleaningStep(step="singular", before=name, after=singular, reason=why))
        sense, why = physical_sense(singular, wn)
        if singular in SPATIAL_WORDS:
            steps.append(CleaningStep(step="abstract", before=singular, after=None, reason="a word for a part of space, not an object"))
            staged.append((mention, None, None, steps))
            continue
        if singular in COCO_CATEGORY_NAMES or singular in COCO_ALIASES:
            kind = "a COCO category name" if singular in COCO_CATEGORY_NAMES else "an alias of a COCO category name"
            steps.append(CleaningStep(step="abstract", before=singular, after=singular, reason=kind))
        elif sense is None:
            steps.append(CleaningStep(step="abstract", before=singular, after=None, reason=why))
            staged.append((mention, None, None, steps))
            continue
        else:
            steps.append(CleaningStep(step="abstract", before=singular, after=singular, reason=why))
        staged.append((mention, singular, sense, steps))

    # synonym groups: union of names sharing a deciding sense, plus the alias table
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        while parent.setdefault(x, x) != x:
            x = parent[x]
        return x

    # every COCO name's deciding sense seeds a group, so a lone "sofa" still becomes "couch"
    by_sense: dict[str, str] = {}
    for coco in COCO_CATEGORY_NAMES:
        coco_sense, _ = physical_sense(coco, wn)
        if coco_sense is not None:
            by_sense.setdefault(coco_sense, coco)
    for _, name, sense, _ in staged:
        if name is None:
            continue
        find(name)
        if name in COCO_ALIASES:
            parent[find(name)] = find(COCO_ALIASES[name])
        if sense is not None:
            if sense in by_sense:
                parent[find(name)] = find(by_sense[sense])
            else:
                by_sense[sense] = name
    groups: dict[str, list[str]] = {}
    for name in list(parent):
        groups.setdefault(find(name), []).append(name)
    counts = Counter(name for _, name, _, _ in staged if name is not None)
    rep_of = {name: _representative(members, counts) for members in groups.values() for name in members}

    cleaned: list[CleanedObject] = []
    for mention, name, sense, steps in staged:
        if name is None:
            cleaned.append(CleanedObject(mention=mention, name=None, steps=steps))
            continue
        rep = rep_of[name]
        if rep != name:
            members = sorted(m for m, r in rep_of.items() if r == rep)
            why = f"alias of the COCO name {rep!r}" if COCO_ALIASES.get(name) == rep else f"synonyms {members} share {sense}; {rep!r} represents them"
            steps = [*steps, CleaningStep(step="synonym", before=name, after=rep, reason=why)]
        cleaned.append(CleanedObject(mention=mention, name=rep, sense=sense, steps=steps))
    return cleaned
