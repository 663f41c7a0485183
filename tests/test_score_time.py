"""Readouts at score time, one request path, one backend option group (the architecture issue).

Runs use the scripted backend (no model); every check reads what a user reads: exit codes,
score JSON, the per-question file, samples.jsonl.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_pipeline import _make_world, _run_args
from typer.testing import CliRunner

from halluprobe.cli import app
from halluprobe.readouts.logits import LOGIT_READOUTS
from halluprobe.readouts.text import TEXT_RULES, parse_text
from halluprobe.rundir import RunDir
from halluprobe.run_setup import run_fingerprint

runner = CliRunner()
SRC = Path(__file__).resolve().parent.parent / "src" / "halluprobe"


def _score(out: Path, *extra: str) -> dict:
    result = runner.invoke(app, ["score", str(out), "--json", "--resamples", "20", *extra])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_a_run_made_with_one_text_rule_is_scored_with_any_other(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    made = runner.invoke(app, _run_args(world, out, "--text-rules", "pope"))
    assert made.exit_code == 0, made.output
    # the deprecated flag: one line on stderr, and it means --text (the rule list is not kept)
    assert [line for line in made.stderr.splitlines() if "deprecated" in line] == [
        "warning: --text-rules is deprecated: every text rule is applied at score time; use --text (the default) or --no-text"
    ]
    header = RunDir(out).read_header()
    assert header.text_rules == list(TEXT_RULES) and "text:strict" in header.readouts
    per_question = tmp_path / "strict.jsonl"
    report = _score(out, "--readout", "text:strict", "--per-question", str(per_question))
    lines = [json.loads(line) for line in per_question.read_text().splitlines()]
    samples = RunDir(out).read_samples()
    assert len(lines) == len(samples) == 72
    # each line is the rule applied to the stored text, by hand
    for line, sample in zip(lines, samples):
        assert (line["split"], line["question_id"], line["label"]) == (sample.split, sample.question_id, sample.label)
        assert line["decision"] == parse_text("strict", sample.text or "") and "p_yes" not in line
    tp = sum(1 for x in lines if x["label"] == "yes" and x["decision"] == "yes")
    assert report["readout"] == "text:strict" and report["pooled"]["tp"] == tp
    # a logit readout's per-question lines carry p_yes
    _score(out, "--readout", "dynamic", "--per-question", str(per_question), "--overwrite")  # the same file again
    assert all(0.0 <= json.loads(line)["p_yes"] <= 1.0 for line in per_question.read_text().splitlines())


@pytest.mark.parametrize("flag", [["--no-text"], ["--text-rules", ""]])
def test_a_logits_only_run_refuses_text_rules_with_the_reason(tmp_path: Path, flag: list[str]) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    made = runner.invoke(app, _run_args(world, out, *flag))
    assert made.exit_code == 0, made.output
    assert ("deprecated" in made.stderr) == (flag[0] == "--text-rules")
    header = RunDir(out).read_header()
    assert header.text_rules == [] and not any(r.startswith("text:") for r in header.readouts)
    assert all(s.text is None for s in RunDir(out).read_samples())
    result = runner.invoke(app, ["score", str(out), "--readout", "text:pope"])
    assert result.exit_code == 2 and "stored no text (it was run with --no-text)" in result.output
    unknown = runner.invoke(app, ["score", str(out), "--readout", "text:nope"])
    assert unknown.exit_code == 2 and "unknown text rule 'nope'" in unknown.output


def _as_an_earlier_halluprobe_wrote_it(out: Path) -> None:
    """Rewrite a run dir the way halluprobe 0.1 wrote it: each readout's decision stored in the
    sample, and the fingerprint that held the text-rule list."""
    from halluprobe.readouts.apply import apply_all

    rundir = RunDir(out)
    header = rundir.read_header()
    samples = rundir.read_samples()
    old = header.model_copy(update={"generate": None})
    old = old.model_copy(update={"fingerprint": run_fingerprint(old, legacy=True)})
    rundir.header_path.write_text(old.model_dump_json(indent=2) + "\n")
    rundir.samples_path.write_text(
        "".join(s.model_copy(update={"readouts": apply_all(s, header)}).model_dump_json() + "\n" for s in samples)
    )


def test_a_run_dir_of_an_earlier_halluprobe_scores_identically_and_resumes(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    assert runner.invoke(app, _run_args(world, out, "--limit", "4")).exit_code == 0
    before = {r: _score(out, "--readout", r, "--force-invalid") for r in [*LOGIT_READOUTS, "text:pope", "text:yorn"]}
    _as_an_earlier_halluprobe_wrote_it(out)
    assert all(json.loads(line)["readouts"] for line in (out / "samples.jsonl").read_text().splitlines())
    for readout, report in before.items():
        assert _score(out, "--readout", readout, "--force-invalid") == report
    # its old fingerprint is still accepted on resume, and the new samples store raw outputs
    resumed = runner.invoke(app, _run_args(world, out, "--resume"))
    assert resumed.exit_code == 0, resumed.output
    samples = RunDir(out).read_samples()
    assert len(samples) == 72 and sum(1 for s in samples if s.readouts) == 8


def test_a_stored_decision_the_rules_no_longer_give_is_reported(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    assert runner.invoke(app, _run_args(world, out, "--limit", "2")).exit_code == 0
    _as_an_earlier_halluprobe_wrote_it(out)
    path = out / "samples.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    stored = lines[0]["readouts"]["text:pope"]
    stored["decision"] = "no" if stored["decision"] == "yes" else "yes"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    result = runner.invoke(app, ["score", str(out), "--readout", "text:pope", "--resamples", "20"])
    assert result.exit_code == 0 and "text:pope: 1 of 4 stored decisions differ" in result.stderr


def test_resume_asks_errored_samples_again(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    image = world["images"] / "img0.png"
    kept = image.read_bytes()
    image.unlink()
    out = tmp_path / "run"
    first = runner.invoke(app, _run_args(world, out))
    assert first.exit_code == 0 and "12 errors" in first.output and "12 errored sample(s) left" in first.output
    assert not RunDir(out).complete_path.exists()  # not complete while errors are left
    image.write_bytes(kept)  # the cause is fixed
    second = runner.invoke(app, _run_args(world, out, "--resume"))
    assert second.exit_code == 0 and "12 answered, 60 already done, 0 errors" in second.output
    samples = RunDir(out).read_samples()
    assert len(samples) == 72 and not any(s.error for s in samples) and RunDir(out).complete_path.exists()
    # the retried answers replaced the errors in place: run order is kept
    keys = [s.key for s in samples]
    assert keys.index(("random", 1)) == 0 and keys.index(("adversarial", 1)) == 36


def test_errors_can_be_accepted_and_kept(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    (world["images"] / "img0.png").unlink()
    out = tmp_path / "run"
    assert runner.invoke(app, _run_args(world, out, "--accept-errors")).exit_code == 0
    assert json.loads(RunDir(out).complete_path.read_text())["errors"] == 12
    kept = runner.invoke(app, _run_args(world, out, "--resume", "--keep-errors"))
    assert kept.exit_code == 0 and "0 answered, 72 already done" in kept.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--backend-option", "max_retires=3"], "unknown option 'max_retires' for the scripted backend; valid: batch_size"),
        (["--endpoint", "http://127.0.0.1:9/v1"], "--endpoint is an option of the openai backend, not of 'scripted'"),
        (["--limit", "-1"], "--limit"),
        (["--max-new-tokens", "-5"], "--max-new-tokens"),
        (["--batch-size", "0"], "--batch-size"),
        (["--dtype", "float8"], "--dtype"),
        (["--max-new-tokens", "0"], "stores no text"),
    ],
)
def test_bad_backend_and_generation_options_exit_2(tmp_path: Path, extra: list[str], message: str) -> None:
    world = _make_world(tmp_path)
    result = runner.invoke(app, _run_args(world, tmp_path / "run", *extra))
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "run" / "samples.jsonl").exists()


def test_an_unknown_openai_option_names_the_valid_ones(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    args = _run_args(world, tmp_path / "run", "--endpoint", "http://127.0.0.1:9/v1", "--backend-option", "max_retires=3")
    args[args.index("scripted")] = "openai"
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "unknown option 'max_retires' for the openai backend" in result.output
    assert "max_retries" in result.output


def test_only_the_ask_helper_calls_a_backend_and_no_verb_wires_stop_strings() -> None:
    callers = [
        str(path.relative_to(SRC))
        for path in SRC.rglob("*.py")
        if re.search(r"\.answer\(", path.read_text()) and "backends" not in path.relative_to(SRC).parts
    ]
    assert callers == ["ask.py"]
    cli_text = "".join(p.read_text() for p in (SRC / "cli").glob("*.py"))
    assert "stop_strings" not in cli_text


def test_no_cli_module_is_long() -> None:
    lengths = {p.name: len(p.read_text().splitlines()) for p in (SRC / "cli").glob("*.py")}
    assert max(lengths.values()) <= 300, lengths


def test_score_per_question_is_for_run_dirs(tmp_path: Path) -> None:
    result = runner.invoke(app, ["score", "--answers", "a", "--labels", "b", "--per-question", str(tmp_path / "x")])
    assert result.exit_code == 2


def test_probe_choice_refuses_an_image_outside_the_images_root(tmp_path: Path) -> None:
    from halluprobe.benchmarks.autoprobe.questions import AttriBaitDraft, attribait_question, write_choice_questions

    images = tmp_path / "images"
    images.mkdir()
    (tmp_path / "x.png").write_bytes(b"not read")
    questions = tmp_path / "autoprobe_attribait.jsonl"
    draft = AttriBaitDraft(question="What colour is the dog?", options=("brown", "black"))
    write_choice_questions(questions, [attribait_question(0, "../x.png", "dog", draft)])
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": {}}))
    result = runner.invoke(
        app,
        ["probe", "choice", "--questions", str(questions), "--images", str(images), "--model", str(script),
         "--backend", "scripted", "--out", str(tmp_path / "choice.jsonl")],
    )  # fmt: skip
    assert result.exit_code == 2 and "'../x.png' escapes the images root" in result.output, result.output
    assert str(questions) in result.output and not (tmp_path / "choice.jsonl").exists()


@pytest.mark.slow  # prove build loads its MiniLM embedder (about 11 s)
def test_prove_build_runs_against_an_openai_compatible_server(tmp_path: Path) -> None:
    """The backend option group reaches every verb that loads a model: prove build takes
    --endpoint; its generation asks with no stop strings and its length cap."""
    pytest.importorskip("httpx")
    pytest.importorskip("sentence_transformers")
    from _openai_server import FakeChatServer
    from PIL import Image

    images = tmp_path / "images"
    images.mkdir()
    Image.new("RGB", (16, 16), "white").save(images / "cat.png")
    captions = tmp_path / "captions.jsonl"
    captions.write_text(json.dumps({"image": "cat.png", "caption": "A cat.", "tuples": [["cat"]]}) + "\n")
    out = tmp_path / "built"
    with FakeChatServer() as server:
        result = runner.invoke(
            app,
            ["prove", "build", "--captions", str(captions), "--model", "tiny-vlm", "--backend", "openai",
             "--endpoint", server.url, "--no-cache", "--images", str(images), "--out", str(out), "--max-new-tokens", "300"],
        )  # fmt: skip
        bodies = list(server.bodies)
    assert result.exit_code == 0, result.output
    assert len(bodies) == 1 and "stop" not in bodies[0] and bodies[0]["max_tokens"] == 300
    # the fake server answers a yes/no piece, not question/answer pairs: recorded, not lost
    assert json.loads((out / "build.json").read_text())["counts"] == {"kept": 0, "invalid_output": 1}


def test_an_images_folder_made_of_links_is_not_refused(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    store = tmp_path / "store"
    world["images"].rename(store)
    linked = tmp_path / "images"
    linked.mkdir()
    for image in store.iterdir():
        (linked / image.name).symlink_to(image)
    world["images"] = linked
    result = runner.invoke(app, _run_args(world, tmp_path / "run"))
    assert result.exit_code == 0 and "72 answered" in result.output and "0 errors" in result.output, result.output


@pytest.mark.parametrize("verb", ["report", "probe-induce", "score-resamples"])
def test_a_folder_where_a_file_is_due_or_a_negative_count_is_one_line(tmp_path: Path, verb: str) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    assert runner.invoke(app, _run_args(world, out, "--limit", "1")).exit_code == 0
    folder = tmp_path / "folder"
    folder.mkdir()
    if verb == "report":
        args = ["report", str(out), "--out", str(folder), "--resamples", "10"]
    elif verb == "probe-induce":
        prompts = tmp_path / "prompts.toml"
        prompts.write_text('prompts = ["Describe the image."]\n')
        args = ["probe", "induce", "--images", str(world["images"]), "--model", str(world["script"]), "--backend", "scripted",
                "--prompts", str(prompts), "--out", str(folder)]  # fmt: skip
    else:
        args = ["score", str(out), "--resamples", "-1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.exception is None or isinstance(result.exception, SystemExit)


def test_audit_of_two_runs_prints_the_typed_audits_as_json(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    one, two = tmp_path / "one", tmp_path / "two"
    assert runner.invoke(app, _run_args(world, one, "--limit", "3")).exit_code == 0
    assert runner.invoke(app, _run_args(world, two, "--limit", "3", "--template", "Q: {question} A:")).exit_code == 0
    result = runner.invoke(app, ["audit", str(one), str(two), "--json", "--resamples", "20"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout)
    assert [a["run"]["template"] for a in payload["audits"]] == ["chat", "Q: {question} A:"]
    assert payload["comparison"]["differ_in"] == "template" and (one / "audit.json").exists()
    text = runner.invoke(app, ["audit", str(one), str(two), "--resamples", "20"])
    assert text.exit_code == 0 and f"{one}/audit.json" in text.stdout


def test_models_lists_the_tested_families_and_their_engine() -> None:
    result = runner.invoke(app, ["models", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["model_type"]: r for r in json.loads(result.stdout)}
    assert {"llava", "llava_next", "instructblip", "qwen2_vl", "paligemma", "gemma3", "internvl"} <= set(rows)
    assert rows["instructblip"]["engine"].startswith("plain (its Q-Former") and rows["llava"]["engine"] == "prefix cache"
    table = runner.invoke(app, ["models"]).stdout
    assert table.startswith("| model_type | family | engine |") and "mplug_owl2" in table


def test_the_multi_model_table_marks_invalid_legacy_readouts(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    one, two = tmp_path / "one", tmp_path / "two"
    assert runner.invoke(app, _run_args(world, one)).exit_code == 0
    assert runner.invoke(app, _run_args(world, two, "--no-text")).exit_code == 0  # logits only
    result = runner.invoke(app, ["audit", str(one), str(two), "--table"])
    assert result.exit_code == 0, result.output
    rows = [line.split(" | ") for line in result.stdout.splitlines() if line.startswith("| script.json")]
    assert len(rows) == 6  # two runs x (random, adversarial, macro)
    macro = json.loads(runner.invoke(app, ["score", str(one), "--json", "--resamples", "0"]).stdout)["macro"]["f1"]
    first_macro = next(r for r in rows if r[1] == "macro")
    assert first_macro[4] == f"{macro:.4f}" and first_macro[2].endswith("†")  # the scripted vocabulary's legacy ids are invalid
    assert rows[-1][5:] == ["-", "-", "-", "- |"]  # no text stored: no text rule
    latex = runner.invoke(app, ["audit", str(one), "--table", "--latex"]).stdout
    assert latex.startswith("\\begin{tabular}") and "$^\\dagger$" in latex


def test_an_open_ended_run_dir_of_an_earlier_halluprobe_resumes(tmp_path: Path) -> None:
    """halluprobe 0.1 fingerprinted an open-ended run with the default rule list its header did not store."""
    from halluprobe.run_setup import _TEXT_FINGERPRINT

    world = _make_world(tmp_path)
    out = tmp_path / "run"
    assert runner.invoke(app, _run_args(world, out, "--open-ended", "--limit", "2", "--max-new-tokens", "4")).exit_code == 0
    rundir = RunDir(out)
    header = rundir.read_header().model_copy(update={"generate": None})
    legacy = run_fingerprint(header.model_copy(update={"text_rules": list(_TEXT_FINGERPRINT)}), legacy=True)
    rundir.header_path.write_text(header.model_copy(update={"fingerprint": legacy}).model_dump_json(indent=2) + "\n")
    resumed = runner.invoke(app, _run_args(world, out, "--open-ended", "--max-new-tokens", "4", "--resume"))
    assert resumed.exit_code == 0 and "68 answered" in resumed.output, resumed.output


def test_a_metrics_file_that_is_not_utf8_is_one_line(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    assert runner.invoke(app, _run_args(world, out, "--limit", "1")).exit_code == 0
    (out / "metrics.json").write_bytes(b"\xff\xfe{")
    with pytest.raises(Exception) as caught:
        RunDir(out).read_metrics()
    assert type(caught.value).__name__ == "InputError" and "not UTF-8" in str(caught.value)


def test_a_server_backend_refuses_correction_signals_before_the_run(tmp_path: Path) -> None:
    pytest.importorskip("httpx")
    world = _make_world(tmp_path)
    args = _run_args(world, tmp_path / "run", "--endpoint", "http://127.0.0.1:9/v1", "--signals", "noised")
    args[args.index("scripted")] = "openai"
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "records none of the signals noised: they need the hf backend" in result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("endpoint", ["http://[::1", "http://127.0.0.1:99999/v1"])
def test_a_malformed_endpoint_is_one_line(tmp_path: Path, endpoint: str) -> None:
    pytest.importorskip("httpx")
    world = _make_world(tmp_path)
    args = _run_args(world, tmp_path / "run", "--endpoint", endpoint)
    args[args.index("scripted")] = "openai"
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "--endpoint is not a valid URL" in result.output


def test_a_corrupt_xlsx_sheet_is_one_line(tmp_path: Path) -> None:
    pytest.importorskip("openpyxl")
    sheet = tmp_path / "Model_POPE.xlsx"
    sheet.write_bytes(b"not a zip")
    result = runner.invoke(app, ["import", "vlmevalkit", str(sheet), "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "not a readable .xlsx workbook" in result.output


def test_check_reads_files_and_claims_with_one_line_errors(tmp_path: Path) -> None:
    bad = tmp_path / "paper.md"
    bad.write_bytes(b"| a |\n\xff\n")
    result = runner.invoke(app, ["check", str(bad)])
    assert result.exit_code == 2 and "not UTF-8" in result.output
    claims = tmp_path / "claims.toml"
    claims.write_text("claim = [1]\n")
    bad.write_text("text\n")
    result = runner.invoke(app, ["check", str(bad), "--claims", str(claims)])
    assert result.exit_code == 2 and "error:" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--text-rules", "nope"], "unknown text rule 'nope'"),
        (["--no-text", "--text-rules", "pope"], "--no-text and --text-rules 'pope' contradict each other"),
        (["--text", "--text-rules", ""], "--text and --text-rules '' contradict each other"),
        (["--max-new-tokens", "0"], "give --no-text for a logits-only run"),
    ],
)
def test_text_flags_that_do_not_combine_are_one_line(tmp_path: Path, flags: list[str], message: str) -> None:
    result = runner.invoke(app, _run_args(_make_world(tmp_path), tmp_path / "run", *flags))
    assert result.exit_code == 2 and message in result.output, result.output
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(("rules", "resume_flag", "accepted"), [
    (["pope"], "--text", True), (["pope", "strict"], "--text", True), (["pope"], "--no-text", False), ([], "--no-text", True),
])  # fmt: skip
def test_a_run_dir_fingerprinted_with_a_rule_list_resumes_with_the_text_flag(
    tmp_path: Path, rules: list[str], resume_flag: str, accepted: bool
) -> None:
    """halluprobe 0.1 fingerprinted the rule list as given (--text-rules pope); --text resumes it."""
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    made = runner.invoke(app, _run_args(world, out, "--limit", "2", "--text" if rules else "--no-text"))
    assert made.exit_code == 0, made.output
    rundir = RunDir(out)
    old = rundir.read_header().model_copy(update={"generate": None, "text_rules": rules})
    rundir.header_path.write_text(old.model_copy(update={"fingerprint": run_fingerprint(old, legacy=True)}).model_dump_json(indent=2) + "\n")
    resumed = runner.invoke(app, _run_args(world, out, resume_flag, "--resume"))
    if accepted:
        assert resumed.exit_code == 0 and "68 answered, 4 already done" in resumed.output, resumed.output
    else:
        assert resumed.exit_code == 2 and "refusing to resume" in resumed.output, resumed.output
