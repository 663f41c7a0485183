"""The judgment dir: ``judge.json`` (the judge's header) and ``judgments.jsonl`` (one ledger line per
judged item, appended and fsynced batch by batch like a run's samples.jsonl).

It sits beside the run it judges (or anywhere: it names its answers and their sha256), so one
set of answers can carry judgments by several judges, each in its own dir.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import ValidationError

from halluprobe.errors import InputError
from halluprobe.files import append_durable, write_atomic
from halluprobe.jsonl import read_log_lines
from halluprobe.judging.ledger import JudgeHeader, Judgment

__all__ = ["JudgmentDir", "header_mismatch"]


def header_mismatch(old: JudgeHeader, new: JudgeHeader) -> list[str]:
    """Fields that differ between a stored header and a resumed pass's (backend_info aside: an
    endpoint or a cache path may move without changing the judge)."""
    skip = {"backend_info", "answers"}  # the answers are known by their sha256, not by the path typed
    return [name for name in JudgeHeader.model_fields if name not in skip and getattr(old, name) != getattr(new, name)]


class JudgmentDir:
    """One judge's verdicts on one set of answers."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    @property
    def header_path(self) -> Path:
        return self.path / "judge.json"

    @property
    def judgments_path(self) -> Path:
        return self.path / "judgments.jsonl"

    def start(self, header: JudgeHeader, *, overwrite: bool = False) -> None:
        """Begin or resume: an existing dir is resumed only by the same judge on the same answers."""
        if self.path.exists() and not self.path.is_dir():
            raise InputError("not a directory", self.path)
        if self.header_path.exists() and not overwrite:
            differ = header_mismatch(self.read_header(), header)
            if differ:
                raise InputError(f"judged by another judge or on other answers ({', '.join(differ)} differ): "
                                 "pass --overwrite, or judge into another dir", self.header_path)  # fmt: skip
            return
        if overwrite and self.path.exists():
            for name in ("judge.json", "judgments.jsonl"):
                if (self.path / name).exists():
                    (self.path / name).unlink()
        elif not self.header_path.exists() and self.judgments_path.exists():
            raise InputError("judgments without their judge.json: pass --overwrite to replace them", self.judgments_path)
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(self.header_path, (header.model_dump_json(indent=2) + "\n").encode())

    def read_header(self) -> JudgeHeader:
        if not self.header_path.exists():
            raise InputError("no judge.json: not a judgment dir", self.path)
        try:
            return JudgeHeader.model_validate_json(self.header_path.read_bytes())
        except ValidationError as err:
            raise InputError(f"invalid judge header: {err.errors()[0]['msg']}", self.header_path) from None

    def append(self, judgments: Iterable[Judgment]) -> None:
        append_durable(self.judgments_path, "".join(j.model_dump_json() + "\n" for j in judgments))

    def read_judgments(self) -> list[Judgment]:
        """Every item's final line: an ``error`` line is replaced by a later line for the same item
        (a resume asks it again); two final lines for one item are refused (judged twice)."""
        found: dict[str, Judgment] = {}
        if not self.judgments_path.exists():
            return []
        for number, line in read_log_lines(self.judgments_path, "judgments"):
            try:
                judgment = Judgment.model_validate_json(line)
            except ValidationError as err:
                raise InputError(f"invalid judgment: {err.errors()[0]['msg']}", self.judgments_path, number) from None
            earlier = found.get(judgment.item_id)
            if earlier is not None and earlier.status != "error":
                raise InputError(f"item {judgment.item_id!r} judged twice", self.judgments_path, number)
            found[judgment.item_id] = judgment
        return list(found.values())

    def done_ids(self) -> set[str]:
        """Items with a final verdict (parsed or unparseable): a resumed pass skips them."""
        return {j.item_id for j in self.read_judgments() if j.status != "error"}

