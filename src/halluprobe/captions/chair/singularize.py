"""pattern's ``singularize`` (CLiPS Pattern, ``pattern/text/en/inflect.py``; rules adapted there
from Bermi Ferrer's Inflector, BSD), transcribed as the rules the original CHAIR evaluator ran.

The rules are applied exactly as pattern applies them, quirks included: a word that is the
tail of an uninflected or uncountable word is returned unchanged (``"on"``: the end of
``"salmon"``), the ``-ie`` exceptions written ``"^tie"``/``"^pie"`` never match (so ``ties`` ->
``ty``), ``bus`` loses its ``s`` (``bu``), ``glass`` becomes ``glas`` and the ``[octop|vir]i``
rule is a character class. ``pip install pattern`` no longer gives this package, hence the
transcription.
"""

from __future__ import annotations

import re

__all__ = ["singularize"]

_PREPOSITIONS = frozenset((
    "about", "before", "during", "of", "till", "above", "behind", "except", "off", "to", "across", "below",
    "for", "on", "under", "after", "beneath", "from", "onto", "until", "among", "beside", "in", "out", "unto",
    "around", "besides", "into", "over", "upon", "at", "between", "near", "since", "with", "athwart",
    "betwixt", "beyond", "but", "by",
))  # fmt: skip

# (pattern, replacement), tried in order; the first that matches wins
_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple((re.compile(p), r) for p, r in (
    (r"(?i)(.)ae$", r"\1a"), (r"(?i)(.)itis$", r"\1itis"), (r"(?i)(.)eaux$", r"\1eau"),
    (r"(?i)(quiz)zes$", r"\1"), (r"(?i)(matr)ices$", r"\1ix"), (r"(?i)(ap|vert|ind)ices$", r"\1ex"),
    (r"(?i)^(ox)en", r"\1"), (r"(?i)(alias|status)es$", r"\1"), (r"(?i)([octop|vir])i$", r"\1us"),
    (r"(?i)(cris|ax|test)es$", r"\1is"), (r"(?i)(shoe)s$", r"\1"), (r"(?i)(o)es$", r"\1"),
    (r"(?i)(bus)es$", r"\1"), (r"(?i)([m|l])ice$", r"\1ouse"), (r"(?i)(x|ch|ss|sh)es$", r"\1"),
    (r"(?i)(m)ovies$", r"\1ovie"), (r"(?i)(.)ombies$", r"\1ombie"), (r"(?i)(s)eries$", r"\1eries"),
    (r"(?i)([^aeiouy]|qu)ies$", r"\1y"),
    # -f, -fe sometimes take -ves in the plural (lives, wolves)
    (r"([aeo]l)ves$", r"\1f"), (r"([^d]ea)ves$", r"\1f"), (r"arves$", "arf"), (r"erves$", "erve"),
    (r"([nlw]i)ves$", r"\1fe"), (r"(?i)([lr])ves$", r"\1f"), (r"([aeo])ves$", r"\1ve"),
    (r"(?i)(sive)s$", r"\1"), (r"(?i)(tive)s$", r"\1"), (r"(?i)(hive)s$", r"\1"), (r"(?i)([^f])ves$", r"\1fe"),
    # -ses
    (r"(?i)(^analy)ses$", r"\1sis"),
    (r"(?i)((a)naly|(b)a|(d)iagno|(p)arenthe|(p)rogno|(s)ynop|(t)he)ses$", r"\1\2sis"),
    (r"(?i)(.)opses$", r"\1opsis"), (r"(?i)(.)yses$", r"\1ysis"), (r"(?i)(h|d|r|o|n|b|cl|p)oses$", r"\1ose"),
    (r"(?i)(fruct|gluc|galact|lact|ket|malt|rib|sacchar|cellul)ose$", r"\1ose"), (r"(?i)(.)oses$", r"\1osis"),
    # -a
    (r"(?i)([ti])a$", r"\1um"), (r"(?i)(n)ews$", r"\1ews"), (r"(?i)s$", ""),
))  # fmt: skip

_UNINFLECTED = (
    "bison", "bream", "breeches", "britches", "carp", "chassis", "christmas", "clippers", "cod", "contretemps",
    "corps", "debris", "diabetes", "djinn", "eland", "elk", "flounder", "gallows", "georgia", "graffiti",
    "headquarters", "herpes", "high-jinks", "homework", "innings", "jackanapes", "mackerel", "measles", "mews",
    "mumps", "news", "pincers", "pliers", "proceedings", "rabies", "salmon", "scissors", "series", "shears",
    "species", "swine", "swiss", "trout", "tuna", "whiting", "wildebeest",
)  # fmt: skip
_UNCOUNTABLE = (
    "advice", "bread", "butter", "cheese", "electricity", "equipment", "fruit", "furniture", "garbage", "gravel",
    "happiness", "information", "ketchup", "knowledge", "love", "luggage", "mathematics", "mayonnaise", "meat",
    "mustard", "news", "progress", "research", "rice", "sand", "software", "understanding", "water",
)  # fmt: skip
# pattern writes two of these as "^pie" and "^tie" and compares literally: they never match
_IE_WORDS = (
    "alergie", "auntie", "beanie", "birdie", "bogie", "bombie", "collie", "cookie", "cutie", "doggie", "eyrie",
    "freebie", "goonie", "groupie", "hankie", "hippie", "hoagie", "hottie", "indie", "junkie", "laddie",
    "laramie", "lingerie", "meanie", "newbie", "nightie", "oldie", "^pie", "pixie", "quickie", "reverie",
    "rookie", "softie", "sortie", "stoolie", "sweetie", "techie", "^tie", "toughie", "valkyrie", "veggie",
    "weenie", "yuppie", "zombie",
)  # fmt: skip
# irregular plural tail -> singular tail, tried in this order
_IRREGULAR: tuple[tuple[str, str], ...] = (
    ("atlantes", "atlas"), ("atlases", "atlas"), ("axes", "axe"), ("beeves", "beef"), ("brethren", "brother"),
    ("children", "child"), ("corpora", "corpus"), ("corpuses", "corpus"), ("ephemerides", "ephemeris"),
    ("feet", "foot"), ("ganglia", "ganglion"), ("geese", "goose"), ("genera", "genus"), ("genii", "genie"),
    ("graffiti", "graffito"), ("helves", "helve"), ("kine", "cow"), ("leaves", "leaf"), ("loaves", "loaf"),
    ("men", "man"), ("mongooses", "mongoose"), ("monies", "money"), ("moves", "move"), ("mythoi", "mythos"),
    ("numena", "numen"), ("occipita", "occiput"), ("octopodes", "octopus"), ("opera", "opus"),
    ("opuses", "opus"), ("our", "my"), ("oxen", "ox"), ("penes", "penis"), ("penises", "penis"),
    ("people", "person"), ("sexes", "sex"), ("soliloquies", "soliloquy"), ("teeth", "tooth"),
    ("testes", "testis"), ("trilbys", "trilby"), ("turves", "turf"), ("zoa", "zoon"),
)  # fmt: skip


def singularize(word: str) -> str:
    """The singular pattern gives ``word`` (a noun)."""
    if "-" in word:  # mothers-in-law
        parts = word.split("-")
        if len(parts) > 1 and parts[1] in _PREPOSITIONS:
            return singularize(parts[0]) + "-" + "-".join(parts[1:])
    if word.endswith("'"):  # dogs' -> dog's
        return singularize(word[:-1]) + "'s"
    lower = word.lower()
    if any(x.endswith(lower) for x in _UNINFLECTED) or any(
        x.endswith(lower) for x in _UNCOUNTABLE
    ):
        return word
    if any(lower.endswith(x + "s") for x in _IE_WORDS):
        return lower
    for plural, singular in _IRREGULAR:
        if lower.endswith(plural):
            return re.sub("(?i)" + plural + "$", singular, word)
    for pattern, replacement in _RULES:
        match = pattern.search(word)
        if match:
            for k, group in enumerate(match.groups()):
                if group is None:  # an unmatched group is dropped from the replacement
                    replacement = replacement.replace("\\" + str(k + 1), "")
            return pattern.sub(replacement, word)
    return word
