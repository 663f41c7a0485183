"""A second adversarial pass (issue 32) over `amber`, `build chair`, `data pope --dataset`,
`literature` and `run --sample`: each case here exited 0 with a wrong or silent result, or ended
in a traceback, before its fix (or stays xfail where the fix lies in code this pass may not edit)."""

from __future__ import annotations

# ruff: noqa: F811  (toy_coco is a fixture imported from _literature, then requested by name)

import json
from pathlib import Path

import pytest
from _literature import literature_cache, llava_entry, toy_coco, write_registry  # noqa: F401 - fixtures
from click.testing import Result
from test_amber import _amber
from typer.testing import CliRunner

from halluprobe.cli import app

runner = CliRunner()
AMBER = ["--no-check-sha256"]


def _one_line_exit_2(result: Result, *needles: str) -> None:
    output = result.output
    assert result.exit_code == 2, output
    assert len(output.strip().splitlines()) == 1 and "Traceback" not in output, output
    for needle in needles:
        assert needle in output, output


def _amber_run(tmp_path: Path, data: Path) -> Path:
    """A scripted run of the AMBER existence questions `amber questions` writes."""
    questions = tmp_path / "questions"
    built = runner.invoke(app, ["amber", "questions", "--data", str(data), "--out", str(questions), *AMBER])
    assert built.exit_code == 0, built.output
    images = tmp_path / "imgs"
    images.mkdir()
    for k in (1, 2, 3):
        (images / f"AMBER_{k}.jpg").write_bytes(b"x")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {}}))
    out = tmp_path / "run"
    done = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), "--benchmark", str(questions / "amber_existence.jsonl"),
                               "--images", str(images), "--out", str(out)])  # fmt: skip
    assert done.exit_code == 0, done.output
    return out


def test_amber_score_of_a_run_with_no_samples_is_refused_not_zeros(tmp_path: Path) -> None:
    """Every AMBER number 0.0 (n=0), exit 0, for a run with no answers; `score` refuses it."""
    data = _amber(tmp_path / "amber")
    run = _amber_run(tmp_path, data)
    (run / "samples.jsonl").write_text("")
    result = runner.invoke(app, ["amber", "score", str(run), "--data", str(data), *AMBER])
    _one_line_exit_2(result, "samples.jsonl", "no samples")


def test_amber_questions_refuses_an_annotation_type_it_does_not_know(tmp_path: Path) -> None:
    """A query whose annotation type is neither discriminative nor generative was dropped silently."""
    data = _amber(tmp_path / "amber")
    annotations = json.loads((data / "annotations.json").read_text())
    annotations[1]["type"] = "discriminative-hallucinaton"  # a misspelt type: its query vanished from every split
    (data / "annotations.json").write_text(json.dumps(annotations))
    result = runner.invoke(app, ["amber", "questions", "--data", str(data), "--out", str(tmp_path / "q"), *AMBER])
    _one_line_exit_2(result, "query 2", "discriminative-hallucinaton")
    assert not (tmp_path / "q").exists()


def test_amber_questions_refuses_a_query_id_given_twice(tmp_path: Path) -> None:
    """Two queries with one id were written as two questions with one question_id (refused only by `run`)."""
    data = _amber(tmp_path / "amber")
    path = data / "query" / "query_discriminative.json"
    queries = json.loads(path.read_text())
    path.write_text(json.dumps(queries + [queries[0]]))
    result = runner.invoke(app, ["amber", "questions", "--data", str(data), "--out", str(tmp_path / "q"), *AMBER])
    _one_line_exit_2(result, "query_discriminative.json", "query id 2 is given twice")
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize("similarity", ["nan", "inf", "1.5", "-2"])
def test_amber_generative_refuses_a_similarity_no_cosine_can_pass(tmp_path: Path, similarity: str) -> None:
    """--similarity nan (or above 1) makes no two words one: every caption's numbers change silently."""
    data = _amber(tmp_path / "amber")
    result = runner.invoke(app, ["amber", "generative", str(tmp_path / "run"), "--data", str(data), "--similarity", similarity, *AMBER])
    _one_line_exit_2(result, "--similarity")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_registry_figure_that_is_not_a_number_is_refused(tmp_path: Path, value: float) -> None:
    """A published NaN was "audited; 0 of 1 reproduced", exit 0, and literature.json held NaN (not JSON)."""
    entry, _ = llava_entry(tmp_path / "mirror")
    entry["published"] = [{"metric": "f1_macro", "value": value, "scale": 100, "decimals": 1, "where": "x", "path": "README.md"}]
    reg = write_registry(tmp_path, [entry])
    result = runner.invoke(app, ["literature", "list", "--registry", str(reg)])
    _one_line_exit_2(result, "registry.json", "published.0.value")


@pytest.mark.parametrize(("field", "value"), [("commit", "../../.."), ("repository", "../x")])
def test_a_registry_files_own_commit_and_repository_are_checked(tmp_path: Path, field: str, value: str) -> None:
    """An entry's commit and repository have a pattern; a file's own were taken as they came,
    and '../' in them walked the mirror URL out of its folder."""
    entry, _ = llava_entry(tmp_path / "mirror")
    entry["answers"][0][field] = value
    reg = write_registry(tmp_path, [entry])
    result = runner.invoke(app, ["literature", "list", "--registry", str(reg)])
    _one_line_exit_2(result, "registry.json", f"answers.0.{field}")


def test_a_registry_path_that_climbs_out_is_refused(tmp_path: Path) -> None:
    entry, _ = llava_entry(tmp_path / "mirror")
    entry["answers"][0]["path"] = "../../../etc/passwd"
    reg = write_registry(tmp_path, [entry])
    result = runner.invoke(app, ["literature", "list", "--registry", str(reg)])
    _one_line_exit_2(result, "registry.json", "answers.0.path")


def test_audit_of_a_registry_with_a_nan_figure_writes_no_nan(tmp_path: Path, toy_coco: Path) -> None:
    entry, _ = llava_entry(toy_coco)
    entry["published"] = [{"metric": "f1_macro", "value": float("nan"), "scale": 100, "decimals": 1, "where": "x", "path": "README.md"}]
    reg = write_registry(tmp_path, [entry])
    out = tmp_path / "audit"
    result = runner.invoke(app, ["literature", "audit", "--all", "--out", str(out), "--registry", str(reg), "--resamples", "10"])
    _one_line_exit_2(result, "published.0.value")
    assert not out.exists()


@pytest.mark.parametrize("temperature", ["inf", "1e999"])
def test_run_sample_infinite_temperature_is_one_line_before_the_model_loads(tmp_path: Path, temperature: str) -> None:
    """`run --sample --seed 1 --temperature inf` ended in a pydantic traceback."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llava"}))  # no weights: a load would fail loudly
    bench = tmp_path / "b.jsonl"
    bench.write_text(json.dumps({"question_id": 1, "image": "a.jpg", "text": "Describe.", "label": "yes"}) + "\n")
    (tmp_path / "imgs").mkdir()
    (tmp_path / "imgs" / "a.jpg").write_bytes(b"x")
    result = runner.invoke(app, ["run", "--model", str(model), "--benchmark", str(bench), "--images", str(tmp_path / "imgs"), "--out",
                                 str(tmp_path / "run"), "--open-ended", "--sample", "--seed", "1", "--temperature", temperature])  # fmt: skip
    _one_line_exit_2(result, "--temperature")
    assert not (tmp_path / "run").exists()


def test_build_chair_refuses_a_negative_image_id(tmp_path: Path) -> None:
    listed = tmp_path / "list.jsonl"
    listed.write_text('{"image_id": -5}\n')
    result = runner.invoke(app, ["build", "chair", "--list", str(listed), "--out", str(tmp_path / "q.jsonl")])
    _one_line_exit_2(result, "list.jsonl:1")


def _toy_gqa_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_datasets import _toy_gqa

    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    _toy_gqa(tmp_path, monkeypatch)


def test_data_pope_keeps_a_users_missing_images_txt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`data pope --images` replaced any missing-images.txt in --out (the verb has no --overwrite)."""
    _toy_gqa_dataset(tmp_path, monkeypatch)
    out, images = tmp_path / "out", tmp_path / "imgs"
    out.mkdir()
    images.mkdir()
    (out / "missing-images.txt").write_text("my notes\n")
    result = runner.invoke(app, ["data", "pope", "--dataset", "gqa", "--out", str(out), "--images", str(images)])
    _one_line_exit_2(result, "missing-images.txt: exists")
    assert (out / "missing-images.txt").read_text() == "my notes\n" and sorted(p.name for p in out.iterdir()) == ["missing-images.txt"]
    # an earlier list of these questions is the verb's own: a rerun replaces it, and removes it once nothing is missing
    (out / "missing-images.txt").write_text("2405722.jpg\n2405723.jpg\n2405724.jpg\n")
    (images / "2405722.jpg").write_bytes(b"x")
    again = runner.invoke(app, ["data", "pope", "--dataset", "gqa", "--out", str(out), "--images", str(images)])
    assert again.exit_code == 0, again.output
    assert (out / "missing-images.txt").read_text() == "2405723.jpg\n2405724.jpg\n"
    for name in ("2405723.jpg", "2405724.jpg"):
        (images / name).write_bytes(b"x")
    assert runner.invoke(app, ["data", "pope", "--dataset", "gqa", "--out", str(out), "--images", str(images)]).exit_code == 0
    assert not (out / "missing-images.txt").exists()


def test_data_pope_images_naming_a_file_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--images naming a file reported every image missing, exit 0."""
    _toy_gqa_dataset(tmp_path, monkeypatch)
    (tmp_path / "notes.txt").write_text("x")
    result = runner.invoke(app, ["data", "pope", "--dataset", "gqa", "--out", str(tmp_path / "out"), "--images", str(tmp_path / "notes.txt")])
    _one_line_exit_2(result, "notes.txt", "--images")
    assert not (tmp_path / "out").exists()


def test_amber_questions_images_naming_a_file_says_so(tmp_path: Path) -> None:
    """--images naming a file was "3 AMBER images are not in the folder", naming FILE/AMBER_1.jpg."""
    data = _amber(tmp_path / "amber")
    (tmp_path / "notes.txt").write_text("x")
    result = runner.invoke(app, ["amber", "questions", "--data", str(data), "--out", str(tmp_path / "q"), "--images", str(tmp_path / "notes.txt"), *AMBER])
    _one_line_exit_2(result, "notes.txt: --images must be a folder")


def test_run_max_new_tokens_has_a_bound_before_the_model_loads(tmp_path: Path) -> None:
    """--max-new-tokens 1000000000 went on to load the model; the decoding loop runs until EOS or the cap."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llava"}))
    bench = tmp_path / "b.jsonl"
    bench.write_text(json.dumps({"question_id": 1, "image": "a.jpg", "text": "Describe.", "label": "yes"}) + "\n")
    (tmp_path / "imgs").mkdir()
    result = runner.invoke(app, ["run", "--model", str(model), "--benchmark", str(bench), "--images", str(tmp_path / "imgs"), "--out",
                                 str(tmp_path / "run"), "--open-ended", "--max-new-tokens", "1000000000"])  # fmt: skip
    _one_line_exit_2(result, "--max-new-tokens 1000000000 is over the limit")
    assert not (tmp_path / "run").exists()


def test_build_chair_never_replaces_a_run_dirs_file(tmp_path: Path) -> None:
    """`build chair --out RUN/run.json --overwrite` would replace a run's header: refused, kept."""
    run = tmp_path / "run1"
    run.mkdir()
    (run / "run.json").write_text("{}\n")
    images = tmp_path / "list.jsonl"
    images.write_text('{"image_id": 42}\n')
    result = CliRunner().invoke(app, ["build", "chair", "--list", str(images), "--out", str(run / "run.json"), "--overwrite"])
    assert result.exit_code == 2 and "run dir" in result.output, result.output
    assert (run / "run.json").read_text() == "{}\n"
