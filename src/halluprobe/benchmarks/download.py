"""Pinned downloads: one URL into a content-keyed cache, checked by sha256, copied out.

Only the standard library talks to the network (urllib); ``file://`` URLs work the same way,
which is how the tests serve files without a network. The cache folder: parameter, then
``HALLUPROBE_CACHE_DIR``, then the user cache folder; a file lives at
``<cache>/<kind>/<sha256>/<name>``, so two contents of one name never mix and a second fetch
needs no network.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import shutil
import socket
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path, PurePosixPath

from halluprobe.benchmarks.created import removed_on_failure
from halluprobe.errors import InputError, RuntimeFailure

__all__ = [
    "FileFailure",
    "default_cache_dir",
    "download",
    "fetch_pinned",
    "already_pinned",
    "copy_pinned",
    "remove_quietly",
    "sha256_of_file",
]

_ENV_CACHE = "HALLUPROBE_CACHE_DIR"
_TIMEOUT_S = 60.0
_CHUNK = 1 << 16
_USER_AGENT = "halluprobe (+https://github.com/RUCAIBox/POPE data fetcher)"


class FileFailure(Exception):
    """One URL failed (HTTP error status, broken transfer): a per-file failure, not an unreachable host."""


def default_cache_dir() -> Path:
    """``$HALLUPROBE_CACHE_DIR``, else the platform's user cache folder for halluprobe."""
    env = os.environ.get(_ENV_CACHE)
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir  # late: only fetching needs it

    return Path(user_cache_dir("halluprobe"))


def sha256_of_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            h.update(chunk)
    return h.hexdigest()


def remove_quietly(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass


def _unreachable(url: str, reason: object) -> RuntimeFailure:
    host = urllib.parse.urlsplit(url).netloc or url
    return RuntimeFailure(f"cannot reach {host}: {reason} (offline?)")


def download(url: str, dest: Path) -> str:
    """Stream ``url`` into ``dest``; return the sha256 of what was written.

    Raises RuntimeFailure when the host cannot be reached and FileFailure on an HTTP error
    status, a missing ``file://`` path or a broken transfer; ``dest`` may then hold a partial
    file, which the caller removes.
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
        raise FileFailure(f"HTTP {e.code} {e.reason} for {url}") from e
    except http.client.HTTPException as e:  # e.g. IncompleteRead: the server closed early
        raise FileFailure(f"broken transfer for {url}: {e!r}") from e
    except urllib.error.URLError as e:
        if url.startswith("file:"):  # a local mirror without the file: that file is missing
            raise FileFailure(f"no such file: {url}") from e
        raise _unreachable(url, e.reason) from e
    except (TimeoutError, socket.timeout) as e:
        raise _unreachable(url, "timed out") from e
    except (ConnectionError, OSError) as e:
        # reset mid-transfer, refused, ... (OSError also covers a full disk: say what happened)
        if isinstance(e, ConnectionError) or e.errno is None:
            raise _unreachable(url, e) from e
        raise RuntimeFailure(f"cannot write {dest}: {e.strerror or e}") from e
    return h.hexdigest()


def fetch_pinned(url: str, name: str, sha256: str, *, cache_dir: Path, kind: str) -> Path:
    """The cached copy of ``url`` (downloaded when absent), whose sha256 must be ``sha256``.

    A download with another digest is removed and is an InputError naming the URL, the expected
    and the received digest (the registry and the file disagree: nothing to retry)."""
    if PurePosixPath(name).name != name or name in ("", ".", ".."):
        raise InputError(f"a pinned file name must be a plain file name, got {name!r}")
    cached = cache_dir / kind / sha256 / name
    if cached.is_file() and sha256_of_file(cached) == sha256:
        return cached
    with removed_on_failure() as created:  # a failed download leaves no empty cache folder
        try:
            created.folder(cached.parent)
        except OSError as e:
            raise RuntimeFailure(f"cannot create cache folder {cached.parent}: {e.strerror or e}") from e
        part = cached.with_name(name + ".part")
        try:
            got = download(url, part)
        except FileFailure as e:
            remove_quietly(part)
            raise RuntimeFailure(f"{name}: download failed: {e}") from e
        except BaseException:
            remove_quietly(part)
            raise
        if got != sha256:
            remove_quietly(part)
            raise InputError(f"sha256 mismatch: expected {sha256}, got {got}; the download was removed", url)
        try:
            os.replace(part, cached)
        except OSError as e:
            remove_quietly(part)
            raise RuntimeFailure(f"cannot write {cached}: {e.strerror or e}") from e
    return cached


def already_pinned(dest: Path, sha256: str, *, overwrite: bool) -> bool:
    """Whether ``dest`` already holds the pinned content (then it is kept). Another file there is
    an InputError unless ``overwrite``: called for every output before any is written, so a
    refusal leaves the folder as it was."""
    if not (dest.exists() or dest.is_symlink()):
        return False
    if dest.is_file() and sha256_of_file(dest) == sha256:
        return True
    if not overwrite:
        raise InputError("exists and differs from the pinned file; pass overwrite to replace it", dest)
    if dest.is_dir():
        raise InputError("a folder stands where the pinned file goes", dest)
    return False


def copy_pinned(cached: Path, dest: Path, sha256: str, *, overwrite: bool) -> Path:
    """Copy a verified cached file to ``dest`` (kept when it already has the digest; another
    file there is an InputError unless ``overwrite``). A copy, not a link: editing the output
    must never corrupt the cache; a temporary file renamed into place, so ``dest`` is never half
    written."""
    if already_pinned(dest, sha256, overwrite=overwrite):
        return dest
    tmp = dest.with_name(f".{dest.name}.tmp-{os.getpid()}")
    try:
        shutil.copyfile(cached, tmp)
        os.replace(tmp, dest)
    except OSError as e:
        remove_quietly(tmp)
        raise InputError(f"cannot write: {e.strerror or e}", dest) from e
    return dest
