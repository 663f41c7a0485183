"""Official POPE question files and the COCO val2014 images they use: download, verify, cache.

- :func:`fetch_pope` downloads the three official COCO POPE files into a content-keyed cache
  (``<cache>/pope/<sha256>/<name>``), verifies each against its pinned sha256 and copies it into
  the output folder. A second call finds the verified copy in the cache and needs no network.
- :func:`fetch_coco_images` downloads only the images that given question files use. Each goes
  to a ``.part`` file, must decode with PIL, and is then renamed into place, so an interrupted
  fetch resumes where it stopped and a bad image is never kept.

Only the standard library talks to the network (urllib). Base URLs: parameter, then the
``HALLUPROBE_POPE_URL`` / ``HALLUPROBE_COCO_URL`` environment variables, then the defaults;
the cache folder: parameter, then ``HALLUPROBE_CACHE_DIR``, then the user cache folder.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import shutil
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from halluprobe.errors import InputError, RuntimeFailure

__all__ = [
    "POPE_BASE_URL",
    "POPE_FILES",
    "COCO_VAL2014_URL",
    "FetchReport",
    "default_cache_dir",
    "pope_urls",
    "fetch_pope",
    "fetch_coco_images",
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

_ENV_CACHE = "HALLUPROBE_CACHE_DIR"
_ENV_POPE_URL = "HALLUPROBE_POPE_URL"
_ENV_COCO_URL = "HALLUPROBE_COCO_URL"
_TIMEOUT_S = 60.0
_CHUNK = 1 << 16
_USER_AGENT = "halluprobe (+https://github.com/RUCAIBox/POPE data fetcher)"


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


def default_cache_dir() -> Path:
    """``$HALLUPROBE_CACHE_DIR``, else the platform's user cache folder for halluprobe."""
    env = os.environ.get(_ENV_CACHE)
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir  # late: only fetching needs it

    return Path(user_cache_dir("halluprobe"))


def _base(url: str | None, env: str, default: str) -> str:
    base = url or os.environ.get(env) or default
    return base if base.endswith("/") else base + "/"


def pope_urls(base_url: str | None = None, pins: dict[str, str] | None = None) -> dict[str, str]:
    """File name -> download URL of the POPE files (official ones unless ``pins`` says others)."""
    base = _base(base_url, _ENV_POPE_URL, POPE_BASE_URL)
    return {name: base + urllib.parse.quote(name) for name in (pins or POPE_FILES)}


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def _unreachable(url: str, reason: object) -> RuntimeFailure:
    host = urllib.parse.urlsplit(url).netloc or url
    return RuntimeFailure(f"cannot reach {host}: {reason} (offline?)")


class _FileFailure(Exception):
    """One URL failed (HTTP error status, broken transfer): a per-file failure, not an unreachable host."""


def _download(url: str, dest: Path) -> str:
    """Stream ``url`` into ``dest``; return the sha256 of what was written.

    Raises RuntimeFailure when the host cannot be reached and _FileFailure on an HTTP error
    status or a broken transfer; ``dest`` may then hold a partial file, which the caller removes.
    """
    req = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    h = hashlib.sha256()
    try:
        with urllib.request.urlopen(req, timeout=_TIMEOUT_S) as resp, open(dest, "wb") as f:
            while True:
                chunk = resp.read(_CHUNK)
                if not chunk:
                    break
                h.update(chunk)
                f.write(chunk)
    except urllib.error.HTTPError as e:
        raise _FileFailure(f"HTTP {e.code} {e.reason} for {url}") from e
    except http.client.HTTPException as e:  # e.g. IncompleteRead: the server closed early
        raise _FileFailure(f"broken transfer for {url}: {e!r}") from e
    except urllib.error.URLError as e:
        raise _unreachable(url, e.reason) from e
    except (TimeoutError, socket.timeout) as e:
        raise _unreachable(url, "timed out") from e
    except (ConnectionError, OSError) as e:
        # reset mid-transfer, refused, ... (OSError also covers a full disk: say what happened)
        if isinstance(e, ConnectionError) or e.errno is None:
            raise _unreachable(url, e) from e
        raise RuntimeFailure(f"cannot write {dest}: {e.strerror or e}") from e
    return h.hexdigest()


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def fetch_pope(
    out_dir: str | Path,
    *,
    cache_dir: str | Path | None = None,
    base_url: str | None = None,
    pins: dict[str, str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    overwrite: bool = False,
) -> list[Path]:
    """Download (or take from the cache) the pinned POPE files, verify them, copy them to ``out_dir``.

    ``pins`` (file name -> sha256) replaces :data:`POPE_FILES`. A download whose sha256 differs
    from its pin is removed and raises RuntimeFailure naming the file, the expected and the
    received digest. A file already in ``out_dir`` with the pinned digest is kept; one with
    another digest is an InputError unless ``overwrite``.
    """
    pins = dict(pins if pins is not None else POPE_FILES)
    urls = pope_urls(base_url, pins)
    cache = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create output directory: {e.strerror or e}", out) from e

    results: list[Path] = []
    for i, (name, expected) in enumerate(pins.items(), start=1):
        if PurePosixPath(name).name != name or name in ("", ".", ".."):
            raise InputError(f"POPE file name must be a plain file name, got {name!r}")
        cached = cache / "pope" / expected / name
        if cached.is_file() and _sha256_file(cached) == expected:
            logger.info("%s: using the cached copy %s", name, cached)
        else:
            try:
                cached.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:
                raise RuntimeFailure(f"cannot create cache folder {cached.parent}: {e.strerror or e}") from e
            part = cached.with_name(name + ".part")
            logger.info("%s: downloading %s", name, urls[name])
            try:
                got = _download(urls[name], part)
            except _FileFailure as e:
                _remove(part)
                raise RuntimeFailure(f"{name}: download failed: {e}") from e
            except BaseException:
                _remove(part)
                raise
            if got != expected:
                _remove(part)
                raise RuntimeFailure(
                    f"{name}: sha256 mismatch: expected {expected}, got {got} (from {urls[name]}); "
                    "the download was removed"
                )
            os.replace(part, cached)

        dest = out / name
        if dest.exists():
            if dest.is_file() and _sha256_file(dest) == expected:
                results.append(dest)
                if progress is not None:
                    progress(i, len(pins))
                continue
            if not overwrite:
                raise InputError("exists and differs from the pinned file; pass overwrite to replace it", dest)
        # a copy, not a link: editing the output must never corrupt the cache
        tmp = out / f".{name}.tmp-{os.getpid()}"
        try:
            shutil.copyfile(cached, tmp)
            os.replace(tmp, dest)
        except OSError as e:
            _remove(tmp)
            raise InputError(f"cannot write: {e.strerror or e}", dest) from e
        results.append(dest)
        if progress is not None:
            progress(i, len(pins))
    return results


def _check_image(path: Path) -> str | None:
    """None when the file decodes as an image, else the reason."""
    from PIL import Image  # late: pillow is only needed here

    try:
        with Image.open(path) as im:
            im.load()  # a full decode: verify() alone lets truncated JPEGs through
    except Exception as e:  # PIL raises many types (OSError, SyntaxError, ValueError, ...)
        return f"does not decode as an image: {e}"
    return None


def _image_names(question_files: Iterable[str | Path]) -> list[str]:
    from halluprobe.benchmarks.pope import read_questions  # late: avoid an import cycle

    names: dict[str, None] = {}
    for qf in question_files:
        for q in read_questions(qf):
            if q.image not in names:
                if PurePosixPath(q.image.replace("\\", "/")).is_absolute() or ":" in q.image:
                    raise InputError(f"cannot fetch image {q.image!r}: not a path relative to the images root", qf)
                names[q.image] = None
    return sorted(names)  # sorted: the fetch order does not depend on the question order


def _fetch_one(name: str, base: str, out: Path) -> tuple[str, str, str | None]:
    """Fetch one image; returns (name, 'downloaded' | 'skipped' | 'failed', reason)."""
    dest = out / name
    if dest.is_file() and _check_image(dest) is None:
        return name, "skipped", None
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    url = base + urllib.parse.quote(name)
    try:
        _download(url, part)
    except _FileFailure as e:
        _remove(part)
        return name, "failed", str(e)
    except BaseException:
        _remove(part)
        raise
    reason = _check_image(part)
    if reason is not None:
        _remove(part)
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
) -> FetchReport:
    """Download the images the given question files use (and only those) into ``out_dir``.

    Images already present and decodable are skipped, so a second call resumes. An image that
    fails (HTTP error, does not decode) is deleted and listed in ``FetchReport.failed``; an
    unreachable host raises RuntimeFailure at once. ``base_url`` defaults to
    ``$HALLUPROBE_COCO_URL`` or :data:`COCO_VAL2014_URL`.
    """
    base = _base(base_url, _ENV_COCO_URL, COCO_VAL2014_URL)
    out = Path(out_dir)
    names = _image_names(question_files)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create output directory: {e.strerror or e}", out) from e

    downloaded: list[str] = []
    skipped: list[str] = []
    failed: dict[str, str] = {}
    total = len(names)
    # Downloads are I/O bound: a few threads, results gathered here so progress runs in the
    # caller's thread.
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        pending: set[Future[tuple[str, str, str | None]]] = {
            pool.submit(_fetch_one, name, base, out) for name in names
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
