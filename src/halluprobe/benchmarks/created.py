"""What a fetching or building verb created, removed again when it fails.

A verb that fails (offline, a pin that does not match, a full disk, Ctrl-C) must leave nothing
it created: no empty ``--out`` folder, no first file of three. :class:`CreatedOutputs` records
the folders a verb makes and the files it writes where nothing stood before;
:func:`removed_on_failure` removes them when the block raises. What stood there before the verb
is never touched: a folder is removed only when it is empty again (``rmdir``), and a file only
when the verb recorded it as new.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["CreatedOutputs", "removed_on_failure"]

logger = logging.getLogger(__name__)


class CreatedOutputs:
    """The folders and files one verb created, in the order it created them."""

    def __init__(self) -> None:
        self.folders: list[Path] = []
        self.files: list[Path] = []
        self._lock = threading.Lock()  # image fetches record from worker threads

    def folder(self, path: str | Path) -> Path:
        """Create ``path`` and its missing parents, recording each one made here; OSError as
        ``mkdir`` raises it (the caller says which folder it was for)."""
        target = Path(path)
        missing: list[Path] = []
        probe = target
        while not probe.exists() and not probe.is_symlink() and probe != probe.parent:
            missing.append(probe)
            probe = probe.parent
        for made in reversed(missing):  # outermost first, as mkdir -p does
            try:
                made.mkdir()
            except FileExistsError:  # made meanwhile by another thread or process: not ours
                continue
            with self._lock:
                self.folders.append(made)
        if not target.is_dir():
            raise NotADirectoryError(20, "Not a directory", str(target))
        return target

    def new_files(self, paths: Iterable[str | Path]) -> None:
        """Record the ``paths`` about to be written that do not exist yet (call it before writing:
        a file that was there is the user's, kept on failure even if the verb replaced it)."""
        fresh = [Path(p) for p in paths if not (Path(p).exists() or Path(p).is_symlink())]
        with self._lock:
            self.files.extend(p for p in fresh if p not in self.files)

    def undo(self) -> None:
        """Remove the recorded files, then the recorded folders that are empty, innermost first."""
        for path in reversed(self.files):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
            except OSError as e:  # best effort: the verb's own error is the one to report
                logger.warning("could not remove %s: %s", path, e.strerror or e)
        for path in reversed(self.folders):
            try:
                path.rmdir()
            except FileNotFoundError:
                pass
            except OSError:  # not empty: something else (kept images, a user's file) lives there
                pass
        self.files.clear()
        self.folders.clear()


@contextmanager
def removed_on_failure(outer: CreatedOutputs | None = None) -> Iterator[CreatedOutputs]:
    """A :class:`CreatedOutputs` undone when the block raises (any exception, Ctrl-C included).
    With ``outer``, the caller's record is used and the caller undoes it: a step of a larger verb
    (the question files of ``data pope --images``) goes when a later step fails."""
    if outer is not None:
        yield outer
        return
    created = CreatedOutputs()
    try:
        yield created
    except BaseException:
        created.undo()
        raise
