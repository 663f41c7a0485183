"""Time of deriving yes/no token sets from real vocabularies (median of several runs).

Prints figures; asserts nothing about time (tests/test_tokensets.py checks the derivation reads
the vocabulary in bulk). The vocabularies are the real LLaMA-2 and Qwen2 ones, fetched once
from PyPI by the tests' asset helper (tests/_assets.py), and Mistral v1 from mistral-common.

    python bench/bench_tokensets.py --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    import _assets
    from transformers import AutoTokenizer

    from halluprobe.readouts.tokensets import derive_token_sets

    folders = {
        "llama-2 (32000)": _assets.llama_tokenizer_dir(),
        "mistral v1 (32000)": _assets.mistral_tokenizer_dir("v1"),
        "qwen2 (151936)": _assets.qwen2_tokenizer_dir(),
    }
    for name, folder in folders.items():
        tokenizer = AutoTokenizer.from_pretrained(folder)
        times = []
        for _ in range(args.runs):
            started = time.perf_counter()
            derive_token_sets(tokenizer)
            times.append(time.perf_counter() - started)
        print(f"{name:20s} median {statistics.median(times):.3f} s  (min {min(times):.3f}, max {max(times):.3f}, {args.runs} runs)")


if __name__ == "__main__":
    main()
