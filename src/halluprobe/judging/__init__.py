"""Judged scoring: a judge (or extractor) is any halluprobe backend asked through :func:`halluprobe.ask.ask`;
every verdict is stored with its ledger (judge, template hash, settings, raw reply) in a judgment dir.

Modules: :mod:`~halluprobe.judging.ledger` (the records), :mod:`~halluprobe.judging.store` (the
append-only judgment dir), :mod:`~halluprobe.judging.judge` (one resumable pass),
:mod:`~halluprobe.judging.agreement` (two judges on the same answers). See docs/design/judging.md.
"""

from __future__ import annotations

__all__: list[str] = []
