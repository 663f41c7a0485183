"""The decoding table for people: Markdown (per run, paired differences, CHAIR by length bin,
PROVE) and booktabs LaTeX, under a provenance comment.

The comment (``halluprobe-decoding-provenance {JSON}``) names every run (path, role, name,
fingerprint, samples sha256), the CHAIR family and ground truth, the PROVE score files (sha256)
and the bootstrap: every count and metric is recomputable from those run dirs
(``halluprobe decoding`` again, or by hand from samples.jsonl); ``halluprobe check`` recomputes
every table under it (:mod:`halluprobe.check.decoding`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from halluprobe.formatting import format_ratio, markdown_table
from halluprobe.provenance import DecodingProvenance, marked_comment

__all__ = ["decoding_latex", "decoding_markdown", "decoding_provenance", "decoding_text"]

# (key, label, scale): rates in %, length in words, hallucinations per 100 words as they are
COLUMNS = (("chair_s", "CHAIR_s", 100), ("chair_i", "CHAIR_i", 100), ("recall", "Recall", 100), ("length", "Len", 1),
           ("halluc_per_100_words", "Hall/100w", 1))  # fmt: skip
PAIRED = (*COLUMNS, ("chair_s_at_baseline_length", "CHAIR_s at baseline length", 100))


def decoding_provenance(result: Mapping[str, Any], prove_scores: Sequence[Path] = ()) -> DecodingProvenance:
    from halluprobe import __version__
    from halluprobe.rundir import sha256_file

    chair = result.get("chair", {})
    optional = {"tokenizer": chair["tokenizer"]} if chair.get("tokenizer", "punkt") != "punkt" else {}  # punkt's (and older) name none
    return DecodingProvenance.model_validate({
        "table": "decoding",
        "runs": [{k: r[k] for k in ("path", "role", "name", "fingerprint", "samples_sha256")} for r in result["runs"]],
        "family": chair.get("family"), "ground_truth": chair.get("ground_truth"), "truncate_incomplete": chair.get("truncate_incomplete"),
        "prove_scores": [{"path": str(p), "scores_sha256": sha256_file(p / "scores.jsonl")} for p in prove_scores],
        "bootstrap": result["bootstrap"], "halluprobe": __version__, **optional,
    })  # fmt: skip


def _comment(provenance: DecodingProvenance | Mapping[str, Any], syntax: Literal["markdown", "latex"]) -> str:
    # check passes the comment it read as a dict (check/decoding.py's DecodingTable)
    record = provenance if isinstance(provenance, DecodingProvenance) else DecodingProvenance.model_validate(provenance)
    return marked_comment(record, syntax)


def _value(value: float | None, ci: Any, scale: float, signed: bool = False) -> str:
    cell = format_ratio(value, ci, digits=1, ci_digits=1, scale=scale, missing="n/a")
    return ("+" + cell) if signed and value is not None and value >= 0 else cell


def _run_rows(chair: Mapping[str, Any]) -> list[list[Any]]:
    return [[r["name"], r["role"], r["n"], *(_value(r[k], r["ci"].get(k), s) for k, _, s in COLUMNS)] for r in chair["per_run"]]


def _paired_rows(chair: Mapping[str, Any]) -> list[list[Any]]:
    rows = []
    for entry in chair["paired"]:
        for against, label in (("vs_greedy", "greedy"), ("vs_sampled", "sampled")):
            if against not in entry:
                continue
            d = entry[against]
            note = " (other sampling)" if against == "vs_sampled" and entry.get("sampling_matches") is False else ""
            rows.append([entry["name"], label + note, *(_value(d[k]["diff"], d[k]["ci"], s, signed=True) for k, _, s in PAIRED)])
    return rows


def _prove_lines(prove: Mapping[str, Any]) -> list[str]:
    lines = ["### PROVE", ""]
    lines += markdown_table(["run", "role", "n", "hscore", "tscore"],
                            [[r["name"], r["role"], r["n"], _value(r["hscore"], r["ci"].get("hscore"), 100),
                              _value(r["tscore"], r["ci"].get("tscore"), 100)] for r in prove["per_run"]])  # fmt: skip
    rows = []
    for entry in prove["paired"]:
        for against, label in (("vs_greedy", "greedy"), ("vs_sampled", "sampled")):
            if against in entry:
                d = entry[against]
                rows.append([entry["name"], label, *(f"{_value(d[m]['diff'], d[m]['ci'], 100, signed=True)} (n={d[m]['n']})" for m in ("hscore", "tscore"))])
    lines += ["", *markdown_table(["method", "against", "Δ hscore", "Δ tscore"], rows)] if rows else []
    return lines + ["", "hscore, tscore in % (PROVE's scores of `prove score`); differences over the questions both runs score, resampled by image.", ""]


def _counted_by(chair: Mapping[str, Any]) -> str:
    """The family, and the tokenizer where it is not punkt's (older results name none)."""
    tokenizer = chair.get("tokenizer", "punkt")
    return chair["family"] if tokenizer == "punkt" else f"{chair['family']}, tokenizer {tokenizer}"


def decoding_markdown(result: Mapping[str, Any], provenance: DecodingProvenance | Mapping[str, Any]) -> str:
    lines = ["## Decoding methods on free-form answers", "", _comment(provenance, "markdown")]
    chair = result.get("chair")
    if chair is not None:
        lines += markdown_table(["run", "role", "n", *(label for _, label, _ in COLUMNS)], _run_rows(chair))
        gt = chair["ground_truth"]
        year = " " + str(gt["year"]) if gt.get("year") else ""
        note = (f"CHAIR ({_counted_by(chair)}) on the {chair['images']} images every run captioned ({chair['images_dropped']} left out: a failed "
                f"sample in some run); ground truth: {gt['source']}{year}. CHAIR_s, CHAIR_i, Recall in %, "
                "Len in words per caption, Hall/100w = hallucinated objects per 100 words; 95% image-bootstrap CIs.")  # fmt: skip
        lines += ["", note, ""]
        rows = _paired_rows(chair)
        if rows:
            lines += ["### Paired differences (method - baseline, per image)", ""]
            lines += markdown_table(["method", "against", *(f"Δ {label}" for _, label, _ in PAIRED)], rows)
            matched = ("CHAIR_s at baseline length: the method's CHAIR_s per length bin, weighted as the baseline's captions "
                       "fall in those bins (matched length). A method that only shortens captions lowers CHAIR_s but not this.")  # fmt: skip
            lines += ["", matched, ""]
        lines += ["### CHAIR by caption length (bins at the greedy baseline's length quartiles)", ""]
        bin_rows = []
        for run in chair["length_bins"]:
            for b in run["bins"]:
                low, high = b["lengths"]
                span = f"<= {high}" if low is None else (f">= {low}" if high is None else f"{low}-{high}")
                bin_rows.append([run["name"], span, b["n"], _value(b["chair_s"], None, 100), _value(b["chair_i"], None, 100)])
        lines += markdown_table(["run", "length (words)", "captions", "CHAIR_s", "CHAIR_i"], bin_rows)
        lines.append("")
    if "prove" in result:
        lines += _prove_lines(result["prove"])
    return "\n".join(lines) + "\n"


def decoding_latex(result: Mapping[str, Any], provenance: DecodingProvenance | Mapping[str, Any]) -> str:
    """Per-run CHAIR and the paired differences, booktabs, the provenance comment above."""
    from halluprobe.tables import latex_escape

    body = [_comment(provenance, "latex")]
    chair = result.get("chair")
    if chair is not None:
        body += [r"\begin{tabular}{llr" + "r" * len(COLUMNS) + "}", r"\toprule",
                 "Run & Role & $n$ & CHAIR$_s$ & CHAIR$_i$ & Recall & Len & Hall/100w \\\\", r"\midrule"]  # fmt: skip
        body += [" & ".join(latex_escape(str(c)) for c in row) + " \\\\" for row in _run_rows(chair)]
        body += [r"\bottomrule", r"\end{tabular}"]
        rows = _paired_rows(chair)
        if rows:
            body += ["", r"\begin{tabular}{ll" + "r" * len(PAIRED) + "}", r"\toprule",
                     r"Method & Against & $\Delta$CHAIR$_s$ & $\Delta$CHAIR$_i$ & $\Delta$Recall & $\Delta$Len & $\Delta$Hall/100w & $\Delta$CHAIR$_s$ (matched length) \\",
                     r"\midrule"]  # fmt: skip
            body += [" & ".join(latex_escape(str(c)) for c in row) + " \\\\" for row in rows]
            body += [r"\bottomrule", r"\end{tabular}"]
    if "prove" in result:
        body += ["", r"\begin{tabular}{llrrr}", r"\toprule", r"Run & Role & $n$ & hscore & tscore \\", r"\midrule"]
        for r in result["prove"]["per_run"]:
            cells = [r["name"], r["role"], r["n"], _value(r["hscore"], r["ci"].get("hscore"), 100), _value(r["tscore"], r["ci"].get("tscore"), 100)]
            body.append(" & ".join(latex_escape(str(c)) for c in cells) + " \\\\")
        body += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(body) + "\n"


def decoding_text(result: Mapping[str, Any]) -> str:
    """The terminal view: one line per run, one per paired difference."""
    lines = []
    chair = result.get("chair")
    if chair is not None:
        lines.append(f"CHAIR ({_counted_by(chair)}), {chair['images']} images ({chair['images_dropped']} left out)")
        for row in _run_rows(chair):
            lines.append(f"  {row[0]} [{row[1]}] n={row[2]}: " + "  ".join(f"{label} {cell}" for (_, label, _), cell in zip(COLUMNS, row[3:])))
        for row in _paired_rows(chair):
            lines.append(f"  {row[0]} - {row[1]}: " + "  ".join(f"Δ{label} {cell}" for (_, label, _), cell in zip(PAIRED, row[2:])))
    if "prove" in result:
        for r in result["prove"]["per_run"]:
            lines.append(f"PROVE {r['name']} [{r['role']}]: hscore {_value(r['hscore'], r['ci'].get('hscore'), 100)}  "
                         f"tscore {_value(r['tscore'], r['ci'].get('tscore'), 100)}")  # fmt: skip
    return "\n".join(lines)
