"""Reading JSON Lines input with one-line errors that name file and line (exit code 2)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from halluprobe.errors import InputError

__all__ = ["read_text", "iter_objects", "type_name"]


def type_name(value: Any) -> str:
    """The JSON name of a value's type, for error messages."""
    return "null" if value is None else type(value).__name__


def read_text(path: Path, what: str) -> tuple[bytes, str]:
    """Raw bytes (for hashing) and text of a UTF-8 file; a BOM is tolerated (some exporters write one)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {what}: {e.strerror or e}", path) from e
    try:
        return raw, raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(f"not UTF-8 text (byte {e.start})", path) from e


def iter_objects(text: str, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) per non-blank line; LF or CRLF; last newline optional."""
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"malformed JSON: {e.msg} (column {e.colno})", path, lineno) from e
        if not isinstance(rec, dict):
            raise InputError(f"expected a JSON object, got {type_name(rec)}", path, lineno)
        yield lineno, rec
