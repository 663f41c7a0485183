"""The run plan on the tiny LLaVA (issue 31): a `run --decode` parses its spec once and builds one
engine, the one that answers (none only to probe the method), and its run.json is the one the
version before the plan wrote, byte for byte but for the time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from halluprobe.backends.hf import backend as hf, decode_rules as hf_decode_rules  # noqa: E402
from halluprobe.backends.base import DecodesText  # noqa: E402
from halluprobe.cli import app  # noqa: E402
from halluprobe.rundir import RunDir  # noqa: E402
from halluprobe.tiny import build_tiny_llava, demo_photos  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path) -> tuple[Path, Path, Path]:
    photos, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    images = photos / "images" if (photos / "images").is_dir() else photos
    names = sorted(p.name for p in images.iterdir())[:3]
    model = build_tiny_llava(tmp_path_factory.mktemp("llava"), llama_tokenizer_dir, seed=0, image_size=112)
    bench = tmp_path_factory.mktemp("bench") / "open.jsonl"
    texts = ["Describe the image.", "What is on the table?", "Describe the image."]
    bench.write_text("".join(json.dumps({"question_id": i, "image": n, "text": q, "label": "yes", "kind": "open"}) + "\n"
                             for i, (n, q) in enumerate(zip(names, texts))))  # fmt: skip
    return model, bench, images


@pytest.mark.parametrize("spec", ["vcd:alpha=1", "m3id", "pai:gamma=1.1,start=0"])
def test_a_decode_run_parses_its_spec_once_and_builds_one_engine(
    setup: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spec: str
) -> None:
    model, bench, images = setup
    parsed: list[str] = []
    built: list[Any] = []
    real_parse, real_build = hf_decode_rules.parse_decode, hf.build_engine

    def parse(text: str) -> Any:
        parsed.append(text)
        return real_parse(text)

    def build(*args: Any, **kwargs: Any) -> Any:
        built.append(real_build(*args, **kwargs))
        return built[-1]

    monkeypatch.setattr(hf_decode_rules, "parse_decode", parse)
    monkeypatch.setattr(hf, "build_engine", build)
    args = ["run", "--model", str(model), "--benchmark", str(bench), "--images", str(images), "--out", str(tmp_path / "run"),
            "--template", "llava", "--open-ended", "--max-new-tokens", "3", "--dtype", "float32", "--device", "cpu", "--decode", spec]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert parsed == [spec]  # 17 parses before the plan (twice per question among them)
    assert len(built) == 1  # before the plan, an engine was built first only to check the method
    header = RunDir(tmp_path / "run").read_header()
    assert header.generate is not None and header.generate.decode is not None and header.generate.decode.text == spec
    assert json.loads((tmp_path / "run" / "run.json").read_text())["generate"]["decode"] == spec


def test_the_hf_backend_decodes_through_the_protocol() -> None:
    assert issubclass(hf.HFBackend, DecodesText)
