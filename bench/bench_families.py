"""Fast (prefix cache) versus plain engine throughput, per VLM family, on the tiny test builds.

Prints figures; asserts nothing about time. For each family of tests/_families.py the tiny
random-weight build is written to a temporary folder, loaded twice (prefix cache on and off),
warmed up, and asked ``--images`` real photos x 18 distinct POPE-style questions (so the
engine's de-duplication of repeated prompts does not help) ``--runs`` times, the two engines
interleaved; the median time of each gives questions per second and the ratio fast / plain.

The builds are tiny (a 28-pixel image costs 4 to 40 tokens), so this measures the engines'
overhead more than their savings: on a real checkpoint the image is hundreds of tokens
(LLaVA-1.5: 576) and the prefix is most of the prompt (see bench_engine.py). Families on the
plain engine (InstructBLIP, PaliGemma) run the same code both ways: their ratio is ~1 by design.

Usage::

    python bench/bench_families.py                       # every family, 3 images, 5 runs
    python bench/bench_families.py --families llava gemma3 --runs 7 --max-new-tokens 8
    python bench/bench_families.py --json figures.json
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

OBJECTS = (
    "person", "cup", "cat", "dog", "umbrella", "motorcycle", "dining table", "bottle", "car",
    "chair", "traffic light", "bicycle", "bench", "handbag", "laptop", "spoon", "bird", "clock",
)
PHOTOS = ("astronaut.jpg", "coffee.jpg", "chelsea.jpg", "motorcycle.jpg", "camera.jpg")


def _requests(backend: Any, photos: Path, n_images: int) -> list[Any]:
    from halluprobe.records import Request

    out = []
    for i, image in enumerate(PHOTOS[:n_images]):
        for j, obj in enumerate(OBJECTS):
            article = "an" if obj[0] in "aeiou" else "a"
            prompt = backend.render_prompt(f"Is there {article} {obj} in the image?", None)
            out.append(Request(split="random", question_id=i * 100 + j, image_path=str(photos / image), prompt=prompt))
    return out


def _timed(backend: Any, requests: list[Any], max_new_tokens: int) -> float:
    started = time.perf_counter()
    for batch in backend.answer(requests, GenerateConfig(max_new_tokens=max_new_tokens, top_k=5)):
        if any(r.error for r in batch):
            raise RuntimeError(next(r.error for r in batch if r.error))
    return time.perf_counter() - started


def bench_family(name: str, photos: Path, args: argparse.Namespace) -> dict[str, Any]:
    import _families

    from halluprobe.backends.hf.backend import HFBackend

    with tempfile.TemporaryDirectory(prefix=f"bench-{name}-") as tmp:
        folder = _families.build_family(name, Path(tmp) / name)
        engines = {
            label: HFBackend(str(folder), batch_size=args.batch_size, dtype="float32", device="cpu", prefix_cache=pc)
            for label, pc in (("fast", True), ("plain", False))
        }
        requests = _requests(engines["fast"], photos, args.images)
        for backend in engines.values():  # warm-up: first-call allocations, stopping criteria
            _timed(backend, requests[:3], args.max_new_tokens)
        times: dict[str, list[float]] = {"fast": [], "plain": []}
        for _ in range(args.runs):
            for label, backend in engines.items():
                times[label].append(_timed(backend, requests, args.max_new_tokens))
        prefix_tokens = None  # the shared prefix of the first image's prompts (fast engine only)
        if engines["fast"].info()["prefix_cache"]:
            prompts = [r.prompt for r in requests[: len(OBJECTS)]]
            shared = engines["fast"]._inputs.encode_shared(prompts, _photo(photos, PHOTOS[0]))
            prefix_tokens = shared.prefix_len if shared is not None else None
        median = {label: statistics.median(values) for label, values in times.items()}
        return {
            "family": name,
            "engine": "prefix cache" if engines["fast"].info()["prefix_cache"] else "plain",
            "questions": len(requests),
            "prefix_tokens": prefix_tokens,
            "fast_qps": len(requests) / median["fast"],
            "plain_qps": len(requests) / median["plain"],
            "ratio": median["plain"] / median["fast"],
            "runs": {label: [round(v, 4) for v in values] for label, values in times.items()},
        }


def _photo(photos: Path, name: str) -> Any:
    from PIL import Image

    with Image.open(photos / name) as im:
        return im.convert("RGB")


def main() -> None:
    import _families
    import torch

    from halluprobe.tiny import demo_photos

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", nargs="*", default=list(_families.FAMILY_NAMES))
    parser.add_argument("--images", type=int, default=3, choices=range(1, len(PHOTOS) + 1))
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=0, help="0: logit readouts only (one forward pass)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.WARNING)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-photos-") as tmp:
        photos, _ = demo_photos(tmp)
        print(f"{'family':16} {'engine':12} {'prefix':>6} {'fast q/s':>9} {'plain q/s':>9} {'fast/plain':>10}")
        for name in args.families:
            row = bench_family(name, photos, args)
            rows.append(row)
            print(
                f"{name:16} {row['engine']:12} {row['prefix_tokens'] or '-':>6} {row['fast_qps']:9.1f} "
                f"{row['plain_qps']:9.1f} {row['ratio']:10.2f}",
                flush=True,
            )
    if args.json:
        meta = {"runs": args.runs, "images": args.images, "batch_size": args.batch_size,
                "max_new_tokens": args.max_new_tokens, "threads": torch.get_num_threads()}
        args.json.write_text(json.dumps({"settings": meta, "families": rows}, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
