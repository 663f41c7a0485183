"""Pinned downloads are bounded (issue 32): by the pinned size and by an overall deadline, against
a loopback server (127.0.0.1 only) that trickles a byte at a time, sends an endless body, or
declares more than the pin allows. Every server loop is bounded; each test ends in seconds."""

from __future__ import annotations

import hashlib
import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from halluprobe.benchmarks.download import fetch_pinned
from halluprobe.errors import InputError, RuntimeFailure

PAYLOAD = b"0123456789" * 10
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.send_response(200)
        try:
            if self.path == "/trickle":  # one byte every 0.2 s, at most 100 s' worth
                self.send_header("Content-Length", str(len(PAYLOAD)))
                self.end_headers()
                for byte in PAYLOAD:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(0.2)
            elif self.path == "/endless":  # no length, chunks until the client hangs up (bounded)
                self.end_headers()
                for _ in range(100_000):
                    self.wfile.write(b"x" * 4096)
            elif self.path == "/declared":  # says 10 GB up front
                self.send_header("Content-Length", str(10 * 1024**3))
                self.end_headers()
            else:
                self.send_header("Content-Length", str(len(PAYLOAD)))
                self.end_headers()
                self.wfile.write(PAYLOAD)
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture()
def server() -> Iterator[str]:
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_a_trickling_server_is_stopped_at_the_deadline(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALLUPROBE_DOWNLOAD_DEADLINE_S", "1")
    start = time.monotonic()
    with pytest.raises(RuntimeFailure, match=r"took longer than 1 s"):
        fetch_pinned(f"{server}/trickle", "f.json", SHA, cache_dir=tmp_path, kind="t", size=len(PAYLOAD))
    assert time.monotonic() - start < 5
    assert not any(p.is_file() for p in tmp_path.rglob("*"))  # no partial file, no cache folder left


def test_an_endless_body_is_stopped_at_the_pinned_size(server: str, tmp_path: Path) -> None:
    start = time.monotonic()
    with pytest.raises(RuntimeFailure, match=r"sent more than the 100 bytes the pin allows"):
        fetch_pinned(f"{server}/endless", "f.json", SHA, cache_dir=tmp_path, kind="t", size=len(PAYLOAD))
    assert time.monotonic() - start < 5 and not any(p.is_file() for p in tmp_path.rglob("*"))


def test_an_endless_body_without_a_pinned_size_meets_the_default_bound(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("halluprobe.benchmarks.download.DEFAULT_MAX_BYTES", 50_000)
    with pytest.raises(RuntimeFailure, match=r"sent more than the 50,000 bytes"):
        fetch_pinned(f"{server}/endless", "f.json", SHA, cache_dir=tmp_path, kind="t")


def test_a_declared_length_over_the_pin_is_refused_before_reading(server: str, tmp_path: Path) -> None:
    with pytest.raises(RuntimeFailure, match=r"is 10,737,418,240 bytes, over the 100 the pin allows"):
        fetch_pinned(f"{server}/declared", "f.json", SHA, cache_dir=tmp_path, kind="t", size=len(PAYLOAD))


def test_a_pinned_file_within_its_bounds_downloads(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HALLUPROBE_DOWNLOAD_DEADLINE_S", "5")
    got = fetch_pinned(f"{server}/ok", "f.json", SHA, cache_dir=tmp_path, kind="t", size=len(PAYLOAD))
    assert got.read_bytes() == PAYLOAD


@pytest.mark.parametrize("value", ["0", "-1", "soon", "inf", "nan"])
def test_a_bad_deadline_is_one_line(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("HALLUPROBE_DOWNLOAD_DEADLINE_S", value)
    with pytest.raises(InputError, match="HALLUPROBE_DOWNLOAD_DEADLINE_S must be a positive number"):
        fetch_pinned(f"{server}/ok", "f.json", SHA, cache_dir=tmp_path, kind="t")
