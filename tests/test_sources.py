"""fetch_pope / fetch_coco_images against a local http.server on 127.0.0.1 (no other network)."""

from __future__ import annotations

import functools
import hashlib
import io
import json
import random
import socket
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from PIL import Image

from halluprobe.benchmarks import sources
from halluprobe.benchmarks.sources import POPE_FILES, fetch_coco_images, fetch_pope, pope_urls
from halluprobe.errors import InputError, RuntimeFailure


class _Handler(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # quiet test output
        pass

    def do_GET(self) -> None:
        self.server.requests.append(self.path)  # type: ignore[attr-defined]
        super().do_GET()


class Server:
    """Serves a folder on 127.0.0.1 in a thread; records the request paths."""

    def __init__(self, root: Path) -> None:
        handler = functools.partial(_Handler, directory=str(root))
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.requests = []  # type: ignore[attr-defined]
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self.thread.start()

    @property
    def requests(self) -> list[str]:
        return self.httpd.requests  # type: ignore[attr-defined,no-any-return]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # never the user's cache, never a proxy for 127.0.0.1, no inherited base URLs
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY",
                "HALLUPROBE_POPE_URL", "HALLUPROBE_COCO_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HALLUPROBE_CACHE_DIR", str(tmp_path / "env-cache"))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    root = tmp_path / "www"
    root.mkdir()
    srv = Server(root)
    try:
        yield srv, root
    finally:
        srv.stop()


def closed_port_url() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    return f"http://127.0.0.1:{port}/"


def pope_lines(split: str, images: list[str]) -> bytes:
    rows = []
    for img in images:
        for obj, label in (("dog", "yes"), (f"{split}-neg", "no")):
            rows.append({"question_id": len(rows) + 1, "image": img, "text": f"Is there a {obj} in the image?", "label": label})
    return "".join(json.dumps(r) + "\n" for r in rows).encode()


def make_pope_files(root: Path) -> dict[str, str]:
    pins = {}
    for split in ("random", "popular", "adversarial"):
        data = pope_lines(split, ["a.jpg", "b.jpg"])
        (root / f"coco_pope_{split}.json").write_bytes(data)
        pins[f"coco_pope_{split}.json"] = hashlib.sha256(data).hexdigest()
    return pins


def jpeg_bytes(seed: int, size: int = 48) -> bytes:
    rng = random.Random(seed)
    im = Image.frombytes("RGB", (size, size), bytes(rng.randrange(256) for _ in range(size * size * 3)))
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


# ------------------------------------------------------------------------------------------
# POPE files


def test_official_pins_and_urls() -> None:
    assert set(POPE_FILES) == {f"coco_pope_{s}.json" for s in ("random", "popular", "adversarial")}
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in POPE_FILES.values())
    urls = pope_urls()
    assert urls["coco_pope_random.json"] == (
        "https://raw.githubusercontent.com/RUCAIBox/POPE/main/output/coco/coco_pope_random.json"
    )
    assert sources.COCO_VAL2014_URL == "http://images.cocodataset.org/val2014/"


def test_download_verify_and_cache_reuse(served: tuple[Server, Path], tmp_path: Path) -> None:
    srv, root = served
    pins = make_pope_files(root)
    cache = tmp_path / "cache"
    calls: list[tuple[int, int]] = []
    paths = fetch_pope(tmp_path / "out", cache_dir=cache, base_url=srv.url, pins=pins, progress=lambda d, t: calls.append((d, t)))
    assert [p.name for p in paths] == list(pins)
    for p in paths:
        assert p.read_bytes() == (root / p.name).read_bytes()
        cached = cache / "pope" / pins[p.name] / p.name
        assert cached.read_bytes() == p.read_bytes()
    assert sorted(srv.requests) == sorted(f"/{n}" for n in pins)
    assert calls[-1] == (3, 3)
    assert not list(cache.rglob("*.part"))

    # second call: server gone, the cache answers
    srv.stop()
    again = fetch_pope(tmp_path / "out2", cache_dir=cache, base_url=srv.url, pins=pins)
    assert [p.read_bytes() for p in again] == [p.read_bytes() for p in paths]
    # the same out_dir again: files already there with the pinned digest are kept
    assert fetch_pope(tmp_path / "out", cache_dir=cache, base_url=srv.url, pins=pins) == paths


def test_env_cache_and_url(served: tuple[Server, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    srv, root = served
    pins = make_pope_files(root)
    monkeypatch.setenv("HALLUPROBE_POPE_URL", srv.url.rstrip("/"))  # no trailing slash on purpose
    fetch_pope(tmp_path / "out", pins=pins)
    name = "coco_pope_random.json"
    assert (tmp_path / "env-cache" / "pope" / pins[name] / name).is_file()
    assert len(srv.requests) == 3


def test_sha_mismatch(served: tuple[Server, Path], tmp_path: Path) -> None:
    srv, root = served
    pins = make_pope_files(root)
    actual = pins["coco_pope_popular.json"]
    wrong = "ab" * 32
    pins["coco_pope_popular.json"] = wrong
    cache = tmp_path / "cache"
    # the registry and the file disagree: bad input (exit 2), one line naming the URL
    with pytest.raises(InputError) as ei:
        fetch_pope(tmp_path / "out", cache_dir=cache, base_url=srv.url, pins=pins)
    msg = str(ei.value)
    assert "coco_pope_popular.json" in msg and wrong in msg and actual in msg
    assert "\n" not in msg
    assert not (cache / "pope" / wrong).exists() or not any((cache / "pope" / wrong).iterdir())
    assert not (tmp_path / "out" / "coco_pope_popular.json").exists()


def test_http_404(served: tuple[Server, Path], tmp_path: Path) -> None:
    srv, _ = served
    with pytest.raises(RuntimeFailure, match="HTTP 404"):
        fetch_pope(tmp_path / "out", cache_dir=tmp_path / "c", base_url=srv.url, pins={"missing.json": "0" * 64})
    assert not list((tmp_path / "c").rglob("*.part"))


def test_offline(tmp_path: Path) -> None:
    url = closed_port_url()
    with pytest.raises(RuntimeFailure) as ei:
        fetch_pope(tmp_path / "out", cache_dir=tmp_path / "c", base_url=url, pins={"coco_pope_random.json": "0" * 64})
    msg = str(ei.value)
    assert msg.startswith(f"cannot reach {url[7:-1]}: ") and msg.endswith("(offline?)")
    assert "\n" not in msg
    assert not list((tmp_path / "c").rglob("*.part"))


def test_out_dir_differs(served: tuple[Server, Path], tmp_path: Path) -> None:
    srv, root = served
    pins = make_pope_files(root)
    out = tmp_path / "out"
    out.mkdir()
    (out / "coco_pope_random.json").write_text("my edits\n")
    with pytest.raises(InputError, match="differs") as ei:
        fetch_pope(out, cache_dir=tmp_path / "c", base_url=srv.url, pins=pins)
    assert ei.value.path == str(out / "coco_pope_random.json")
    assert (out / "coco_pope_random.json").read_text() == "my edits\n"
    fetch_pope(out, cache_dir=tmp_path / "c", base_url=srv.url, pins=pins, overwrite=True)
    assert (out / "coco_pope_random.json").read_bytes() == (root / "coco_pope_random.json").read_bytes()


# ------------------------------------------------------------------------------------------
# COCO images


IMAGES = [f"COCO_val2014_{i:012d}.jpg" for i in range(1, 6)]


@pytest.fixture
def image_server(served: tuple[Server, Path], tmp_path: Path) -> tuple[Server, Path, list[Path]]:
    srv, root = served
    for i, name in enumerate(IMAGES):
        (root / name).write_bytes(jpeg_bytes(i))
    # two question files that together use images 1, 2 and 4 (1 twice)
    qdir = tmp_path / "questions"
    qdir.mkdir()
    q1 = qdir / "x_pope_random.json"
    q1.write_bytes(pope_lines("random", [IMAGES[0], IMAGES[1]]))
    q2 = qdir / "x_pope_popular.json"
    q2.write_bytes(pope_lines("popular", [IMAGES[3], IMAGES[0]]))
    return srv, root, [q1, q2]


def test_images_subset_only(image_server: tuple[Server, Path, list[Path]], tmp_path: Path) -> None:
    srv, root, qfiles = image_server
    out = tmp_path / "images"
    calls: list[tuple[int, int]] = []
    rep = fetch_coco_images(qfiles, out, base_url=srv.url, progress=lambda d, t: calls.append((d, t)))
    wanted = sorted([IMAGES[0], IMAGES[1], IMAGES[3]])
    assert rep.ok and rep.requested == 3
    assert list(rep.downloaded) == wanted and rep.skipped == ()
    assert sorted(p.name for p in out.iterdir()) == wanted
    assert sorted(srv.requests) == [f"/{n}" for n in wanted]
    for n in wanted:
        assert (out / n).read_bytes() == (root / n).read_bytes()
    assert calls[-1] == (3, 3) and len(calls) == 3


def test_resume(image_server: tuple[Server, Path, list[Path]], tmp_path: Path) -> None:
    srv, root, qfiles = image_server
    out = tmp_path / "images"
    fetch_coco_images(qfiles, out, base_url=srv.url)
    n_requests = len(srv.requests)

    rep = fetch_coco_images(qfiles, out, base_url=srv.url)  # nothing to do
    assert rep.downloaded == () and len(rep.skipped) == 3
    assert len(srv.requests) == n_requests

    # an interrupted fetch: one image gone with a stale .part beside it, one truncated in place
    (out / IMAGES[0]).unlink()
    (out / (IMAGES[0] + ".part")).write_bytes(b"\xff\xd8partial")
    good = (out / IMAGES[3]).read_bytes()
    (out / IMAGES[3]).write_bytes(good[: len(good) // 3])
    rep = fetch_coco_images(qfiles, out, base_url=srv.url, workers=1)
    assert list(rep.downloaded) == [IMAGES[0], IMAGES[3]]
    assert list(rep.skipped) == [IMAGES[1]]
    assert sorted(srv.requests[n_requests:]) == [f"/{IMAGES[0]}", f"/{IMAGES[3]}"]
    assert (out / IMAGES[3]).read_bytes() == good
    assert not list(out.glob("*.part"))


def test_corrupt_and_missing_images_are_rejected(image_server: tuple[Server, Path, list[Path]], tmp_path: Path) -> None:
    srv, root, qfiles = image_server
    good = (root / IMAGES[0]).read_bytes()
    (root / IMAGES[0]).write_bytes(good[: len(good) // 2])  # truncated JPEG
    (root / IMAGES[1]).write_bytes(b"<html>not an image</html>")
    (root / IMAGES[3]).unlink()  # 404
    out = tmp_path / "images"
    rep = fetch_coco_images(qfiles, out, base_url=srv.url)
    assert not rep.ok and rep.downloaded == ()
    assert set(rep.failed) == {IMAGES[0], IMAGES[1], IMAGES[3]}
    assert "decode" in rep.failed[IMAGES[0]] and "decode" in rep.failed[IMAGES[1]]
    assert "HTTP 404" in rep.failed[IMAGES[3]]
    assert list(out.iterdir()) == []  # nothing bad kept, no .part left


def test_images_offline(image_server: tuple[Server, Path, list[Path]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, qfiles = image_server
    url = closed_port_url()
    monkeypatch.setenv("HALLUPROBE_COCO_URL", url)  # the env var is the base when no parameter
    with pytest.raises(RuntimeFailure, match=r"^cannot reach 127\.0\.0\.1:\d+: .*\(offline\?\)$"):
        fetch_coco_images(qfiles, tmp_path / "images")
    assert not list((tmp_path / "images").glob("*.part"))


def test_absolute_image_paths_are_not_fetched(tmp_path: Path) -> None:
    q = tmp_path / "q.json"
    q.write_text(json.dumps({"question_id": 1, "image": "/data/a.jpg", "text": "t", "label": "yes"}) + "\n")
    with pytest.raises(InputError, match="relative"):
        fetch_coco_images([q], tmp_path / "images", base_url=closed_port_url())


def test_report_summary_line(image_server: tuple[Server, Path, list[Path]], tmp_path: Path) -> None:
    srv, root, qfiles = image_server
    (root / IMAGES[1]).write_bytes(b"junk")
    rep = fetch_coco_images(qfiles, tmp_path / "images", base_url=srv.url)
    assert str(rep).startswith("2 downloaded, 0 already present, 1 failed (of 3); first failure: " + IMAGES[1])
