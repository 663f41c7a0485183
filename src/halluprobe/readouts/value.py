"""A readout as a typed value, parsed once where a name enters (a flag, a grid, a run's header).

Every readout name is one of five kinds:

- ``logit``: ``dynamic``, ``legacy_2tok``, ``legacy_8tok`` (:mod:`halluprobe.readouts.logits`);
- ``text``: ``text:RULE`` or ``text:RULE@VERSION`` (:mod:`halluprobe.readouts.text`);
- ``correction``: ``NAME`` or ``NAME:key=value,...`` over stored signals
  (:mod:`halluprobe.readouts.corrections`), its parameters parsed and checked here;
- ``run_level``: a rule that reads the whole run (``threshold:yes_ratio=r``), applied by
  :func:`halluprobe.readouts.apply.apply_run` only;
- ``stored``: any other name, a decision that exists only as stored in ``Sample.readouts``
  (another tool's rule recorded with imported answers: ``lmms-eval:exact``,
  ``vlmevalkit:auxmatch``); whether a run has it is known only with the run.

``str(readout)`` is the name as given, so tables, JSON and provenance keep it byte for byte.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from halluprobe.errors import InputError
from halluprobe.readouts.corrections import CORRECTIONS, RUN_LEVEL, inert_reason_of, parse_correction, required_signals
from halluprobe.readouts.logits import LEGACY_READOUTS, LOGIT_READOUTS
from halluprobe.readouts.text import ALL_TEXT_RULES

__all__ = ["Readout", "ReadoutKind", "TEXT_PREFIX", "unknown_readout"]

ReadoutKind = Literal["logit", "text", "correction", "run_level", "stored"]
TEXT_PREFIX = "text:"


@dataclass(frozen=True)
class Readout:
    """One parsed readout name: its kind, what it names (a logit readout, a text rule, a
    correction method, a stored decision) and a correction's every parameter (given or default)."""

    name: str
    kind: ReadoutKind
    method: str
    params: tuple[tuple[str, float], ...] = ()

    @classmethod
    def parse(cls, name: str) -> Readout:
        """The readout ``name`` stands for; an unknown text rule or a bad correction spec is
        an :class:`~halluprobe.errors.InputError` of one line."""
        if name in LOGIT_READOUTS:
            return cls(name, "logit", name)
        if name.startswith(TEXT_PREFIX):
            rule = name[len(TEXT_PREFIX) :]
            if rule not in ALL_TEXT_RULES:
                raise InputError(unknown_readout(f"unknown text rule {rule!r}"))
            return cls(name, "text", rule)
        if name.partition(":")[0] in CORRECTIONS:
            method, params = parse_correction(name)
            kind: ReadoutKind = "run_level" if method in RUN_LEVEL else "correction"
            return cls(name, kind, method, tuple(params.items()))
        return cls(name, "stored", name)

    @classmethod
    def of(cls, readout: Readout | str) -> Readout:
        """``readout`` as a value: a name is parsed, a value is kept."""
        return readout if isinstance(readout, Readout) else cls.parse(readout)

    def __str__(self) -> str:
        return self.name

    @property
    def parameters(self) -> Mapping[str, float]:
        return dict(self.params)

    @property
    def recomputable(self) -> bool:
        """Computed from raw outputs (else it can only be read as stored)."""
        return self.kind != "stored"

    @property
    def legacy(self) -> bool:
        """A logit readout of fixed LLaMA-2 ids (invalid where they are other words)."""
        return self.kind == "logit" and self.method in LEGACY_READOUTS

    @property
    def signals(self) -> tuple[str, ...]:
        """The stored signals a correction reads with these settings (none when inert)."""
        return required_signals(self.method, self.parameters) if self.kind == "correction" else ()

    @property
    def inert_reason(self) -> str | None:
        """Why a correction cannot change a first-token yes/no answer with these settings."""
        return inert_reason_of(self.method, self.parameters) if self.kind == "correction" else None


def unknown_readout(reason: str, available: Sequence[str] | None = None) -> str:
    """The one message for a readout that cannot be given: the reason, then what can be (the
    run's readouts when a run is known, else every kind of name)."""
    corrections = ", ".join(CORRECTIONS)
    if available is not None:
        return f"{reason}; it has: {', '.join(available)}, and the corrections {corrections} over recorded signals"
    return (
        f"{reason}; a readout is one of {', '.join(LOGIT_READOUTS)}, text:RULE with RULE one of "
        f"{', '.join(ALL_TEXT_RULES)}, a correction NAME[:key=value,...] with NAME one of {corrections}, "
        "or a decision stored in the run"
    )
