"""`halluprobe literature`: the packaged registry, and list / audit offline on fixtures shaped like
the real entries, served from a file:// mirror laid out <repository>/<commit>/<path>."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from halluprobe.benchmarks.datasets import DATASETS
from halluprobe.cli import app
from halluprobe.imports import FORMATS
from halluprobe.literature.registry import load_registry

runner = CliRunner()
HEX64 = re.compile(r"^[0-9a-f]{64}$")
REPO, COMMIT = "haotian-liu/LLaVA", "3" * 40
POPE_REPO, POPE_COMMIT = "RUCAIBox/POPE", "e" * 40
SUFFIX = "\nAnswer the question using a single word or phrase."
SPLITS = ("adversarial", "random", "popular")  # LLaVA's category order and id offsets
OFFSET = {"adversarial": 0, "random": 10_000_000, "popular": 20_000_000}
# awkward answers: LLaVA's rule reads the first sentence's words, whatever else they say
ANSWERS = ["Yes", "No", "No, there is not.", "I don't know", "Not sure.", "There isn't any", "No, but there is a cat.", "Yes."]


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HALLUPROBE_GITHUB_URL", raising=False)


def _put(root: Path, repo: str, commit: str, path: str, data: bytes) -> dict[str, Any]:
    dest = root / repo / commit / path
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(data)
    pinned = {"path": path, "sha256": hashlib.sha256(data).hexdigest()}
    return pinned if (repo, commit) == (REPO, COMMIT) else {**pinned, "repository": repo, "commit": commit}


def _llava_rule(text: str) -> str:
    """LLaVA's llava/eval/eval_pope.py, transcribed: first sentence, commas removed, split on spaces."""
    if text.find(".") != -1:
        text = text.split(".")[0]
    words = text.replace(",", "").split(" ")
    return "no" if ("No" in words or "not" in words or "no" in words) else "yes"


def _f1(pairs: list[tuple[str, str]]) -> float:
    tp = sum(lab == "yes" and dec == "yes" for lab, dec in pairs)
    fp = sum(lab == "no" and dec == "yes" for lab, dec in pairs)
    fn = sum(lab == "yes" and dec == "no" for lab, dec in pairs)
    return 2 * tp / (2 * tp + fp + fn)


def _llava_fixture(root: Path) -> tuple[dict[str, Any], float]:
    """A registry entry shaped like llava-1.5-13b (answers + LLaVA question file + POPE labels with
    'imange'), and the mean F1 of LLaVA's rule over the splits, computed here."""
    labels, questions, answers = [], [], []
    f1s = []
    for s_i, split in enumerate(SPLITS):
        recs = []
        for i in range(8):
            image = f"COCO_val2014_{i // 2:012d}.jpg"
            obj = ("dog", "cat", "car", "cup")[(i + s_i) % 4]
            word = "imange" if i == 3 else "image"
            recs.append({"question_id": i + 1, "image": image, "text": f"Is there a {obj} in the {word}?", "label": "yes" if i % 2 == 0 else "no"})
        labels.append(_put(root, POPE_REPO, POPE_COMMIT, f"output/coco/coco_pope_{split}.json", "".join(json.dumps(r) + "\n" for r in recs).encode()))
        pairs = []
        for i, r in enumerate(recs):
            qid = OFFSET[split] + r["question_id"]
            questions.append({"question_id": qid, "image": r["image"], "text": r["text"] + SUFFIX, "category": split})
            text = ANSWERS[(i + s_i) % len(ANSWERS)]
            answers.append({"question_id": qid, "prompt": r["text"] + SUFFIX, "text": text, "answer_id": f"a{qid}", "model_id": "llava-v1.5-13b", "metadata": {}})
            pairs.append((str(r["label"]), _llava_rule(text)))
        f1s.append(_f1(pairs))
    entry = {
        "name": "llava-toy", "model": "LLaVA-1.5-13B", "decoding": "greedy", "repository": REPO, "commit": COMMIT, "format": "llava",
        "answers": [_put(root, REPO, COMMIT, "playground/data/eval/pope/answers/llava-v1.5-13b.jsonl", "".join(json.dumps(a) + "\n" for a in answers).encode())],
        "questions": _put(root, REPO, COMMIT, "playground/data/eval/pope/llava_pope_test.jsonl", "".join(json.dumps(q) + "\n" for q in questions).encode()),
        "labels": labels, "dataset": "coco-toy", "version": "toy",
        "parser": {"rule": "pope", "source": "llava/eval/eval_pope.py"},
        "published": [], "notes": ["toy"],
    }  # fmt: skip
    return entry, sum(f1s) / len(f1s)


@pytest.fixture
def toy_coco(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A file:// mirror holding the LLaVA-shaped fixture, its labels pinned as dataset coco-toy@toy."""
    from halluprobe.benchmarks.datasets import DatasetVersion, SourceFile
    from halluprobe.benchmarks.fingerprint import content_fingerprint
    from halluprobe.benchmarks.pope import read_questions

    mirror = tmp_path / "mirror"
    entry, _ = _llava_fixture(mirror)
    sources, prints = {}, {}
    for f in entry["labels"]:
        name = f["path"].rsplit("/", 1)[-1]
        sources[name] = (SourceFile(POPE_REPO, POPE_COMMIT, f["path"], f["sha256"]),)
        prints[name] = content_fingerprint(read_questions(mirror / POPE_REPO / POPE_COMMIT / f["path"]))
    monkeypatch.setitem(DATASETS, "coco-toy", {"toy": DatasetVersion("coco-toy", "toy", "2023-08-10", "pope", sources, prints, "coco-val2014", {})})
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", mirror.as_uri())
    return mirror


def _registry(tmp_path: Path, entries: list[dict[str, Any]]) -> Path:
    path = tmp_path / "registry.json"
    path.write_text(json.dumps({"schema_version": 1, "entries": entries}, indent=2))
    return path


def test_the_packaged_registry_is_pinned_data() -> None:
    registry = load_registry()
    names = {e.name for e in registry.entries}
    assert {"llava-1.5-13b", "cd-rethink-llava-1.5-7b-greedy", "cd-rethink-llava-1.5-7b-sample", "dashb-paligemma-3b"} <= names
    assert sum(n.startswith("marine-") for n in names) == 2
    for e in registry.entries:
        assert re.match(r"^[0-9a-f]{40}$", e.commit)
        assert all(HEX64.match(f.sha256) for _, f in e.files())
        # a dataset version halluprobe pins, or the fingerprint of the authors' own draw
        assert (e.dataset in DATASETS and e.version in DATASETS[e.dataset]) or e.fingerprint is not None
    dashb = next(e for e in registry.entries if e.name == "dashb-paligemma-3b")
    assert any("NOT reproduced" in n for n in dashb.notes)  # the leaderboard row the file does not give
    board = [f for f in dashb.published if f.path == "benchmark.md"]
    assert {f.metric: f.value for f in board} == {"dashb_mean": 62.0, "dashb_tnr": 26.4, "dashb_tpr": 97.7}


def test_literature_list_runs_offline() -> None:
    result = runner.invoke(app, ["literature", "list"])
    assert result.exit_code == 0, result.output
    for name in ("llava-1.5-13b", "cd-rethink-llava-1.5-7b-sample", "marine-llava-1.5-7b-guidance-0.7", "dashb-paligemma-3b"):
        assert f"| {name} |" in result.output
    assert "| llava-1.5-13b |" in result.output and "auditable" in result.output
    as_json = runner.invoke(app, ["literature", "list", "--json"])
    assert json.loads(as_json.output)["schema_version"] == 1


def test_audit_all_recomputes_the_published_figure(tmp_path: Path, toy_coco: Path) -> None:
    entry, mean_f1 = _llava_fixture(toy_coco)
    published = round(100 * mean_f1, 1)
    entry["published"] = [
        {"metric": "f1_macro", "value": published, "scale": 100, "decimals": 1, "where": "MODEL_ZOO row | POPE", "path": "docs/MODEL_ZOO.md"},
        {"metric": "f1_macro", "value": published + 2.0, "scale": 100, "decimals": 1, "where": "a misquote", "path": "README.md"},
    ]
    marine = {**entry, "name": "marine-toy", "format": "marine", "published": []}  # a format of another build
    reg = _registry(tmp_path, [entry, marine])
    out = tmp_path / "audit"
    result = runner.invoke(app, ["literature", "audit", "--all", "--out", str(out), "--registry", str(reg), "--resamples", "200"])
    assert result.exit_code == 0, result.output
    data = json.loads((out / "literature.json").read_text())
    llava = data["entries"][0]
    assert llava["status"] == "audited" and llava["answers"] == 24
    first, second = llava["figures"]
    assert first["authors"] == pytest.approx(100 * mean_f1) and first["equal"] is True
    assert second["equal"] is False and second["difference"] == pytest.approx(100 * mean_f1 - published - 2.0)
    lo, hi = first["ci"]
    assert lo <= first["authors"] <= hi
    # strict reads "I don't know" / "Not sure" as unknown (wrong here); LLaVA's rule as yes / no
    assert first["strict"] != first["authors"] and llava["rule_changes"] > 0
    # the labels are the pinned dataset the entry names, told by content fingerprint
    assert llava["questions_are"] == {s: [f"coco-toy@toy:coco_pope_{s}.json"] for s in ("random", "popular", "adversarial")}
    md = (out / "literature.md").read_text()
    assert md.startswith("<!-- halluprobe literature audit: halluprobe=")
    assert "| equal |" in md and "differs by" in md and "MODEL_ZOO row \\| POPE" in md
    assert "parser confound: text:pope and text:strict classify" in md
    if "marine" not in FORMATS:  # the marine importer lives on another branch until merged
        assert data["entries"][1]["status"].startswith("not audited: needs the import format 'marine'")
    # the files were fetched into OUT, pinned; a second audit refuses to replace the first
    assert (out / "llava-toy" / "files" / "questions" / "llava_pope_test.jsonl").is_file()
    again = runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(out), "--registry", str(reg)])
    assert again.exit_code == 2 and "--overwrite" in again.output
    forced = runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(out), "--registry", str(reg), "--overwrite", "--resamples", "50"])
    assert forced.exit_code == 0, forced.output


def test_audit_bad_input_is_exit_2_one_line(tmp_path: Path, toy_coco: Path) -> None:
    entry, _ = _llava_fixture(toy_coco)
    # labels that are not the dataset version the entry names: refused, naming the file
    other = _registry(tmp_path, [{**entry, "dataset": "coco", "version": "2023-08-10"}])
    wrong = runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(tmp_path / "w"), "--registry", str(other)])
    assert wrong.exit_code == 2 and wrong.output.count("\n") == 1
    assert "labels match no fingerprint of coco@2023-08-10 (they are: coco-toy@toy:coco_pope_" in wrong.output
    # an own draw pinned by fingerprint: questions with another fingerprint are refused
    own = _registry(tmp_path, [{**entry, "dataset": "coco", "version": None, "fingerprint": "0" * 64}])
    drift = runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(tmp_path / "d"), "--registry", str(own)])
    assert drift.exit_code == 2 and drift.output.count("\n") == 1 and "match no fingerprint the registry pins" in drift.output
    from halluprobe.benchmarks.fingerprint import content_fingerprint
    from halluprobe.benchmarks.pope import read_questions

    fp = content_fingerprint(read_questions(toy_coco / POPE_REPO / POPE_COMMIT / "output/coco/coco_pope_random.json"))
    pinned = _registry(tmp_path, [{**entry, "dataset": "coco", "version": None, "fingerprint": fp}])
    fits = runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(tmp_path / "f"), "--registry", str(pinned), "--resamples", "20"])
    assert fits.exit_code == 0, fits.output
    entry["answers"][0]["sha256"] = "a" * 64  # the registry and the file disagree
    reg = _registry(tmp_path, [entry])
    one = runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(tmp_path / "a"), "--registry", str(reg)])
    assert one.exit_code == 2
    assert one.output.count("\n") == 1 and "sha256 mismatch" in one.output and "llava-v1.5-13b.jsonl" in one.output
    # --all goes on and lists the entry with its reason
    every = runner.invoke(app, ["literature", "audit", "--all", "--out", str(tmp_path / "b"), "--registry", str(reg)])
    assert every.exit_code == 0 and "not audited: " in (tmp_path / "b" / "literature.md").read_text()
    unknown = runner.invoke(app, ["literature", "audit", "nope", "--out", str(tmp_path / "c"), "--registry", str(reg)])
    assert unknown.exit_code == 2 and "no registry entry 'nope'" in unknown.output
    neither = runner.invoke(app, ["literature", "audit", "--out", str(tmp_path / "c")])
    assert neither.exit_code == 2 and "NAME or --all" in neither.output
    broken = _registry(tmp_path, [{**entry, "published": [{"metric": "auc", "value": 1, "scale": 1, "decimals": 1, "where": "x", "path": "y"}]}])
    bad = runner.invoke(app, ["literature", "list", "--registry", str(broken)])
    assert bad.exit_code == 2 and "unknown metric 'auc'" in bad.output and str(broken) in bad.output
