"""The one CLI: a verb per stage, one module per verb group. Exit 0 ok, 1 runtime failure,
2 bad usage or bad input (one line naming file:line).

Options come from flags, then ``HALLUPROBE_*`` environment variables, then ``--config FILE.toml``
(keys are option names with underscores), then defaults. The options of every verb that loads
a model are one group, declared once (:mod:`halluprobe.cli._backend`).
"""

from __future__ import annotations

from halluprobe.cli import amber as _amber  # noqa: F401
from halluprobe.cli import benchmarks as _benchmarks  # noqa: F401
from halluprobe.cli import chair as _chair  # noqa: F401
from halluprobe.cli import check as _check  # noqa: F401
from halluprobe.cli import corrections as _corrections  # noqa: F401

# the verb modules register their commands on the app when imported (order = --help order)
from halluprobe.cli import data as _data  # noqa: F401
from halluprobe.cli import decoding as _decoding  # noqa: F401
from halluprobe.cli import hallusion_judge as _hallusion_judge  # noqa: F401
from halluprobe.cli import io as _io  # noqa: F401
from halluprobe.cli import objhal as _objhal  # noqa: F401
from halluprobe.cli import literature as _literature  # noqa: F401
from halluprobe.cli import mmhal as _mmhal  # noqa: F401
from halluprobe.cli import probe as _probe  # noqa: F401
from halluprobe.cli import prove as _prove  # noqa: F401
from halluprobe.cli import run as _run  # noqa: F401
from halluprobe.cli import score as _score  # noqa: F401
from halluprobe.cli._app import app

__all__ = ["app", "main"]


def main() -> None:
    app()
