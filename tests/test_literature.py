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
    from halluprobe.literature.audit import missing_capability

    assert [e.name for e in registry.entries if missing_capability(e) is not None] == []  # every entry auditable here
    assert {e.split for e in registry.entries if e.format == "marine"} == {"adversarial"}
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
    other_rule = {**entry, "name": "other-rule", "parser": {"rule": "nosuchrule", "source": "elsewhere"}, "published": []}
    reg = _registry(tmp_path, [entry, other_rule])
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
    # an entry this build cannot parse is listed with why, not given a number
    assert data["entries"][1]["status"] == "not audited: needs the text rule text:nosuchrule, not in this build"
    assert "| other-rule | - | - | not audited: needs the text rule text:nosuchrule" in md
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


# --- fixtures shaped like the other registered entries, built from their documented fields ---

CD_REPO, CD_COMMIT = "ustc-hyin/cd_rethink", "8" * 40
MARINE_REPO, MARINE_COMMIT = "Linxi-ZHAO/MARINE", "9" * 40
DASHB_REPO, DASHB_COMMIT = "YanNeu/DASH-B", "0" * 40
AWKWARD = ["Yes", "No", "I don't know", "Not sure.", "There isn't any", "No, but there is a cat.", "Yes, there is no cat.", "nothing"]


def _vcd_rule(text: str, label: str) -> str:
    """cd_rethink eval/pope_eval_base.py (VCD's), transcribed: a yes-labelled answer is a TP iff
    'yes' is in it, a no-labelled one a TN iff 'no' is; returned as the decision those counts mean."""
    answer = text.strip().lower()
    if label == "yes":
        return "yes" if "yes" in answer else "no"
    return "no" if "no" in answer else "yes"


def _marine_rule(text: str) -> str | None:
    """MARINE eval/eval_pope.py load_predictions, transcribed: blank -> left out (None)."""
    if not text.strip():
        return None
    return "no" if any(w.lower() in {"no", "not"} for w in text.split(".")[0].split()) else "yes"


def _dashb_rule(response: str) -> str | None:
    """DASH-B src/eval_utils.py compute_answer, transcribed."""
    if "yes" in response.lower():
        return "yes"
    return "no" if "no" in response.lower() else None


def _confusion(pairs: list[tuple[str, str]]) -> dict[str, float]:
    tp = sum(lab == "yes" and dec == "yes" for lab, dec in pairs)
    fp = sum(lab == "no" and dec == "yes" for lab, dec in pairs)
    tn = sum(lab == "no" and dec == "no" for lab, dec in pairs)
    fn = sum(lab == "yes" and dec == "no" for lab, dec in pairs)
    return {"f1": 2 * tp / (2 * tp + fp + fn), "accuracy": (tp + tn) / len(pairs), "yes_ratio": (tp + fp) / len(pairs)}


def _pope_records(n: int, tag: int, misspell: int | None = None) -> list[dict[str, Any]]:
    return [
        {"question_id": i + 1, "image": f"COCO_val2014_{(i // 2) + 100 * tag:012d}.jpg",
         "text": f"Is there a {('dog', 'cat', 'car', 'cup', 'bus')[(i + tag) % 5]} in the {'imange' if i == misspell else 'image'}?",
         "label": "yes" if (i + tag) % 2 == 0 else "no"}
        for i in range(n)
    ]  # fmt: skip


def _cd_rethink_fixture(root: Path, decoding: str) -> tuple[dict[str, Any], dict[str, float]]:
    """VCD-style answer lines (question_id, prompt, text, model_id, image, metadata), one split per
    file, the authors' labels copies beside them, no LLaVA question file; nothing published."""
    answers, labels, per_split = [], [], []
    for s_i, split in enumerate(("random", "popular", "adversarial")):
        recs = _pope_records(8, s_i, misspell=3 if split == "adversarial" else None)
        labels.append(_put(root, CD_REPO, CD_COMMIT, f"data/coco/coco_pope_{split}.json", "".join(json.dumps(r) + "\n" for r in recs).encode()))
        lines, pairs = [], []
        for i, r in enumerate(recs):
            text = AWKWARD[(i + 2 * s_i + 3 * (decoding == "sample")) % len(AWKWARD)]
            lines.append({"question_id": r["question_id"], "prompt": r["text"], "text": text, "model_id": "llava-v1.5-7b", "image": r["image"], "metadata": {}})
            pairs.append((r["label"], _vcd_rule(text, r["label"])))
        path = f"outputs/pope/baseline/llava-7b-coco-{split}-{decoding}.jsonl"
        answers.append(_put(root, CD_REPO, CD_COMMIT, path, "".join(json.dumps(x) + "\n" for x in lines).encode()))
        per_split.append(_confusion(pairs))
    entry = {
        "name": f"cd-rethink-toy-{decoding}", "model": "LLaVA-1.5-7B", "decoding": decoding, "repository": CD_REPO, "commit": CD_COMMIT,
        "format": "llava", "answers": answers, "questions": None, "labels": labels, "dataset": "coco-vcd-toy", "version": "toy",
        "parser": {"rule": "vcd", "source": "eval/pope_eval_base.py"}, "published": [], "notes": ["nothing published"],
    }  # fmt: skip
    macro = {f"{k}_macro": sum(m[k] for m in per_split) / len(per_split) for k in ("f1", "accuracy", "yes_ratio")}
    return entry, macro


def _marine_fixture(root: Path) -> tuple[list[dict[str, Any]], dict[str, dict[str, float]], str]:
    """MARINE's shape: answers keyed by image_id with '<image>\\n' prompts, labels an array keyed
    'id' (no text), its own adversarial draw as a POPE file, scores shipped in pope_eval.jsonl.
    Two guidance strengths share the draw and the labels; one answer is blank (left out)."""
    from halluprobe.benchmarks.fingerprint import content_fingerprint
    from halluprobe.benchmarks.pope import read_questions

    recs = _pope_records(10, 7, misspell=4)
    draw_bytes = "".join(json.dumps(r) + "\n" for r in recs).encode()
    draw = _put(root, MARINE_REPO, MARINE_COMMIT, "data/org_qa/pope/coco/coco_pope_adversarial.json", draw_bytes)
    label_bytes = json.dumps([{"id": r["question_id"], "image": r["image"], "label": r["label"]} for r in recs], indent=4).encode()
    label = _put(root, MARINE_REPO, MARINE_COMMIT, "data/marine_qa/label/pope_toy_label.json", label_bytes)
    fingerprint = content_fingerprint(read_questions(root / MARINE_REPO / MARINE_COMMIT / draw["path"]))
    entries, scores = [], {}
    for g_i, guidance in enumerate(("0.0", "0.7")):
        lines, pairs = [], []
        for i, r in enumerate(recs):
            text = "" if (g_i, i) == (1, 5) else AWKWARD[(i + 3 * g_i) % len(AWKWARD)] + " The image shows a table."
            lines.append({"question_id": r["question_id"], "image_id": r["image"], "prompt": "<image>\n" + r["text"], "text": text,
                          "answer_id": f"x{i}", "model_id": "llava-1.5-7b-hf", "metadata": ""})  # fmt: skip
            decision = _marine_rule(text)
            if decision is not None:
                pairs.append((r["label"], decision))
        scores[guidance] = {**_confusion(pairs), "answers": len(recs), "scored": len(pairs)}
        answers = _put(root, MARINE_REPO, MARINE_COMMIT, f"output/answers/toy-guidance_strength{guidance}.jsonl", "".join(json.dumps(x) + "\n" for x in lines).encode())
        where = f"output/answers/eval/pope_eval.jsonl, line for guidance_strength{guidance}"
        entries.append({
            "name": f"marine-toy-{guidance}", "model": "LLaVA-1.5-7B", "decoding": f"guidance {guidance}", "repository": MARINE_REPO,
            "commit": MARINE_COMMIT, "format": "marine", "answers": [answers], "questions": draw, "labels": [label],
            "dataset": "coco", "version": None, "split": "adversarial", "fingerprint": fingerprint,
            "parser": {"rule": "marine", "source": "eval/eval_pope.py", "unknown": "drop"},
            "published": [  # as the authors' script rounds them
                {"metric": "f1", "value": round(scores[guidance]["f1"], 4), "scale": 1, "decimals": 4, "where": where, "path": "output/answers/eval/pope_eval.jsonl"},
                {"metric": "accuracy", "value": round(scores[guidance]["accuracy"], 4), "scale": 1, "decimals": 4, "where": where, "path": "output/answers/eval/pope_eval.jsonl"},
            ],
            "notes": ["MARINE's own draw"],
        })  # fmt: skip
    return entries, scores, fingerprint


def _dashb_fixture(root: Path) -> tuple[dict[str, Any], dict[str, float]]:
    """DASH-B's answers array ({img_id, object_name, gt, response, answer}, pretty-printed): the
    positive file names repeat across objects. Published: the shipped results file (exact) and a
    leaderboard row whose TPR and mean the file does not give (as the real row)."""
    objects = ("ant", "bee", "owl", "yak")
    rows, answered = [], []
    for o_i, obj in enumerate(objects):
        for j in range(6):
            gt = "no" if j < 3 else "yes"
            img = f"neg_{obj}_{j}.jpg" if gt == "no" else f"pos_{j}.jpg"  # pos_3.jpg under every object
            response = AWKWARD[(o_i + j) % len(AWKWARD)].lower()
            rows.append({"img_id": img, "object_name": obj, "gt": gt, "response": response, "answer": _dashb_rule(response)})
            answered.append((gt, _dashb_rule(response)))
    pos = [a == "yes" for g, a in answered if g == "yes"]
    neg = [a == "no" for g, a in answered if g == "no"]
    truth = {"TPR": sum(pos) / len(pos), "TNR": sum(neg) / len(neg), "ACC": sum(g == a for g, a in answered) / len(answered)}
    answers = _put(root, DASHB_REPO, DASHB_COMMIT, "output/Toy-3b_answers.json", json.dumps(rows, indent=4).encode())
    board_tpr = round(100 * truth["TPR"], 1) + 11.3
    board_mean = round((board_tpr + 100 * truth["TNR"]) / 2, 1)
    shipped = "output/Toy-3b_dash_b_results.json"
    entry = {
        "name": "dashb-toy", "model": "Toy-3b", "decoding": "the authors' evaluator", "repository": DASHB_REPO, "commit": DASHB_COMMIT,
        "format": "dashb", "answers": [answers], "questions": None, "labels": [], "dataset": "dashb", "version": "toy",
        "parser": {"rule": "dashb", "source": "src/eval_utils.py compute_answer"},
        "published": [
            {"metric": "dashb_tnr", "value": truth["TNR"], "scale": 1, "decimals": 4, "where": f"{shipped}, TNR", "path": shipped},
            {"metric": "dashb_tpr", "value": truth["TPR"], "scale": 1, "decimals": 4, "where": f"{shipped}, TPR", "path": shipped},
            {"metric": "dashb_accuracy", "value": truth["ACC"], "scale": 1, "decimals": 4, "where": f"{shipped}, ACC", "path": shipped},
            {"metric": "dashb_mean", "value": board_mean, "scale": 100, "decimals": 1, "where": "benchmark.md, row Toy-3b, ACC", "path": "benchmark.md"},
            {"metric": "dashb_tnr", "value": round(100 * truth["TNR"], 1), "scale": 100, "decimals": 1, "where": "benchmark.md, row Toy-3b, TNR", "path": "benchmark.md"},
            {"metric": "dashb_tpr", "value": board_tpr, "scale": 100, "decimals": 1, "where": "benchmark.md, row Toy-3b, TPR", "path": "benchmark.md"},
        ],
        "notes": [],
    }  # fmt: skip
    return entry, {**truth, "board_tpr": board_tpr, "board_mean": board_mean}


def _pin_toy_dashb(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pinned dashb@toy in DASH-B's {source: {object: [file]}} files: every negative of the
    DASH-B fixture, but only pos_3.jpg and pos_4.jpg of 'ant' and 'bee' among its positives."""
    from halluprobe.benchmarks.datasets import DatasetVersion, SourceFile

    neg = {"coco": {obj: [f"neg_{obj}_{j}.jpg" for j in range(3)] for obj in ("ant", "bee", "owl", "yak")}}
    pos = {"objects365": {obj: ["pos_3.jpg", "pos_4.jpg"] for obj in ("ant", "bee")}}
    sources = tuple(
        SourceFile(DASHB_REPO, "1" * 40, f"images/dash_benchmark_{kind}.json", _put(root, DASHB_REPO, "1" * 40, f"images/dash_benchmark_{kind}.json", json.dumps(data).encode())["sha256"])
        for kind, data in (("neg", neg), ("pos", pos))
    )
    version = DatasetVersion("dashb", "toy", "2025-03-31", "dashb", {"dashb.jsonl": sources}, {}, "user", {"dashb": 16})
    monkeypatch.setitem(DATASETS, "dashb", {"toy": version})


def test_audit_all_on_every_entry_shape(tmp_path: Path, toy_coco: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`literature list` and `literature audit --all` offline over fixtures shaped like every real
    entry (LLaVA's pooled answers, cd_rethink's per-split lines, MARINE's id-keyed labels and own
    draw, DASH-B's answers array), every figure recomputed here from the transcribed rules."""
    llava, llava_f1 = _llava_fixture(toy_coco)
    llava["published"] = [{"metric": "f1_macro", "value": round(100 * llava_f1, 1), "scale": 100, "decimals": 1, "where": "MODEL_ZOO", "path": "docs/MODEL_ZOO.md"}]
    greedy, greedy_macro = _cd_rethink_fixture(toy_coco, "greedy")
    sample, sample_macro = _cd_rethink_fixture(toy_coco, "sample")
    marines, marine_scores, fingerprint = _marine_fixture(toy_coco)
    dashb, truth = _dashb_fixture(toy_coco)
    _pin_toy_dashb(toy_coco, monkeypatch)
    reg = _registry(tmp_path, [llava, greedy, sample, *marines, dashb])

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
    marines, _, fingerprint = _marine_fixture(toy_coco)
    entry = marines[0]
    other = _registry(tmp_path, [{**entry, "fingerprint": "1" * 64}])
    drift = runner.invoke(app, ["literature", "audit", entry["name"], "--out", str(tmp_path / "a"), "--registry", str(other)])
    assert drift.exit_code == 2 and drift.output.count("\n") == 1
    assert f"coco_pope_adversarial.json: the question file's content fingerprint is {fingerprint}, the registry pins {'1' * 64}" in drift.output
    # the draw re-pinned with one question edited: its fingerprint is pinned, but the answers ask the old one
    draw = toy_coco / MARINE_REPO / MARINE_COMMIT / entry["questions"]["path"]
    edited = draw.read_text().replace("Is there a", "Is there any", 1)
    moved = _put(toy_coco, MARINE_REPO, "7" * 40, entry["questions"]["path"], edited.encode())
    from halluprobe.benchmarks.dataset_files import fingerprint_of_file

    repinned = _registry(tmp_path, [{**entry, "questions": moved, "fingerprint": fingerprint_of_file(toy_coco / MARINE_REPO / ("7" * 40) / moved["path"])}])
    wrong = runner.invoke(app, ["literature", "audit", entry["name"], "--out", str(tmp_path / "b"), "--registry", str(repinned)])
    assert wrong.exit_code == 2 and wrong.output.count("\n") == 1
    assert "toy-guidance_strength0.0.jsonl: answer to question_id 1 is not the pinned draw's (coco_pope_adversarial.json)" in wrong.output


def test_report_of_a_registered_answers_file_has_its_published_figures(tmp_path: Path, toy_coco: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`report` on a run imported from a pinned answers file (matched by the answers' sha256)
    adds the section: the figure, the authors' rule it needs, this run's value; others get none."""
    import halluprobe.literature.registry as registry_module

    entry, mean_f1 = _llava_fixture(toy_coco)
    published = round(100 * mean_f1, 1) + 0.4  # a misquote: the section must say by how much
    entry["published"] = [{"metric": "f1_macro", "value": published, "scale": 100, "decimals": 1, "where": "MODEL_ZOO row", "path": "docs/MODEL_ZOO.md"}]
    reg = _registry(tmp_path, [entry])
    out = tmp_path / "audit"
    assert runner.invoke(app, ["literature", "audit", "llava-toy", "--out", str(out), "--registry", str(reg), "--resamples", "50"]).exit_code == 0
    loaded = registry_module.load_registry(reg)
    monkeypatch.setattr(registry_module, "load_registry", lambda path=None: loaded)
    page = tmp_path / "report" / "r.html"
    result = runner.invoke(app, ["report", str(out / "llava-toy" / "run"), "--out", str(page), "--resamples", "50"])
    assert result.exit_code == 0, result.output
    md, html = page.with_suffix(".md").read_text(), page.read_text()
    assert "## Published figures" in md and "is the released answers file of `llava-toy`" in md
    assert "need the authors' parser `text:pope` with unreadable answers counted `wrong`" in md
    assert f"| f1_macro | MODEL_ZOO row | {published:.1f} | {100 * mean_f1:.2f} | differs by {100 * mean_f1 - published:+.2f} |" in md
    assert '<section id="literature">' in html and '<a href="#literature">Published figures</a>' in html
    assert html.index('<section id="literature">') < html.index("<footer>")
    # a run that is no registered file: no section
    other = tmp_path / "other"
    answers = toy_coco / REPO / COMMIT / entry["answers"][0]["path"]
    edited = answers.read_text().replace('"text": "Yes"', '"text": "yes"', 1)
    (tmp_path / "edited.jsonl").write_text(edited)
    labels = [str(toy_coco / POPE_REPO / POPE_COMMIT / f["path"]) for f in entry["labels"]]
    imported = runner.invoke(app, ["import", "llava", str(tmp_path / "edited.jsonl"), "--questions", str(toy_coco / REPO / COMMIT / entry["questions"]["path"]),
                                   *[a for p in labels for a in ("--labels", p)], "--out", str(other)])  # fmt: skip
    assert imported.exit_code == 0, imported.output
    plain = tmp_path / "report" / "plain.html"
    assert runner.invoke(app, ["report", str(other), "--out", str(plain), "--resamples", "50"]).exit_code == 0
    assert "Published figures" not in plain.read_text() and "Published figures" not in plain.with_suffix(".md").read_text()
