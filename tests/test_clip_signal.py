"""The clip signal and the clip correction: similarities equal the CLIP model's own (a tiny
random CLIPModel on the real CLIP BPE vocabulary), the runner records them beside any backend,
the correction equals its formula and is the base pass at beta = 0, and bad input is one line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_corrections import _per_question
from test_pipeline import _make_world, _run_args
from typer.testing import CliRunner

torch = pytest.importorskip("torch")

from _autoprobe_assets import clip_tokenizer_dir  # noqa: E402

from halluprobe.cli import app  # noqa: E402
from halluprobe.clip_signal import EMPTY_CAPTION, ClipScorer, object_caption  # noqa: E402
from halluprobe.rundir import RunDir  # noqa: E402
from halluprobe.tiny import build_tiny_clip, demo_photos  # noqa: E402

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

runner = CliRunner()


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_clip(tmp_path_factory.mktemp("clip"), clip_tokenizer_dir(), seed=0)


@pytest.fixture(scope="module")
def clip_run(tmp_path_factory: pytest.TempPathFactory, clip_dir: Path) -> Path:
    root = tmp_path_factory.mktemp("clip-run")
    world = _make_world(root)
    out = root / "run"
    result = runner.invoke(app, _run_args(world, out, "--signals", "clip,noised", "--clip-model", str(clip_dir)))
    assert result.exit_code == 0, result.output
    return out


def test_the_similarities_are_clips_own(clip_dir: Path, tmp_path: Path) -> None:
    from PIL import Image
    from transformers import CLIPModel, CLIPProcessor

    images, _ = demo_photos(tmp_path)
    pairs = [(str(images / "chelsea.jpg"), "cat"), (str(images / "coffee.jpg"), "cup"), (str(images / "chelsea.jpg"), "dog")]
    got = ClipScorer(clip_dir, device="cpu", batch_size=2).similarities(pairs)
    model = CLIPModel.from_pretrained(str(clip_dir)).eval()
    processor = CLIPProcessor.from_pretrained(str(clip_dir))
    scale = float(model.logit_scale.detach().exp())
    for (path, obj), similarity in zip(pairs, got):
        assert not isinstance(similarity, str)
        inputs = processor(text=[object_caption(obj), EMPTY_CAPTION], images=Image.open(path).convert("RGB"), return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model(**inputs)
            # the patches: the vision tower's last layer through its final norm and the projection
            hidden = model.vision_model(pixel_values=inputs["pixel_values"]).last_hidden_state[0, 1:]
            patches = torch.nn.functional.normalize(model.visual_projection(model.vision_model.post_layernorm(hidden)), dim=-1)
        per_image = out.logits_per_image[0] / scale  # CLIP's own cosine similarities
        assert similarity.object_global == pytest.approx(float(per_image[0]), abs=1e-5)
        assert similarity.empty_global == pytest.approx(float(per_image[1]), abs=1e-5)
        per_patch = patches @ out.text_embeds.T  # [P, 2]
        assert similarity.object_patch == pytest.approx(float(per_patch[:, 0].max()), abs=1e-5)
        assert similarity.empty_patch == pytest.approx(float(per_patch[:, 1].max()), abs=1e-5)
        assert similarity.logit_scale == pytest.approx(scale)
    assert got[0].object_global != got[2].object_global  # the object's caption matters


def test_a_run_records_clip_beside_the_backend(clip_run: Path, clip_dir: Path) -> None:
    rundir = RunDir(clip_run)
    header = rundir.read_header()
    assert header.clip is not None and header.clip.model == str(clip_dir)
    assert header.generate is not None and header.generate.signals == ("noised",)  # what the backend was given
    samples = rundir.read_samples()
    assert all(s.clip is not None and "noised" in s.signals for s in samples)
    # the same (image, object) gets the same numbers in both splits
    by_pair = {}
    for s in samples:
        by_pair.setdefault((s.image, s.object), set()).add(s.clip.object_global if s.clip else None)
    assert all(len(values) == 1 for values in by_pair.values())
    assert '"clip"' in rundir.samples_path.read_text().splitlines()[0]


def test_a_run_without_clip_stores_no_clip_key(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    assert runner.invoke(app, _run_args(world, out, "--limit", "2")).exit_code == 0
    assert '"clip"' not in (out / "samples.jsonl").read_text() and '"clip"' not in (out / "run.json").read_text()


@pytest.mark.parametrize(("beta", "patch"), [(1.0, 0.0), (1.5, 0.0), (0.7, 1.0), (2.0, 0.3)])
def test_the_clip_correction_equals_its_formula(clip_run: Path, tmp_path: Path, beta: float, patch: float) -> None:
    base = _per_question(clip_run, "dynamic", tmp_path)
    got = _per_question(clip_run, f"clip:beta={beta},patch={patch}", tmp_path)
    samples = {(s.split, s.question_id): s for s in RunDir(clip_run).read_samples()}
    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    moved = 0
    for b, g in zip(base, got):
        c = samples[(g["split"], g["question_id"])].clip
        assert c is not None
        z = c.logit_scale * ((1 - patch) * (c.object_global - c.empty_global) + patch * (c.object_patch - c.empty_patch))
        # p'(yes) ~ p(yes) sigmoid(z)^beta, p'(no) ~ p(no) (1 - sigmoid(z))^beta: log-odds + beta z
        assert logit(g["p_yes"]) == pytest.approx(logit(b["p_yes"]) + beta * z, abs=1e-9)
        assert g["decision"] == ("yes" if g["p_yes"] > 0.5 else "no")
        moved += abs(g["p_yes"] - b["p_yes"]) > 1e-6
    assert moved > len(got) // 2  # the signal moves the answers: the check above is not 0 = 0


def test_clip_at_beta_zero_is_the_base_pass(clip_run: Path, tmp_path: Path) -> None:
    assert _per_question(clip_run, "clip:beta=0", tmp_path) == _per_question(clip_run, "dynamic", tmp_path)


def test_the_corrections_table_and_report_carry_clip(clip_run: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["corrections", str(clip_run), "--correction", "clip:beta=1", "--resamples", "20", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)["rows"]}
    assert rows["clip:beta=1"]["delta_f1"] == pytest.approx(rows["clip:beta=1"]["f1"] - rows["dynamic"]["f1"])
    report = runner.invoke(app, ["report", str(clip_run), "--out", str(tmp_path / "r.html"), "--resamples", "10"])
    assert report.exit_code == 0, report.output
    section = (tmp_path / "r.md").read_text().split("Corrections\n", 1)[1]
    assert "`clip:beta=1`" in section and "`vcd:alpha=1,beta=0.1`" in section


def test_the_clip_model_is_part_of_the_fingerprint(clip_run: Path, tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    ok = runner.invoke(app, _run_args(world, out, "--limit", "1", "--signals", "noised"))
    assert ok.exit_code == 0, ok.output
    clip_model = RunDir(clip_run).read_header().clip
    assert clip_model is not None
    refused = runner.invoke(app, _run_args(world, out, "--resume", "--signals", "noised,clip", "--clip-model", clip_model.model))
    assert refused.exit_code == 2 and "refusing to resume: the CLIP model (--clip-model) differs" in refused.output


def test_an_image_clip_cannot_read_is_an_error_on_that_sample(tmp_path: Path, clip_dir: Path) -> None:
    world = _make_world(tmp_path)
    (world["images"] / "img0.png").write_bytes(b"not a png")  # the scripted backend never opens images
    out = tmp_path / "run"
    result = runner.invoke(app, _run_args(world, out, "--signals", "clip", "--clip-model", str(clip_dir)))
    assert result.exit_code == 0, result.output
    samples = RunDir(out).read_samples()
    broken = [s for s in samples if s.image == "img0.png"]
    assert broken and all(s.error and "clip signal: cannot read image" in s.error and s.clip is None for s in broken)
    assert all(s.error is None and s.clip is not None for s in samples if s.image != "img0.png")
    assert not RunDir(out).complete_path.exists()  # errors: not marked complete


def test_a_clip_folder_without_weights_is_one_line_and_exit_1(tmp_path: Path, clip_dir: Path) -> None:
    world = _make_world(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("config.json", "tokenizer_config.json", "tokenizer.json", "processor_config.json"):
        if (clip_dir / name).exists():
            (broken / name).write_bytes((clip_dir / name).read_bytes())
    result = runner.invoke(app, _run_args(world, tmp_path / "run", "--signals", "clip", "--clip-model", str(broken)))
    assert result.exit_code == 1 and "cannot load CLIP model" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_question_without_an_object_is_refused_naming_its_file(tmp_path: Path, clip_dir: Path) -> None:
    world = _make_world(tmp_path)
    lines = world["random"].read_text().splitlines()
    lines[3] = json.dumps({**json.loads(lines[3]), "text": "Is the image bright?"})
    world["random"].write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, _run_args(world, tmp_path / "run", "--signals", "clip", "--clip-model", str(clip_dir)))
    assert result.exit_code == 2 and "names no object" in result.output and "toy_pope_random.json" in result.output, result.output
    assert not (tmp_path / "run").exists()


def test_a_failing_clip_pass_keeps_the_batch_as_errors(tmp_path: Path, clip_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(self: ClipScorer, pairs: object) -> None:
        raise RuntimeError("CUDA out of memory (simulated)")

    monkeypatch.setattr(ClipScorer, "similarities", fail)
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    result = runner.invoke(app, _run_args(world, out, "--signals", "clip", "--clip-model", str(clip_dir), "--limit", "3"))
    assert result.exit_code == 0, result.output
    samples = RunDir(out).read_samples()
    assert len(samples) == 6 and all(s.error == "clip signal: RuntimeError: CUDA out of memory (simulated)" for s in samples)
    assert all(s.candidates for s in samples)  # what the backend answered is kept
    monkeypatch.undo()
    again = runner.invoke(app, _run_args(world, out, "--signals", "clip", "--clip-model", str(clip_dir), "--limit", "3", "--resume"))
    assert again.exit_code == 0, again.output
    assert all(s.error is None and s.clip is not None for s in RunDir(out).read_samples()) and RunDir(out).complete_path.exists()


def test_shift_rules_on_pieces_keep_a_one_sided_answer_and_an_unknown() -> None:
    from halluprobe.readouts.apply import apply
    from halluprobe.readouts.value import Readout
    from halluprobe.readouts.tokensets import piece_token_sets
    from halluprobe.records import ClipSimilarity, Sample

    sets = piece_token_sets("test")
    clip = ClipSimilarity(object_global=0.1, object_patch=0.2, empty_global=0.3, empty_patch=0.1, logit_scale=100.0)

    def sample(candidates: dict[str, float]) -> Sample:
        return Sample(split="s", question_id=1, image="i.png", object="cat", label="yes", prompt="p", candidates=candidates, clip=clip)

    only_yes = sample({"Yes": -0.1, "Maybe": -2.5})
    for spec in ("clip:beta=3", "bias:b=5"):
        result = apply(Readout.parse(spec), only_yes, sets)
        assert result is not None and result.decision == "yes" and result.p_yes == 1.0  # the no set has no mass to gain
        neither = apply(Readout.parse(spec), sample({"Maybe": -0.1}), sets)
        assert neither is not None and neither.decision == "unknown" and neither.p_yes is None
    both = apply(Readout.parse("clip:beta=1"), sample({"Yes": math.log(0.6), "No": math.log(0.4)}), sets)
    assert both is not None and both.p_yes is not None
    z = 100.0 * (0.1 - 0.3)
    assert math.log(both.p_yes / (1 - both.p_yes)) == pytest.approx(math.log(0.6 / 0.4) + z)
    assert both.decision == "no"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--signals", "clip"], "the clip signal needs a CLIP model: give --clip-model PATH"),
        (["--clip-model", "CLIP"], "add clip to --signals"),
        (["--signals", "clip", "--clip-model", "NOT_CLIP"], "model_type 'llava' is not a CLIP model"),
        (["--signals", "clip", "--clip-model", "EMPTY"], "has no config.json"),
        (["--signals", "clip", "--clip-model", "./no/such/clip"], "--clip-model: no such folder"),
        (["--signals", "clip", "--open-ended", "--clip-model", "CLIP"], "an open-ended run has no yes/no answer to correct"),
    ],
)
def test_bad_clip_input_is_one_line_before_the_run_dir(tmp_path: Path, clip_dir: Path, extra: list[str], message: str) -> None:
    world = _make_world(tmp_path)
    (tmp_path / "notclip").mkdir()
    (tmp_path / "notclip" / "config.json").write_text('{"model_type": "llava"}')
    (tmp_path / "empty").mkdir()
    folders = {"CLIP": str(clip_dir), "NOT_CLIP": str(tmp_path / "notclip"), "EMPTY": str(tmp_path / "empty")}
    result = runner.invoke(app, _run_args(world, tmp_path / "run", *[folders.get(x, x) for x in extra]))
    assert result.exit_code == 2 and message in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists()


def test_a_server_run_records_clip_and_the_rule_reads_its_pieces(tmp_path: Path, clip_dir: Path) -> None:
    from _openai_server import FakeChatServer
    from test_openai_backend import _args, _world

    world = _world(tmp_path, n_images=3)
    out = tmp_path / "run"
    with FakeChatServer() as server:
        result = runner.invoke(app, _args(world, out, [server.url], "--signals", "clip", "--clip-model", str(clip_dir)))
    assert result.exit_code == 0, result.output
    header = RunDir(out).read_header()
    assert header.token_sets is not None and header.token_sets.keyed_by == "piece" and header.clip is not None
    base = _per_question(out, "dynamic", tmp_path)
    got = _per_question(out, "clip:beta=2", tmp_path)
    samples = {(s.split, s.question_id): s for s in RunDir(out).read_samples()}
    logit = lambda p: math.log(p / (1 - p))  # noqa: E731
    for b, g in zip(base, got):
        c = samples[(g["split"], g["question_id"])].clip
        assert c is not None
        assert logit(g["p_yes"]) == pytest.approx(logit(b["p_yes"]) + 2 * c.logit_scale * (c.object_global - c.empty_global), abs=1e-9)
    with FakeChatServer() as server:  # a contrast signal needs the hf backend: refused, naming it
        refused = runner.invoke(app, _args(world, tmp_path / "other", [server.url], "--signals", "clip,noised", "--clip-model", str(clip_dir)))
    assert refused.exit_code == 2 and "records none of the signals noised: they need the hf backend" in refused.output
