"""The CHAIR section of a report: both normaliser families side by side, the objects most
often hallucinated, and CHAIR against caption length (shorter captions hallucinate less, so a
method that shortens captions "reduces" CHAIR: the section shows it).

Tables carry a provenance comment (``halluprobe-chair-provenance {JSON}``: the run, its
fingerprint and samples sha256, the families, the ground truth, the options and the bootstrap)
above them. ``halluprobe check`` does not verify it yet.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from halluprobe.formatting import format_ratio, markdown_table

__all__ = ["CHAIR_PROVENANCE_MARK", "chair_latex_table", "chair_provenance", "chair_section", "hallucinated_objects", "length_bins"]

CHAIR_PROVENANCE_MARK = "halluprobe-chair-provenance"
_METRICS = (("chair_s", "CHAIR_s", 100), ("chair_i", "CHAIR_i", 100), ("recall", "Recall", 100), ("length", "Len", 1))


def chair_provenance(results: Mapping[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    """What the table was computed from: ``source`` (the run: path, fingerprint, samples sha256)
    and, per family, the ground truth and the options recorded with the result."""
    from halluprobe import __version__

    first = next(iter(results.values()))["summary"]["settings"]
    return {
        "table": "chair", "source": dict(source), "families": list(results),
        "ground_truth": {f: r["summary"]["settings"]["ground_truth"] for f, r in results.items()},
        "truncate_incomplete": first.get("truncate_incomplete"), "prompt": first.get("prompt"),
        "max_new_tokens": first.get("max_new_tokens"), "halluprobe": __version__,
    }  # fmt: skip


def _comment(provenance: Mapping[str, Any], syntax: Literal["markdown", "latex"]) -> str:
    payload = json.dumps(provenance, ensure_ascii=True, separators=(", ", ": "), default=str)
    if syntax == "latex":
        return f"% {CHAIR_PROVENANCE_MARK} {payload}"
    return f"<!-- {CHAIR_PROVENANCE_MARK} {payload.replace('>', chr(92) + 'u003e')} -->"


def _cell(summary: Mapping[str, Any], metric: str, scale: int) -> str:
    return format_ratio(summary[metric], summary["ci"].get(metric), digits=1, ci_digits=1, scale=scale, missing="n/a")


def hallucinated_objects(scores: Sequence[Any], top: int = 10) -> list[tuple[str, int, int]]:
    """(category, captions hallucinating it, mentions) for the most often hallucinated."""
    captions: Counter[str] = Counter()
    mentions: Counter[str] = Counter()
    for s in scores:
        captions.update(set(s.hallucinated))
        mentions.update(s.hallucinated)
    return [(name, n, mentions[name]) for name, n in sorted(captions.items(), key=lambda kv: (-kv[1], kv[0]))[:top]]


def length_bins(scores: Sequence[Any], bins: int = 4) -> list[dict[str, Any]]:
    """Captions split into ``bins`` groups of caption length (equal counts, by length order):
    each group's length range, CHAIR_s and CHAIR_i."""
    ordered = sorted(scores, key=lambda s: s.length)
    out = []
    for k in range(bins):
        part = ordered[k * len(ordered) // bins : (k + 1) * len(ordered) // bins]
        if not part:
            continue
        mentions = sum(len(s.objects) for s in part)
        out.append({
            "lengths": (part[0].length, part[-1].length), "n": len(part),
            "chair_s": sum(bool(s.hallucinated) for s in part) / len(part),
            "chair_i": sum(len(s.hallucinated) for s in part) / mentions if mentions else None,
        })  # fmt: skip
    return out


def chair_section(results: Mapping[str, Any], scores: Mapping[str, Sequence[Any]], source: Mapping[str, Any]) -> str:
    """The Markdown section: families side by side, top hallucinated objects, CHAIR by length."""
    lines = ["## CHAIR", "", _comment(chair_provenance(results, source), "markdown")]
    header = ["family", "n", *(label for _, label, _ in _METRICS)]
    rows = [[f, r["summary"]["n"], *(_cell(r["summary"], m, s) for m, _, s in _METRICS)] for f, r in results.items()]
    lines += markdown_table(header, rows)
    first = next(iter(results.values()))["summary"]["settings"]
    gt = first["ground_truth"]
    lines += ["", f"Ground truth: {gt['source']}{' ' + str(gt['year']) if gt.get('year') else ''}; prompt: {first.get('prompt')!s}; "
              f"max_new_tokens: {first.get('max_new_tokens')}; truncate_incomplete: {first.get('truncate_incomplete')}. "
              "CHAIR_s, CHAIR_i, Recall in %, Len in words per caption; 95% image-bootstrap CIs.", ""]  # fmt: skip
    lines += ["### Objects most often hallucinated", ""]
    top = {f: hallucinated_objects(s) for f, s in scores.items()}
    depth = max((len(v) for v in top.values()), default=0)
    lines += markdown_table(["rank", *results], [[k + 1, *(f"{v[k][0]} ({v[k][1]} captions)" if k < len(v) else "" for v in top.values())] for k in range(depth)])
    lines += ["", "### CHAIR against caption length", ""]
    binned = {f: length_bins(s) for f, s in scores.items()}
    rows = []
    for f, groups in binned.items():
        for g in groups:
            rows.append([f, f"{g['lengths'][0]}-{g['lengths'][1]}", g["n"], format_ratio(g["chair_s"], digits=1, scale=100),
                         format_ratio(g["chair_i"], digits=1, scale=100, missing="n/a")])  # fmt: skip
    lines += markdown_table(["family", "length (words)", "captions", "CHAIR_s", "CHAIR_i"], rows)
    return "\n".join(lines) + "\n"


def chair_latex_table(results: Mapping[str, Any], source: Mapping[str, Any]) -> str:
    """The families-side-by-side table in booktabs LaTeX, its provenance comment above it."""
    from halluprobe.tables import latex_escape

    body = [
        _comment(chair_provenance(results, source), "latex"),
        r"\begin{tabular}{lrrrrr}", r"\toprule",
        "Family & $n$ & CHAIR$_s$ & CHAIR$_i$ & Recall & Len \\\\", r"\midrule",
    ]  # fmt: skip
    for f, r in results.items():
        s = r["summary"]
        cells = [latex_escape(f), str(s["n"]), *(latex_escape(_cell(s, m, sc)) for m, _, sc in _METRICS)]
        body.append(" & ".join(cells) + " \\\\")
    body += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(body) + "\n"
