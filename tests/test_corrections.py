"""Corrections read at score time from stored signals: each rule against an independent
recomputation by its published formula, the settings that reproduce the baseline, inert rules,
bad input, the corrections table, and the hf backend's signals (both engines)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from test_pipeline import _make_world, _run_args
from typer.testing import CliRunner

from halluprobe.cli import app
from halluprobe.rundir import RunDir

runner = CliRunner()


@pytest.fixture(scope="module")
def signal_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("signals")
    world = _make_world(root)
    out = root / "run"
    result = runner.invoke(app, _run_args(world, out, "--signals", "noised,layers,instruction,no-image,attention:0.5;0;2"))
    assert result.exit_code == 0, result.output
    return out


def _per_question(run: Path, readout: str, tmp: Path) -> list[dict]:
    path = tmp / f"{readout.replace(':', '_')}.jsonl"
    result = runner.invoke(app, ["score", str(run), "--readout", readout, "--resamples", "0", "--per-question", str(path), "--overwrite"])
    assert result.exit_code == 0, result.output
    return [json.loads(line) for line in path.read_text().splitlines()]


def _lse(values: list[float]) -> float:
    top = max(values)
    return top if top == -math.inf else top + math.log(sum(math.exp(v - top) for v in values))


def _decide(yes: float, no: float) -> tuple[str, float | None]:
    if yes == no == -math.inf:
        return "unknown", None
    return ("yes" if yes > no else "no" if no > yes else "unknown"), 1 / (1 + math.exp(no - yes))


def _by_hand(run: Path, score) -> list[tuple[str, float | None]]:  # type: ignore[no-untyped-def]
    rundir = RunDir(run)
    sets = rundir.read_header().token_sets
    assert sets is not None
    out = []
    for s in rundir.read_samples():
        base = {i: s.candidates[str(i)] for i in [*sets.yes_ids, *sets.no_ids]}
        scores = score(s, base, s.first_token[0].logprob)
        out.append(_decide(_lse([scores[i] for i in sets.yes_ids]), _lse([scores[i] for i in sets.no_ids])))
    return out


@pytest.mark.parametrize(("alpha", "beta"), [(1.0, 0.1), (2.5, 0.0), (0.5, 0.5)])
def test_vcd_equals_its_formula(signal_run: Path, tmp_path: Path, alpha: float, beta: float) -> None:
    def vcd(s, base, top):  # type: ignore[no-untyped-def]
        noised = s.signals["noised"].candidates
        cut = math.log(beta) + top if beta > 0 else -math.inf
        return {i: (1 + alpha) * lp - alpha * noised[str(i)] if lp >= cut else -math.inf for i, lp in base.items()}

    expected = _by_hand(signal_run, vcd)
    got = _per_question(signal_run, f"vcd:alpha={alpha},beta={beta}", tmp_path)
    assert [g["decision"] for g in got] == [e[0] for e in expected]
    for g, (_, p) in zip(got, expected):
        assert g.get("p_yes") == pytest.approx(p, abs=1e-12)


def test_icd_equals_its_formula(signal_run: Path, tmp_path: Path) -> None:
    def icd(s, base, top):  # type: ignore[no-untyped-def]
        disturbed = s.signals["instruction"].candidates
        cut = math.log(0.1) + top
        return {i: 2 * lp - disturbed[str(i)] if lp >= cut else -math.inf for i, lp in base.items()}

    expected = _by_hand(signal_run, icd)
    got = _per_question(signal_run, "icd:alpha=1,beta=0.1", tmp_path)
    assert [(g["decision"], g.get("p_yes")) for g in got] == [(d, p) for d, p in expected]
    # the instruction the variant was rendered with is recorded in run.json
    from halluprobe.records import ICD_INSTRUCTION

    generate = RunDir(signal_run).read_header().generate
    assert generate is not None and generate.instruction == ICD_INSTRUCTION


@pytest.mark.parametrize(("lam", "t"), [(0.02, 10.0), (0.5, 2.0)])
def test_m3id_equals_its_formula(signal_run: Path, tmp_path: Path, lam: float, t: float) -> None:
    w = (1 - math.exp(-lam * t)) / math.exp(-lam * t)

    def m3id(s, base, top):  # type: ignore[no-untyped-def]
        text_only = s.signals["no-image"].candidates
        return {i: lp + w * (lp - text_only[str(i)]) for i, lp in base.items()}

    expected = _by_hand(signal_run, m3id)
    got = _per_question(signal_run, f"m3id:lambda={lam},t={t}", tmp_path)
    assert [g["decision"] for g in got] == [e[0] for e in expected]
    assert all(g.get("p_yes") == pytest.approx(p, abs=1e-12) for g, (_, p) in zip(got, expected))


def test_pai_equals_its_formula(signal_run: Path, tmp_path: Path) -> None:
    def pai(s, base, top):  # type: ignore[no-untyped-def]
        amplified, text_only = s.signals["attention"].candidates, s.signals["no-image"].candidates
        return {i: 1.1 * amplified[str(i)] - 0.1 * text_only[str(i)] for i in base}

    expected = _by_hand(signal_run, pai)
    got = _per_question(signal_run, "pai:gamma=1.1", tmp_path)
    assert [g["decision"] for g in got] == [e[0] for e in expected]
    assert all(g.get("p_yes") == pytest.approx(p, abs=1e-12) for g, (_, p) in zip(got, expected))


@pytest.mark.parametrize("ratio", [0.25, 0.5, 0.8])
def test_a_threshold_meets_its_yes_ratio_and_keeps_p_yes(signal_run: Path, tmp_path: Path, ratio: float) -> None:
    base = _per_question(signal_run, "dynamic", tmp_path)
    got = _per_question(signal_run, f"threshold:yes_ratio={ratio}", tmp_path)
    assert [g["p_yes"] for g in got] == [b["p_yes"] for b in base]
    yes = [g for g in got if g["decision"] == "yes"]
    assert len(yes) == round(ratio * len(got))  # the scripted p_yes have no ties
    assert min(g["p_yes"] for g in yes) > max(g["p_yes"] for g in got if g["decision"] == "no")


def test_dola_equals_its_formula(signal_run: Path, tmp_path: Path) -> None:
    def dola(s, base, top):  # type: ignore[no-untyped-def]
        early = max((v for k, v in s.signals.items() if k.startswith("layer:")), key=lambda v: v.jsd).candidates
        cut = math.log(0.1) + top
        return {i: lp - early[str(i)] if lp >= cut else -math.inf for i, lp in base.items()}

    expected = _by_hand(signal_run, dola)
    got = _per_question(signal_run, "dola:relative_top=0.1", tmp_path)
    assert [(g["decision"], g.get("p_yes")) for g in got] == [(d, p) for d, p in expected]


@pytest.mark.parametrize("neutral", ["vcd:alpha=0,beta=0", "bias:b=0", "m3id:t=0"])
def test_neutral_settings_reproduce_the_baseline_exactly(signal_run: Path, tmp_path: Path, neutral: str) -> None:
    assert _per_question(signal_run, neutral, tmp_path) == _per_question(signal_run, "dynamic", tmp_path)


def test_a_bias_against_yes_lowers_the_yes_ratio(signal_run: Path, tmp_path: Path) -> None:
    base = _per_question(signal_run, "dynamic", tmp_path)
    biased = _per_question(signal_run, "bias:b=3", tmp_path)
    assert sum(x["decision"] == "yes" for x in biased) < sum(x["decision"] == "yes" for x in base)
    for b, x in zip(base, biased):  # log-odds shifted by exactly -3
        logit = lambda p: math.log(p / (1 - p))  # noqa: E731
        assert logit(x["p_yes"]) == pytest.approx(logit(b["p_yes"]) - 3, abs=1e-9)


def test_the_table_reports_inert_rules_baselines_and_the_confound(signal_run: Path) -> None:
    result = runner.invoke(app, ["corrections", str(signal_run), "--correction", "vcd", "--correction", "m3id",
                                 "--correction", "bias:b=1", "--resamples", "30", "--json"])  # fmt: skip
    assert result.exit_code == 0, result.output
    table = json.loads(result.stdout)
    rows = {r["name"]: r for r in table["rows"]}
    assert rows["dynamic"]["kind"] == "baseline" and rows["dynamic"]["delta_f1"] is None
    dynamic = json.loads(runner.invoke(app, ["score", str(signal_run), "--json", "--resamples", "30"]).stdout)
    assert rows["dynamic"]["f1"] == dynamic["macro"]["f1"]  # the table's counts are score's
    assert "t = 0" in rows["m3id"]["inert"] and rows["m3id"]["delta_f1"] == 0.0
    assert rows["bias:b=1"]["delta_f1"] == pytest.approx(rows["bias:b=1"]["f1"] - rows["dynamic"]["f1"])
    assert [r["kind"] for r in table["rows"]].count("confound") == 1
    # the sampled baseline: each answer's p_yes summed, F1 of those expected counts, per split
    lines = _per_question(signal_run, "dynamic", signal_run.parent)
    f1s = []
    for split in ("random", "adversarial"):
        mine = [x for x in lines if x["split"] == split]
        tp = sum(x["p_yes"] for x in mine if x["label"] == "yes")
        fp = sum(x["p_yes"] for x in mine if x["label"] == "no")
        f1s.append(2 * tp / (tp + fp + sum(x["label"] == "yes" for x in mine)))
    assert rows["dynamic"]["f1_sampled"] == pytest.approx(sum(f1s) / 2)


def test_a_grid_chooses_on_folds_and_shows_the_optimistic_choice(signal_run: Path, tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text("[bias]\nb = [0, 1, 3]\n")
    result = runner.invoke(app, ["corrections", str(signal_run), "--grid", str(grid), "--folds", "3", "--resamples", "0", "--json"])
    assert result.exit_code == 0, result.output
    chosen = [r for r in json.loads(result.stdout)["rows"] if r["chosen_on"]]
    assert [r["chosen_on"] for r in chosen] == ["folds", "test (optimistic)"]
    assert chosen[0]["name"].startswith("bias (chosen on 3 image folds")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--correction", "vcdx"], "unknown correction 'vcdx'"),
        (["--correction", "vcd:gamma=2"], "vcd takes alpha=NUMBER, beta=NUMBER"),
        (["--correction", "vcd:alpha=big"], "alpha must be a number"),
        (["--correction", "clipx"], "unknown correction 'clipx'"),
        (["--correction", "clip:patch=2"], "patch must lie in [0, 1]"),
        (["--correction", "clip"], "`halluprobe run --signals clip --clip-model PATH`"),
    ],
)
def test_bad_corrections_are_one_line(signal_run: Path, args: list[str], message: str) -> None:
    result = runner.invoke(app, ["corrections", str(signal_run), *args, "--resamples", "0"])
    assert result.exit_code == 2 and message in result.output, result.output


def test_a_grid_with_an_unknown_key_is_one_line(signal_run: Path, tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text("[vcd]\nalpha = [1]\ngamma = [2]\n")
    result = runner.invoke(app, ["corrections", str(signal_run), "--grid", str(grid)])
    assert result.exit_code == 2 and "[vcd] has no parameter 'gamma'" in result.output


def test_signals_are_part_of_the_fingerprint(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    out = tmp_path / "run"
    assert runner.invoke(app, _run_args(world, out, "--limit", "2", "--signals", "noised")).exit_code == 0
    refused = runner.invoke(app, _run_args(world, out, "--resume", "--signals", "noised,layers"))
    assert refused.exit_code == 2 and "refusing to resume" in refused.output
    unsupported = runner.invoke(app, _run_args(world, tmp_path / "other", "--signals", "no-such"))
    assert unsupported.exit_code == 2 and "not 'no-such'" in unsupported.output
    assert not (tmp_path / "other").exists()  # refused before the run dir is written


def test_the_report_has_a_corrections_section_for_a_run_with_signals(signal_run: Path, tmp_path: Path) -> None:
    result = runner.invoke(app, ["report", str(signal_run), "--out", str(tmp_path / "report.html"), "--resamples", "20"])
    assert result.exit_code == 0, result.output
    md = (tmp_path / "report.md").read_text()
    section = md[md.index("Corrections\n"):]
    for method in ("vcd:alpha=1,beta=0.1", "icd:alpha=1,beta=0.1", "dola:relative_top=0.1", "pai:gamma=1.1", "m3id:lambda=0.02,t=0"):
        assert f"`{method}`" in section
    assert "(inert)" in section and 'id="corrections"' in (tmp_path / "report.html").read_text()


def test_a_report_of_a_run_without_signals_has_no_corrections_section(tmp_path: Path) -> None:
    world = _make_world(tmp_path)
    assert runner.invoke(app, _run_args(world, tmp_path / "run", "--limit", "2")).exit_code == 0
    assert runner.invoke(app, ["report", str(tmp_path / "run"), "--out", str(tmp_path / "r.html"), "--resamples", "10"]).exit_code == 0
    assert "Corrections" not in (tmp_path / "r.md").read_text()


def test_seeded_draws_center_on_the_expected_counts(signal_run: Path) -> None:
    args = ["corrections", str(signal_run), "--correction", "vcd", "--resamples", "0", "--draws", "400", "--json"]
    first, second = runner.invoke(app, args), runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    rows = json.loads(first.stdout)["rows"]
    assert rows == json.loads(second.stdout)["rows"]  # seeded: the same draws
    for row in rows:
        mean, lo, hi = row["f1_draws"]
        assert lo <= mean <= hi
        # the mean of sampled F1 lies near the F1 of the expected counts (not equal: F1 is not linear)
        assert abs(mean - row["f1_sampled"]) < 0.05


def test_the_confound_row_of_a_text_rule_keeps_its_decisions_under_sampling(signal_run: Path) -> None:
    result = runner.invoke(app, ["corrections", str(signal_run), "--correction", "bias:b=0", "--resamples", "0", "--json"])
    rows = {r["kind"]: r for r in json.loads(result.stdout)["rows"]}
    confound = rows["confound"]
    assert confound["name"].startswith("text:") and confound["f1_sampled"] == confound["f1"]


@pytest.mark.parametrize("policy", ["wrong", "no", "drop"])
def test_mcnemar_follows_the_unknown_policy(signal_run: Path, tmp_path: Path, policy: str) -> None:
    from halluprobe.metrics.stats import mcnemar_exact

    result = runner.invoke(app, ["corrections", str(signal_run), "--correction", "bias:b=3", "--unknown", policy, "--resamples", "0", "--json"])
    rows = {r["name"]: r for r in json.loads(result.stdout)["rows"]}
    base, biased = _per_question(signal_run, "dynamic", tmp_path), _per_question(signal_run, "bias:b=3", tmp_path)
    confound_name = next(n for n, r in rows.items() if r["kind"] == "confound")
    text = _per_question(signal_run, confound_name, tmp_path)  # text:exact: every answer unknown here

    def right(lines: list[dict]) -> list[bool]:
        read = {"wrong": None, "no": "no", "yes": "yes", "drop": None}[policy]
        return [(read if x["decision"] == "unknown" and read else x["decision"]) == x["label"] for x in lines]

    assert rows["bias:b=3"]["mcnemar_p"] == mcnemar_exact(right(biased), right(base)).p_value
    keep = [x["decision"] != "unknown" for x in text] if policy == "drop" else [True] * len(text)
    expected = mcnemar_exact([r for r, k in zip(right(text), keep) if k], [r for r, k in zip(right(base), keep) if k]).p_value
    assert rows[confound_name]["mcnemar_p"] == expected


def test_without_a_correction_the_table_has_every_method_the_signals_allow(signal_run: Path) -> None:
    result = runner.invoke(app, ["corrections", str(signal_run), "--resamples", "0", "--json"])
    assert result.exit_code == 0, result.output
    names = [r["name"] for r in json.loads(result.stdout)["rows"] if r["kind"] not in ("baseline", "confound")]
    assert names == ["vcd:alpha=1,beta=0.1", "icd:alpha=1,beta=0.1", "dola:relative_top=0.1", "pai:gamma=1.1", "m3id:lambda=0.02,t=0"]


def test_a_grid_value_out_of_bounds_names_the_grid_file(signal_run: Path, tmp_path: Path) -> None:
    grid = tmp_path / "grid.toml"
    grid.write_text("[clip]\nbeta = [1]\npatch = [0, 2]\n")
    result = runner.invoke(app, ["corrections", str(signal_run), "--grid", str(grid)])
    assert result.exit_code == 2 and f"{grid}: clip:beta=1,patch=2: patch must lie in [0, 1]" in result.output, result.output


@pytest.mark.parametrize("value", ["inf", "nan", "-inf"])
def test_a_parameter_that_is_not_finite_is_refused(signal_run: Path, value: str) -> None:
    result = runner.invoke(app, ["score", str(signal_run), "--readout", f"bias:b={value}"])
    assert result.exit_code == 2 and "b must be a finite number" in result.output, result.output


@pytest.mark.parametrize("policy", ["wrong", "drop"])
def test_the_table_and_the_audit_give_one_paired_test(signal_run: Path, policy: str) -> None:
    """Both read metrics.paired: on a run without errors, the confound row's ΔF1, its CI and
    McNemar's p are the audit's paired entry for the same readout against dynamic."""
    from halluprobe.audit import audit_run
    from halluprobe.corrections_table import corrections_table

    table = corrections_table(signal_run, [], policy=policy, n_resamples=40, seed=3)  # type: ignore[arg-type]
    confound = next(r for r in table.rows if r.kind == "confound")
    audit = audit_run(signal_run, policy=policy, n_resamples=40, seed=3)  # type: ignore[arg-type]
    assert audit.run.errors == 0 and audit.headline == "dynamic"
    entry = audit.paired[confound.name]
    assert (confound.delta_f1, confound.delta_f1_ci, confound.mcnemar_p) == (entry.delta_f1, entry.delta_f1_ci, entry.mcnemar_p)
    assert confound.delta_f1_ci is not None


def _top_token_outside_both_sets(run: Path, out: Path) -> Path:
    """A copy of ``run`` whose model puts its first-token argmax on a piece that is neither yes
    nor no (the first non-yes/no piece listed, raised above every yes/no candidate): under VCD's
    plausibility cut-off at beta = 1 only that piece survives, so every answer is unknown."""
    import shutil

    shutil.copytree(run, out)
    sets = RunDir(out).read_header().token_sets
    assert sets is not None
    answer_ids = {*sets.yes_ids, *sets.no_ids}
    lines = []
    for line in (out / "samples.jsonl").read_text().splitlines():
        sample = json.loads(line)
        other = next(t for t in sample["first_token"] if t["id"] not in answer_ids)
        other["logprob"] = max(sample["candidates"].values()) + 0.5
        sample["first_token"] = [other, *(t for t in sample["first_token"] if t is not other)]
        lines.append(json.dumps(sample))
    (out / "samples.jsonl").write_text("\n".join(lines) + "\n")
    return out


def test_a_row_whose_answers_are_all_unknown_shows_how_many(signal_run: Path, tmp_path: Path) -> None:
    run = _top_token_outside_both_sets(signal_run, tmp_path / "run")
    n = sum(1 for _ in RunDir(run).read_samples())
    args = ["corrections", str(run), "--correction", "vcd:alpha=1,beta=1", "--correction", "vcd:alpha=1,beta=0", "--resamples", "20"]
    rows = {r["name"]: r for r in json.loads(runner.invoke(app, [*args, "--json"]).stdout)["rows"]}
    assert rows["vcd:alpha=1,beta=1"]["f1"] == 0.0 and rows["vcd:alpha=1,beta=1"]["unknown"] == n
    assert "unknown" not in rows["vcd:alpha=1,beta=0"]  # no cut-off: every answer read, no count written
    markdown = runner.invoke(app, [*args, "--markdown"]).stdout
    header = next(line for line in markdown.splitlines() if line.startswith("| method"))
    assert header.endswith("| unknown |")
    unread = next(line for line in markdown.splitlines() if line.startswith("| vcd:alpha=1,beta=1 "))
    assert unread.startswith("| vcd:alpha=1,beta=1 | 0.0000 [") and unread.endswith(f"| {n} |")
    assert "a row whose answers are all unknown reads nothing" in markdown
    paper = tmp_path / "table.md"
    paper.write_text(markdown)
    checked = runner.invoke(app, ["check", str(paper), "--runs", str(run)])
    assert checked.exit_code == 0, checked.output
    terminal = runner.invoke(app, args).stdout
    assert f"{n}/{n}" in terminal and "unknown" in terminal
    report = runner.invoke(app, ["report", str(run), "--out", str(tmp_path / "report.html"), "--resamples", "0"])
    assert report.exit_code == 0, report.output
    # the report's table has the methods at their default settings: none reads nothing here
    # (a confound row that reads nothing is marked like any other row)
    marked = [line for line in (tmp_path / "report.md").read_text().splitlines() if "answers unknown" in line]
    assert all("(confound)" in line for line in marked), marked
    from halluprobe.corrections_table import corrections_table
    from halluprobe.report.page import render_report

    table = corrections_table(run, ["vcd:alpha=1,beta=1"], n_resamples=0)
    html, md = render_report([run], tmp_path / "marked.html", corrections=[table], n_resamples=0)
    assert f"`vcd:alpha=1,beta=1` ({n} answers unknown) | 0.0 |" in md.read_text()
    assert f'<span class="bad">({n} answers unknown)</span>' in html.read_text()


def test_a_free_form_run_points_to_the_decoding_verb(tmp_path: Path) -> None:
    from halluprobe.records import GenerateConfig, RunHeader

    folder = tmp_path / "captions"
    folder.mkdir()
    header = RunHeader(
        halluprobe_version="test", created_at="2026-01-01T00:00:00Z", fingerprint="fp", backend="hf", backend_info={},
        model="tiny", template="llava", readouts=[], text_rules=[], max_new_tokens=64, token_sets=None, benchmarks={"chair": "0" * 64},
        benchmark_paths={"chair": str(tmp_path / "q.jsonl")}, images_root=str(tmp_path), open_ended=True,
        generate=GenerateConfig(max_new_tokens=64, stop_strings=()),
    )  # fmt: skip
    (folder / "run.json").write_text(header.model_dump_json(indent=2) + "\n")
    (folder / "samples.jsonl").write_text("")
    result = CliRunner().invoke(app, ["corrections", str(folder)])
    assert result.exit_code == 2
    assert "holds free-form answers" in result.output and f"halluprobe decoding {folder}" in result.output
    assert len(result.output.strip().splitlines()) == 1
