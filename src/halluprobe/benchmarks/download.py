"""Pinned downloads: one URL into a content-keyed cache, checked by sha256, copied out.

Only the standard library talks to the network (urllib); ``file://`` URLs work the same way,
which is how the tests serve files without a network. Every download is bounded: by the pinned
size where the pin knows it (else :data:`DEFAULT_MAX_BYTES`) and by an overall deadline
(``HALLUPROBE_DOWNLOAD_DEADLINE_S``, default :data:`DEFAULT_DEADLINE_S`), so a server that
trickles a byte at a time or sends an endless body is a failure, not a hang. A mirror given as a
plain folder path is read as that folder (:func:`mirror_url`). The cache folder: parameter, then
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
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path, PurePosixPath

from halluprobe.benchmarks.created import removed_on_failure
from halluprobe.errors import InputError, RuntimeFailure

__all__ = [
    "FileFailure",
    "Unreachable",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_DEADLINE_S",
    "download_deadline",
    "mirror_url",
    "default_cache_dir",
    "download",
    "fetch_pinned",
    "already_pinned",
    "copy_pinned",
    "remove_quietly",
    "sha256_of_file",
]

_ENV_CACHE = "HALLUPROBE_CACHE_DIR"
_ENV_DEADLINE = "HALLUPROBE_DOWNLOAD_DEADLINE_S"
_TIMEOUT_S = 60.0
_CHUNK = 1 << 16
# a file whose pin has no size: no pinned file (question files, answers files, images) comes near
DEFAULT_MAX_BYTES = 256 << 20
DEFAULT_DEADLINE_S = 900.0  # one file, start to end: generous on a slow link, never endless
_USER_AGENT = "halluprobe (+https://github.com/RUCAIBox/POPE data fetcher)"


class FileFailure(Exception):
    """One URL failed (HTTP error status, broken transfer, over its size or deadline): a per-file
    failure, not an unreachable host."""


class Unreachable(RuntimeFailure):
    """The host cannot be reached (offline, refused, timed out): a caller that knows the mirror
    variable which would make it work adds it to the message."""


def download_deadline() -> float:
    """Seconds one download may take in all: ``$HALLUPROBE_DOWNLOAD_DEADLINE_S``, else
    :data:`DEFAULT_DEADLINE_S`; a value that is not a positive number is one line (exit 2)."""
    raw = os.environ.get(_ENV_DEADLINE)
    if not raw:
        return DEFAULT_DEADLINE_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise InputError(f"{_ENV_DEADLINE} must be a positive number of seconds, got {raw!r}")
    return value


def mirror_url(value: str, variable: str) -> str:
    """A mirror's base as a URL: ``http(s)://`` and ``file://`` as given, a plain folder path
    (absolute, relative or ``~``) as its ``file://`` URL. A folder that does not exist, or
    another scheme, is one line naming ``variable`` (the option or environment variable)."""
    scheme = urllib.parse.urlsplit(value).scheme.lower()
    if scheme in ("http", "https", "file"):
        return value
    if len(scheme) > 1:  # one letter: a Windows drive, a path
        raise InputError(f"{variable}: {value!r} is neither an http(s):// or file:// URL nor a folder")
    folder = Path(value).expanduser()
    if not folder.is_dir():
        raise InputError(f"{variable}: no such folder {value!r} (give a folder laid out as the mirror, or an http(s):// URL)")
    return folder.absolute().as_uri() + "/"


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


def _unreachable(url: str, reason: object) -> Unreachable:
    host = urllib.parse.urlsplit(url).netloc or url
    return Unreachable(f"cannot reach {host}: {reason} (offline?)")


def _declared_length(resp: object) -> int | None:
    headers = getattr(resp, "headers", None)
    raw = headers.get("Content-Length") if headers is not None else None
    return int(raw) if isinstance(raw, str) and raw.strip().isdigit() else None


def download(url: str, dest: Path, *, max_bytes: int | None = None, deadline_s: float | None = None) -> str:
    """Stream ``url`` into ``dest``; return the sha256 of what was written.

    At most ``max_bytes`` (default :data:`DEFAULT_MAX_BYTES`) are read, and the whole transfer
    must end within ``deadline_s`` (default :func:`download_deadline`): each read takes what has
    arrived (``read1``), so a trickling server is stopped at the deadline, not after its next
    64 KiB. Raises RuntimeFailure when the host cannot be reached and FileFailure on an HTTP
    error status, a missing ``file://`` path, a broken transfer, a body over the bound or a
    transfer past the deadline; ``dest`` may then hold a partial file, which the caller removes.
    """
    limit = DEFAULT_MAX_BYTES if max_bytes is None else max_bytes
    deadline = download_deadline() if deadline_s is None else deadline_s
    end = time.monotonic() + deadline
    req = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    h = hashlib.sha256()
    got = 0
    try:
        with urllib.request.urlopen(req, timeout=min(_TIMEOUT_S, deadline)) as resp, open(dest, "wb") as f:
            declared = _declared_length(resp)
            if declared is not None and declared > limit:
                raise FileFailure(f"{url} is {declared:,} bytes, over the {limit:,} the pin allows")
            read = getattr(resp, "read1", resp.read)
            while True:
                if time.monotonic() > end:
                    raise FileFailure(f"{url} took longer than {deadline:g} s ({got:,} bytes so far); stopped")
                chunk = read(_CHUNK)
                if not chunk:
                    break
                got += len(chunk)
                if got > limit:
                    raise FileFailure(f"{url} sent more than the {limit:,} bytes the pin allows; stopped")
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


def fetch_pinned(url: str, name: str, sha256: str, *, cache_dir: Path, kind: str, size: int | None = None) -> Path:
    """The cached copy of ``url`` (downloaded when absent), whose sha256 must be ``sha256``;
    ``size`` (bytes, where the pin knows it) bounds the download, else :data:`DEFAULT_MAX_BYTES`.

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
            got = download(url, part, max_bytes=size)
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
