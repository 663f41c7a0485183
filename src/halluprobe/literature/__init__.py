"""Published POPE numbers recomputed from the authors' own released answers files.

:mod:`halluprobe.literature.registry` is the data (``registry.json``): one entry per released
file. :mod:`halluprobe.literature.audit` audits one entry; :mod:`halluprobe.literature.table`
runs an audit over entries and writes ``literature.md`` and ``literature.json``.
"""

from __future__ import annotations

__all__: list[str] = []
