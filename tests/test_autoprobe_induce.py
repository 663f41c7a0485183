"""`halluprobe probe induce`: prompt sets from TOML, descriptions appended and resumed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.cli import app

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

runner = CliRunner()

_DESCRIPTIONS = {
    "a.jpg": "A cat sleeps on a sofa. A dog watches from the kitchen.",
    "b.jpg": "A cup of coffee sits on a saucer next to a spoon.",
}


def _setup(tmp_path: Path, toml: str, extra_rules: list[dict[str, str]] | None = None) -> list[str]:
    images = tmp_path / "images"
    images.mkdir()
    for name in _DESCRIPTIONS:
        (images / name).write_bytes(b"jpeg bytes are not read by the scripted backend")
    (images / "notes.txt").write_text("not an image")
    rules = list(extra_rules or []) + [{"match": "Describe", "image": k, "text": v} for k, v in _DESCRIPTIONS.items()]
    (tmp_path / "script.json").write_text(json.dumps({"generate": rules}))
    (tmp_path / "prompts.toml").write_text(toml)
    return ["probe", "induce", "--images", str(images), "--backend", "scripted", "--model", str(tmp_path / "script.json"),
            "--prompts", str(tmp_path / "prompts.toml"), "--out", str(tmp_path / "descriptions.jsonl")]  # fmt: skip


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_induce_writes_every_image_prompt_and_epoch_and_resumes(tmp_path: Path) -> None:
    args = _setup(tmp_path, 'system = "Be exhaustive."\nprompts = ["Describe the image.", "Describe every object."]\nepochs = 2\nmax_new_tokens = 64\n')
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    out = tmp_path / "descriptions.jsonl"
    lines = _lines(out)
    assert len(lines) == 2 * 2 * 2  # images x prompts x epochs
    assert {line["key"] for line in lines} == {f"{i}#p{p}#e{e}" for i in _DESCRIPTIONS for p in (0, 1) for e in (0, 1)}
    first = lines[0]
    assert first["text"] == _DESCRIPTIONS[first["image"]] and first["error"] is None
    assert first["prompt_set"] == "prompts" and first["prompt"] == "Describe the image."
    assert first["rendered"] == "USER: <image>\nBe exhaustive.\n\nDescribe the image.\nASSISTANT:"
    # resume: nothing new; after a kill mid-line the truncated line is ignored and redone
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "0 description(s) written" in again.output and "8 already there" in again.output
    text = out.read_text()
    kept = text.splitlines(keepends=True)
    out.write_text("".join(kept[:5]) + kept[5][: len(kept[5]) // 2])
    resumed = runner.invoke(app, args)
    assert resumed.exit_code == 0, resumed.output
    assert "3 description(s) written" in resumed.output
    assert sorted(line["key"] for line in _lines_tolerant(out)) == sorted(line["key"] for line in lines)


def _lines_tolerant(path: Path) -> list[dict[str, object]]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def test_json_mode_validates_and_retries(tmp_path: Path) -> None:
    rules = [{"match": "previous answer was not valid", "text": '{"description": "A cat on a sofa."}'},
             {"match": "JSON", "image": "a.jpg", "text": "A cat on a sofa (no JSON)."},
             {"match": "JSON", "image": "b.jpg", "text": '{"description": "A cup."}'}]  # fmt: skip
    args = _setup(tmp_path, 'prompts = ["Describe the image."]\njson_mode = true\nmax_retries = 1\n', rules)
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    by_image = {line["image"]: line for line in _lines(tmp_path / "descriptions.jsonl")}
    assert by_image["a.jpg"]["text"] == "A cat on a sofa." and by_image["a.jpg"]["attempts"] == 2
    assert by_image["b.jpg"]["text"] == "A cup." and by_image["b.jpg"]["attempts"] == 1


def test_another_prompt_set_is_refused_on_resume(tmp_path: Path) -> None:
    args = _setup(tmp_path, 'prompts = ["Describe the image."]\n')
    assert runner.invoke(app, args).exit_code == 0
    (tmp_path / "prompts.toml").write_text('prompts = ["Describe the image in detail."]\n')
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "another prompt set" in result.output and "descriptions.jsonl" in result.output


def test_another_images_folder_with_the_same_names_is_refused_on_resume(tmp_path: Path) -> None:
    """The key holds the file name only: the image's sha256 tells another folder's a.jpg apart."""
    args = _setup(tmp_path, 'prompts = ["Describe the image."]\n')
    assert runner.invoke(app, args).exit_code == 0
    import hashlib

    out = tmp_path / "descriptions.jsonl"
    for line in _lines(out):
        assert line["image_sha256"] == hashlib.sha256((tmp_path / "images" / str(line["image"])).read_bytes()).hexdigest()
    other = tmp_path / "other"
    other.mkdir()
    for name in _DESCRIPTIONS:
        (other / name).write_bytes(b"another photo under the same name")
    before = out.read_bytes()
    args[args.index("--images") + 1] = str(other)
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "another image named a.jpg" in lines[0] and "use another --out" in lines[0], result.output
    assert out.read_bytes() == before  # nothing appended, nothing mixed
    # the same bytes in another folder are the same images: resumed, nothing new
    same = tmp_path / "same"
    same.mkdir()
    for name in _DESCRIPTIONS:
        (same / name).write_bytes((tmp_path / "images" / name).read_bytes())
    args[args.index("--images") + 1] = str(same)
    again = runner.invoke(app, args)
    assert again.exit_code == 0 and "0 description(s) written" in again.output, again.output


@pytest.mark.parametrize(
    ("toml", "problem"),
    [
        ('prompts = ["a"', "not valid TOML"),
        ("epochs = 2\n", "'prompts': Field required"),
        ("prompts = []\n", "'prompts': List should have at least 1 item"),
        ('prompts = ["Describe.", "  "]\n', "'prompts': prompt 2 is empty"),
        ('prompts = ["a"]\nepochs = 0\n', "'epochs': Input should be greater than or equal to 1"),
        ('prompts = ["a"]\nsystem_prompt = "x"\n', "'system_prompt': Extra inputs are not permitted"),
        ('prompts = "Describe."\n', "'prompts': Input should be a valid list"),
    ],
)
def test_bad_prompt_set_is_one_line_naming_file_and_problem(tmp_path: Path, toml: str, problem: str) -> None:
    args = _setup(tmp_path, toml)
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"error: {tmp_path / 'prompts.toml'}: ") and problem in lines[0], lines[0]


def test_empty_image_folder_is_exit_2(tmp_path: Path) -> None:
    args = _setup(tmp_path, 'prompts = ["Describe."]\n')
    empty = tmp_path / "empty"
    empty.mkdir()
    args[args.index("--images") + 1] = str(empty)
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "no images" in result.output


def test_induce_with_the_hf_backend_on_a_tiny_llava(tmp_path: Path) -> None:
    """The real generation path: a random-weight LLaVA, descriptions not cut at the first '.'."""
    pytest.importorskip("torch")
    pytest.importorskip("skimage")
    from halluprobe.backends.hf.backend import HFBackend
    import _autoprobe_assets

    from halluprobe.tiny import demo_photos

    model_dir = _autoprobe_assets.tiny_llava_dir()
    demo, _ = demo_photos(tmp_path / "demo")
    photos = tmp_path / "photos"
    photos.mkdir()
    (demo / "coffee.jpg").rename(photos / "coffee.jpg")
    (tmp_path / "prompts.toml").write_text('prompts = ["Describe the image."]\nmax_new_tokens = 12\n')
    out = tmp_path / "descriptions.jsonl"
    result = runner.invoke(app, ["probe", "induce", "--images", str(photos), "--backend", "hf", "--model", str(model_dir),
                                 "--prompts", str(tmp_path / "prompts.toml"), "--out", str(out),
                                 "--backend-option", "device=cpu"])  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = _lines(out)
    assert len(lines) == 1
    for line in lines:
        assert line["error"] is None and line["text"]
        assert line["rendered"] == "USER: <image>\nDescribe the image. ASSISTANT:"
    # what generation asks for: no stop strings (EOS or max_new_tokens end a description)
    backend = HFBackend(str(model_dir), device="cpu")
    # the description ran to max_new_tokens (12): one token more continues it, so neither EOS nor a
    # stop string ended it (this random model emits no '.' or newline, so its text alone cannot show that)
    from halluprobe.records import YES_NO_STOP_STRINGS, GenerateConfig, Request

    request = Request(split="x", question_id=0, image_path=str(photos / "coffee.jpg"), prompt=str(lines[0]["rendered"]))
    described = GenerateConfig(max_new_tokens=13, top_k=1, stop_strings=())
    ((longer,),) = list(backend.answer([request], described))
    assert len(backend.engine(described).stopping) == 0  # the criteria of the call's (empty) stop set
    ((shorter,),) = list(backend.answer([request], GenerateConfig(max_new_tokens=11, top_k=1, stop_strings=())))
    description = str(lines[0]["text"])
    assert longer.text is not None and longer.text.startswith(description) and len(longer.text) > len(description)
    assert shorter.text is not None and description.startswith(shorter.text) and len(shorter.text) < len(description)
    yes_no = GenerateConfig(max_new_tokens=2, top_k=1)  # the yes/no default
    list(backend.answer([request], yes_no))
    assert backend.engine(yes_no).stops == YES_NO_STOP_STRINGS and len(backend.engine(yes_no).stopping) == 1


def test_the_documented_example_prompt_set_loads() -> None:
    from halluprobe.benchmarks.autoprobe.induction import load_prompt_set

    example = Path(__file__).resolve().parents[1] / "docs" / "autoprobe-prompts.example.toml"
    prompt_set = load_prompt_set(example)
    assert prompt_set.name == "inducing-v1" and len(prompt_set.prompts) == 3 and prompt_set.system
