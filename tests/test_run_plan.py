"""The run plan (issue 31): every check made once, before any model loads; the decode spec parsed
once into a typed value that writes the string's bytes; capabilities asked through protocols; and
a run dir written before the plan (its spec a string) reads back, resumes and keeps its bytes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from _run_plan import QUESTIONS, SPEC, DecodingScripted
from typer.testing import CliRunner

from halluprobe.backends.hf import decode_rules as hf_decode_rules
from halluprobe.backends.base import DecodesText
from halluprobe.backends.hf.decode_rules import parse_decode_spec
from halluprobe.backends.scripted import ScriptedBackend
from halluprobe.cli import app
from halluprobe.errors import InputError
from halluprobe.records import DecodeSpec, GenerateConfig, RunHeader
from halluprobe.rundir import RunDir
from halluprobe.run_setup import RunConfig, check_backend, make_header, plan_run, run_fingerprint
from halluprobe.runner import execute_plan

# written by halluprobe 285a742 (before the plan) with tests/_run_plan.py's backend: the spec a
# string in run.json, the last of three questions left unanswered
OLD = Path(__file__).parent / "golden" / "run_plan" / "old-decode"


@pytest.fixture
def old_run(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the old run dir and its inputs, and an images root holding its images."""
    shutil.copytree(OLD, tmp_path / "old")
    images = tmp_path / "images"
    images.mkdir()
    for name, _ in QUESTIONS:
        (images / name).write_bytes(b"not read")
    return tmp_path / "old", images


def _config(spec: str = SPEC, **changes: Any) -> RunConfig:
    settings: dict[str, Any] = {"model": "decoding-script", "open_ended": True, "max_new_tokens": 8, "decode": parse_decode_spec(spec),
                                "sample": True, "seed": 3, "temperature": 0.7, **changes}  # fmt: skip
    return RunConfig(**settings)


def test_the_typed_spec_writes_the_strings_bytes_and_fingerprint() -> None:
    typed = GenerateConfig(max_new_tokens=8, stop_strings=(), decode=parse_decode_spec("icd:alpha=2,beta=0"), sample=True, seed=1)
    as_string = GenerateConfig.model_validate_json(typed.model_dump_json())
    assert typed.model_dump_json() == as_string.model_dump_json() == (
        '{"max_new_tokens":8,"top_k":10,"stop_strings":[],"signals":[],"instruction":null,"decode":"icd:alpha=2,beta=0","sample":true,"seed":1}'
    )
    assert typed.decode == DecodeSpec(text="icd:alpha=2,beta=0", method="icd", params={"alpha": 2.0, "beta": 0.0})
    assert as_string.decode == DecodeSpec(text="icd:alpha=2,beta=0", method="icd")  # read back: what was asked, unresolved
    header = RunHeader.model_validate_json((OLD / "run" / "run.json").read_text())
    retyped = header.model_copy(update={"generate": header.generate.model_copy(update={"decode": parse_decode_spec(SPEC)})})
    assert run_fingerprint(retyped) == run_fingerprint(header) == header.fingerprint


def test_an_old_run_json_reads_back_typed_and_keeps_its_bytes() -> None:
    raw = (OLD / "run" / "run.json").read_text()
    assert json.loads(raw)["generate"]["decode"] == SPEC  # the form every earlier version wrote
    header = RunDir(OLD / "run").read_header()
    assert header.generate is not None and isinstance(header.generate.decode, DecodeSpec)
    assert (header.generate.decode.text, header.generate.decode.method) == (SPEC, "vcd")
    assert header.model_dump_json(indent=2) + "\n" == raw
    assert run_fingerprint(header) == header.fingerprint


def test_an_old_decode_run_resumes_under_the_plan(old_run: tuple[Path, Path]) -> None:
    folder, images = old_run
    before = (folder / "run" / "run.json").read_bytes()
    plan = plan_run(_config(resume=True), [folder / "open.jsonl"], images, folder / "run")
    backend = DecodingScripted(str(folder / "script.json"))
    summary = execute_plan(plan, backend, make_header(plan.config, backend, plan.benchmarks, images))
    assert (summary.skipped, summary.answered, summary.errors) == (2, 1, 0)
    assert backend.asked == ["check_decoding"]  # asked once, through the protocol; no engine built to probe
    assert (folder / "run" / "run.json").read_bytes() == before and (folder / "run" / "complete.json").is_file()
    assert [s.text for s in RunDir(folder / "run").read_samples()] == ["A red cube on a table.", "A red cube on a table.", "A green ball."]
    # another method is another run: refused, as before
    other = plan_run(_config("vcd:alpha=2", resume=True), [folder / "open.jsonl"], images, folder / "run")
    with pytest.raises(InputError, match="refusing to resume"):
        execute_plan(other, backend, make_header(other.config, backend, other.benchmarks, images))


def test_the_spec_is_parsed_once_per_run(old_run: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    folder, images = old_run
    calls: list[str] = []
    real = hf_decode_rules.parse_decode

    def counting(spec: str) -> Any:
        calls.append(spec)
        return real(spec)

    monkeypatch.setattr(hf_decode_rules, "parse_decode", counting)
    config = _config("icd:alpha=1", overwrite=True)  # the edge's parse; ICD renders an instruction variant per question
    plan = plan_run(config, [folder / "open.jsonl"], images, folder / "fresh")
    backend = DecodingScripted(str(folder / "script.json"))
    header = make_header(plan.config, backend, plan.benchmarks, images)
    assert execute_plan(plan, backend, header).answered == 3
    assert calls == ["icd:alpha=1"] and plan.variants == ("instruction",)


def _cli(folder: Path, images: Path, *extra: str) -> Any:
    args = ["run", "--backend", "scripted", "--model", str(folder / "script.json"), "--benchmark", str(folder / "open.jsonl"),
            "--images", str(images), "--out", str(folder / "new"), *extra]  # fmt: skip
    return CliRunner().invoke(app, args)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--overwrite",), "question 0 \\(split 'open'\\) is an open question"),  # the runner found it after loading
        (("--open-ended", "--resume", "--shard", "0/1"), "refusing to resume: the run dir holds shard none"),  # so did this
        (("--open-ended", "--overwrite", "--signals", "noised"), "an open-ended run has no yes/no answer to correct"),
        (("--open-ended", "--overwrite", "--decode", "vcd:beta=2"), r"beta must lie in \[0, 1\]"),
    ],
)
def test_every_check_is_made_before_any_model_loads(
    old_run: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, extra: tuple[str, ...], message: str
) -> None:
    import re

    from halluprobe.cli._backend import BackendSpec

    folder, images = old_run
    shutil.copytree(folder / "run", folder / "new")

    def no_loading(self: Any) -> Any:
        raise AssertionError("a model was loaded before the plan's checks")

    monkeypatch.setattr(BackendSpec, "load", no_loading)
    result = _cli(folder, images, *extra)
    assert result.exit_code == 2 and re.search(message, result.output), result.output
    assert len(result.output.strip().splitlines()) == 1


def test_capabilities_are_asked_through_protocols(old_run: tuple[Path, Path]) -> None:
    folder, images = old_run
    assert isinstance(DecodingScripted(str(folder / "script.json")), DecodesText) and not issubclass(ScriptedBackend, DecodesText)
    plan = plan_run(_config(overwrite=True, backend="hf"), [folder / "open.jsonl"], images, folder / "fresh")
    with pytest.raises(InputError, match="^the hf backend cannot apply --decode or --sample: they need the hf backend's decoding loop$"):
        check_backend(plan, ScriptedBackend(str(folder / "script.json")))  # a backend without the loop, whatever its name
    assert not (folder / "fresh").exists()


def test_a_spec_read_back_from_a_string_is_parsed_once_by_the_plan(old_run: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    folder, images = old_run
    stored = RunDir(folder / "run").read_header().generate
    assert stored is not None and stored.decode is not None and stored.decode.params is None
    calls: list[str] = []
    real = hf_decode_rules.parse_decode

    def counting(spec: str) -> Any:
        calls.append(spec)
        return real(spec)

    monkeypatch.setattr(hf_decode_rules, "parse_decode", counting)
    config = _config(decode=stored.decode, resume=True)
    calls.clear()
    plan = plan_run(config, [folder / "open.jsonl"], images, folder / "run")
    assert calls == [SPEC] and plan.config.decode == plan.generate.decode == parse_decode_spec(SPEC)
