"""PROVE (ICCV 2025): programmatic, scene-graph-based evaluation of free-form VLM answers.

Modules: ``scene_graph`` (typed tuples and the SceneGraph), ``sandbox`` (verification programs
in a locked-down child process), ``data`` (the released format, the downloader), ``extraction``
(text -> tuples), ``scoring`` (hscore / tscore), ``build`` (benchmark construction).
Nothing heavy is imported here.
"""

from __future__ import annotations

__all__: list[str] = []
