"""A fetching or building verb that fails leaves nothing it created and keeps what was there.

Failures are made without a network: a closed port on 127.0.0.1 (offline), a file:// mirror
that lacks a file (HTTP 404's twin), a pinned digest that does not match, a write that fails.
"""

from __future__ import annotations

import hashlib
import json
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from halluprobe.benchmarks import pope as pope_module
from halluprobe.benchmarks.created import CreatedOutputs, removed_on_failure
from halluprobe.benchmarks.dataset_files import fetch_dataset
from halluprobe.benchmarks.datasets import DATASETS, DatasetVersion, SourceFile
from halluprobe.benchmarks.download import fetch_pinned
from halluprobe.benchmarks.sources import fetch_coco_images, fetch_pope
from halluprobe.cli import app
from halluprobe.errors import InputError, RuntimeFailure

runner = CliRunner()
SPLITS = ("random", "popular", "adversarial")


@pytest.fixture(autouse=True)
def _isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY", "HALLUPROBE_POPE_URL", "HALLUPROBE_COCO_URL", "HALLUPROBE_GITHUB_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "cache"))


def closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now: connection refused, as offline
    return f"http://127.0.0.1:{port}/"


def _questions(split: str, images: list[str]) -> bytes:
    rows = [{"question_id": i + 1, "image": img, "text": f"Is there a {split} in the image?", "label": "yes"} for i, img in enumerate(images)]
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def _mirror(root: Path, images: list[str]) -> dict[str, str]:
    """The three POPE files in a local folder; file name -> sha256."""
    root.mkdir(parents=True, exist_ok=True)
    pins = {}
    for split in SPLITS:
        data = _questions(split, images)
        (root / f"coco_pope_{split}.json").write_bytes(data)
        pins[f"coco_pope_{split}.json"] = hashlib.sha256(data).hexdigest()
    return pins


def _tree(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


# -- the record itself ----------------------------------------------------------------------------


def test_undo_removes_only_what_was_made(tmp_path: Path) -> None:
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep\n")
    with pytest.raises(RuntimeError), removed_on_failure() as made:
        made.folder(user / "a" / "b")
        made.new_files([user / "notes.txt", user / "a" / "b" / "new.json"])
        (user / "notes.txt").write_text("replaced\n")  # the user's file: recorded as not new
        (user / "a" / "b" / "new.json").write_text("{}\n")
        (user / "a" / "stray.txt").write_text("made by someone else\n")
        raise RuntimeError("boom")
    # new.json and the empty b/ go; a/ holds a file nobody recorded, so it stays; notes.txt stays
    assert _tree(user) == ["a", "a/stray.txt", "notes.txt"]
    ok = CreatedOutputs()
    with removed_on_failure(ok) as same:  # an outer record: the caller undoes it, not the block
        assert same is ok
        same.folder(tmp_path / "kept")
    assert (tmp_path / "kept").is_dir() and ok.folders == [tmp_path / "kept"]


# -- pinned downloads -------------------------------------------------------------------------------


def test_offline_fetch_pope_leaves_no_out_folder_and_no_cache_folder(tmp_path: Path) -> None:
    out = tmp_path / "new" / "pope"
    with pytest.raises(RuntimeFailure, match=r"\(offline\?\)$"):
        fetch_pope(out, cache_dir=tmp_path / "c", base_url=closed_port_url(), pins={"coco_pope_random.json": "0" * 64})
    assert not (tmp_path / "new").exists()  # neither --out nor the parent it would have made
    assert not (tmp_path / "c").exists()  # nor <cache>/pope/<sha256>/


def test_a_failure_on_the_third_file_leaves_neither_of_the_first_two(tmp_path: Path) -> None:
    www = tmp_path / "www"
    pins = _mirror(www, ["a.jpg"])
    (www / "coco_pope_adversarial.json").unlink()  # the mirror lacks the last file
    out = tmp_path / "out"
    out.mkdir()
    (out / "readme.txt").write_text("the user's\n")
    with pytest.raises(RuntimeFailure, match="coco_pope_adversarial.json: download failed"):
        fetch_pope(out, cache_dir=tmp_path / "c", base_url=www.as_uri(), pins=pins)
    assert _tree(out) == ["readme.txt"]  # the user's folder kept as it was, nothing of ours in it


def test_a_user_file_that_differs_refuses_before_anything_is_written(tmp_path: Path) -> None:
    www = tmp_path / "www"
    pins = _mirror(www, ["a.jpg"])
    out = tmp_path / "out"
    out.mkdir()
    (out / "coco_pope_popular.json").write_text("my edits\n")  # the second of three
    with pytest.raises(InputError, match="differs"):
        fetch_pope(out, cache_dir=tmp_path / "c", base_url=www.as_uri(), pins=pins)
    assert _tree(out) == ["coco_pope_popular.json"]  # coco_pope_random.json was not copied first
    assert (out / "coco_pope_popular.json").read_text() == "my edits\n"


def test_a_digest_mismatch_leaves_an_empty_cache_folder_behind_nowhere(tmp_path: Path) -> None:
    (tmp_path / "f.json").write_text("[]\n")
    with pytest.raises(InputError, match="sha256 mismatch"):
        fetch_pinned((tmp_path / "f.json").as_uri(), "f.json", "1" * 64, cache_dir=tmp_path / "c", kind="github")
    assert not (tmp_path / "c").exists()


def test_offline_images_leave_no_folder_they_made(tmp_path: Path) -> None:
    q = tmp_path / "q.json"
    q.write_bytes(_questions("random", ["val2014/x.jpg", "val2014/y.jpg"]))
    with pytest.raises(RuntimeFailure, match=r"\(offline\?\)$"):
        fetch_coco_images([q], tmp_path / "images", base_url=closed_port_url(), workers=1)
    assert not (tmp_path / "images").exists()


def _two_file_version(tmp_path: Path, *, missing_second: bool) -> DatasetVersion:
    """A POPE-shaped dataset of two files on a file:// mirror (the second absent if asked)."""
    root = tmp_path / "mirror"
    sources = {}
    for split in ("random", "popular"):
        data = _questions(split, ["COCO_val2014_000000000001.jpg"])
        path = f"output/seem/toy/toy_pope_seem_{split}.json"
        dest = root / "RUCAIBox/POPE" / ("9" * 40) / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        if not (missing_second and split == "popular"):
            dest.write_bytes(data)
        sources[f"toy_pope_{split}.json"] = (SourceFile("RUCAIBox/POPE", "9" * 40, path, hashlib.sha256(data).hexdigest()),)
    return DatasetVersion("toy", "1", "2023-10-26", "pope", sources, {n: "0" * 64 for n in sources}, "coco-val2014", {"random": 1, "popular": 1})


def test_fetch_dataset_writes_nothing_when_its_second_source_fails(tmp_path: Path) -> None:
    version = _two_file_version(tmp_path, missing_second=True)
    with pytest.raises(RuntimeFailure, match="toy_pope_seem_popular.json: download failed"):
        fetch_dataset(version, tmp_path / "out", mirror=(tmp_path / "mirror").as_uri())
    assert not (tmp_path / "out").exists()


# -- the verbs ----------------------------------------------------------------------------------


def test_data_pope_offline_images_remove_the_question_files_it_wrote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    version = _two_file_version(tmp_path, missing_second=False)
    monkeypatch.setitem(DATASETS, "toy", {"1": version})
    monkeypatch.setenv("HALLUPROBE_GITHUB_URL", (tmp_path / "mirror").as_uri())
    monkeypatch.setenv("HALLUPROBE_COCO_URL", closed_port_url())
    out = tmp_path / "out"
    result = runner.invoke(app, ["data", "pope", "--dataset", "toy", "--out", str(out), "--images", str(tmp_path / "img")])
    assert result.exit_code == 1, result.output
    assert result.output.count("\n") == 1 and "(offline?)" in result.output
    assert not out.exists() and not (tmp_path / "img").exists()
    # the same verb online (the images folder served as file://) keeps all it wrote
    served = tmp_path / "coco"
    served.mkdir()
    from PIL import Image

    Image.new("RGB", (4, 4)).save(served / "COCO_val2014_000000000001.jpg")
    monkeypatch.setenv("HALLUPROBE_COCO_URL", served.as_uri())
    ok = runner.invoke(app, ["data", "pope", "--dataset", "toy", "--out", str(out), "--images", str(tmp_path / "img")])
    assert ok.exit_code == 0, ok.output
    assert _tree(out) == ["toy_pope_popular.json", "toy_pope_random.json"]
    assert _tree(tmp_path / "img") == ["COCO_val2014_000000000001.jpg"]


def test_data_pope_version_offline_leaves_no_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALLUPROBE_POPE_URL", closed_port_url())
    result = runner.invoke(app, ["data", "pope", "--version", "2023-08", "--out", str(tmp_path / "a" / "b")])
    assert result.exit_code == 1 and "(offline?)" in result.output
    assert _tree(tmp_path) == []  # no --out, no parent, no cache folder


def test_build_pope_that_fails_midway_leaves_no_partial_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    objects = tmp_path / "objects.jsonl"
    names = ["dog", "cat", "car", "tree", "cup", "bed", "sink", "kite"]
    objects.write_text("".join(json.dumps({"image": f"{i}.jpg", "objects": names[i % 8 : i % 8 + 2]}) + "\n" for i in range(12)))
    real = pope_module.write_atomic

    def disk_full_at_the_manifest(path: Path, data: bytes | str) -> Path:
        if Path(path).name.endswith("manifest.json"):
            raise InputError("cannot write: No space left on device", path)
        return real(path, data)

    monkeypatch.setattr(pope_module, "write_atomic", disk_full_at_the_manifest)
    args = ["build", "pope", "--objects", str(objects), "--images", "6", "--per-image", "1", "--name", "t"]
    result = runner.invoke(app, [*args, "--out", str(tmp_path / "new")])
    assert result.exit_code == 2 and "No space left" in result.output
    assert not (tmp_path / "new").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("x\n")
    result = runner.invoke(app, [*args, "--out", str(mine)])
    assert result.exit_code == 2 and _tree(mine) == ["keep.txt"]
