"""`halluprobe run --open-ended --decode METHOD --sample ...` on the tiny LLaVA (issue 24): the
method and sampling settings in run.json and the fingerprint, neutral settings give the greedy
text, each method's text is contrast_decode's on the same branches, sampling is seeded per
question (same text at another batch size and on --resume), bad input exits 2 before any model
loads, and `halluprobe decoding` reads the runs' methods."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from halluprobe.backends.hf.backend import HFBackend  # noqa: E402
from halluprobe.backends.hf.decode_rules import ContrastRule, DoLaRule, M3IDRule
from halluprobe.backends.hf.decode import contrast_decode  # noqa: E402
from halluprobe.backends.hf.signals import VCD_NOISE_STEP, noised_inputs  # noqa: E402
from halluprobe.cli import app  # noqa: E402
from halluprobe.captions.comparison.runs import decoding_identity  # noqa: E402
from halluprobe.records import ICD_INSTRUCTION  # noqa: E402
from halluprobe.rundir import RunDir  # noqa: E402
from halluprobe.tiny import build_tiny_llava, demo_photos  # noqa: E402

pytestmark = pytest.mark.slow

QUESTIONS = ["Describe the image.", "What is on the table?", "Describe the image."]
NEW = 6


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path) -> tuple[Path, Path, Path]:
    photos, _ = demo_photos(tmp_path_factory.mktemp("photos"))
    images = photos / "images" if (photos / "images").is_dir() else photos
    names = sorted(p.name for p in images.iterdir())[:3]
    model = build_tiny_llava(tmp_path_factory.mktemp("llava"), llama_tokenizer_dir, seed=0, image_size=112)
    bench = tmp_path_factory.mktemp("bench") / "open.jsonl"
    rows = [{"question_id": i, "image": n, "text": q, "label": "yes", "kind": "open"} for i, (n, q) in enumerate(zip(names, QUESTIONS))]
    bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return model, bench, images


def _run(setup: tuple[Path, Path, Path], out: Path, *extra: str, model: str | None = None) -> Any:
    path, bench, images = setup
    hf = () if model else ("--dtype", "float32", "--device", "cpu")
    args = ["run", "--model", model or str(path), "--benchmark", str(bench), "--images", str(images), "--out", str(out),
            "--template", "llava", "--open-ended", "--max-new-tokens", str(NEW), *hf, *extra]  # fmt: skip
    return CliRunner().invoke(app, args)


def _texts(out: Path) -> dict[int, str | None]:
    return {s.question_id: s.text for s in RunDir(out).read_samples() if s.error is None}


@pytest.fixture(scope="module")
def greedy(setup: tuple[Path, Path, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[int, str | None]:
    out = tmp_path_factory.mktemp("runs") / "greedy"
    result = _run(setup, out)
    assert result.exit_code == 0, result.output
    return _texts(out)


@pytest.mark.parametrize("neutral", ["vcd:alpha=0", "icd:alpha=0,beta=0", "m3id:lambda=0", "pai:gamma=1,alpha=0,start=0"])
def test_neutral_settings_write_the_greedy_text(setup: Any, greedy: dict[int, str | None], tmp_path: Path, neutral: str) -> None:
    result = _run(setup, tmp_path / "run", "--decode", neutral)
    assert result.exit_code == 0, result.output
    assert _texts(tmp_path / "run") == greedy and len(greedy) == 3


def _independent(setup: Any, method: str, rule: Any) -> dict[int, str]:
    """The method's text from contrast_decode, one question at a time, its branch built here."""
    model, bench, images = setup
    backend = HFBackend(str(model), dtype="float32", device="cpu")
    inputs = backend.core.inputs
    out: dict[int, str] = {}
    from PIL import Image

    for line in bench.read_text().splitlines():
        row = json.loads(line)
        path = str(images / row["image"])
        with Image.open(path) as im:
            image = im.convert("RGB")
        base = inputs.encode([backend.render_prompt(row["text"], "llava")], [image])
        if method == "vcd":
            contrast = noised_inputs(base, [path], VCD_NOISE_STEP)
        elif method == "dola":
            contrast = None
        elif method == "icd":
            contrast = inputs.encode([backend.render_prompt(f"{ICD_INSTRUCTION} {row['text']}", "llava")], [image])
        else:
            contrast = inputs.encode([backend.render_prompt(row["text"], "llava", image=False)], [])
        core = backend.core
        got = contrast_decode(core.model, base, contrast, rule, max_new_tokens=NEW, end_ids=[core.tokenizer.eos_token_id], pad_id=core.pad_id)
        out[row["question_id"]] = core.tokenizer.decode(got.tokens[0], skip_special_tokens=True)
    return out


@pytest.mark.parametrize(("spec", "method", "rule"), [("vcd:alpha=1", "vcd", ContrastRule(1.0, 0.1)), ("icd:alpha=2,beta=0", "icd", ContrastRule(2.0, 0.0)),
                                                       ("m3id:lambda=0.5", "m3id", M3IDRule(0.5)), ("dola", "dola", DoLaRule((0,), 0.1, 1.2))])  # fmt: skip
def test_a_method_run_writes_the_loops_text_and_records_its_settings(
    setup: Any, greedy: dict[int, str | None], tmp_path: Path, spec: str, method: str, rule: Any
) -> None:
    out = tmp_path / method
    result = _run(setup, out, "--decode", spec, "--batch-size", "2")
    assert result.exit_code == 0, result.output
    assert _texts(out) == _independent(setup, method, rule)
    assert _texts(out) != greedy  # the contrast branch changed some text
    header = RunDir(out).read_header()
    assert header.generate is not None and header.generate.decode is not None and header.generate.decode.text == spec and header.generate.sample is None
    assert decoding_identity(header.generate, "x")[:2] == (spec, spec)
    # --resume with another method is refused (the fingerprint holds the method)
    other = _run(setup, out, "--decode", "vcd:alpha=3", "--resume")
    assert other.exit_code == 2 and "refusing to resume" in other.output


def test_sampling_is_seeded_per_question(setup: Any, greedy: dict[int, str | None], tmp_path: Path) -> None:
    sampling = ("--sample", "--seed", "7", "--temperature", "1.5", "--top-p", "0.95", "--sample-top-k", "50")
    result = _run(setup, tmp_path / "a", *sampling, "--batch-size", "3")
    assert result.exit_code == 0, result.output
    texts = _texts(tmp_path / "a")
    assert texts != greedy
    assert texts[0] != texts[2]  # the same question about another image, its own draws
    result = _run(setup, tmp_path / "b", *sampling, "--batch-size", "1")
    assert result.exit_code == 0 and _texts(tmp_path / "b") == texts  # not the batch's
    # resume: a question dropped from samples.jsonl is asked again and gets the same text
    samples = tmp_path / "b" / "samples.jsonl"
    samples.write_text("".join(samples.read_text().splitlines(keepends=True)[:1]))
    (tmp_path / "b" / "complete.json").unlink(missing_ok=True)
    result = _run(setup, tmp_path / "b", *sampling, "--resume")
    assert result.exit_code == 0, result.output
    assert _texts(tmp_path / "b") == texts
    other_seed = _run(setup, tmp_path / "b", "--sample", "--seed", "8", "--temperature", "1.5", "--top-p", "0.95", "--sample-top-k", "50", "--resume")
    assert other_seed.exit_code == 2 and "refusing to resume" in other_seed.output
    generate = json.loads((tmp_path / "a" / "run.json").read_text())["generate"]
    assert {k: generate[k] for k in ("sample", "seed", "temperature", "top_p", "sample_top_k")} == {
        "sample": True, "seed": 7, "temperature": 1.5, "top_p": 0.95, "sample_top_k": 50}  # fmt: skip
    assert decoding_identity(RunDir(tmp_path / "a").read_header().generate, "a")[4] is True
    # a sampled method run too
    result = _run(setup, tmp_path / "c", "--decode", "vcd:alpha=1", *sampling)
    assert result.exit_code == 0 and len(_texts(tmp_path / "c")) == 3
    header = json.loads((tmp_path / "c" / "run.json").read_text())
    assert header["generate"]["decode"] == "vcd:alpha=1"  # the spec as typed (the fingerprint's)
    # and every setting it decoded with, the defaults resolved (a record beside it)
    assert header["backend_info"]["decoding"] == {"method": "vcd", "alpha": 1.0, "beta": 0.1, "noise_step": 500}
    assert "decoding" not in json.loads((tmp_path / "a" / "run.json").read_text())["backend_info"]  # sampling alone: no method


def test_plain_runs_keep_their_header_and_fingerprint(setup: Any, greedy: dict[int, str | None], tmp_path: Path) -> None:
    """A run without --decode/--sample writes no decoding key (its run.json and fingerprint as before)."""
    result = _run(setup, tmp_path / "plain")
    assert result.exit_code == 0
    generate = json.loads((tmp_path / "plain" / "run.json").read_text())["generate"]
    assert set(generate) == {"max_new_tokens", "top_k", "stop_strings", "signals", "instruction"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (("--decode", "opera"), "the decoding loop runs vcd, icd, m3id, dola, pai"),
        (("--decode", "pai:alpha=-1"), r"alpha must lie in \[0, 100\]"),
        (("--decode", "dola:repetition_penalty=0"), r"repetition_penalty must lie in \[1, 10\]"),
        (("--decode", "vcd:gamma=1"), "not 'gamma=1'"),
        (("--decode", "vcd:alpha=-1"), r"alpha must lie in \[0, 100\]"),
        (("--decode", "m3id:t=3"), "t is the decoding step"),
        (("--decode", "pai:start=3,end=2"), r"PAI's layers \[3, 2\) hold no layer"),
        (("--sample",), "--sample needs --seed"),
        (("--temperature", "0.5"), "--temperature is a sampling setting"),
        (("--sample", "--seed", "1", "--top-p", "0"), "--top-p must lie in"),
        (("--decode", "vcd", "--backend", "scripted"), "the scripted backend cannot apply --decode"),
        (("--decode", "vcd", "--backend", "openai", "--endpoint", "http://127.0.0.1:9/v1"), "the openai backend cannot apply --decode"),
    ],
)
def test_bad_decoding_input_exits_2_before_any_model_loads(setup: Any, tmp_path: Path, extra: tuple[str, ...], message: str) -> None:
    import re

    result = _run(setup, tmp_path / "bad", *extra, model=str(tmp_path / "no-such-model"))
    assert result.exit_code == 2, result.output
    assert re.search(message, result.output), result.output
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize(
    ("spec", "message"),
    [("pai", r"layers \[2, 2\) hold no layer \(this model has 2 layers\)"), ("pai:start=0,end=50", "past the model's 2 layers")],
)
def test_pai_layers_the_model_lacks_are_refused_from_config_json(setup: Any, tmp_path: Path, spec: str, message: str) -> None:
    """A local folder's config.json names the text model's layers: PAI's range is checked before
    any weight is looked for (the folder holds nothing else)."""
    import re

    folder = tmp_path / "two-layers"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llava", "text_config": {"num_hidden_layers": 2}}))
    result = _run(setup, tmp_path / "bad", "--decode", spec, model=str(folder))
    assert result.exit_code == 2 and re.search(message, result.output), result.output
    assert not (tmp_path / "bad").exists()


def test_decode_needs_open_ended(setup: Any, tmp_path: Path) -> None:
    _, bench, images = setup
    args = ["run", "--model", str(tmp_path / "none"), "--benchmark", str(bench), "--images", str(images), "--out", str(tmp_path / "o"), "--decode", "vcd"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "give --open-ended" in result.output


def test_decoding_table_reads_the_methods_runs(tmp_path: Path, setup: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """`halluprobe decoding` over a greedy, a method and a sampled run written by `run --decode`:
    each run named by its recorded method and sampling, its caption length recomputed here."""
    import shutil

    from _chair import FixtureTools, wordnet_or_skip

    from halluprobe.captions.chair import families as chair_families

    wordnet_or_skip()
    monkeypatch.setattr(chair_families, "NltkTools", lambda need_tagger=True: FixtureTools())
    model, bench, images = setup
    coco = tmp_path / "coco"
    coco.mkdir()
    rows = [json.loads(line) for line in bench.read_text().splitlines()]
    for i, row in enumerate(rows, start=1):
        name = f"COCO_val2014_{i:012d}.jpg"
        shutil.copy(images / row["image"], coco / name)
        row["image"] = name
    coco_bench = tmp_path / "coco.jsonl"
    coco_bench.write_text("".join(json.dumps(r) + "\n" for r in rows))
    truth = tmp_path / "objects.jsonl"
    truth.write_text("".join(json.dumps({"image_id": i, "objects": ["dog"]}) + "\n" for i in range(1, len(rows) + 1)))
    sampling = ("--sample", "--seed", "1", "--temperature", "1.2")
    runs = {"greedy": (), "vcd": ("--decode", "vcd:alpha=1"), "sampled": sampling}
    for name, extra in runs.items():
        result = _run((model, coco_bench, coco), tmp_path / name, *extra)
        assert result.exit_code == 0, result.output
    args = ["decoding", str(tmp_path / "greedy"), str(tmp_path / "vcd"), "--sampled-baseline", str(tmp_path / "sampled"),
            "--ground-truth", str(truth), "--json", "--bootstrap", "20"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    per_run = {r["role"]: r for r in json.loads(result.stdout)["chair"]["per_run"]}
    assert per_run["method"]["name"] == "vcd:alpha=1"
    assert per_run["sampled baseline"]["name"].startswith("sampled (sampled")
    for role, name in (("greedy baseline", "greedy"), ("method", "vcd"), ("sampled baseline", "sampled")):
        texts = [s.text or "" for s in RunDir(tmp_path / name).read_samples()]
        assert per_run[role]["length"] == pytest.approx(sum(len(t.split()) for t in texts) / len(texts)), role


@pytest.mark.parametrize(("model_type", "spec"), [("instructblip", "m3id:lambda=0.5"), ("paligemma", "pai:gamma=1.1")])
def test_no_image_method_refused_for_an_image_first_family_before_loading(setup: Any, tmp_path: Path, model_type: str, spec: str) -> None:
    """Only a config.json: the refusal comes from it, before any weight is looked for."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
    result = _run(setup, tmp_path / "out", "--decode", spec, model=str(folder))
    assert result.exit_code == 2, result.output
    assert "without the image" in result.output and str(folder / "config.json") in result.output.replace("\n", "")
    assert not (tmp_path / "out").exists()


def test_a_failing_branch_is_an_error_on_its_sample_asked_again_on_resume(setup: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The noised branch of question 1 fails: its sample is an error (no plain-decoded text),
    the batch's other questions keep the method's text, and --resume asks it again. The plain
    engine's full-prompt branch (the prefix engine's: tests/test_decode_prefix.py)."""
    from halluprobe.backends.hf import decode_engine as hf_decode_engine

    want_out = tmp_path / "want"
    assert _run(setup, want_out, "--decode", "vcd:alpha=1").exit_code == 0
    want = _texts(want_out)
    real = hf_decode_engine.noised_inputs

    def failing(inputs: Any, paths: Any, step: int) -> Any:
        if len(paths) == 1 and paths[0].endswith(RunDir(want_out).read_samples()[1].image):
            raise RuntimeError("noise failed")
        if len(paths) > 1:
            raise RuntimeError("batch failed")  # the batch: retried row by row
        return real(inputs, paths, step)

    monkeypatch.setattr(hf_decode_engine, "noised_inputs", failing)
    out = tmp_path / "run"
    result = _run(setup, out, "--decode", "vcd:alpha=1", "--batch-size", "3", "--no-prefix-cache")
    assert result.exit_code == 0, result.output
    samples = {s.question_id: s for s in RunDir(out).read_samples()}
    assert samples[1].error == "RuntimeError: noise failed" and samples[1].text is None
    assert {k: s.text for k, s in samples.items() if k != 1} == {k: v for k, v in want.items() if k != 1}
    monkeypatch.setattr(hf_decode_engine, "noised_inputs", real)
    assert _run(setup, out, "--decode", "vcd:alpha=1", "--batch-size", "3", "--no-prefix-cache", "--resume").exit_code == 0
    assert _texts(out) == want
