"""`halluprobe decoding`: free-form runs of decoding methods against a greedy and a sampled
baseline. The runs are built here (run.json + samples.jsonl of captions with known
hallucinations); every number is checked by hand and recomputed independently from samples.jsonl."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from _decoding_runs import (  # noqa: F401 (chair_wordnet, fixture_nltk: autouse fixtures)
    GREEDY,
    METHOD,
    OBJECTS,
    SAMPLED,
    TRUTH,
    chair_wordnet,
    decoding_run,
    fixture_nltk,
    write_truth,
)
from typer.testing import CliRunner

from halluprobe.captions.chair.length import quartile_bin, quartile_bounds
from halluprobe.captions.comparison.runs import decoding_identity
from halluprobe.cli import app
from halluprobe.records import GenerateConfig

runner = CliRunner()


def _invoke(tmp_path: Path, *args: str) -> Any:
    result = runner.invoke(app, ["decoding", *args, "--ground-truth", str(write_truth(tmp_path))])
    return result


def _independent(run: Path) -> dict[str, float]:
    """CHAIR of a run straight from samples.jsonl: words split on spaces, object words matched by name."""
    caps = halluc_caps = bad = mentions = recalled = words = 0
    truth_total = 0
    for line in (run / "samples.jsonl").read_text().splitlines():
        sample = json.loads(line)
        image = int(sample["image"].split("_")[-1].split(".")[0])
        said = [w for w in sample["text"].split() if w in OBJECTS]
        wrong = [w for w in said if w not in TRUTH[image]]
        caps += 1
        halluc_caps += bool(wrong)
        bad += len(wrong)
        mentions += len(said)
        recalled += len(set(said) & set(TRUTH[image]))
        truth_total += len(TRUTH[image])
        words += len(sample["text"].split())
    return {"chair_s": halluc_caps / caps, "chair_i": bad / mentions, "recall": recalled / truth_total, "length": words / caps,
            "halluc_per_100_words": 100 * bad / words}  # fmt: skip


def test_length_bounds_and_bins_by_hand() -> None:
    # greedy lengths 5, 8, 5, 2: sorted 2 5 5 8, ranks ceil(k*4/4) = 1, 2, 3 -> 2, 5, 5 -> bounds 2, 5
    assert quartile_bounds([5, 8, 5, 2]) == [2, 5]
    assert [quartile_bin(n, [2, 5]) for n in (1, 2, 3, 5, 6, 8)] == [0, 0, 1, 1, 2, 2]
    assert quartile_bounds([]) == []


def test_table_numbers_by_hand_and_recomputed(tmp_path: Path) -> None:
    greedy, method, sampled = decoding_run(tmp_path / "greedy", GREEDY), decoding_run(tmp_path / "vcd", METHOD), decoding_run(tmp_path / "sampled", SAMPLED, sample=True, seed=0)
    result = _invoke(tmp_path, str(greedy), str(method), "--sampled-baseline", str(sampled), "--json", "--bootstrap", "200")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    chair = data["chair"]
    assert chair["images"] == 4 and chair["images_dropped"] == 0 and chair["length_bounds"] == [2, 5]
    per_run = {r["name"].removesuffix(" (sampled, seed=0)"): r for r in chair["per_run"]}  # the sampled run: its folder name
    assert [r["role"] for r in chair["per_run"]] == ["greedy baseline", "method", "sampled baseline"]
    by_hand = {
        "greedy": {"chair_s": 2 / 4, "chair_i": 3 / 8, "recall": 5 / 5, "length": 20 / 4, "halluc_per_100_words": 100 * 3 / 20},
        "vcd": {"chair_s": 1 / 4, "chair_i": 2 / 7, "recall": 5 / 5, "length": 17 / 4, "halluc_per_100_words": 100 * 2 / 17},
        "sampled": {"chair_s": 2 / 4, "chair_i": 2 / 6, "recall": 4 / 5, "length": 14 / 4, "halluc_per_100_words": 100 * 2 / 14},
    }
    for name, run in (("greedy", greedy), ("vcd", method), ("sampled", sampled)):
        assert by_hand[name] == pytest.approx(_independent(run))
        for metric, value in by_hand[name].items():
            assert per_run[name][metric] == pytest.approx(value), (name, metric)
            low, high = per_run[name]["ci"][metric]
            assert low <= value + 1e-9 and value - 1e-9 <= high
    # matched length, against greedy: bins <=2, 3-5, >=6 hold greedy's captions 1/4, 2/4, 1/4.
    # vcd per bin: <=2 {1, 4} none hallucinate, 3-5 {3} none, >=6 {2} hallucinates -> 0*1/4 + 0*2/4 + 1*1/4
    assert per_run["vcd"]["chair_s_at_baseline_length"] == pytest.approx(0.25)
    assert per_run["greedy"]["chair_s_at_baseline_length"] == pytest.approx(0.5)  # its own CHAIR_s
    assert per_run["sampled"]["chair_s_at_baseline_length"] is None  # no sampled caption over 5 words: no match
    paired = {p["name"].removesuffix(" (sampled, seed=0)"): p for p in chair["paired"]}
    vs_greedy = paired["vcd"]["vs_greedy"]
    assert vs_greedy["chair_s"]["diff"] == pytest.approx(-0.25) and vs_greedy["chair_i"]["diff"] == pytest.approx(2 / 7 - 3 / 8)
    assert vs_greedy["length"]["diff"] == pytest.approx(17 / 4 - 5) and vs_greedy["recall"]["diff"] == pytest.approx(0)
    assert vs_greedy["chair_s_at_baseline_length"]["diff"] == pytest.approx(-0.25)
    assert vs_greedy["halluc_per_100_words"]["diff"] == pytest.approx(200 / 17 - 15)
    low, high = vs_greedy["chair_s"]["ci"]
    assert low <= -0.25 <= high
    # against the sampled baseline: its captions are 1/2 in <=2 and 1/2 in 3-5; vcd hallucinates in neither -> 0
    vs_sampled = paired["vcd"]["vs_sampled"]
    assert vs_sampled["chair_s"]["diff"] == pytest.approx(-0.25) and vs_sampled["recall"]["diff"] == pytest.approx(0.2)
    assert vs_sampled["chair_s_at_baseline_length"]["a"] == pytest.approx(0) and vs_sampled["chair_s_at_baseline_length"]["diff"] == pytest.approx(-0.5)
    assert paired["vcd"]["sampling_matches"] is None  # the method itself is not sampled
    # the sampled baseline against greedy: what sampling alone does
    assert paired["sampled"]["vs_greedy"]["chair_s"]["diff"] == pytest.approx(0) and paired["sampled"]["vs_greedy"]["recall"]["diff"] == pytest.approx(-0.2)
    bins = {b["name"].removesuffix(" (sampled, seed=0)"): [(x["n"], x["chair_s"]) for x in b["bins"]] for b in chair["length_bins"]}
    assert bins["greedy"] == [(1, 0), (2, 0.5), (1, 1)]
    assert bins["vcd"] == [(2, 0), (1, 0), (1, 1)]
    assert bins["sampled"] == [(2, 0), (2, 1), (0, None)]


def test_markdown_and_latex_carry_provenance(tmp_path: Path) -> None:
    greedy, method = decoding_run(tmp_path / "greedy", GREEDY), decoding_run(tmp_path / "vcd", METHOD)
    md = _invoke(tmp_path, str(greedy), str(method), "--markdown", "--bootstrap", "50")
    assert md.exit_code == 0, md.output
    comment = next(line for line in md.stdout.splitlines() if "halluprobe-decoding-provenance" in line)
    provenance = json.loads(comment.removeprefix("<!-- halluprobe-decoding-provenance ").removesuffix(" -->"))
    assert [r["fingerprint"] for r in provenance["runs"]] == ["fp-greedy", "fp-vcd"] and provenance["family"] == "chair@lemmatizer"
    assert provenance["bootstrap"] == {"n_resamples": 50, "seed": 0}
    assert "| vcd | greedy | -25.0 [" in md.stdout and "| greedy | greedy baseline | 4 | 50.0 [" in md.stdout
    tex = _invoke(tmp_path, str(greedy), str(method), "--latex", "--bootstrap", "0")
    assert tex.exit_code == 0, tex.output
    assert tex.stdout.startswith("% halluprobe-decoding-provenance {") and "vcd & method & 4 & 25.0 & 28.6 & 100.0 & 4.2 & 11.8" in tex.stdout
    plain = _invoke(tmp_path, str(greedy), str(method), "--bootstrap", "0")
    assert plain.exit_code == 0 and "vcd - greedy: ΔCHAIR_s -25.0" in plain.stdout


def test_runs_on_other_questions_are_refused(tmp_path: Path) -> None:
    greedy = decoding_run(tmp_path / "greedy", GREEDY)
    fewer = decoding_run(tmp_path / "fewer", {1: "a dog", 2: "a cat", 3: "a cat"})
    other_image = decoding_run(tmp_path / "other", METHOD, image_of=lambda i: f"COCO_val2014_{i + 10:012d}.jpg")
    other_prompt = decoding_run(tmp_path / "prompt", METHOD, prompt="USER: <image>\nWhat is this? ASSISTANT:")
    for run, phrase in ((fewer, "1 of its questions missing"), (other_image, "other images"), (other_prompt, "other questions")):
        result = _invoke(tmp_path, str(greedy), str(run))
        assert result.exit_code == 2 and f"{run / 'samples.jsonl'}: " in result.output and phrase in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1
    alone = _invoke(tmp_path, str(greedy))
    assert alone.exit_code == 2 and "at least one method run" in alone.output
    twice = _invoke(tmp_path, str(greedy), str(greedy))
    assert twice.exit_code == 2 and "given twice" in twice.output
    method = decoding_run(tmp_path / "vcd", METHOD)
    nothing = runner.invoke(app, ["decoding", str(greedy), str(method), "--no-chair"])
    assert nothing.exit_code == 2 and "--no-chair leaves nothing to compare" in nothing.output
    huge = _invoke(tmp_path, str(greedy), str(method), "--bootstrap", "100001")
    assert huge.exit_code == 2 and "--bootstrap 100001 is over the limit" in huge.output
    family = _invoke(tmp_path, str(greedy), str(method), "--family", "stemmer")
    assert family.exit_code == 2 and "--family must be lemmatizer or singularize" in family.output


def test_a_failed_sample_drops_its_image_everywhere(tmp_path: Path) -> None:
    greedy = decoding_run(tmp_path / "greedy", GREEDY)
    method = decoding_run(tmp_path / "vcd", {**METHOD, 2: None})
    result = _invoke(tmp_path, str(greedy), str(method), "--json", "--bootstrap", "0")
    assert result.exit_code == 0, result.output
    chair = json.loads(result.stdout)["chair"]
    assert chair["images"] == 3 and chair["images_dropped"] == 1
    # greedy on images 1, 3, 4: one hallucinating caption of three
    assert chair["per_run"][0]["chair_s"] == pytest.approx(1 / 3) and chair["per_run"][1]["chair_s"] == pytest.approx(0)


def test_method_and_sampling_read_from_run_json() -> None:
    generate = GenerateConfig(max_new_tokens=64, decode="vcd:alpha=1,beta=0.1", sample=True, temperature=0.7, top_p=0.9, seed=3)
    name, method, settings, sampling, sampled = decoding_identity(generate, "run_a")
    assert method == "vcd:alpha=1,beta=0.1" and sampled and sampling == {"sample": True, "temperature": 0.7, "top_p": 0.9, "seed": 3}
    assert name == "vcd:alpha=1,beta=0.1 (sampled, temperature=0.7, top_p=0.9, seed=3)" and "max_new_tokens" not in settings
    assert list(settings) == ["sample", "seed", "temperature", "top_p"]  # sorted, as the table's JSON has them
    plain = decoding_identity(GenerateConfig(max_new_tokens=8, top_k=10), "greedy_run")
    assert plain == ("greedy_run", None, {}, {}, False)
    assert decoding_identity(None, "old_run") == ("old_run", None, {}, {}, False)  # a run dir of halluprobe 0.1: no generate
    assert decoding_identity(GenerateConfig(decode=""), "empty")[:2] == ("empty", None)


def test_run_json_shapes_read_as_before(tmp_path: Path) -> None:
    """The raw second read of run.json (before issue 31) ran only after the typed header accepted
    the file: the shapes it also knew (a top-level decode, decode as an object, do_sample) were
    refused in one line then, and are now; numbers written otherwise read as the header's type."""
    greedy = decoding_run(tmp_path / "greedy", GREEDY)
    for name, change in (("top", lambda h: {**h, "decode": "vcd"}), ("object", lambda h: {**h, "generate": {**h["generate"], "decode": {"method": "dola"}}}),
                         ("do_sample", lambda h: {**h, "generate": {**h["generate"], "do_sample": True}})):  # fmt: skip
        run = decoding_run(tmp_path / name, METHOD)
        (run / "run.json").write_text(json.dumps(change(json.loads((run / "run.json").read_text()))))
        result = _invoke(tmp_path, str(greedy), str(run))
        assert result.exit_code == 2 and f"{run / 'run.json'}:1: invalid run header" in result.output.replace("\n", ""), result.output
    hand = decoding_run(tmp_path / "hand", METHOD)
    header = json.loads((hand / "run.json").read_text())
    (hand / "run.json").write_text(json.dumps({**header, "generate": {**header["generate"], "decode": "vcd", "sample": 1, "temperature": 1, "seed": 0}}))
    sampled = decoding_run(tmp_path / "sampled", SAMPLED, sample=True, temperature=1.0, seed=0)
    result = _invoke(tmp_path, str(greedy), str(hand), "--sampled-baseline", str(sampled), "--json", "--bootstrap", "0")
    assert result.exit_code == 0, result.output
    runs = json.loads(result.stdout)["runs"]
    assert runs[1]["name"] == "vcd (sampled, temperature=1.0, seed=0)" and runs[1]["sampling"] == {"sample": True, "temperature": 1.0, "seed": 0}
    assert json.loads(result.stdout)["chair"]["paired"][0]["sampling_matches"] is True
    old = decoding_run(tmp_path / "old-greedy", GREEDY)  # a run dir of halluprobe 0.1: no generate in run.json
    header = json.loads((old / "run.json").read_text())
    (old / "run.json").write_text(json.dumps({k: v for k, v in header.items() if k != "generate"}))
    result = _invoke(tmp_path, str(old), str(hand), "--json", "--bootstrap", "0")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["runs"][0] | {"path": ""} == {"path": "", "role": "greedy baseline", "name": "old-greedy", "method": None,
                                                                "settings": {}, "sampling": {}, "sampled": False, "fingerprint": "fp-old-greedy",
                                                                "samples_sha256": json.loads(result.stdout)["runs"][0]["samples_sha256"]}  # fmt: skip


def test_a_method_sampled_otherwise_than_the_sampled_baseline_is_marked(tmp_path: Path) -> None:
    from halluprobe.captions.chair.families import family_named
    from halluprobe.captions.chair.groundtruth import load_ground_truth
    from halluprobe.captions.comparison.render import decoding_markdown, decoding_provenance
    from halluprobe.captions.comparison.runs import load_comparison
    from halluprobe.captions.comparison.table import decoding_table

    greedy = decoding_run(tmp_path / "greedy", GREEDY)
    sampled = decoding_run(tmp_path / "sampled", SAMPLED, sample=True, temperature=1.0, seed=1)
    truth = load_ground_truth(write_truth(tmp_path))
    for temperature, matches in ((0.7, False), (1.0, True)):  # the seed is one draw, not a setting
        method = decoding_run(tmp_path / f"vcd-{temperature}", METHOD, decode="vcd:alpha=1", sample=True, temperature=temperature, seed=2)
        result = decoding_table(load_comparison(greedy, [method], sampled), family=family_named("lemmatizer"), ground_truth=truth, n_resamples=0)
        assert result.chair is not None and result.chair.paired[0].sampling_matches is matches
        marked = f"| vcd:alpha=1 (sampled, temperature={temperature}, seed=2) | sampled (other sampling) |" in decoding_markdown(result, decoding_provenance(result))
        assert marked is not matches


def _prove_scores(folder: Path, run: Path, values: dict[str, tuple[str, float | None, float | None]]) -> Path:
    folder.mkdir()
    lines = [json.dumps({"question_id": q, "image": img, "question": "q?", "response": "r", "hscore": h, "tscore": t}) for q, (img, h, t) in values.items()]
    (folder / "scores.jsonl").write_text("\n".join(lines) + "\n")
    (folder / "summary.json").write_text(json.dumps({"settings": {"responses": str(run)}}))
    return folder


def test_prove_scores_per_run_and_paired(tmp_path: Path) -> None:
    greedy, method = decoding_run(tmp_path / "greedy", GREEDY), decoding_run(tmp_path / "vcd", METHOD)
    g = _prove_scores(tmp_path / "pg", greedy, {"a": ("x.jpg", 0.5, 0.8), "b": ("y.jpg", 0.7, 0.6), "c": ("y.jpg", None, 0.4)})
    m = _prove_scores(tmp_path / "pm", method, {"a": ("x.jpg", 0.6, 0.9), "b": ("y.jpg", 0.6, 0.9), "c": ("y.jpg", 0.2, None)})
    result = runner.invoke(app, ["decoding", str(greedy), str(method), "--no-chair", "--prove-scores", str(g), "--prove-scores", str(m),
                                 "--json", "--bootstrap", "100"])  # fmt: skip
    assert result.exit_code == 0, result.output
    prove = json.loads(result.stdout)["prove"]
    per_run = {r["name"]: r for r in prove["per_run"]}
    assert per_run["greedy"]["hscore"] == pytest.approx(0.6) and per_run["greedy"]["tscore"] == pytest.approx(0.6)
    assert per_run["vcd"]["hscore"] == pytest.approx(1.4 / 3) and per_run["vcd"]["tscore"] == pytest.approx(0.9)
    diff = prove["paired"][0]["vs_greedy"]
    # hscore over a, b (c undefined for greedy): (0.6 + 0.6)/2 - (0.5 + 0.7)/2; tscore over a, b: 0.9 - 0.7
    assert diff["hscore"]["n"] == 2 and diff["hscore"]["diff"] == pytest.approx(0.0)
    assert diff["tscore"]["n"] == 2 and diff["tscore"]["diff"] == pytest.approx(0.2)
    stray = _prove_scores(tmp_path / "ps", tmp_path / "elsewhere", {"a": ("x.jpg", 0.5, 0.5)})
    refused = runner.invoke(app, ["decoding", str(greedy), str(method), "--no-chair", "--prove-scores", str(stray)])
    assert refused.exit_code == 2 and "none of the runs of this table" in refused.output
    only_method = runner.invoke(app, ["decoding", str(greedy), str(method), "--no-chair", "--prove-scores", str(m)])
    assert only_method.exit_code == 2 and "none for the greedy baseline" in only_method.output


def test_a_method_that_only_shortens_shows_as_that(tmp_path: Path) -> None:
    # greedy: two short clean captions, two long ones that hallucinate; the "method" shortens
    # caption 3 and keeps the rest: CHAIR_s halves, but at greedy's lengths it is no better
    greedy = decoding_run(tmp_path / "greedy", {1: "a dog", 2: "a cat", 3: "a dog and a cat with a car", 4: "a bus with a dog and a cat"})
    short = decoding_run(tmp_path / "short", {1: "a dog", 2: "a cat", 3: "a dog", 4: "a bus with a dog and a cat"})
    result = _invoke(tmp_path, str(greedy), str(short), "--json", "--bootstrap", "0")
    assert result.exit_code == 0, result.output
    chair = json.loads(result.stdout)["chair"]
    # lengths 2 2 8 8: ranks 1, 2, 3 -> 2, 2, 8 -> bins <=2 (half of greedy's captions), 3-8 (the other half)
    assert chair["length_bounds"] == [2, 8]
    d = chair["paired"][0]["vs_greedy"]
    assert d["chair_s"]["diff"] == pytest.approx(0.25 - 0.5)  # plain CHAIR_s: a 25-point "gain"
    # matched: short's rate is 0 in <=2 (three captions) and 1 in 3-8 (caption 4), weighted 1/2, 1/2
    assert d["chair_s_at_baseline_length"]["a"] == pytest.approx(0.5) and d["chair_s_at_baseline_length"]["diff"] == pytest.approx(0)


def test_runs_written_by_halluprobe_run(tmp_path: Path) -> None:
    """The runner's own run dirs (build chair, run --open-ended on the scripted backend) go straight in."""
    images = tmp_path / "imgs"
    images.mkdir()
    names = {i: f"COCO_val2014_{i:012d}.jpg" for i in TRUTH}
    for name in names.values():
        (images / name).write_bytes(b"not read by the scripted backend")
    listing = tmp_path / "list.jsonl"
    listing.write_text("".join(json.dumps({"image": n}) + "\n" for n in names.values()))
    bench = tmp_path / "chair.jsonl"
    assert runner.invoke(app, ["build", "chair", "--list", str(listing), "--out", str(bench), "--prompt", "Describe this image."]).exit_code == 0
    runs = []
    for label, captions in (("greedy", GREEDY), ("method", METHOD)):
        script = tmp_path / f"{label}.json"
        script.write_text(json.dumps({"present": {}, "generate": [{"match": "Describe", "image": names[i], "text": t} for i, t in captions.items()]}))
        out = tmp_path / f"run-{label}"
        run = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), "--benchmark", str(bench), "--images", str(images),
                                  "--open-ended", "--max-new-tokens", "64", "--out", str(out)])  # fmt: skip
        assert run.exit_code == 0, run.output
        runs.append(out)
    # the scripted backend's model is its script, one per run here: other models, compared when asked
    refused = _invoke(tmp_path, str(runs[0]), str(runs[1]), "--json", "--bootstrap", "0")
    assert refused.exit_code == 2 and "is not the greedy baseline's" in refused.output
    result = _invoke(tmp_path, str(runs[0]), str(runs[1]), "--json", "--bootstrap", "0", "--allow-other-models")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert [r["name"] for r in data["runs"]] == ["run-greedy", "run-method"] and data["runs"][0]["method"] is None
    per_run = data["chair"]["per_run"]
    assert per_run[0]["chair_s"] == pytest.approx(_independent(runs[0])["chair_s"]) == pytest.approx(0.5)
    assert per_run[1]["chair_i"] == pytest.approx(_independent(runs[1])["chair_i"]) == pytest.approx(2 / 7)


def test_a_baseline_that_its_run_json_contradicts_is_refused(tmp_path: Path) -> None:
    """The roles come from the argument order; a run.json that says otherwise is one line naming it."""
    greedy = decoding_run(tmp_path / "greedy", GREEDY)
    vcd = decoding_run(tmp_path / "vcd", METHOD, decode="vcd:alpha=1", sample=True, seed=0)
    sampled = decoding_run(tmp_path / "sampled", SAMPLED, sample=True, seed=0)
    other_greedy = decoding_run(tmp_path / "greedy2", SAMPLED)
    for args, message, run in (
        ([vcd, greedy, "--sampled-baseline", sampled], "the greedy baseline was decoded with vcd:alpha=1", vcd),
        ([sampled, vcd], "the greedy baseline was decoded by sampling", sampled),
        ([greedy, sampled, "--sampled-baseline", vcd], "the sampled baseline was decoded with vcd:alpha=1", vcd),
        ([greedy, vcd, "--sampled-baseline", other_greedy], "the sampled baseline was decoded greedily", other_greedy),
    ):
        result = _invoke(tmp_path, *map(str, args))
        assert result.exit_code == 2, result.output
        assert message in result.output and str(run / "run.json") in result.output.replace("\n", ""), result.output
    # an imported run records no sampling: taken as the sampled baseline it is given as
    header = json.loads((other_greedy / "run.json").read_text())
    (other_greedy / "run.json").write_text(json.dumps({**header, "backend": "import:opera"}))
    assert _invoke(tmp_path, str(greedy), str(vcd), "--sampled-baseline", str(other_greedy), "--json").exit_code == 0
