"""Writing output files: the one atomic writer every stage uses, and the one durable append.

:func:`write_atomic` writes a temporary file beside the target (``.NAME.tmp-PID``), flushes and
fsyncs it, then renames it over the target: a crash or a full disk never leaves a half-written
file under the final name, and the temporary file is removed on failure.
"""

from __future__ import annotations

import logging
import os
import posixpath
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from halluprobe.errors import InputError

__all__ = [
    "escapes_root",
    "resolve_image",
    "read_rgb_image",
    "write_atomic",
    "append_durable",
    "drop_cut_tail",
    "refuse_existing",
    "refuse_outputs",
    "fresh_out_dir",
    "refuse_non_folder",
    "refuse_non_file",
    "plain_component",
]

log = logging.getLogger(__name__)


def write_atomic(path: str | Path, data: bytes | str) -> Path:
    """Write ``data`` (str: UTF-8) to ``path`` atomically, creating its folder.

    A failure (no space, no permission) is :class:`InputError`, one line naming the file."""
    target = Path(path)
    payload = data.encode("utf-8") if isinstance(data, str) else data
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, target)
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", target) from e
    finally:
        if tmp.exists():
            tmp.unlink()
    return target


def _refuse_dangling(target: Path, flag: str) -> None:
    if target.is_symlink() and not target.exists():
        raise InputError(f"{flag} is a symbolic link to nothing ({os.readlink(target)}): give a real path", target)


def refuse_non_file(path: str | Path, flag: str = "--out") -> Path:
    """An output file that may exist (an append-only log that is resumed): a folder or a
    dangling symbolic link in its place is one line; appending through such a link would create
    a file wherever it points."""
    target = Path(path)
    _refuse_dangling(target, flag)
    if target.is_dir():
        raise InputError(f"{flag} must be a file, not a folder", target)
    return target


def refuse_existing(path: str | Path, *, overwrite: bool, flag: str = "--out") -> Path:
    """A file the user named as an output: one line (exit 2) when something is there already,
    unless ``overwrite``; a folder or a dangling symbolic link in its place is refused either way
    (a link would be replaced by the file, not followed)."""
    target = refuse_non_file(path, flag)
    if (target.exists() or target.is_symlink()) and not overwrite:
        raise InputError(f"{flag} exists: pass --overwrite to replace it", target)
    return target


def refuse_outputs(paths: Iterable[str | Path], *, overwrite: bool, flag: str = "--out") -> list[Path]:
    """Every file one verb is about to write, checked together before it writes any of them.

    The one check behind "nothing of the user's is replaced without ``--overwrite``": give it the
    FULL list of a verb's output files (tables, JSON, per-family files, ...), call it after the
    options are read and before the first write, and write only if it returns. Refused, as one
    line naming the path (:class:`InputError`, exit 2):

    - a file (or a symbolic link) already at a path, unless ``overwrite``;
    - a folder at a path, or a file where one of its parent folders goes (either way);
    - a dangling symbolic link at a path (either way: the write would land wherever it points).

    The first problem is named, with how many other outputs are in the way, so one rerun with
    ``--overwrite`` replaces them all. Nothing is created or removed here. Returns the paths."""
    targets = [Path(p) for p in paths]
    blocked: list[Path] = []
    for target in targets:
        _refuse_dangling(target, flag)
        if target.is_dir():
            raise InputError(f"a folder stands where this command writes a file ({flag})", target)
        parent = next((p for p in target.parents if p.exists() or p.is_symlink()), None)
        if parent is not None and not parent.is_dir():
            raise InputError(f"{flag} must be a folder, not a file", parent)
        if target.exists() or target.is_symlink():
            blocked.append(target)
    if blocked and not overwrite:
        more = f" (and {len(blocked) - 1} more of the files this command writes)" if len(blocked) > 1 else ""
        raise InputError(f"exists{more}: pass --overwrite to replace what this command writes (nothing was written)", blocked[0])
    return targets


def refuse_non_folder(path: str | Path, flag: str = "--out") -> Path:
    """An output folder that may exist: a file or a dangling symbolic link in its place is one
    line (exit 2), not the ``FileExistsError`` ``mkdir`` raises."""
    target = Path(path)
    _refuse_dangling(target, flag)
    if target.exists() and not target.is_dir():
        raise InputError(f"{flag} must be a folder, not a file", target)
    return target


def fresh_out_dir(
    path: str | Path, *, overwrite: bool, owned: Callable[[str], bool], flag: str = "--out", create: bool = True
) -> Path:
    """A folder a verb writes its files into: absent or empty, or (``overwrite``) a folder from
    which the files this verb owns (``owned(name)``) are removed first; what else it holds is
    kept. A file or a dangling symbolic link in its place is refused. ``create=False`` with an
    ``owned`` that owns nothing: only the checks, before any input is read (nothing written yet)."""
    target = refuse_non_folder(path, flag)
    if target.is_dir():
        try:
            entries = sorted(target.iterdir())
        except OSError as e:
            raise InputError(f"cannot list {flag}: {e.strerror or e}", target) from None
        if entries and not overwrite:
            raise InputError(
                f"{flag} is not empty ({len(entries)} entries, e.g. {entries[0].name!r}): give a new or empty folder, "
                "or pass --overwrite to replace the files this command writes (nothing else is touched)",
                target,
            )
        for entry in entries:
            if owned(entry.name):
                if entry.is_dir() and not entry.is_symlink():
                    raise InputError("a folder stands where this command writes a file", entry)
                try:
                    entry.unlink()
                except OSError as e:
                    raise InputError(f"cannot remove: {e.strerror or e}", entry) from None
    if not create:
        return target
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"cannot create {flag}: {e.strerror or e}", target) from None
    return target


def plain_component(name: str, what: str, path: str | Path | None = None, line: int | None = None) -> str:
    """``name`` when it can be one file name inside an output folder: not empty, not ``.`` or
    ``..``, no ``/`` or ``\\``, no NUL or control character, not absolute. A split, model or task
    name read from data that makes a file name must pass this, or nothing lands outside ``--out``."""
    bad = (
        not name
        or name in (".", "..")
        or any(c in name for c in "/\\")
        or any(ord(c) < 32 or ord(c) == 127 for c in name)
        or re.match(r"^[A-Za-z]:", name) is not None
        or len(name.encode("utf-8", "surrogatepass")) > 200
    )
    if bad:
        raise InputError(f"{what} {name!r} cannot name a file: it must be one plain name (no '/', '\\', '..', control characters)", path, line)
    return name


def drop_cut_tail(path: str | Path) -> None:
    """Cut a log file's last line when no newline ends it (a crash mid-write), so that appended
    lines start on a line of their own; the file stays as it is otherwise."""
    target = Path(path)
    try:
        with open(target, "r+b") as fh:
            size = fh.seek(0, os.SEEK_END)
            if size == 0:
                return
            fh.seek(size - 1)
            if fh.read(1) == b"\n":
                return
            fh.seek(0)
            keep = fh.read().rfind(b"\n") + 1
            log.warning("dropping a truncated last line of %s (%d bytes)", target, size - keep)
            fh.truncate(keep)
    except FileNotFoundError:
        return
    except OSError as e:
        raise InputError(f"cannot repair: {e.strerror or e}", target) from e


def append_durable(path: str | Path, text: str) -> None:
    """Append ``text`` (whole lines) to a log file, flushed and fsynced before returning: a killed
    process loses at most the lines of the call in flight. A last line a crash cut short is
    dropped first (:func:`drop_cut_tail`), so it never runs into the new lines. Nothing to
    append: nothing is done."""
    if not text:
        return
    drop_cut_tail(path)
    try:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
    except OSError as e:
        raise InputError(f"cannot write: {e.strerror or e}", path) from e


def resolve_image(image: str, root: Path, *, source: str | Path | None = None) -> Path:
    """An image path relative to the images root, or absolute; a relative one may not leave
    the root (``../x.png``). The check is on the path as written, not on where symbolic links
    point: an images folder made of links into a dataset store is fine. ``source`` (the
    benchmark or questions file) is named in the error."""
    path = Path(image)
    if path.is_absolute():
        return path
    joined = Path(os.path.normpath(Path(os.path.abspath(root)) / path))
    if not joined.is_relative_to(Path(os.path.abspath(root))):
        raise InputError(f"image path {image!r} escapes the images root {root}", source)
    return joined


def escapes_root(image: str) -> bool:
    """Whether a relative image path, as written, leaves its root (``../x.png``); absolute
    paths (POSIX or Windows) do not count: they name no root."""
    norm = image.replace("\\", "/")
    if norm.startswith("/") or re.match(r"^[A-Za-z]:/", norm):
        return False
    n = posixpath.normpath(norm)
    return n == ".." or n.startswith("../")


def read_rgb_image(path: str | Path) -> Any:
    """The image as RGB (a PIL image), or why it cannot be read: an unreadable image is an error
    on the samples that ask about it, never the end of a run."""
    from PIL import Image

    try:
        with Image.open(path) as img:
            return img.convert("RGB")
    except Exception as err:
        return f"cannot read image {path}: {type(err).__name__}: {err}"
