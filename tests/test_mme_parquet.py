"""MME from lmms-lab's parquet copy (the Hugging Face dataset lmms-lab/MME): the same lines,
numbering and scores as the release folder holding the same content, images written once and
inside the images folder, the subtask filters, and bad inputs as one line, exit 2.

The parquet files are made here with pyarrow in lmms-lab's schema (read from lmms-eval's mme
task): question_id (the image's path), question, answer (Yes/No), category (the subtask) and
image, a struct {bytes, path}.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image
from typer.testing import CliRunner

from halluprobe.benchmarks.mme import mme_questions, read_parquet, read_release_folder
from halluprobe.cli import app
from halluprobe.errors import InputError

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

runner = CliRunner()

_QUESTION = "Is there a {} in the image? Please answer yes or no."
# subtask -> [(image name, present objects, [(question object, answer)] x 2)], in the release's
# sorted order; artwork uses the release's images/ + questions_answers_YN/ shape
_CONTENT = {
    "existence": [("000000000001.jpg", ["cat"], [("cat", "Yes"), ("dog", "No")]), ("000000000002.jpg", ["bus"], [("bus", "Yes"), ("kite", "No")])],
    "count": [("000000000001.jpg", ["cat"], [("cat", "Yes"), ("horse", "No")]), ("000000000004.jpg", [], [("sheep", "Yes"), ("tie", "No")])],
    "position": [("000000000005.jpg", ["bench"], [("bench", "Yes"), ("clock", "No")])],
    "color": [("000000000007.jpg", ["car"], [("car", "Yes"), ("boat", "No")])],
    "artwork": [("10002.jpg", ["painting"], [("painting", "Yes"), ("statue", "No")]), ("10003.jpg", ["vase"], [("statue", "Yes"), ("vase", "No")])],
}
_IMAGE_TYPE = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def _png(seed: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (8, 8), (seed * 20 % 256, 10, 0)).save(buf, format="PNG")
    return buf.getvalue()


def _rows() -> list[dict[str, object]]:
    """lmms-lab's rows for _CONTENT, in file order (subtask by subtask, two rows per image)."""
    rows: list[dict[str, object]] = []
    for k, (subtask, images) in enumerate(_CONTENT.items()):
        for i, (name, _, qas) in enumerate(images):
            blob = _png(k * 10 + i)
            for obj, answer in qas:
                rows.append({"question_id": f"{subtask}/{name}", "question": _QUESTION.format(obj), "answer": answer, "category": subtask, "image": {"bytes": blob, "path": name}})
    return rows


def _write(path: Path, rows: list[dict[str, object]], drop: str | None = None) -> Path:
    columns = ["question_id", "question", "answer", "category", "image"]
    data = {c: pa.array([r[c] for r in rows], type=_IMAGE_TYPE if c == "image" else pa.string()) for c in columns if c != drop}
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table(data), path)
    return path


def _shards(tmp: Path) -> Path:
    """The dataset repository's layout: data/test-0000k-of-00002.parquet (the split falls mid-subtask
    on purpose: a subtask's lines continue across files in file order)."""
    rows = _rows()
    _write(tmp / "MME" / "data" / "test-00000-of-00002.parquet", rows[:5])
    _write(tmp / "MME" / "data" / "test-00001-of-00002.parquet", rows[5:])
    return tmp / "MME"


def _release(tmp: Path) -> Path:
    """The release folder with the same images (byte for byte) and questions."""
    root = tmp / "MME_Benchmark_release_version"
    by_image: dict[str, bytes] = {str(r["question_id"]): r["image"]["bytes"] for r in _rows()}  # type: ignore[index]
    for subtask, images in _CONTENT.items():
        folder = root / subtask
        img_dir, qa_dir = (folder / "images", folder / "questions_answers_YN") if subtask == "artwork" else (folder, folder)
        img_dir.mkdir(parents=True, exist_ok=True)
        qa_dir.mkdir(parents=True, exist_ok=True)
        for name, _, qas in images:
            (img_dir / name).write_bytes(by_image[f"{subtask}/{name}"])
            (qa_dir / f"{Path(name).stem}.txt").write_text("".join(f"{_QUESTION.format(o)}\t{a}\n" for o, a in qas))
    return root


def _fails(args: list[str], needle: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert needle in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


# -- tests ----------------------------------------------------------------------------------------


def test_parquet_gives_the_release_folders_questions(tmp_path: Path) -> None:
    from_parquet = read_parquet([_shards(tmp_path)])
    from_release = read_release_folder(_release(tmp_path))
    assert list(from_parquet) == list(from_release) == ["existence", "count", "position", "color", "artwork"]
    for subtask in from_release:
        ours, theirs = mme_questions(from_parquet[subtask]), mme_questions(from_release[subtask])
        assert [(q.split, q.question_id, q.text, q.label) for q in ours] == [(q.split, q.question_id, q.text, q.label) for q in theirs]
        # the same image names; the release's images/ shape only adds a folder
        assert [q.image for q in ours] == [q.image.replace("/images/", "/") for q in theirs]
    line = from_parquet["count"][0]
    assert (line.source.name, line.line, line.image, line.answer) == ("test-00000-of-00002.parquet", 5, "count/000000000001.jpg", "yes")
    assert from_parquet["count"][1].source.name == "test-00001-of-00002.parquet" and from_parquet["count"][1].line == 1


def test_build_writes_each_image_once_and_scores_as_the_release(tmp_path: Path) -> None:
    shards, root = _shards(tmp_path), _release(tmp_path)
    out = tmp_path / "q"
    result = runner.invoke(app, ["build", "mme", "--parquet", str(shards / "data" / "test-00000-of-00002.parquet"), "--parquet", str(shards / "data" / "test-00001-of-00002.parquet"), "--out", str(out)])
    assert result.exit_code == 0, result.output
    images = sorted(p.relative_to(out / "images").as_posix() for p in (out / "images").rglob("*") if p.is_file())
    assert images == sorted({str(r["question_id"]) for r in _rows()})  # 8 images for 16 rows
    assert "8 image(s)" in result.output
    for image in images:
        assert (out / "images" / image).read_bytes() == (root / image.replace("artwork/", "artwork/images/")).read_bytes()
    # a second build replaces nothing without --overwrite (images included), and all with it
    _fails(["build", "mme", "--parquet", str(shards), "--out", str(out)], "--overwrite")
    assert runner.invoke(app, ["build", "mme", "--parquet", str(shards), "--out", str(out), "--overwrite"]).exit_code == 0
    # the scores: a scripted run on each build, `halluprobe mme` on both
    present: dict[str, list[str]] = {}
    for found in _CONTENT.values():
        for name, objs, _ in found:
            present.setdefault(name, []).extend(objs)
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"present": present, "seed": 3, "hallucinate": {"dog": 0.5, "statue": 0.5}}))
    qrel = tmp_path / "qrel"
    assert runner.invoke(app, ["build", "mme", "--release", str(root), "--out", str(qrel)]).exit_code == 0
    scores = []
    for qdir, images_root in ((out, out / "images"), (qrel, root)):
        run = tmp_path / f"run-{qdir.name}"
        benches = [a for s in _CONTENT for a in ("--benchmark", str(qdir / f"{s}.jsonl"))]
        result = runner.invoke(app, ["run", "--backend", "scripted", "--model", str(script), *benches, "--images", str(images_root), "--out", str(run), "--text"])
        assert result.exit_code == 0, result.output
        result = runner.invoke(app, ["mme", str(run), "--json", "--resamples", "0"])
        assert result.exit_code == 0, result.output
        scores.append(json.loads(result.stdout))
    assert scores[0] == scores[1]


def test_hallucination_and_subtask_filters(tmp_path: Path) -> None:
    shards = _shards(tmp_path)
    out = tmp_path / "h"
    result = runner.invoke(app, ["build", "mme", "--parquet", str(shards), "--hallucination", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.glob("*.jsonl")) == ["color.jsonl", "count.jsonl", "existence.jsonl", "position.jsonl"]
    assert sorted(p.name for p in (out / "images").iterdir()) == ["color", "count", "existence", "position"]  # no artwork image
    out2 = tmp_path / "a"
    assert runner.invoke(app, ["build", "mme", "--parquet", str(shards), "--subtask", "artwork", "--out", str(out2)]).exit_code == 0
    assert [p.name for p in out2.glob("*.jsonl")] == ["artwork.jsonl"]
    assert sorted(p.name for p in (out2 / "images" / "artwork").iterdir()) == ["10002.jpg", "10003.jpg"]
    with pytest.raises(InputError, match="no rows of subtask 'OCR'"):
        read_parquet([shards], ("OCR",))


def test_bad_parquet_inputs_are_one_line_exit_2(tmp_path: Path) -> None:
    rows = _rows()
    out = str(tmp_path / "q")
    bad = tmp_path / "bad.parquet"

    def build(path: Path = bad) -> list[str]:
        return ["build", "mme", "--parquet", str(path), "--out", out]

    _write(bad, rows, drop="category")
    _fails(build(), "no column 'category'")
    _write(bad, [*rows[:2], {**rows[2], "answer": "Maybe"}, *rows[3:]])
    _fails(build(), "bad.parquet:3: answer 'Maybe' is not Yes or No")
    _write(bad, [*rows, rows[1]])
    _fails(build(), f"bad.parquet:{len(rows) + 1}: duplicate question")
    for escape in ("../evil.png", "/tmp/evil.png", "existence/../../evil.png", "existence//x.png", "a\\..\\evil.png"):
        _write(bad, [{**r, "question_id": escape} for r in rows[:2]])
        _fails(build(), "outside the images folder")
    assert not (tmp_path / "evil.png").exists() and not Path(out).exists()
    # one image, two different byte strings: refused, nothing written
    _write(bad, [rows[0], {**rows[1], "image": {"bytes": _png(99), "path": "x"}}])
    _fails(build(), "bad.parquet:2: image 'existence/000000000001.jpg' differs")
    _write(bad, [rows[0], {**rows[1], "image": {"bytes": None, "path": "x"}}])
    _fails(build(), "bad.parquet:2: no image bytes")
    assert not Path(out).exists()
    pq.write_table(pa.table({**{c: pa.array([r[c] for r in rows[:2]]) for c in ("question_id", "question", "answer", "category")}, "image": pa.array([{"path": "x"}] * 2)}), bad)
    _fails(build(), "column 'image' is struct<path: string>, not lmms-lab/MME's struct {bytes, path}")
    (tmp_path / "text.parquet").write_text("not parquet")
    _fails(build(tmp_path / "text.parquet"), "not a readable parquet file")
    _fails(build(tmp_path / "nowhere"), "no such parquet file or folder")
    _write(bad, rows[:3])
    _fails(build(), "the last has no partner")
    # the dataset repository once held two copies of a shard: a folder with both is refused
    twice = tmp_path / "twice"
    _write(twice / "test-00000-of-00001-a.parquet", rows[:2])
    _write(twice / "test-00000-of-00001-b.parquet", rows[:2])
    _fails(build(twice), "test-00000-of-00001-b.parquet:1: duplicate question for image 'existence/000000000001.jpg' (first at ")
    _fails(["build", "mme", "--parquet", str(bad), "--release", str(tmp_path), "--out", out], "drop --release")


def test_without_pyarrow_one_line_says_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = _write(tmp_path / "ok.parquet", _rows()[:2])
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # `import pyarrow` raises ImportError
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    _fails(["build", "mme", "--parquet", str(bad), "--out", str(tmp_path / "q")], "pip install pyarrow")


def test_a_pyarrow_that_could_unpickle_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bad = _write(tmp_path / "ok.parquet", _rows()[:2])
    monkeypatch.setattr(pa, "__version__", "14.0.0")
    _fails(["build", "mme", "--parquet", str(bad), "--out", str(tmp_path / "q")], "CVE-2023-47248")


def test_pyarrow_is_imported_on_use_only() -> None:
    code = "import sys, halluprobe.benchmarks.mme, halluprobe.cli.benchmarks; sys.exit('pyarrow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


def test_a_bare_binary_image_column_is_the_bytes(tmp_path: Path) -> None:
    rows = _rows()[:4]
    table = {c: pa.array([r[c] for r in rows]) for c in ("question_id", "question", "answer", "category")}
    table["image"] = pa.array([r["image"]["bytes"] for r in rows], type=pa.binary())  # type: ignore[index]
    path = tmp_path / "binary.parquet"
    pq.write_table(pa.table(table), path)
    out = tmp_path / "q"
    result = runner.invoke(app, ["build", "mme", "--parquet", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert (out / "images" / "existence" / "000000000002.jpg").read_bytes() == rows[2]["image"]["bytes"]  # type: ignore[index]
