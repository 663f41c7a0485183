"""Imports of LLaVA and generic answers, POPE versions, and `score --answers` pairing.

Every file is built here from the formats' documented fields; confusion counts are recomputed
independently (LLaVA's eval_pope.py rule and pairing, re-implemented below from its description).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.cli import app

SUFFIX = "\nAnswer the question using a single word or phrase."
OFFSET = {"adversarial": 0, "random": 10_000_000, "popular": 20_000_000}
ANSWERS = ["Yes", "No", "yes", "No, there is not.", "I cannot tell", "Yes.", "no", "There is no cat"]


def write_lines(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def make_labels(folder: Path, *, random_n: int = 8, misspell: bool = False, shift_ids: int = 0) -> dict[str, list[dict]]:
    """Three small POPE splits sharing images; ``random_n`` < 8 drops random questions (an older
    version), ``shift_ids`` renumbers them, ``misspell`` writes "imange" like the 2023 files."""
    folder.mkdir(parents=True, exist_ok=True)
    objects = {"random": ["cat", "dog", "car", "tree"], "popular": ["cat", "person", "car", "chair"],
               "adversarial": ["cat", "bowl", "car", "fork"]}  # fmt: skip
    splits: dict[str, list[dict]] = {}
    for split, objs in objects.items():
        rows = []
        for i in range(8):
            image = f"COCO_val2014_{i // 2:012d}.jpg"
            obj = objs[i % 4]
            word = "imange" if misspell and i % 3 == 0 else "image"
            rows.append({"question_id": i + 1, "image": image, "text": f"Is there a {obj} in the {word}?",
                         "label": "yes" if i % 2 == 0 else "no"})  # fmt: skip
        if split == "random":
            rows = rows[:random_n]
            for r in rows:
                r["question_id"] += shift_ids
        splits[split] = rows
        write_lines(folder / f"coco_pope_{split}.json", rows)
    return splits


def make_llava(folder: Path, splits: dict[str, list[dict]]) -> tuple[Path, Path]:
    questions, answers = [], []
    n = 0
    for split in ("adversarial", "random", "popular"):
        for r in splits[split]:
            qid = OFFSET[split] + r["question_id"]
            text = r["text"] + SUFFIX
            questions.append({"question_id": qid, "image": r["image"], "text": text, "category": split})
            answers.append({"question_id": qid, "prompt": text, "text": ANSWERS[n % len(ANSWERS)],
                            "answer_id": f"a{n}", "model_id": "llava-test", "metadata": {}})  # fmt: skip
            n += 1
    return write_lines(folder / "answers.jsonl", answers), write_lines(folder / "llava_pope_test.jsonl", questions)


def llava_eval_counts(answers: Path, questions: Path, labels_dir: Path) -> dict[str, tuple[int, int, int, int]]:
    """LLaVA's eval_pope.py as its source describes it: per category, answers in file order
    paired by position with the labels file; first sentence, commas removed, split on ' ',
    no when 'No'/'not'/'no' is a word; counts (TP, FP, TN, FN)."""
    cats = {json.loads(l)["question_id"]: json.loads(l)["category"] for l in questions.read_text().splitlines()}
    rows = [json.loads(l) for l in answers.read_text().splitlines()]
    out = {}
    for split in ("random", "popular", "adversarial"):
        labels = [json.loads(l)["label"] for l in (labels_dir / f"coco_pope_{split}.json").read_text().splitlines()]
        mine = [r["text"] for r in rows if cats[r["question_id"]] == split]
        tp = fp = tn = fn = 0
        for text, label in zip(mine, labels):
            first = text.split(".")[0] if "." in text else text
            words = first.replace(",", "").split(" ")
            pred = "no" if ("No" in words or "not" in words or "no" in words) else "yes"
            tp += pred == "yes" and label == "yes"
            fp += pred == "yes" and label == "no"
            tn += pred == "no" and label == "no"
            fn += pred == "no" and label == "yes"
        out[split] = (tp, fp, tn, fn)
    return out


def score_json(run: Path, readout: str) -> dict:
    result = CliRunner().invoke(app, ["score", str(run), "--readout", readout, "--json", "--resamples", "0"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def counts(report: dict, split: str) -> tuple[int, int, int, int]:
    m = report["splits"][split]
    return (m["tp"], m["fp"], m["tn"], m["fn"])


def import_llava(tmp_path: Path, answers: Path, questions: Path, labels_dir: Path, out: str = "run") -> object:
    args = ["import", "llava", str(answers), "--questions", str(questions), "--out", str(tmp_path / out)]
    for split in ("random", "popular", "adversarial"):
        args += ["--labels", str(labels_dir / f"coco_pope_{split}.json")]
    return CliRunner().invoke(app, args)


def test_llava_import_scores_like_llavas_own_rule(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels", misspell=True)
    answers, questions = make_llava(tmp_path, splits)
    result = import_llava(tmp_path, answers, questions, tmp_path / "labels")
    assert result.exit_code == 0, result.output
    report = score_json(tmp_path / "run", "text:pope")
    expected = llava_eval_counts(answers, questions, tmp_path / "labels")
    for split in ("random", "popular", "adversarial"):
        assert counts(report, split) == expected[split]
    header = json.loads((tmp_path / "run" / "run.json").read_text())
    assert header["backend"] == "import:llava" and header["token_sets"] is None and header["model"] == "llava-test"
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["imported"]["total"] == 24 and manifest["skipped"] == []
    # any text rule applies at score time; audit and report read the imported run
    assert score_json(tmp_path / "run", "text:strict")["splits"]["random"]["unknown"] > 0
    audit = CliRunner().invoke(app, ["audit", str(tmp_path / "run"), "--headline", "text:pope", "--resamples", "5"])
    assert audit.exit_code == 0, audit.output
    written = json.loads((tmp_path / "run" / "audit.json").read_text())
    assert "text:yorn" in written["readouts"]
    # no first-token outputs: no token diagnostic, rather than a made-up 0% offset rate
    assert written["offset_rate"] is None and "argmax outside" not in audit.output
    report = CliRunner().invoke(app, ["report", str(tmp_path / "run"), "--headline", "text:pope", "--resamples", "5",
                                      "--out", str(tmp_path / "r.html")])  # fmt: skip
    assert report.exit_code == 0, report.output


def test_llava_answers_of_an_older_version_pair_by_text_not_position(tmp_path: Path) -> None:
    old = make_labels(tmp_path / "old", random_n=6, shift_ids=0)  # the answers were made on this one
    new_dir = tmp_path / "new"
    make_labels(new_dir)  # 8 random questions
    # the new random file lists the questions in another order (its ids differ from the old ones)
    rows = [json.loads(l) for l in (new_dir / "coco_pope_random.json").read_text().splitlines()]
    rows = rows[::-1]
    for i, r in enumerate(rows, start=1):
        r["question_id"] = i
    write_lines(new_dir / "coco_pope_random.json", rows)
    answers, questions = make_llava(tmp_path, old)
    result = import_llava(tmp_path, answers, questions, new_dir)
    assert result.exit_code == 0, result.output
    assert "2 labelled questions have no answer" in result.output
    by_text = score_json(tmp_path / "run", "text:pope")
    right = llava_eval_counts(answers, questions, tmp_path / "old")["random"]
    wrong = llava_eval_counts(answers, questions, new_dir)["random"]  # positional pairing with new labels
    assert counts(by_text, "random") == right != wrong


def test_llava_question_not_in_labels_is_one_line_exit_2(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    splits["popular"][3]["text"] = "Is there a giraffe in the image?"
    answers, questions = make_llava(tmp_path, splits)
    result = import_llava(tmp_path, answers, questions, tmp_path / "labels")
    assert result.exit_code == 2
    assert "answers.jsonl:20:" in result.output and "not among the popular labels" in result.output


def test_llava_split_without_labels_is_listed_in_the_manifest(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    answers, questions = make_llava(tmp_path, splits)
    args = ["import", "llava", str(answers), "--questions", str(questions), "--out", str(tmp_path / "run"),
            "--labels", str(tmp_path / "labels" / "coco_pope_random.json")]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["imported"]["total"] == 8 and len(manifest["skipped"]) == 16
    assert all("no labels file for split" in s["reason"] for s in manifest["skipped"])


def test_duplicate_answer_is_refused(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    answers, questions = make_llava(tmp_path, splits)
    lines = answers.read_text().splitlines()
    answers.write_text("\n".join([*lines, lines[0]]) + "\n")
    result = import_llava(tmp_path, answers, questions, tmp_path / "labels")
    assert result.exit_code == 2 and "duplicate answer to adversarial question 1" in result.output


def test_detect_format_and_undetectable(tmp_path: Path) -> None:
    from halluprobe.errors import InputError
    from halluprobe.imports.formats import detect_format

    splits = make_labels(tmp_path / "labels")
    answers, _ = make_llava(tmp_path, splits)
    assert detect_format(answers) == "llava"
    odd = write_lines(tmp_path / "odd.jsonl", [{"foo": 1}])
    with pytest.raises(InputError, match="cannot tell the answers format"):
        detect_format(odd)


# -- score --answers ---------------------------------------------------------------------------


def answers_lines(rows: list[dict], *, ids: bool = True, split: str | None = None) -> list[dict]:
    out = []
    for n, r in enumerate(rows):
        line = {"question": r["text"], "answer": ANSWERS[n % len(ANSWERS)]}
        if ids:
            line["question_id"] = r["question_id"]
        if split:
            line["split"] = split
        out.append(line)
    return out


def score_answers(answers: Path, *labels: Path) -> object:
    args = ["score", "--answers", str(answers), "--rule", "pope", "--json", "--resamples", "0"]
    for path in labels:
        args += ["--labels", str(path)]
    return CliRunner().invoke(app, args)


def test_score_answers_several_labels_and_split_keys(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    rows = [line for s in ("random", "popular", "adversarial") for line in answers_lines(splits[s], split=s)]
    answers = write_lines(tmp_path / "a.jsonl", rows)
    labels = [tmp_path / "labels" / f"coco_pope_{s}.json" for s in ("random", "popular", "adversarial")]
    result = score_answers(answers, *labels)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    for split in ("random", "popular", "adversarial"):
        tp = fp = tn = fn = 0
        for r, a in zip(splits[split], answers_lines(splits[split])):
            first = a["answer"].split(".")[0]
            pred = "no" if {"No", "not", "no"} & set(first.replace(",", "").split(" ")) else "yes"
            tp += (pred, r["label"]) == ("yes", "yes")
            fp += (pred, r["label"]) == ("yes", "no")
            tn += (pred, r["label"]) == ("no", "no")
            fn += (pred, r["label"]) == ("no", "yes")
        assert counts(report, split) == (tp, fp, tn, fn)


def test_score_answers_refuses_mixed_ids(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    rows = answers_lines(splits["random"])
    del rows[3]["question_id"]
    result = score_answers(write_lines(tmp_path / "a.jsonl", rows), tmp_path / "labels" / "coco_pope_random.json")
    assert result.exit_code == 2 and "a.jsonl:4:" in result.output and "only 7 of 8 lines have a question_id" in result.output


@pytest.mark.parametrize("bad", [True, "1", 1.0])
def test_score_answers_refuses_non_integer_ids(tmp_path: Path, bad: object) -> None:
    splits = make_labels(tmp_path / "labels")
    rows = answers_lines(splits["random"])
    rows[0]["question_id"] = bad
    result = score_answers(write_lines(tmp_path / "a.jsonl", rows), tmp_path / "labels" / "coco_pope_random.json")
    assert result.exit_code == 2 and "a.jsonl:1: question_id must be an integer" in result.output


def test_score_answers_refuses_another_splits_questions(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    # the adversarial answers, ids 1..8 as every split has, scored against the random labels
    rows = answers_lines(splits["adversarial"])
    result = score_answers(write_lines(tmp_path / "a.jsonl", rows), tmp_path / "labels" / "coco_pope_random.json")
    assert result.exit_code == 2 and "with this question text is in no labels file" in result.output


def test_score_answers_ambiguous_split_is_refused(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    rows = answers_lines(splits["random"])  # question 1 ("cat", image 0) is in every split
    labels = [tmp_path / "labels" / f"coco_pope_{s}.json" for s in ("random", "popular")]
    result = score_answers(write_lines(tmp_path / "a.jsonl", rows), *labels)
    assert result.exit_code == 2 and "fits the splits random, popular" in result.output


def test_score_answers_by_order_still_works(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    rows = answers_lines(splits["random"], ids=False)
    result = score_answers(write_lines(tmp_path / "a.jsonl", rows), tmp_path / "labels" / "coco_pope_random.json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["splits"]["random"]["n"] == 8


# -- versions -------------------------------------------------------------------------------------


def test_versions_pins_and_names() -> None:
    from halluprobe.benchmarks.sources import POPE_FILES, POPE_VERSIONS, pope_version

    assert pope_version("current").files == POPE_FILES
    assert pope_version("2023-08").counts["random"] == 2910
    assert pope_version("2023-08").files["coco_pope_random.json"].startswith("c16b65d2")
    assert [v.counts["random"] for v in POPE_VERSIONS.values()] == [2910, 3000, 3000, 3000]


def test_versions_by_count_and_spelling() -> None:
    from halluprobe.imports.answers import versions_by_counts

    texts = ["Is there a cat in the imange?"] * 144 + ["Is there a cat in the image?"] * (2910 - 144)
    assert versions_by_counts("random", texts) == ["2023-08-10"]
    assert versions_by_counts("adversarial", ["x imange"] * 57 + ["x"] * 2943) == ["2023-10-09"]


def test_question_normalisation() -> None:
    from halluprobe.benchmarks.versions import normalise_question, questions_digest

    assert normalise_question("Is there a cat in the imange?" + SUFFIX) == "is there a cat in the image?"
    assert questions_digest([("a.jpg", "Is there a cat in the imange?")]) == questions_digest([("a.jpg", "is there a  cat in the image?")])


def test_data_pope_version_fetches_at_its_commit_and_checks_the_pin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import http.server
    import threading

    requested: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            requested.append(self.path)
            body = b'{"question_id": 1}\n'
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HALLUPROBE_POPE_URL", f"http://127.0.0.1:{server.server_address[1]}/")
    try:
        result = CliRunner().invoke(app, ["data", "pope", "--version", "2023-08", "--out", str(tmp_path / "out")])
    finally:
        server.shutdown()
    assert result.exit_code == 2  # the download and its pin disagree: bad input (issue 22)
    assert "expected c16b65d2df6d70bb0814c8a4375833d39cdb09928fd936d3fc546491efa37f35" in result.output
    assert requested[0] == "/e3e39262c85a6a83f26cf5094022a782cb0df58d/coco_pope_random.json"
    bad = CliRunner().invoke(app, ["data", "pope", "--version", "1999", "--out", str(tmp_path / "out")])
    assert bad.exit_code == 2 and "unknown POPE version '1999'" in bad.output


# -- text rules naming their version ------------------------------------------------------------


NUMBERED = "".join(f"{i}. The object {i} is here.\n" for i in range(1, 17)) + "So the answer is no."


def test_yorn_current_and_2024_period_rules() -> None:
    from halluprobe.readouts.text import TEXT_RULES, parse_text, yorn, yorn_2024

    # 33 periods: 2024 removes the 32 first (the list numbers' too) and keeps "no." -> unknown;
    # since 2025-05-13 the periods after digits stay and do not count, so "no." loses its period
    assert yorn_2024(NUMBERED) == "unknown"
    assert yorn(NUMBERED) == "no"
    assert parse_text("yorn@2024", NUMBERED) == "unknown"
    assert "yorn@2024" not in TEXT_RULES  # not in the default list a new run records
    assert yorn("Yes. 2.5 cats") == yorn_2024("Yes. 2.5 cats") == "yes"


def test_score_with_an_alternative_rule_version(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    answers, questions = make_llava(tmp_path, splits)
    rows = [json.loads(l) for l in answers.read_text().splitlines()]
    rows[0]["text"] = NUMBERED  # adversarial question 1, label yes
    write_lines(answers, rows)
    assert import_llava(tmp_path, answers, questions, tmp_path / "labels").exit_code == 0
    new, old = score_json(tmp_path / "run", "text:yorn"), score_json(tmp_path / "run", "text:yorn@2024")
    assert old["splits"]["adversarial"]["unknown"] == new["splits"]["adversarial"]["unknown"] + 1
    assert new["splits"]["adversarial"]["fn"] == old["splits"]["adversarial"]["fn"] + 1


def test_score_answers_text_mismatch_names_the_versions(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    rows = answers_lines(splits["random"], ids=False)
    rows[2]["question"] = "Is there a giraffe in the image?"
    result = score_answers(write_lines(tmp_path / "a.jsonl", rows), tmp_path / "labels" / "coco_pope_random.json")
    assert result.exit_code == 2
    assert "a.jsonl:3: question text differs from the random labels' question 3" in result.output
    assert "labels are POPE version random: unpublished" in result.output


def test_a_run_records_the_pope_version_of_its_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from test_pipeline import _make_world, _run_args

    from halluprobe.benchmarks import sources
    from halluprobe.rundir import sha256_file

    world = _make_world(tmp_path)
    # pin the toy random file as a published version, for this test only
    pinned = sources.PopeVersion(
        name="toy", commit="0" * 40, date="2023-01-01", files={"toy_pope_random.json": sha256_file(world["random"])},
        counts={}, misspelled={}, questions_digest={},
    )  # fmt: skip
    monkeypatch.setitem(sources.POPE_VERSIONS, "toy", pinned)
    result = CliRunner().invoke(app, _run_args(world, tmp_path / "run"))
    assert result.exit_code == 0, result.output
    header = json.loads((tmp_path / "run" / "run.json").read_text())
    same = sha256_file(world["adversarial"]) == sha256_file(world["random"])  # the toy splits may be one file's copies
    assert header["pope_versions"] == {"random": ["toy"], "adversarial": ["toy"] if same else []}
    monkeypatch.delitem(sources.POPE_VERSIONS, "toy")
    assert CliRunner().invoke(app, _run_args(world, tmp_path / "run2")).exit_code == 0
    assert json.loads((tmp_path / "run2" / "run.json").read_text())["pope_versions"] == {"random": [], "adversarial": []}


def test_an_import_records_the_labels_version(tmp_path: Path) -> None:
    splits = make_labels(tmp_path / "labels")
    answers, questions = make_llava(tmp_path, splits)
    assert import_llava(tmp_path, answers, questions, tmp_path / "labels").exit_code == 0
    header = json.loads((tmp_path / "run" / "run.json").read_text())
    assert header["pope_versions"] == {"adversarial": [], "random": [], "popular": []}  # toy labels: unpublished
    assert header["backend_info"]["pope_version"]["questions"] == {"adversarial": [], "random": [], "popular": []}


def test_an_import_reads_each_answers_file_once_and_hashes_each_labels_file_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Format detection's read is the reader's, and its bytes give the header's sha256; the
    labels' sha256 (POPE version and run header) is computed once."""
    import hashlib

    import halluprobe.imports.common as common

    splits = make_labels(tmp_path / "labels")
    rows = [line for s in ("random", "popular") for line in answers_lines(splits[s], split=s)]
    answers = write_lines(tmp_path / "a.jsonl", rows)
    labels = [tmp_path / "labels" / f"coco_pope_{s}.json" for s in ("random", "popular")]
    reads: dict[str, int] = {}
    hashes: dict[str, int] = {}
    read_bytes, sha256_file = Path.read_bytes, common.sha256_file

    def counting_read(path: Path) -> bytes:
        reads[path.name] = reads.get(path.name, 0) + 1
        return read_bytes(path)

    def counting_hash(path: str | Path) -> str:
        hashes[Path(path).name] = hashes.get(Path(path).name, 0) + 1
        return sha256_file(path)

    monkeypatch.setattr(Path, "read_bytes", counting_read)
    monkeypatch.setattr(common, "sha256_file", counting_hash)
    args = ["import", str(answers), "--out", str(tmp_path / "run")] + [a for p in labels for a in ("--labels", str(p))]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "answers" in result.output  # detected as the generic format
    assert reads["a.jsonl"] == 1 and "a.jsonl" not in hashes
    assert hashes == {"coco_pope_random.json": 1, "coco_pope_popular.json": 1}
    monkeypatch.undo()
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["backend_info"]["sources"] == {str(answers): hashlib.sha256(answers.read_bytes()).hexdigest()}
    assert info["benchmarks"] == {s: hashlib.sha256(p.read_bytes()).hexdigest() for s, p in zip(("random", "popular"), labels)}
