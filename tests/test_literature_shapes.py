"""`literature list` and `literature audit --all` offline over files shaped like every registered
entry (LLaVA's pooled answers, cd_rethink's per-split lines, MARINE's id-keyed labels and own
draw, DASH-B's answers array), each figure recomputed here from the transcribed rules."""

from __future__ import annotations

# ruff: noqa: F811  (toy_coco is a fixture imported from _literature, then requested by name)

import json
from pathlib import Path

import pytest
from _literature import (
    MARINE_COMMIT,
    MARINE_REPO,
    cd_rethink_entry,
    dashb_entry,
    literature_cache,  # noqa: F401 - fixture, used by every test below
    llava_entry,
    marine_entries,
    pin_toy_dashb,
    put_pinned,
    toy_coco,  # noqa: F401 - fixture
    write_registry,
)
from typer.testing import CliRunner

from halluprobe.cli import app

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("literature_cache")  # every test: its own cache, no mirror


def test_audit_all_on_every_entry_shape(tmp_path: Path, toy_coco: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`literature list` and `literature audit --all` offline over fixtures shaped like every real
    entry (LLaVA's pooled answers, cd_rethink's per-split lines, MARINE's id-keyed labels and own
    draw, DASH-B's answers array), every figure recomputed here from the transcribed rules."""
    llava, llava_f1 = llava_entry(toy_coco)
    llava["published"] = [{"metric": "f1_macro", "value": round(100 * llava_f1, 1), "scale": 100, "decimals": 1, "where": "MODEL_ZOO", "path": "docs/MODEL_ZOO.md"}]
    greedy, greedy_macro = cd_rethink_entry(toy_coco, "greedy")
    sample, sample_macro = cd_rethink_entry(toy_coco, "sample")
    marines, marine_scores, fingerprint = marine_entries(toy_coco)
    dashb, truth = dashb_entry(toy_coco)
    pin_toy_dashb(toy_coco, monkeypatch)
    reg = write_registry(tmp_path, [llava, greedy, sample, *marines, dashb])

    listed = runner.invoke(app, ["literature", "list", "--registry", str(reg)])
    assert listed.exit_code == 0, listed.output
    rows = [line for line in listed.output.splitlines() if line.startswith("| ") and not line.startswith("| entry")]
    assert len(rows) == 6 and all(row.endswith("| auditable |") for row in rows)

    out = tmp_path / "audit"
    result = runner.invoke(app, ["literature", "audit", "--all", "--out", str(out), "--registry", str(reg), "--resamples", "200"])
    assert result.exit_code == 0, result.output
    data = {e["name"]: e for e in json.loads((out / "literature.json").read_text())["entries"]}
    assert all(e["status"] == "audited" for e in data.values()), {n: e["status"] for n, e in data.items()}
    md = (out / "literature.md").read_text()

    assert data["llava-toy"]["figures"][0]["equal"] is True and data["llava-toy"]["answers"] == 24
    # cd_rethink: nothing published, the headline recomputed with VCD's label-dependent rule
    for name, macro in ((greedy["name"], greedy_macro), (sample["name"], sample_macro)):
        assert data[name]["answers"] == 24 and data[name]["figures"] == []
        assert data[name]["recomputed"] == pytest.approx(macro)
        assert data[name]["rule_changes"] > 0  # "I don't know" is a correct no under VCD's, unknown under strict
        assert f"| {name} | none published | - | f1_macro {100 * macro['f1_macro']:.2f}," in md
        assert data[name]["recomputed_strict"]["accuracy_macro"] < data[name]["recomputed"]["accuracy_macro"]  # "I don't know" is no answer
        lo, hi = data[name]["recomputed_ci"]
        assert lo <= data[name]["recomputed"]["f1_macro"] <= hi
    # MARINE: paired by id with the id-keyed labels, the blank answer left out, the shipped scores equal
    for entry in marines:
        audit, score = data[entry["name"]], marine_scores[entry["decoding"].split()[-1]]
        assert audit["answers"] == score["answers"]
        f1, acc = audit["figures"]
        assert f1["authors"] == pytest.approx(score["f1"]) and acc["authors"] == pytest.approx(score["accuracy"])
        assert f1["equal"] is True and acc["equal"] is True and abs(f1["difference"]) < 5e-5
        assert f1["ci"][0] <= f1["authors"] <= f1["ci"][1]
        assert audit["questions_are"] == {"adversarial": [f"own draw coco_pope_adversarial.json (fingerprint {fingerprint[:12]}; 10 of 10 questions answered)"]}
    assert marine_scores["0.7"]["scored"] == 9  # the blank answer was left out, as MARINE's script does
    # DASH-B: the shipped results equal, the leaderboard row's TPR and mean not reproduced, said so
    figs = data["dashb-toy"]["figures"]
    assert [f["equal"] for f in figs] == [True, True, True, False, True, False]
    assert figs[0]["authors"] == pytest.approx(truth["TNR"]) and figs[1]["authors"] == pytest.approx(truth["TPR"])
    assert figs[2]["authors"] == pytest.approx(truth["ACC"])
    assert figs[5]["difference"] == pytest.approx(100 * truth["TPR"] - truth["board_tpr"])
    assert figs[3]["difference"] == pytest.approx(50 * (truth["TPR"] + truth["TNR"]) - truth["board_mean"])
    for fig in figs:  # every DASH-B figure has its image-clustered CI around the recomputed value
        lo, hi = fig["ci"]
        assert lo <= fig["authors"] <= hi and lo < hi
    assert data["dashb-toy"]["answers"] == 24
    # which pinned DASH-B questions the answers are: 12 negatives pinned, 4 of 6 positive keys (object, file)
    assert data["dashb-toy"]["questions_are"] == {"dashb": ["dashb@toy: 12 of 12 negatives, 4 of 12 positives are its (label, object, image file) keys"]}
    assert (
        f"NOT reproduced by the released answers: benchmark.md: dashb_mean {truth['board_mean']:.1f} (recomputed {50 * (truth['TPR'] + truth['TNR']):.2f}), "
        f"dashb_tpr {truth['board_tpr']:.1f} (recomputed {100 * truth['TPR']:.2f})"
    ) in md
    assert md.count("NOT reproduced by the released answers") == 1


def test_audit_refuses_answers_that_are_not_the_pinned_draw(tmp_path: Path, toy_coco: Path) -> None:
    marines, _, fingerprint = marine_entries(toy_coco)
    entry = marines[0]
    other = write_registry(tmp_path, [{**entry, "fingerprint": "1" * 64}])
    drift = runner.invoke(app, ["literature", "audit", entry["name"], "--out", str(tmp_path / "a"), "--registry", str(other)])
    assert drift.exit_code == 2 and drift.output.count("\n") == 1
    assert f"coco_pope_adversarial.json: the question file's content fingerprint is {fingerprint}, the registry pins {'1' * 64}" in drift.output
    # the draw re-pinned with one question edited: its fingerprint is pinned, but the answers ask the old one
    draw = toy_coco / MARINE_REPO / MARINE_COMMIT / entry["questions"]["path"]
    edited = draw.read_text().replace("Is there a", "Is there any", 1)
    moved = put_pinned(toy_coco, MARINE_REPO, "7" * 40, entry["questions"]["path"], edited.encode())
    from halluprobe.benchmarks.dataset_files import fingerprint_of_file

    repinned = write_registry(tmp_path, [{**entry, "questions": moved, "fingerprint": fingerprint_of_file(toy_coco / MARINE_REPO / ("7" * 40) / moved["path"])}])
    wrong = runner.invoke(app, ["literature", "audit", entry["name"], "--out", str(tmp_path / "b"), "--registry", str(repinned)])
    assert wrong.exit_code == 2 and wrong.output.count("\n") == 1
    assert "toy-guidance_strength0.0.jsonl: answer to question_id 1 is not the pinned draw's (coco_pope_adversarial.json)" in wrong.output
