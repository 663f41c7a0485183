"""Questions per second of the openai backend against a loopback server with a fixed latency.

Prints figures; asserts nothing about time. The server is a minimal asyncio HTTP/1.1 server
in its own process (so it does not share the client's interpreter lock), answering every
request after ``--latency-ms`` with one canned chat completion in llama.cpp's / vLLM's shape
(a thread-per-connection server, like the tests' one, is itself the bottleneck at 64). Each
concurrency level runs ``--runs`` full passes over ``--questions`` distinct requests (no
cache, no duplicates), levels interleaved so that load from elsewhere hits them alike; the
median is reported.

With a fixed latency L and nothing else in the way, c requests in flight give c / L
questions per second: the figures show how close the backend comes to that, and where the
client (or the loopback server itself) becomes the limit.

Usage (about a minute on 2 cores with the defaults)::

    python bench/bench_openai.py
    python bench/bench_openai.py --latency-ms 50 --concurrency 1 8 32 128 --runs 5
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _canned() -> bytes:
    """One realistic chat-completion answer (llama.cpp / vLLM shape), reused for every request."""
    tops = [("Yes", -0.2), ("No", -1.9), (" Yes", -4.0), ("There", -4.5), ("yes", -5.0), (" No", -5.5), ("The", -6.0)]
    top_logprobs = [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in tops]
    body = {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 0,
        "model": "tiny-vlm",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Yes"},
                "logprobs": {"content": [{**top_logprobs[0], "top_logprobs": top_logprobs}]},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 600, "completion_tokens": 1, "total_tokens": 601},
    }
    return json.dumps(body).encode()


async def _serve_async(latency_s: float, port_out: Any, stop: Any) -> None:
    """A minimal HTTP/1.1 keep-alive server on asyncio streams: answers every POST after latency_s."""
    import asyncio

    payload = _canned()
    head = (
        f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n\r\n"
    ).encode()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                header = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in header.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":", 1)[1])
                await reader.readexactly(length)
                await asyncio.sleep(latency_s)
                writer.write(head + payload)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, backlog=1024)
    port_out.put(f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1")
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, stop.wait, 3600)  # stops by itself after an hour at most
    server.close()


def _serve(latency_s: float, port_out: Any, stop: Any) -> None:
    import asyncio

    asyncio.run(_serve_async(latency_s, port_out, stop))


def _images(folder: Path, n: int) -> list[Path]:
    from PIL import Image

    paths = []
    for i in range(n):
        path = folder / f"img{i}.png"
        Image.new("RGB", (336, 336), (i * 37 % 255, 120, 200 - i % 200)).save(path)
        paths.append(path)
    return paths


def _one_pass(url: str, requests: list[Any], concurrency: int) -> float:
    from halluprobe.backends.openai.backend import OpenAIBackend

    backend = OpenAIBackend("tiny-vlm", endpoints=[url], concurrency=concurrency, no_cache=True)
    started = time.perf_counter()
    answered = 0
    for batch in backend.answer(requests, GenerateConfig(max_new_tokens=8, top_k=10)):
        answered += len(batch)
        errors = [r.error for r in batch if r.error]
        if errors:
            raise SystemExit(f"bench request failed: {errors[0]}")
    seconds = time.perf_counter() - started
    assert answered == len(requests)
    return len(requests) / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 64])
    parser.add_argument("--latency-ms", type=float, default=20.0)
    parser.add_argument("--questions", type=int, default=384)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    sys.path.insert(0, str(ROOT / "src"))
    from halluprobe.records import Request

    ctx = mp.get_context("spawn")
    port_out, stop = ctx.Queue(), ctx.Event()
    server = ctx.Process(target=_serve, args=(args.latency_ms / 1000, port_out, stop), daemon=True)
    server.start()
    try:
        url = port_out.get(timeout=60)
        with tempfile.TemporaryDirectory(prefix="halluprobe-bench-") as tmp:
            n_images = max(1, args.questions // 12)
            images = _images(Path(tmp), n_images)
            objects = [f"object{j}" for j in range(12)]
            requests = [
                Request(split="random", question_id=i * 12 + j, image_path=str(img), prompt=f"Is there a {obj} in the image?")
                for i, img in enumerate(images)
                for j, obj in enumerate(objects)
            ][: args.questions]
            _one_pass(url, requests[:8], 4)  # warm-up: imports, connections
            figures: dict[int, list[float]] = {c: [] for c in args.concurrency}
            for _ in range(args.runs):
                for c in args.concurrency:
                    figures[c].append(_one_pass(url, requests, c))
    finally:
        stop.set()
        server.join(timeout=10)
        if server.is_alive():
            server.terminate()

    latency = args.latency_ms / 1000
    print(f"openai backend, loopback server, latency {args.latency_ms:g} ms, {len(requests)} requests, median of {args.runs}")
    print(f"{'concurrency':>11} {'q/s':>8} {'ideal c/L':>10} {'of ideal':>9}   runs")
    rows = []
    for c in args.concurrency:
        median = statistics.median(figures[c])
        ideal = c / latency
        print(f"{c:>11} {median:>8.1f} {ideal:>10.0f} {median / ideal:>8.0%}   " + " ".join(f"{v:.1f}" for v in figures[c]))
        rows.append({"concurrency": c, "qps_median": median, "qps_runs": figures[c], "ideal_qps": ideal})
    if args.json:
        args.json.write_text(json.dumps({"latency_ms": args.latency_ms, "questions": len(requests), "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
