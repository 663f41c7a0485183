"""`halluprobe run --open-ended`: full greedy answers (no stop at '.'), no yes/no readouts (tiny LLaVA)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from _scored import scored_samples  # noqa: E402

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from halluprobe.backends.hf.backend import HFBackend  # noqa: E402
from halluprobe.benchmarks.question_file import read_questions  # noqa: E402
from halluprobe.cli import app  # noqa: E402
from halluprobe.errors import InputError  # noqa: E402
from halluprobe.rundir import RunDir, sha256_file  # noqa: E402
from halluprobe.run_setup import RunConfig, make_header
from halluprobe.runner import run_questions  # noqa: E402
from halluprobe.tiny import build_tiny_llava, demo_photos  # noqa: E402

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

DOT = 29889  # LLaMA-2 piece "." (the hf backend's yes/no stop string)


@pytest.fixture(scope="module")
def dotty_llava(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path) -> Path:
    """A tiny LLaVA whose greedy next token is always '.': one residual dimension is a constant
    the layers never write to, the final norm keeps only it, and only the '.' row reads it."""
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    model_dir = build_tiny_llava(tmp_path_factory.mktemp("dotty"), llama_tokenizer_dir, seed=0)
    assert AutoTokenizer.from_pretrained(model_dir).convert_ids_to_tokens(DOT) == "."
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32)
    text = model.model.language_model
    k = 0
    with torch.no_grad():
        text.embed_tokens.weight[:, k] = 10.0
        for layer in text.layers:
            layer.self_attn.o_proj.weight[k, :] = 0.0
            layer.mlp.down_proj.weight[k, :] = 0.0
        text.norm.weight.zero_()
        text.norm.weight[k] = 1.0
        head = model.get_output_embeddings()
        head.weight.zero_()
        head.weight[DOT, k] = 1.0
    model.save_pretrained(model_dir)
    return model_dir


@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    images, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    image = sorted(p.name for p in images.iterdir())[0]
    path = tmp_path_factory.mktemp("bench") / "prove_open.jsonl"
    lines = [{"question_id": i, "image": image, "text": q, "label": "yes", "kind": "open"} for i, q in enumerate(["Describe the image.", "What is in the picture?"])]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return path, images


def test_yes_no_mode_still_stops_at_the_period(dotty_llava: Path, bench: tuple[Path, Path], tmp_path: Path) -> None:
    path, images = bench
    backend = HFBackend(str(dotty_llava), batch_size=2, dtype="float32", device="cpu")
    config = RunConfig(model=str(dotty_llava), template="llava", max_new_tokens=8, overwrite=True)
    header = make_header(config, backend, {"random": (path, sha256_file(path))}, images)
    open_questions = read_questions(path, split="random")
    with pytest.raises(InputError, match="is an open question"):  # their labels are placeholders: never a yes/no run
        run_questions(backend, open_questions, images, RunDir(tmp_path / "run"), config, header)
    questions = [q.model_copy(update={"kind": "yes_no"}) for q in open_questions]  # the same texts as yes/no questions
    run_questions(backend, questions, images, RunDir(tmp_path / "run"), config, header)
    samples = scored_samples(tmp_path / "run")
    assert [s.text for s in samples] == [".", "."]
    assert "dynamic" in samples[0].readouts and not RunDir(tmp_path / "run").read_header().open_ended


def test_open_ended_run_generates_past_the_period(dotty_llava: Path, bench: tuple[Path, Path], tmp_path: Path) -> None:
    path, images = bench
    out = tmp_path / "open"
    args = ["run", "--model", str(dotty_llava), "--benchmark", str(path), "--images", str(images), "--out", str(out)]
    result = CliRunner().invoke(app, [*args, "--template", "llava", "--open-ended", "--max-new-tokens", "12", "--dtype", "float32", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    rundir = RunDir(out)
    samples = rundir.read_samples()
    assert [s.text for s in samples] == ["." * 12, "." * 12]
    assert all(s.readouts == {} and s.error is None for s in samples)
    header = rundir.read_header()
    assert header.open_ended and header.readouts == [] and header.generate is not None and header.generate.stops == ()
    # an open-ended run is not a yes/no run: resuming it as one is refused, over its open questions
    # (their labels are placeholders) ...
    refused = CliRunner().invoke(app, [*args, "--template", "llava", "--resume", "--max-new-tokens", "12", "--dtype", "float32", "--device", "cpu"])
    assert refused.exit_code == 2 and "is an open question (kind 'open')" in refused.output
    # ... and over the same texts as yes/no questions (fingerprint differs)
    plain = tmp_path / "plain" / path.name
    plain.parent.mkdir()
    plain.write_text("".join(json.dumps({k: v for k, v in json.loads(line).items() if k != "kind"}) + "\n" for line in path.read_text().splitlines()))
    args[args.index(str(path))] = str(plain)
    refused = CliRunner().invoke(app, [*args, "--template", "llava", "--resume", "--max-new-tokens", "12", "--dtype", "float32", "--device", "cpu"])
    assert refused.exit_code == 2 and "differ from the existing run" in refused.output
