"""The registry of published answers files (``registry.json``, data in the package).

One entry per released run: the repository and commit, every file it needs (answers, the
question file where the format has one, labels) with its sha256, the model and decoding, the
dataset and version (or the content fingerprint of a draw of the authors' own), the authors'
parser and how it counts an unreadable answer, and each published figure with where it is
stated. The registry grows by adding data (docs/literature.md), not code.
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from halluprobe.errors import InputError
from halluprobe.jsonl import loads

__all__ = ["METRICS", "PinnedFile", "Parser", "Figure", "Entry", "Registry", "load_registry", "registry_entries"]

# what a published figure can be: POPE's metrics, and DASH-B's own (metrics/datasets.py)
METRICS = ("f1", "f1_macro", "accuracy", "accuracy_macro", "precision", "recall", "yes_ratio",
           "dashb_mean", "dashb_tpr", "dashb_tnr", "dashb_accuracy", "dashb_harmonic")  # fmt: skip
_HEX64 = r"^[0-9a-f]{64}$"
_COMMIT = r"^[0-9a-f]{40}$"
_REPOSITORY = r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$"


def _owner_and_name(value: str | None) -> str | None:
    """A GitHub ``owner/name`` is two names; '.' or '..' would walk a mirror's URL out of its folder."""
    if value is not None and any(part in (".", "..") for part in value.split("/")):
        raise ValueError(f"a repository owner/name, got {value!r}")
    return value


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PinnedFile(_Frozen):
    """A file at a commit; repository and commit default to the entry's."""

    path: str
    sha256: str = Field(pattern=_HEX64)
    size: int | None = Field(default=None, ge=0)  # bytes: bounds the download where given
    repository: str | None = Field(default=None, pattern=_REPOSITORY)
    commit: str | None = Field(default=None, pattern=_COMMIT)

    _repository = field_validator("repository")(_owner_and_name)

    @field_validator("path")
    @classmethod
    def _inside_the_repository(cls, value: str) -> str:
        parts = value.split("/")
        if not value or value.startswith("/") or "\\" in value or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"a path inside the repository (no '..', '.', empty or leading '/' part), got {value!r}")
        return value


class Parser(_Frozen):
    """The authors' parse rule, as a halluprobe text rule (``text:<rule>``), and its source."""

    rule: str
    source: str
    unknown: Literal["wrong", "drop", "no", "yes"] = "wrong"  # how the authors count an unreadable answer


class Figure(_Frozen):
    """One published number: ``value`` in ``scale`` (1 or 100), stated to ``decimals`` places."""

    metric: str
    value: float = Field(allow_inf_nan=False)
    scale: Literal[1, 100]
    decimals: int = Field(ge=0, le=6)
    where: str
    path: str
    sha256: str | None = Field(default=None, pattern=_HEX64)

    @field_validator("metric")
    @classmethod
    def _known_metric(cls, value: str) -> str:
        if value not in METRICS:
            raise ValueError(f"unknown metric {value!r}; known: {', '.join(METRICS)}")
        return value


class Entry(_Frozen):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9.-]*$")
    model: str
    decoding: str
    repository: str = Field(pattern=_REPOSITORY)
    commit: str = Field(pattern=_COMMIT)
    format: str

    _repository = field_validator("repository")(_owner_and_name)
    answers: list[PinnedFile] = Field(min_length=1)
    questions: PinnedFile | None = None
    labels: list[PinnedFile] = Field(default_factory=list)
    dataset: str
    version: str | None = None
    split: str | None = None  # the split the answers are, for formats whose files do not say (marine, dashb)
    fingerprint: str | None = Field(default=None, pattern=_HEX64)
    parser: Parser
    published: list[Figure] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)

    def files(self) -> list[tuple[str, PinnedFile]]:
        """(role, file) for every file the entry needs, in download order."""
        return [("answers", f) for f in self.answers] + ([("questions", self.questions)] if self.questions else []) + [
            ("labels", f) for f in self.labels
        ]

    def repository_of(self, f: PinnedFile) -> tuple[str, str]:
        return f.repository or self.repository, f.commit or self.commit


class Registry(_Frozen):
    schema_version: Literal[1]
    about: str = ""
    entries: list[Entry]


def load_registry(path: str | Path | None = None) -> Registry:
    """The packaged registry, or the one at ``path``; InputError naming what is wrong."""
    where: str | Path
    if path is None:
        where = "halluprobe/literature/registry.json"
        text = resources.files("halluprobe.literature").joinpath("registry.json").read_text(encoding="utf-8")
    else:
        where = Path(path)
        try:
            text = where.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"cannot read the registry: {e}", where) from e
    try:
        registry = Registry.model_validate(loads(text))
    except json.JSONDecodeError as e:
        raise InputError(f"malformed JSON: {e.msg} (column {e.colno})", where, e.lineno) from e
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise InputError(f"registry entry field {loc}: {first['msg']}", where) from e
    names = [e.name for e in registry.entries]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup is not None:
        raise InputError(f"two registry entries named {dup!r}", where)
    return registry


def registry_entries(registry: Registry, name: str | None) -> list[Entry]:
    """Every entry (``name`` None) or the one named; InputError listing the names."""
    if name is None:
        return list(registry.entries)
    found = [e for e in registry.entries if e.name == name]
    if not found:
        raise InputError(f"no registry entry {name!r}; known: {', '.join(e.name for e in registry.entries)}")
    return found
