"""Writing output files: the one atomic writer every stage uses.

:func:`write_atomic` writes a temporary file beside the target (``.NAME.tmp-PID``), flushes and
fsyncs it, then renames it over the target: a crash or a full disk never leaves a half-written
file under the final name, and the temporary file is removed on failure.
"""

from __future__ import annotations

import os
from pathlib import Path

from halluprobe.errors import InputError

__all__ = ["write_atomic"]


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
