"""WordNet 3.0 for NLTK, built from Debian's files (no NLTK downloader, no network).

Debian's ``wordnet-base`` installs the WordNet 3.0 database under ``/usr/share/wordnet``
(``data.*``, ``index.*``, ``*.exc``, ``cntlist.rev``, verb sentence frames); ``wordnet-sense-index``
adds ``index.sense``. NLTK's reader also opens a ``lexnames`` file (the 45 lexicographer file
names), which Debian ships only as a man page: it is written here from :data:`LEXNAMES`.

:func:`load_wordnet` builds ``<cache>/nltk_data/corpora/wordnet`` (``<cache>``: ``$HALLUPROBE_CACHE_DIR``
or the user cache directory, :func:`halluprobe.backends.response_cache.cache_dir`) with copies of
the Debian files (NLTK 3.9+ refuses symlinks that leave the corpus root, and roots outside
``nltk.data.path``) plus ``lexnames``, and returns a ``WordNetCorpusReader`` on it.
"""

from __future__ import annotations

import functools
import logging
import warnings
from pathlib import Path
from typing import Any

from halluprobe.backends.response_cache import cache_dir
from halluprobe.errors import RuntimeFailure
from halluprobe.files import write_atomic

__all__ = ["DEBIAN_WORDNET_DIR", "LEXNAMES", "REQUIRED_FILES", "OPTIONAL_FILES", "wordnet_data_dir", "load_wordnet"]

logger = logging.getLogger(__name__)

DEBIAN_WORDNET_DIR = Path("/usr/share/wordnet")

# The lexicographer files of WordNet 3.0 (lexnames(5WN)): number, name, syntactic category.
LEXNAMES: tuple[tuple[int, str, int], ...] = (
    (0, "adj.all", 3), (1, "adj.pert", 3), (2, "adv.all", 4), (3, "noun.Tops", 1),
    (4, "noun.act", 1), (5, "noun.animal", 1), (6, "noun.artifact", 1), (7, "noun.attribute", 1),
    (8, "noun.body", 1), (9, "noun.cognition", 1), (10, "noun.communication", 1), (11, "noun.event", 1),
    (12, "noun.feeling", 1), (13, "noun.food", 1), (14, "noun.group", 1), (15, "noun.location", 1),
    (16, "noun.motive", 1), (17, "noun.object", 1), (18, "noun.person", 1), (19, "noun.phenomenon", 1),
    (20, "noun.plant", 1), (21, "noun.possession", 1), (22, "noun.process", 1), (23, "noun.quantity", 1),
    (24, "noun.relation", 1), (25, "noun.shape", 1), (26, "noun.state", 1), (27, "noun.substance", 1),
    (28, "noun.time", 1), (29, "verb.body", 2), (30, "verb.change", 2), (31, "verb.cognition", 2),
    (32, "verb.communication", 2), (33, "verb.competition", 2), (34, "verb.consumption", 2),
    (35, "verb.contact", 2), (36, "verb.creation", 2), (37, "verb.emotion", 2), (38, "verb.motion", 2),
    (39, "verb.perception", 2), (40, "verb.possession", 2), (41, "verb.social", 2), (42, "verb.stative", 2),
    (43, "verb.weather", 2), (44, "adj.ppl", 3),
)  # fmt: skip

# read when present: tagged-sense counts (Lemma.count) and the sense index
OPTIONAL_FILES: tuple[str, ...] = ("cntlist.rev", "index.sense")

# what NLTK's WordNetCorpusReader opens (lexnames is written, not linked)
REQUIRED_FILES: tuple[str, ...] = tuple(
    f"{kind}.{pos}" for kind in ("data", "index") for pos in ("noun", "verb", "adj", "adv")
) + tuple(f"{pos}.exc" for pos in ("noun", "verb", "adj", "adv"))


def wordnet_data_dir(source: Path = DEBIAN_WORDNET_DIR, cache: Path | None = None) -> Path:
    """Build (idempotently) an NLTK data dir whose ``corpora/wordnet`` holds Debian's WordNet.

    Returns the NLTK data root (the directory to put on ``nltk.data.path``). Raises
    :class:`RuntimeFailure` naming the missing files and the Debian packages that provide them.
    """
    missing = [name for name in REQUIRED_FILES if not (source / name).is_file()]
    if missing:
        raise RuntimeFailure(
            f"WordNet not found in {source} (missing {', '.join(missing[:3])}{'...' if len(missing) > 3 else ''}): "
            "install the Debian packages wordnet-base and wordnet-sense-index"
        )
    root = (cache or cache_dir()) / "nltk_data"
    corpus = root / "corpora" / "wordnet"
    corpus.mkdir(parents=True, exist_ok=True)
    # copies, not symlinks: NLTK refuses to open a file whose real path leaves the corpus root
    for name in (*REQUIRED_FILES, *OPTIONAL_FILES):
        src = source / name
        dst = corpus / name
        if not src.is_file():
            continue
        if not dst.is_file() or dst.stat().st_size != src.stat().st_size:
            write_atomic(dst, src.read_bytes())
    lexnames = "".join(f"{number:02d}\t{name}\t{category}\n" for number, name, category in LEXNAMES)
    target = corpus / "lexnames"
    if not target.exists() or target.read_text() != lexnames:
        write_atomic(target, lexnames)
    return root


@functools.lru_cache(maxsize=4)
def _reader(root: str) -> Any:
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    # NLTK (3.9+) refuses corpus roots outside nltk.data.path: register ours (when asked for)
    if root not in nltk.data.path:
        nltk.data.path.append(root)
    corpus = nltk.data.find("corpora/wordnet")
    logger.info("loading WordNet from %s", corpus)
    with warnings.catch_warnings():  # "multilingual functions are not available": expected, no OMW
        warnings.simplefilter("ignore", UserWarning)
        return WordNetCorpusReader(corpus, None)


def load_wordnet(source: Path = DEBIAN_WORDNET_DIR, cache: Path | None = None) -> Any:
    """An NLTK ``WordNetCorpusReader`` on Debian's WordNet 3.0 (cached per process)."""
    root = wordnet_data_dir(source, cache)
    return _reader(str(root))
