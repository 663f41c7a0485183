"""AMBER (Wang et al. 2023; junyangwang0410/AMBER commit 5e1fd52f8ea6): discriminative yes/no
questions run through the POPE machinery (:mod:`.data`), scored by halluprobe's metrics and by
AMBER's own rules as a named compatibility mode (:mod:`.discriminative`)."""

from __future__ import annotations

__all__: list[str] = []
