"""The one TOML reader: every failure of a TOML file the user gives is one :class:`InputError`.

``tomllib`` raises more than ``TOMLDecodeError``: a ``RecursionError`` on arrays nested a few
thousand deep and a bare ``ValueError`` on an integer longer than Python's 4,300-digit limit.
Both become the same one line (file:line where the parser says it) as a syntax error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import tomllib

from halluprobe.errors import InputError

__all__ = ["loads_toml", "read_toml"]

_AT_LINE = re.compile(r"\(at line (\d+), column \d+\)")


def loads_toml(text: str, path: str | Path | None, what: str) -> dict[str, Any]:
    """The table of TOML ``text`` (read from ``path``, named in errors as ``what``)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        at = _AT_LINE.search(str(err))
        raise InputError(f"{what} is not valid TOML: {err}", path, int(at.group(1)) if at else None) from None
    except RecursionError:
        raise InputError(f"{what} is not valid TOML: nested too deeply", path) from None
    except ValueError as err:  # an integer beyond the 4,300-digit conversion limit
        raise InputError(f"{what} is not valid TOML: a number too long to read ({str(err).split(':')[0]})", path) from None


def read_toml(path: str | Path, what: str) -> dict[str, Any]:
    """The table of the TOML file at ``path`` (UTF-8; a BOM tolerated)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read {what}: {err.strerror or err}", p) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise InputError(f"{what} is not UTF-8 text (byte {err.start})", p, raw.count(b"\n", 0, err.start) + 1) from None
    return loads_toml(text, p, what)
