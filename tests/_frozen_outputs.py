"""Byte-for-byte outputs of the presenting verbs on run dirs stored by an earlier version.

The fixture (`tests/golden/frozen/`) is the demo's POPE run and its three caption runs as
`halluprobe demo` wrote them at commit b240646 (samples gzipped), and what `score`, `audit`,
`corrections`, `report`, `chair`, `decoding` and `check` printed and wrote on them then. A
refactor that keeps every option and output must keep every one of these bytes.

    python tests/_frozen_outputs.py write DEMO_DIR   # re-freeze (only when an output is meant to change)
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

FROZEN = Path(__file__).resolve().parent / "golden" / "frozen"
RUNS = ("run", "captions-greedy", "captions-sampled", "captions-vcd")
GT = "halluprobe-demo/captions/ground_truth.jsonl"
CHAIR = ["--family", "singularize", "--tokenizer", "line", "--ground-truth", GT]
DECODING = ["decoding", "halluprobe-demo/captions-greedy", "halluprobe-demo/captions-vcd",
            "--sampled-baseline", "halluprobe-demo/captions-sampled", *CHAIR, "--bootstrap", "200"]  # fmt: skip
RUN = "halluprobe-demo/run"

# name -> (argv, files or folders the verb writes that are compared too, relative to the root)
VERBS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "score": (["score", RUN, "--resamples", "200"], ("halluprobe-demo/run/metrics.json",)),
    "score_json": (["score", RUN, "--resamples", "200", "--json"], ()),
    "score_markdown": (["score", RUN, "--resamples", "200", "--markdown"], ()),
    "score_latex": (["score", RUN, "--resamples", "200", "--latex", "--readout", "text:pope"], ()),
    "audit": (["audit", RUN, "--resamples", "200"], ("halluprobe-demo/run/audit.json",)),
    "audit_markdown": (["audit", RUN, "--resamples", "200", "--markdown"], ()),
    "audit_latex": (["audit", RUN, "--resamples", "200", "--latex"], ()),
    "audit_json": (["audit", RUN, "--resamples", "200", "--json"], ()),
    "corrections": (["corrections", RUN, "--resamples", "200"], ()),
    "corrections_markdown": (["corrections", RUN, "--resamples", "200", "--markdown"], ()),
    "corrections_latex": (["corrections", RUN, "--resamples", "200", "--latex"], ()),
    "corrections_json": (["corrections", RUN, "--resamples", "200", "--json"], ()),
    "chair": (["chair", "halluprobe-demo/captions-greedy", *CHAIR, "--bootstrap", "200", "--out", "chair-out"],
              ("chair-out",)),
    "chair_json": (["chair", "halluprobe-demo/captions-vcd", *CHAIR, "--bootstrap", "200", "--json",
                    "--against", "halluprobe-demo/captions-greedy"], ()),
    "decoding": (DECODING, ()),
    "decoding_json": ([*DECODING, "--json"], ()),
    "decoding_markdown": ([*DECODING, "--markdown"], ()),
    "decoding_latex": ([*DECODING, "--latex"], ()),
    "report_pope": (["report", RUN, "--resamples", "200", "--out", "report-pope/report.html"],
                    ("report-pope",)),
    "report_chair": (["report", "halluprobe-demo/captions-greedy", "halluprobe-demo/captions-vcd", *CHAIR,
                      "--resamples", "200", "--out", "report-chair/report.html"], ("report-chair",)),
    "report_decoding": (["report", RUN, "halluprobe-demo/captions-greedy", "halluprobe-demo/captions-vcd",
                         "halluprobe-demo/captions-sampled", *CHAIR, "--resamples", "200",
                         "--out", "report-decoding/report.html"], ("report-decoding",)),
}  # fmt: skip
# check reads what the verbs above wrote, so it runs after them
CHECKS: dict[str, list[str]] = {
    "check_report_pope": ["check", "report-pope/report.md"],
    "check_report_decoding": ["check", "report-decoding/report.md"],
    "check_chair": ["check", "chair-out/chair_report.md"],
}


def lay_out(root: Path) -> None:
    """The stored run dirs, unpacked under ROOT/halluprobe-demo as the demo laid them out."""
    demo = root / "halluprobe-demo"
    for name in RUNS:
        source, target = FROZEN / "runs" / name, demo / name
        target.mkdir(parents=True)
        for path in source.iterdir():
            if path.name.endswith(".gz"):
                (target / path.name.removesuffix(".gz")).write_bytes(gzip.decompress(path.read_bytes()))
            else:
                shutil.copyfile(path, target / path.name)
    (demo / "captions").mkdir()
    shutil.copyfile(FROZEN / "runs" / "ground_truth.jsonl", demo / "captions" / "ground_truth.jsonl")


def _cli(argv: list[str], root: Path) -> subprocess.CompletedProcess[bytes]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    return subprocess.run([sys.executable, "-m", "halluprobe.cli", *argv], cwd=root, capture_output=True, env=env, timeout=600)  # fmt: skip


def outputs(root: Path, names: list[str] | None = None) -> dict[str, bytes]:
    """Every compared output, keyed `<verb>.out`, `<verb>.rc` and `<verb>.<file>`."""
    found: dict[str, bytes] = {}
    for name, (argv, files) in VERBS.items():
        if names is not None and name not in names:
            continue
        done = _cli(argv, root)
        found[f"{name}.out"] = done.stdout
        found[f"{name}.rc"] = str(done.returncode).encode()
        for file in files:
            path = root / file
            for each in sorted(path.rglob("*")) if path.is_dir() else [path]:
                if each.is_file():
                    found[f"{name}.{each.relative_to(root).as_posix().replace('/', '__')}"] = each.read_bytes()
    for name, argv in CHECKS.items():
        if names is not None and name not in names:
            continue
        done = _cli(argv, root)
        found[f"{name}.out"] = done.stdout
        found[f"{name}.rc"] = str(done.returncode).encode()
    return found


def write(demo: Path) -> None:
    """Store DEMO's run dirs and freeze every output the current version gives on them."""
    shutil.rmtree(FROZEN, ignore_errors=True)
    for name in RUNS:
        target = FROZEN / "runs" / name
        target.mkdir(parents=True)
        for path in (demo / name).iterdir():
            if path.name == "samples.jsonl":
                (target / "samples.jsonl.gz").write_bytes(gzip.compress(path.read_bytes(), mtime=0))
            elif path.name in ("run.json", "complete.json"):
                shutil.copyfile(path, target / path.name)
    shutil.copyfile(demo / "captions" / "ground_truth.jsonl", FROZEN / "runs" / "ground_truth.jsonl")
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        lay_out(Path(tmp))
        found = outputs(Path(tmp))
    (FROZEN / "outputs").mkdir()
    for key, data in found.items():
        (FROZEN / "outputs" / key).write_bytes(data)
    (FROZEN / "outputs.json").write_text(json.dumps(sorted(found), indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "write":
        sys.exit(__doc__)
    write(Path(sys.argv[2]))
