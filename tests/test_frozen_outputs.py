"""Every output of score, audit, corrections, report, chair, decoding and check on run dirs
stored by an earlier version is byte-identical (tests/_frozen_outputs.py froze them)."""

from __future__ import annotations

import json

import pytest

import _frozen_outputs

# the verbs run in subprocesses on stored runs (no model is built); about 40 s on 2 cores
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def produced(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    root = tmp_path_factory.mktemp("frozen")
    _frozen_outputs.lay_out(root)
    return _frozen_outputs.outputs(root)


def test_the_same_outputs_are_compared(produced: dict[str, bytes]) -> None:
    frozen = json.loads((_frozen_outputs.FROZEN / "outputs.json").read_text(encoding="utf-8"))
    assert sorted(produced) == frozen


@pytest.mark.parametrize("key", json.loads((_frozen_outputs.FROZEN / "outputs.json").read_text(encoding="utf-8")))
def test_output_is_byte_identical(produced: dict[str, bytes], key: str) -> None:
    expected = (_frozen_outputs.FROZEN / "outputs" / key).read_bytes()
    assert produced.get(key) == expected, key
