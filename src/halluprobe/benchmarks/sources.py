"""Official POPE question files and the COCO val2014 images they use: download, verify, cache.

- :func:`fetch_pope` downloads the three official COCO POPE files into a content-keyed cache
  (``<cache>/pope/<sha256>/<name>``), verifies each against its pinned sha256 and copies it into
  the output folder. A second call finds the verified copy in the cache and needs no network.
- :func:`fetch_coco_images` downloads only the images that given question files use. Each goes
  to a ``.part`` file, must decode with PIL, and is then renamed into place, so an interrupted
  fetch resumes where it stopped and a bad image is never kept.

The download itself is :mod:`halluprobe.benchmarks.download`'s. Base URLs: parameter, then the
``HALLUPROBE_POPE_URL`` / ``HALLUPROBE_COCO_URL`` environment variables, then the defaults;
the cache folder: parameter, then ``HALLUPROBE_CACHE_DIR``, then the user cache folder.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from halluprobe.benchmarks.created import CreatedOutputs, removed_on_failure
from halluprobe.benchmarks.download import (
    FileFailure,
    already_pinned,
    copy_pinned,
    default_cache_dir,
    download,
    fetch_pinned,
    mirror_url,
    remove_quietly,
)
from halluprobe.benchmarks.question_file import read_questions  # late: avoid an import cycle
from halluprobe.errors import InputError

__all__ = [
    "POPE_BASE_URL",
    "POPE_FILES",
    "POPE_VERSIONS",
    "PopeVersion",
    "pope_version",
    "COCO_VAL2014_URL",
    "FetchReport",
    "pope_urls",
    "fetch_pope",
    "fetch_coco_images",
    "fetch_images",
    "image_names",
]

logger = logging.getLogger(__name__)

# The authors' repository (RUCAIBox/POPE, formerly AoiDragon/POPE), raw files of output/coco/.
POPE_BASE_URL = "https://raw.githubusercontent.com/RUCAIBox/POPE/main/output/coco/"
# file name -> pinned sha256 of the published file (3000 questions, 500 images each)
POPE_FILES: dict[str, str] = {
    "coco_pope_random.json": "ac25245170b975a5bdf9080b23fd431dfe6be458bc038259c1f4f09a6bef7994",
    "coco_pope_popular.json": "72c1a8ad45d0c13514f5f22598261df41d3b533854d29682e924db50ed8aa753",
    "coco_pope_adversarial.json": "420b3407db1fa9f1187a805dca41cb7b97fd91504e6c2179706188c107fb8ef8",
}
COCO_VAL2014_URL = "http://images.cocodataset.org/val2014/"


@dataclass(frozen=True)
class PopeVersion:
    """One published content of the three COCO POPE files (see docs/pope-versions.md).

    ``files``: file name -> sha256 as committed; ``counts``: split -> questions;
    ``misspelled``: split -> prompts reading "imange"; ``questions_digest``: split -> sha256 of
    the split's sorted ``image<TAB>normalised text`` lines (:mod:`halluprobe.benchmarks.versions`),
    which tells the version of a set of answered questions without its labels."""

    name: str
    commit: str
    date: str
    files: dict[str, str]
    counts: dict[str, int]
    misspelled: dict[str, int]
    questions_digest: dict[str, str]
    note: str = ""


def _version(name: str, commit: str, date: str, rows: dict[str, tuple[str, int, int, str]], note: str) -> PopeVersion:
    return PopeVersion(
        name=name,
        commit=commit,
        date=date,
        files={f"coco_pope_{split}.json": row[0] for split, row in rows.items()},
        counts={split: row[1] for split, row in rows.items()},
        misspelled={split: row[2] for split, row in rows.items()},
        questions_digest={split: row[3] for split, row in rows.items()},
        note=note,
    )


# The four contents the authors' repository published, oldest first (facts measured from its
# history: sha256 as committed, line counts, "imange" counts, question-set digests).
_D_RANDOM = "8709bef60304707531c396d1b56710b362d8f61bc82eb0a015033bdd49668ae3"
_AD_POPULAR = "1f18a71c33db9058f9be01c971dc50989996efb13adeafecaf43fd9b7c4981c0"
_AD_ADVERSARIAL = "f4dbfc42bdaca4f880cd859cb5e0d1ba67f3ffed5bea3ada11f294121dce1b1a"
POPE_VERSIONS: dict[str, PopeVersion] = {
    v.name: v
    for v in (
        _version(
            "2023-08-10", "e3e39262c85a6a83f26cf5094022a782cb0df58d", "2023-08-10",
            {
                "random": ("c16b65d2df6d70bb0814c8a4375833d39cdb09928fd936d3fc546491efa37f35", 2910, 144,
                           "d6ba7e68f21333c09bf58df190f0d49badce07999e46341edc2d2c91b6224682"),
                "popular": ("5b16653023bf4f64d57eb0d168259de6627f5cde7538b85ebed3cc33034aa6cc", 3000, 44, _AD_POPULAR),
                "adversarial": ("1d8f0906a9b50c05640f6f23abfac97523be2a1bed28f7eadc63b811699b2d26", 3000, 58,
                                _AD_ADVERSARIAL),
            },
            "as first published (2023-05-31, identical); LLaVA-1.5's published POPE numbers",
        ),
        _version(
            "2023-08-04", "7ef3026faa9a89ed11fd508385fad652fdc6349f", "2023-08-04",
            {
                "random": ("cb8dec967727fbee4b9cfadf9ba1ea9968515b12063efd313d0cf8b2b4230c86", 3000, 0,
                           "68fcedbb839a7c18556ffab5a6b3b83c3bb1309f5dae581adf36cdd466f84139"),
                "popular": ("eafca6ceff32c7bbb5b2845a00c6828ec8cbaf5e04f890d6902dc46b92f96076", 3000, 0,
                            "6022706a4c8a49f80d9515ccc7001fff11a5ef7dc2311550d831929be0a70d02"),
                "adversarial": ("412efc6fe25eb2604f2386d536bcf713dc88327cb20c36489b1f689f89617d04", 3000, 0,
                                "7f907957d5c777aa5031d64b8a6f2a1100dd7af475a6fec431c97e3dfbdeb307"),
            },
            "other questions altogether, replaced six days later",
        ),
        _version(
            "2023-10-09", "edebdda36a969afac02bc49972c48c38e24dc6fe", "2023-10-09",
            {
                "random": ("ac25245170b975a5bdf9080b23fd431dfe6be458bc038259c1f4f09a6bef7994", 3000, 0, _D_RANDOM),
                "popular": ("72c1a8ad45d0c13514f5f22598261df41d3b533854d29682e924db50ed8aa753", 3000, 0, _AD_POPULAR),
                "adversarial": ("207273ac3b7fdd04df206c6809b77a4e7f60360a730ade6b7e32804e8dd5602f", 3000, 57,
                                _AD_ADVERSARIAL),
            },
            "3,000 random questions; adversarial prompts still misspelled",
        ),
        _version(
            "2023-11-16", "109985c74a00a88ba5341f9b0c1d4900f2a1f789", "2023-11-16",
            {
                "random": ("ac25245170b975a5bdf9080b23fd431dfe6be458bc038259c1f4f09a6bef7994", 3000, 0, _D_RANDOM),
                "popular": ("72c1a8ad45d0c13514f5f22598261df41d3b533854d29682e924db50ed8aa753", 3000, 0, _AD_POPULAR),
                "adversarial": ("420b3407db1fa9f1187a805dca41cb7b97fd91504e6c2179706188c107fb8ef8", 3000, 0,
                                _AD_ADVERSARIAL),
            },
            "current",
        ),
    )
}  # fmt: skip
# short names users type: the month (the issue's "2023-08" is LLaVA-1.5's version) and "current"
_VERSION_ALIASES = {"2023-05": "2023-08-10", "2023-08": "2023-08-10", "2023-10": "2023-10-09", "2023-11": "2023-11-16",
                    "current": "2023-11-16"}  # fmt: skip


def pope_version(name: str) -> PopeVersion:
    """The published POPE version ``name`` (a date or an alias); InputError listing the known ones."""
    found = POPE_VERSIONS.get(_VERSION_ALIASES.get(name, name))
    if found is None:
        known = ", ".join([*POPE_VERSIONS, *_VERSION_ALIASES])
        raise InputError(f"unknown POPE version {name!r}; known: {known}")
    return found

_ENV_POPE_URL = "HALLUPROBE_POPE_URL"
_ENV_COCO_URL = "HALLUPROBE_COCO_URL"


@dataclass(frozen=True)
class FetchReport:
    """What :func:`fetch_coco_images` did: one entry per distinct image the questions use."""

    out_dir: Path
    requested: int
    downloaded: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()  # already present and decodable
    failed: dict[str, str] = field(default_factory=dict)  # image -> reason (not kept on disk)

    @property
    def ok(self) -> bool:
        return not self.failed

    def __str__(self) -> str:
        # one line for a terminal: what a user wants to know after a fetch
        text = (
            f"{len(self.downloaded)} downloaded, {len(self.skipped)} already present, "
            f"{len(self.failed)} failed (of {self.requested})"
        )
        if self.failed:
            first = next(iter(self.failed))
            text += f"; first failure: {first}: {self.failed[first]}"
        return text


def _base(url: str | None, env: str, default: str) -> str:
    given = url or os.environ.get(env)
    base = mirror_url(given, env) if given else default  # a plain folder path: that folder
    return base if base.endswith("/") else base + "/"


def pope_urls(base_url: str | None = None, pins: dict[str, str] | None = None) -> dict[str, str]:
    """File name -> download URL of the POPE files (official ones unless ``pins`` says others)."""
    base = _base(base_url, _ENV_POPE_URL, POPE_BASE_URL)
    return _urls(base, pins)


def _urls(base: str, pins: dict[str, str] | None) -> dict[str, str]:
    return {name: base + urllib.parse.quote(name) for name in (pins or POPE_FILES)}


def fetch_pope(
    out_dir: str | Path,
    *,
    cache_dir: str | Path | None = None,
    base_url: str | None = None,
    pins: dict[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    overwrite: bool = False,
    version: str | None = None,
    created: CreatedOutputs | None = None,
) -> list[Path]:
    """Download (or take from the cache) the pinned POPE files, verify them, copy them to ``out_dir``.

    ``pins`` (file name -> sha256) replaces :data:`POPE_FILES`. ``version`` (a name of
    :data:`POPE_VERSIONS`) fetches that published content instead: the files at its commit,
    pinned by their sha256 (the cache is keyed by sha256, so versions never mix). A download whose sha256 differs
    from its pin is removed and raises InputError (exit 2) naming the URL, the expected and the
    received digest. A file already in ``out_dir`` with the pinned digest is kept; one with
    another digest is an InputError unless ``overwrite``. A failure leaves nothing it created
    (``created``: the caller's record, undone by the caller, :mod:`halluprobe.benchmarks.created`).
    """
    if version is not None:
        if pins is not None:
            raise InputError("give a POPE version or pins, not both")
        chosen = pope_version(version)
        pins = dict(chosen.files)
        default_base = POPE_BASE_URL.replace("/main/", f"/{chosen.commit}/")
        # a mirror given by URL or environment serves the version's files under <base>/<commit>/
        mirror = base_url or os.environ.get(_ENV_POPE_URL)
        urls = _urls(_base(mirror, _ENV_POPE_URL, default_base) + (f"{chosen.commit}/" if mirror else ""), pins)
    else:
        pins = dict(pins if pins is not None else POPE_FILES)
        urls = pope_urls(base_url, pins)
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    out = Path(out_dir)
    # every file verified in the cache and every destination checked before --out is touched:
    # an offline or refused fetch leaves no folder and no first file of three behind
    cached: dict[str, Path] = {}
    for i, (name, expected) in enumerate(pins.items(), start=1):
        logger.info("%s: %s", name, urls[name])
        cached[name] = fetch_pinned(urls[name], name, expected, cache_dir=cache, kind="pope")
        if progress is not None:
            progress(i, len(pins))
    kept = {name for name, expected in pins.items() if already_pinned(out / name, expected, overwrite=overwrite)}
    with removed_on_failure(created) as made:
        try:
            made.folder(out)
        except OSError as e:
            raise InputError(f"cannot create output directory: {e.strerror or e}", out) from e
        made.new_files(out / name for name in pins if name not in kept)
        return [copy_pinned(cached[name], out / name, expected, overwrite=overwrite) for name, expected in pins.items()]


def _check_image(path: Path) -> str | None:
    """None when the file decodes as an image, else the reason."""
    from PIL import Image  # late: pillow is only needed here

    try:
        with Image.open(path) as im:
            im.load()  # a full decode: verify() alone lets truncated JPEGs through
    except Exception as e:  # PIL raises many types (OSError, SyntaxError, ValueError, ...)
        return f"does not decode as an image: {e}"
    return None


def image_names(question_files: Iterable[str | Path]) -> list[str]:

    names: dict[str, None] = {}
    for qf in question_files:
        for q in read_questions(qf):
            if q.image not in names:
                if PurePosixPath(q.image.replace("\\", "/")).is_absolute() or ":" in q.image:
                    raise InputError(f"cannot fetch image {q.image!r}: not a path relative to the images root", qf)
                names[q.image] = None
    return sorted(names)  # sorted: the fetch order does not depend on the question order


def _fetch_one(name: str, base: str, out: Path, created: CreatedOutputs) -> tuple[str, str, str | None]:
    """Fetch one image; returns (name, 'downloaded' | 'skipped' | 'failed', reason)."""
    dest = out / name
    if dest.is_file() and _check_image(dest) is None:
        return name, "skipped", None
    created.folder(dest.parent)
    part = dest.with_name(dest.name + ".part")
    url = base + urllib.parse.quote(name)
    try:
        download(url, part)
    except FileFailure as e:
        remove_quietly(part)
        return name, "failed", str(e)
    except BaseException:
        remove_quietly(part)
        raise
    reason = _check_image(part)
    if reason is not None:
        remove_quietly(part)
        return name, "failed", reason
    os.replace(part, dest)
    return name, "downloaded", None


def fetch_coco_images(
    question_files: list[Path],
    out_dir: str | Path,
    *,
    base_url: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 8,
    created: CreatedOutputs | None = None,
) -> FetchReport:
    """Download the images the given question files use (and only those) into ``out_dir``.

    Images already present and decodable are skipped, so a second call resumes. An image that
    fails (HTTP error, does not decode) is deleted and listed in ``FetchReport.failed``; an
    unreachable host raises RuntimeFailure at once. ``base_url`` defaults to
    ``$HALLUPROBE_COCO_URL`` or :data:`COCO_VAL2014_URL`. Complete images stay when a later one
    fails (that is the resume); the folders made for them go when they are left empty.
    """
    base = _base(base_url, _ENV_COCO_URL, COCO_VAL2014_URL)
    return fetch_images(image_names(question_files), out_dir, base, progress=progress, workers=workers, created=created)


def fetch_images(
    names: list[str],
    out_dir: str | Path,
    base: str,
    *,
    progress: Callable[[int, int], None] | None = None,
    workers: int = 8,
    created: CreatedOutputs | None = None,
) -> FetchReport:
    """Download ``base + name`` into ``out_dir/name`` for each image name (see :func:`fetch_coco_images`)."""
    out = Path(out_dir)
    with removed_on_failure(created) as made:
        try:
            made.folder(out)
        except OSError as e:
            raise InputError(f"cannot create output directory: {e.strerror or e}", out) from e
        return _fetch_all(names, out, base, made, progress, workers)


def _fetch_all(
    names: list[str], out: Path, base: str, made: CreatedOutputs, progress: Callable[[int, int], None] | None, workers: int
) -> FetchReport:

    downloaded: list[str] = []
    skipped: list[str] = []
    failed: dict[str, str] = {}
    total = len(names)
    # Downloads are I/O bound: a few threads, results gathered here so progress runs in the
    # caller's thread.
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        pending: set[Future[tuple[str, str, str | None]]] = {
            pool.submit(_fetch_one, name, base, out, made) for name in names
        }
        done_count = 0
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_EXCEPTION)
                for fut in done:
                    name, status, reason = fut.result()  # re-raises RuntimeFailure (offline)
                    if status == "downloaded":
                        downloaded.append(name)
                    elif status == "skipped":
                        skipped.append(name)
                    else:
                        failed[name] = reason or "failed"
                        logger.warning("%s: %s", name, failed[name])
                    done_count += 1
                    if progress is not None:
                        progress(done_count, total)
        except BaseException:
            for fut in pending:
                fut.cancel()
            raise
    logger.info(
        "images: %d downloaded, %d already present, %d failed (of %d)",
        len(downloaded), len(skipped), len(failed), total,
    )
    return FetchReport(
        out_dir=out,
        requested=total,
        downloaded=tuple(sorted(downloaded)),
        skipped=tuple(sorted(skipped)),
        failed=dict(sorted(failed.items())),
    )
