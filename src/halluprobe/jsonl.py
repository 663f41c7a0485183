"""Reading JSON Lines (or JSON array) input with one-line errors that name file and line (exit code 2),
and writing a file atomically."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from halluprobe.errors import InputError

__all__ = ["loads", "read_json_file", "parse_int_id", "replace_lone_surrogates", "read_text", "read_log_lines", "iter_objects", "type_name", "JsonRecord", "read_records"]

log = logging.getLogger(__name__)


def type_name(value: Any) -> str:
    """The JSON name of a value's type, for error messages."""
    return "null" if value is None else type(value).__name__


class _DuplicateKey(ValueError):
    """A JSON object naming one key twice."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # json keeps the last of two equal keys without a word: {"caption": "a car", "caption": "a cup"}
    # would be scored as "a cup". An object that says two things is refused instead.
    found: dict[str, Any] = {}
    for key, value in pairs:
        if key in found:
            raise _DuplicateKey(key)
        found[key] = value
    return found


def loads(text: str | bytes) -> Any:
    """``json.loads``, where every failure is a :class:`json.JSONDecodeError` like any other
    malformed JSON: nesting deeper than the parser's recursion allows (200,000 ``[``), never a
    ``RecursionError``; an integer longer than Python's 4,300-digit limit, never the bare
    ``ValueError`` ``json.loads`` raises for it; an object that names a key twice (``json`` would
    keep the last silently). Every JSON text halluprobe reads goes through here."""
    try:
        return json.loads(text, object_pairs_hook=_unique_keys)
    except json.JSONDecodeError:
        raise
    except _DuplicateKey as err:
        doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError(f"the key {str(err.args[0])[:60]!r} is given twice in one object", doc[:1], 0) from None
    except RecursionError:
        doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError("nested too deeply", doc[:1], 0) from None
    except ValueError as err:  # "Exceeds the limit (4300 digits) for integer string conversion"
        doc = text if isinstance(text, str) else text.decode("utf-8", "replace")
        raise json.JSONDecodeError(f"a number too long to read ({str(err).split(';')[0]})", doc[:1], 0) from None


# question ids are written in ASCII digits; 18 of them is beyond any benchmark and inside int64
_ID = re.compile(r"[0-9]{1,18}")


def parse_int_id(value: Any, what: str, path: Path | str | None, line: int | None, *, digits_ok: bool = False) -> int:
    """The one id parser: an integer id (0 or more, at most 18 digits), from a JSON integer or,
    with ``digits_ok``, a string of ASCII digits (a spreadsheet cell). Booleans, floats, negative
    numbers, Unicode digits that ``str.isdigit`` accepts but ``int`` refuses (``'²'``) and
    numbers of thousands of digits are one :class:`InputError` naming the file and line."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 10**18:
        return value
    if digits_ok and isinstance(value, str) and _ID.fullmatch(value.strip()):
        return int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool):
        shown = "a negative number" if value < 0 else "a number of more than 18 digits"
    elif isinstance(value, str) and len(value) > 40:
        shown = f"a string of {len(value)} characters"
    else:
        shown = json.dumps(value) if isinstance(value, (str, float, type(None), bool)) else type_name(value)
    raise InputError(f"{what} must be an integer id, got {shown}", path, line)


# a Python str holds a surrogate only when it is lone: json.loads joins an escaped pair into one character
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def replace_lone_surrogates(text: str) -> str:
    """``text`` with U+FFFD for every lone surrogate (a JSON ``"\\ud83d"``: half of an emoji cut
    short). Such a string has no UTF-8 form, so no record or file holding it could be written."""
    return _LONE_SURROGATE.sub("\ufffd", text)


def read_text(path: Path, what: str) -> tuple[bytes, str]:
    """Raw bytes (for hashing) and text of a UTF-8 file; a BOM is tolerated (some exporters write one)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {what}: {e.strerror or e}", path) from e
    try:
        return raw, raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise InputError(f"not UTF-8 text (byte {e.start})", path, line) from None


def read_json_file(path: str | Path, what: str) -> Any:
    """A whole JSON file (a model folder's ``config.json``, ``chat_template.json``): one
    :class:`InputError` naming ``file:line`` when it cannot be read, is not UTF-8 or is not JSON."""
    target = Path(path)
    _, text = read_text(target, what)
    try:
        return loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"{what} is not valid JSON: {e.msg} (column {e.colno})", target, e.lineno) from None


def read_log_lines(path: Path, what: str) -> Iterator[tuple[int, str]]:
    """(1-based line number, text) of each non-blank line of an append-only JSON Lines log
    (``samples.jsonl``, ``prove build``'s answers), written line by line and fsynced.

    A last line without a newline after it that is incomplete JSON, or cut inside a multi-byte
    UTF-8 character, is a write cut short by a crash: skipped with a warning. Any other line is
    yielded, whatever it holds (the caller validates it and names the line); non-UTF-8 bytes
    elsewhere, or a file that cannot be read (a directory in its place), are an InputError."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(f"cannot read {what}: {e.strerror or e}", path) from None
    lines = raw.split(b"\n")
    for number, data in enumerate(lines, start=1):
        if not data.strip():
            continue
        cut_short = number == len(lines)  # no newline after it: possibly a crash mid-write
        try:
            line = data.decode("utf-8")
        except UnicodeDecodeError as e:
            if cut_short:
                log.warning("ignoring truncated last line %d of %s", number, path)
                continue
            raise InputError(f"not UTF-8 text (byte {e.start} of the line)", path, number) from None
        if cut_short:
            try:
                loads(line)
            except ValueError:
                log.warning("ignoring truncated last line %d of %s", number, path)
                continue
        yield number, line


def iter_objects(text: str, path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(1-based line number, object) per non-blank line; LF or CRLF; last newline optional."""
    for lineno, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            rec = loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"malformed JSON: {e.msg} (column {e.colno})", path, lineno) from e
        if not isinstance(rec, dict):
            raise InputError(f"expected a JSON object, got {type_name(rec)}", path, lineno)
        yield lineno, rec


class JsonRecord(NamedTuple):
    """One object of :func:`read_records`, with where it came from for error messages."""

    line: int | None  # 1-based line in JSON Lines; None in a JSON array (its records have no line of their own)
    index: int  # 0-based position among the file's records
    value: dict[str, Any]

    @property
    def where(self) -> str:
        """Prefix naming the record where there is no line number to name it: ``"record 3: "``."""
        return "" if self.line is not None else f"record {self.index}: "


def read_records(path: Path, what: str) -> list[JsonRecord]:
    """The objects of a file that is a JSON array or JSON Lines (told apart by a leading ``[``).

    UTF-8 (a BOM tolerated); JSON Lines split on ``\\n`` only (a U+2028 inside a JSON string is
    not a line break); every problem (unreadable, not UTF-8, empty, malformed JSON, a
    non-object record, no records) is one :class:`InputError` naming the file and the line or record.
    """
    _, text = read_text(path, what)
    if not text.lstrip().startswith("["):
        records = [JsonRecord(line, i, obj) for i, (line, obj) in enumerate(iter_objects(text, path))]
    else:
        try:
            data = loads(text)
        except json.JSONDecodeError as e:
            raise InputError(f"malformed JSON: {e.msg} (column {e.colno})", path, e.lineno) from e
        if not isinstance(data, list):
            raise InputError(f"expected a JSON array, got {type_name(data)}", path)
        for i, rec in enumerate(data):
            if not isinstance(rec, dict):
                raise InputError(f"record {i}: expected a JSON object, got {type_name(rec)}", path)
        records = [JsonRecord(None, i, rec) for i, rec in enumerate(data)]
    if not records:
        raise InputError(f"empty file: no {what} records", path)
    return records

