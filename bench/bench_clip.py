"""Cost of recording the ``clip`` signal: CLIP passes per image and per object name (CPU).

Prints figures; asserts nothing about time. No CLIP weights can be had offline, so the script
builds random-weight ``CLIPModel``s with the published shapes of openai/clip-vit-base-patch32
and openai/clip-vit-large-patch14 (the compute of a pass does not depend on the weights) on the
real CLIP BPE vocabulary, and times :class:`halluprobe.clip_signal.ClipScorer` on POPE-shaped
work: each image asked about 6 objects, as in one POPE split. The first call embeds each image
once and scores its objects; a second call over the same pairs (another split of the same
images) is served from the scorer's stored similarities and is timed too. Median of ``--runs``
runs, each with a fresh scorer.

    python bench/bench_clip.py --images 8 --runs 3
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

# published shapes: (vision width, layers, heads), (text width, layers, heads), projection, patch, image size
SHAPES: dict[str, tuple[tuple[int, int, int], tuple[int, int, int], int, int, int]] = {
    "ViT-B/32": ((768, 12, 12), (512, 12, 8), 512, 32, 224),
    "ViT-L/14": ((1024, 24, 16), (768, 12, 12), 768, 14, 224),
}
OBJECTS = ["person", "dining table", "cup", "chair", "car", "dog", "bottle", "bowl", "cat", "truck", "bench", "umbrella"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    args = parser.parse_args()

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import torch
    from _autoprobe_assets import clip_tokenizer_dir

    from halluprobe.benchmarks.synthetic import write_synthetic
    from halluprobe.clip_signal import ClipScorer
    from halluprobe.tiny import build_tiny_clip

    with tempfile.TemporaryDirectory() as tmp:
        scenes = write_synthetic(Path(tmp) / "scenes", n_images=args.images, seed=7, overwrite=True)
        images = sorted(str(p) for p in scenes.images_dir.iterdir())[: args.images]
        pairs = [(image, OBJECTS[(i + j) % len(OBJECTS)]) for i, image in enumerate(images) for j in range(6)]
        print(f"{len(images)} images x 6 objects, median of {args.runs} runs, {torch.get_num_threads()} threads, CPU")
        for shape in args.shapes.split(","):
            vision, text, projection, patch, size = SHAPES[shape]
            folder = build_tiny_clip(
                Path(tmp) / shape.replace("/", "-"), clip_tokenizer_dir(), vision=vision, text=text,
                projection_dim=projection, patch_size=patch, image_size=size,
            )
            first: list[float] = []
            again: list[float] = []
            for _ in range(args.runs):
                scorer = ClipScorer(folder, device="cpu")
                started = time.perf_counter()
                scorer.similarities(pairs)
                first.append(time.perf_counter() - started)
                started = time.perf_counter()
                scorer.similarities(pairs)  # another split over the same images: cached embeddings
                again.append(time.perf_counter() - started)
            per_image = statistics.median(first) / len(images)
            print(
                f"{shape:9s} first split {statistics.median(first):6.2f} s ({per_image * 1000:6.0f} ms per image, "
                f"objects included); again from the caches {statistics.median(again) * 1000:6.1f} ms"
            )


if __name__ == "__main__":
    main()
