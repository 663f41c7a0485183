"""The readout as a typed value: every kind parsed once, the name kept byte for byte, one
message for an unknown readout, correction specs parsed strictly (repeated keys, declared
ranges, non-finite values), and M3ID's weight safe at any lambda * t."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from test_pipeline import _make_world, _run_args
from typer.testing import CliRunner

from halluprobe.cli import app
from halluprobe.errors import InputError
from halluprobe.readouts.apply import apply
from halluprobe.readouts.corrections import CORRECTIONS, parse_correction
from halluprobe.readouts.value import Readout
from halluprobe.records import Sample, SignalLogprobs, TokenSets

runner = CliRunner()


@pytest.mark.parametrize(
    ("name", "kind", "method"),
    [
        ("dynamic", "logit", "dynamic"),
        ("legacy_2tok", "logit", "legacy_2tok"),
        ("text:strict", "text", "strict"),
        ("text:yorn@2024", "text", "yorn@2024"),
        ("vcd", "correction", "vcd"),
        ("vcd:alpha=2", "correction", "vcd"),
        ("m3id: lambda = 0.5 , t=2", "correction", "m3id"),
        ("threshold:yes_ratio=0.3", "run_level", "threshold"),
        ("lmms-eval:exact", "stored", "lmms-eval:exact"),
        ("vlmevalkit:auxmatch", "stored", "vlmevalkit:auxmatch"),
    ],
)
def test_every_kind_parses_and_keeps_its_name(name: str, kind: str, method: str) -> None:
    readout = Readout.parse(name)
    assert (readout.kind, readout.method) == (kind, method)
    assert str(readout) == name  # tables, JSON and provenance show the name as given
    assert Readout.of(readout) is readout and Readout.of(name) == readout
    assert readout.recomputable == (kind != "stored")


def test_a_correction_carries_every_parameter_given_or_default() -> None:
    assert dict(Readout.parse("vcd:alpha=2").parameters) == {"alpha": 2.0, "beta": 0.1}
    assert dict(Readout.parse("m3id: lambda = 0.5 , t=2").parameters) == {"lambda": 0.5, "t": 2.0}
    assert Readout.parse("m3id:t=0").inert_reason is not None and Readout.parse("m3id:t=0").signals == ()
    assert Readout.parse("m3id:t=1").inert_reason is None and Readout.parse("m3id:t=1").signals == ("no-image",)
    assert Readout.parse("legacy_8tok").legacy and not Readout.parse("dynamic").legacy


def test_an_unknown_text_rule_is_one_line_naming_every_kind() -> None:
    with pytest.raises(InputError) as err:
        Readout.parse("text:nope")
    message = str(err.value)
    assert "\n" not in message and "unknown text rule 'nope'" in message
    for part in ("dynamic", "text:RULE", "yorn@2024", "vcd", "stored in the run"):
        assert part in message


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("vcd:alpha=1,beta=0.1,alpha=20", "vcd:alpha=1,beta=0.1,alpha=20: alpha is given twice"),
        ("vcd:alpha=1, alpha =1", "alpha is given twice"),  # the same value twice is refused too
        ("dola:relative_top=2", "relative_top must lie in [0, 1]"),
        ("vcd:alpha=1e308", "alpha must lie in [0, 100]"),
        ("vcd:beta=-0.1", "beta must lie in [0, 1]"),
        ("icd:alpha=-1", "alpha must lie in [0, 100]"),
        ("pai:gamma=0.5", "gamma must lie in [1, 100]"),
        ("m3id:lambda=11", "lambda must lie in [0, 10]"),
        ("m3id:t=-1", "t must lie in [0, 4096]"),
        ("bias:b=1e5", "b must lie in [-100, 100]"),
        ("threshold:yes_ratio=1.5", "yes_ratio must lie in [0, 1]"),
        ("vcd:alpha=nan", "alpha must be a finite number"),
        ("vcd:alpha=" + "9" * 400, "alpha must be a finite number"),  # a float beyond 1.8e308 is inf
        ("vcd:alpha", "vcd takes alpha=NUMBER, beta=NUMBER"),
    ],
)
def test_a_bad_spec_is_refused_with_one_line(spec: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        parse_correction(spec)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_every_parameter_declares_a_range_holding_its_default() -> None:
    for name, correction in CORRECTIONS.items():
        for key, param in correction.params.items():
            assert math.isfinite(param.low) and math.isfinite(param.high), (name, key)
            assert param.low <= param.default <= param.high, (name, key)
        # the ends of every range are accepted
        for end in ("low", "high"):
            spec = name + ":" + ",".join(f"{k}={getattr(p, end)!r}" for k, p in correction.params.items())
            assert parse_correction(spec)[0] == name


_SETS = TokenSets(yes_ids=[1, 2], no_ids=[3], yes_pieces=["Yes", "yes"], no_pieces=["No"], legacy_valid=False,
                  vocab_size=10, tokenizer_fingerprint="test")  # fmt: skip


def _sample(base: dict[int, float], text_only: dict[int, float]) -> Sample:
    signal = SignalLogprobs(candidates={str(i): v for i, v in text_only.items()}, max_logit=0.0, log_normaliser=0.0)
    return Sample(split="s", question_id=1, image="i.png", object="cat", label="yes", prompt="p",
                  candidates={str(i): v for i, v in base.items()}, signals={"no-image": signal})  # fmt: skip


def _m3id_by_hand(base: dict[int, float], text_only: dict[int, float], w: float) -> float:
    scores = {i: base[i] + w * (base[i] - text_only[i]) for i in base}
    yes = math.log(sum(math.exp(scores[i]) for i in _SETS.yes_ids))
    no = math.log(sum(math.exp(scores[i]) for i in _SETS.no_ids))
    return 1 / (1 + math.exp(no - yes))


@pytest.mark.parametrize(("lam", "t"), [(0.02, 2.0), (0.5, 2.0), (1.0, 3.0)])
def test_m3id_in_log_space_matches_the_formula(lam: float, t: float) -> None:
    base, text_only = {1: -0.9, 2: -2.0, 3: -0.6}, {1: -1.2, 2: -1.9, 3: -0.4}
    w = (1 - math.exp(-lam * t)) / math.exp(-lam * t)
    result = apply(Readout.parse(f"m3id:lambda={lam},t={t}"), _sample(base, text_only), _SETS)
    assert result is not None and result.p_yes == pytest.approx(_m3id_by_hand(base, text_only, w), abs=1e-12)


@pytest.mark.parametrize("t", [80.0, 800.0, 4096.0])
def test_m3id_with_a_huge_weight_decides_by_the_contrast_without_dividing_by_zero(t: float) -> None:
    # lambda t = 800 made exp(-lambda t) 0.0, and the weight a division by zero
    base, text_only = {1: -0.9, 2: -2.0, 3: -0.6}, {1: -1.5, 2: -1.9, 3: -0.4}  # id 1 gains most from the image
    result = apply(Readout.parse(f"m3id:lambda=10,t={t}"), _sample(base, text_only), _SETS)
    assert result is not None and result.decision == "yes" and result.p_yes == 1.0
    flipped = apply(Readout.parse(f"m3id:lambda=10,t={t}"), _sample(base, {1: -0.9, 2: -2.0, 3: -1.0}), _SETS)
    assert flipped is not None and flipped.decision == "no" and flipped.p_yes == 0.0


def test_a_run_level_rule_is_applied_to_the_whole_run_only() -> None:
    with pytest.raises(ValueError, match="apply_run"):
        apply(Readout.parse("threshold"), _sample({1: -1.0, 2: -2.0, 3: -1.0}, {}), _SETS)


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("value")
    out = root / "run"
    result = runner.invoke(app, _run_args(_make_world(root), out, "--signals", "noised"))
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize(
    ("verb", "spec", "message"),
    [
        ("score", "vcd:alpha=1,beta=0.1,alpha=20", "alpha is given twice"),
        ("score", "dola:relative_top=2", "relative_top must lie in [0, 1]"),
        ("score", "vcd:alpha=1e308", "alpha must lie in [0, 100]"),
        ("score", "text:nope", "unknown text rule 'nope'"),
        ("score", "someone:else", "readout 'someone:else' is not in this run; it has: "),
        ("corrections", "vcd:alpha=1,beta=0.1,alpha=20", "alpha is given twice"),
        ("corrections", "m3id:lambda=1e300,t=1", "lambda must lie in [0, 10]"),
    ],
)
def test_the_cli_refuses_a_bad_readout_with_one_line(plain_run: Path, verb: str, spec: str, message: str) -> None:
    flag = "--readout" if verb == "score" else "--correction"
    result = runner.invoke(app, [verb, str(plain_run), flag, spec, "--resamples", "0"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and message in lines[0], result.output


def test_a_huge_m3id_weight_scores_through_the_cli(plain_run: Path) -> None:
    # the run has no no-image signal: refused by its signals, not by an overflow
    result = runner.invoke(app, ["score", str(plain_run), "--readout", "m3id:lambda=10,t=4096", "--resamples", "0"])
    assert result.exit_code == 2 and "--signals no-image" in result.output, result.output


def test_read_benchmarks_is_a_library_function(tmp_path: Path) -> None:
    import hashlib

    from halluprobe.run_setup import read_benchmarks

    world = _make_world(tmp_path)
    questions, fingerprints = read_benchmarks([world["random"], world["adversarial"]])
    assert len(questions) == 72 and set(fingerprints) == {"random", "adversarial"}
    path, sha = fingerprints["random"]
    assert path == world["random"].resolve() and sha == hashlib.sha256(world["random"].read_bytes()).hexdigest()
    with pytest.raises(InputError, match="two benchmark files give the split 'random'"):
        read_benchmarks([world["random"], world["random"]])
    with pytest.raises(InputError, match="benchmark file not found"):
        read_benchmarks([tmp_path / "missing_pope_random.json"])


@pytest.mark.parametrize("readout", ["dynamic", "text:strict", "threshold:yes_ratio=0.5"])
def test_probe_choice_reads_the_existence_run_through_apply_run(plain_run: Path, readout: str) -> None:
    from halluprobe.benchmarks.autoprobe.choice import ChoiceSample, consistency_table
    from halluprobe.readouts.apply import apply_run
    from halluprobe.rundir import RunDir

    run = RunDir(plain_run)
    header, samples = run.read_header(), run.read_samples()
    asked = {(s.image, s.object): s for s in samples if s.label == "no" and s.object is not None}
    choices = [ChoiceSample(question_id=i, image=image, object=obj, label="D", prompt="p", decisions={"logit": "D"})
               for i, (image, obj) in enumerate(asked)]  # fmt: skip
    table = consistency_table(samples, choices, header=header, existence_readout=readout)
    # the whole run is read (a threshold is chosen on every answer), then the no-questions are kept
    by_key = dict(zip([(s.image, s.object) for s in samples], apply_run(Readout.parse(readout), header, samples)))
    expected = {"yes": 0, "no": 0, "unknown": 0}
    for key in asked:
        result = by_key[key]
        expected[result.decision if result is not None else "unknown"] += 1
    assert table["pairs"] == len(asked) > 0
    assert {row: table["table"][row]["D"] for row in expected} == expected
    assert expected["yes"] > 0 and expected["no"] > 0  # the scripted model answers both ways
