"""Audit dicts -> one view model that both the HTML template and the Markdown twin read.

Everything that depends on the audit's key names lives here, so a renamed key is fixed in one
place, and the two outputs cannot drift apart. Missing keys become ``None`` or empty lists:
a report of a run without logit readouts (no ``p_yes``) still renders, with that section
saying why it is empty.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from halluprobe.jsonl import loads

__all__ = [
    "SECTIONS",
    "build_view",
    "fmt_ci",
    "fmt_count",
    "fmt_delta",
    "fmt_p",
    "fmt_pct",
    "fmt_score",
    "piece",
    "short_readout",
]

# Section ids, in page order: the template, the Markdown twin and the tests all use these.
SECTIONS: tuple[tuple[str, str], ...] = (
    ("run", "Run"),
    ("headline", "Headline metrics"),
    ("readouts", "Readout comparison"),
    ("confusion", "Confusion matrices"),
    ("convergence", "Convergence"),
    ("p-yes", "Distribution of p(yes)"),
    ("calibration", "Calibration"),
    ("profile", "Hallucination profile"),
    ("tokens", "Token diagnostic"),
)
LEADERBOARD = ("leaderboard", "Leaderboard")  # first, with several runs
RELABEL = ("relabel", "Labels")  # last, when the audit rescored against other label files

MINUS = "\u2212"  # a typographic minus: the same width as '+' in tabular figures


# -- number formatting (shared by HTML and Markdown) ---------------------------------------


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def fmt_pct(value: Any, digits: int = 1) -> str:
    """A ratio as a percentage without the sign (the column header says %): 0.8629 -> 86.3.

    Ratios are shown in % because POPE tables report them so; AUROC and ECE stay on [0, 1].
    """
    return f"{100 * value:.{digits}f}" if _finite(value) else "–"


def fmt_score(value: Any, digits: int = 3) -> str:
    """A score on [0, 1] that is not a rate (AUROC, ECE, p_yes): 0.8455 -> 0.846."""
    return f"{value:.{digits}f}" if _finite(value) else "–"


def fmt_count(value: Any) -> str:
    """An integer count with SI thousands (a narrow no-break space): 9000 -> 9 000, never split
    across lines and never read as a decimal comma."""
    if not isinstance(value, int) or isinstance(value, bool):
        return "–"
    return f"{value:,}".replace(",", "\u202f")


def fmt_ci(ci: Any, *, pct: bool = True, digits: int = 1, signed: bool = False) -> str:
    """``[lo, hi]`` formatted like its estimate; empty when there is no interval."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or not all(_finite(v) for v in ci):
        return ""
    scale = 100 if pct else 1
    lo, hi = (scale * v for v in ci)
    if signed:
        return f"[{_signed(lo, digits)}, {_signed(hi, digits)}]"
    return f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def _signed(value: float, digits: int) -> str:
    text = f"{abs(value):.{digits}f}"
    if float(text) == 0:
        return text
    return ("+" if value > 0 else MINUS) + text


def fmt_delta(value: Any, digits: int = 1) -> str:
    """A difference of ratios in percentage points, signed: 0.012 -> +1.2."""
    return _signed(100 * value, digits) if _finite(value) else "–"


def fmt_p(value: Any) -> str:
    """A p-value: two significant digits, floored at 0.001 (the resolution a reader needs)."""
    if not _finite(value):
        return "–"
    if value < 0.001:
        return "<0.001"
    if value >= 0.995:
        return "1.00"
    return f"{value:.2g}" if value < 0.01 else f"{value:.2f}"


def piece(text: Any) -> str:
    """A token piece as its Python repr, so leading spaces and control characters show."""
    return repr(text) if isinstance(text, str) else str(text)


def short_readout(name: str) -> str:
    """A readout's name for a narrow column head: ``text:pope`` -> ``pope``, ``legacy_2tok`` -> ``2tok``."""
    return name.removeprefix("text:").removeprefix("legacy_")


# -- reading the run directory for what an audit does not carry -----------------------------


def _run_facts(rundir: Path) -> dict[str, Any]:
    """Header fields and the first stored prompt, read straight from the run directory.

    The audit summarises the run; the report also shows the exact prompt and the benchmark
    fingerprints, which only the run directory has. Read failures leave the fields empty: the
    audit is enough to render.
    """
    facts: dict[str, Any] = {}
    try:
        header = loads((rundir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        header = {}
    if isinstance(header, dict):
        facts["header"] = header
    try:
        with open(rundir / "samples.jsonl", encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    facts["prompt"] = loads(line).get("prompt")
                    break
    except (OSError, ValueError):
        pass
    return facts


# -- view model ----------------------------------------------------------------------------


def _get(mapping: Any, *keys: str, default: Any = None) -> Any:
    for key in keys:
        if not isinstance(mapping, Mapping) or key not in mapping:
            return default
        mapping = mapping[key]
    return mapping


def _short_label(run: Mapping[str, Any], index: int) -> str:
    model = str(run.get("model") or f"run {index + 1}")
    name = Path(model).name or model
    return name.removesuffix(".json")


def _metrics_row(name: str, metrics: Mapping[str, Any] | None, kind: str) -> dict[str, Any]:
    return {"name": name, "kind": kind, "m": dict(metrics or {})}


def _readout_rows(audit: Mapping[str, Any]) -> list[dict[str, Any]]:
    headline = audit.get("headline", "dynamic")
    readouts: Mapping[str, Any] = audit.get("readouts") or {}
    paired: Mapping[str, Any] = audit.get("paired") or {}
    agreement: Mapping[str, Any] = audit.get("agreement") or {}
    rows = []
    for name, r in readouts.items():
        macro = r.get("macro") or {}
        rows.append(
            {
                "name": name,
                "headline": name == headline,
                "valid": bool(r.get("valid", True)),
                "forced": bool(r.get("forced", False)),
                "m": macro,
                "pooled": r.get("pooled") or {},
                "paired": paired.get(name),
                "agreement": _get(agreement, headline, name),
            }
        )
    return rows


def _token_view(audit: Mapping[str, Any], header: Mapping[str, Any]) -> dict[str, Any]:
    sets = _get(audit, "run", "token_sets") or header.get("token_sets") or {}
    yes = list(zip(sets.get("yes_ids", []), sets.get("yes_pieces", [])))
    no = list(zip(sets.get("no_ids", []), sets.get("no_pieces", [])))
    legacy = sets.get("legacy_pieces") or {}
    return {
        "yes": yes,
        "no": no,
        # a server backend reports pieces, not ids: its sets are derived per sample (no list to show)
        "by_piece": sets.get("keyed_by") == "piece",
        "legacy_valid": sets.get("legacy_valid"),
        "legacy": sorted(legacy.items(), key=lambda kv: int(kv[0]) if str(kv[0]).isdigit() else 0),
        "vocab_size": sets.get("vocab_size"),
        "fingerprint": sets.get("tokenizer_fingerprint"),
        "offset_rate": audit.get("offset_rate"),
        "offset_pieces": [list(p) for p in audit.get("offset_pieces") or []],
        "first_pieces": [list(p) for p in audit.get("first_pieces") or []],
        "first_total": audit.get("first_pieces_total"),
        # rule -> {n, differ, text_unknown, dynamic_unknown, both_unknown}
        "text_dynamic": {k: v for k, v in (audit.get("text_dynamic_disagreements") or {}).items() if isinstance(v, Mapping)},
        # logit readout -> {in_set, agree, disagree, offset}: against the greedy first token
        "greedy": {k: v for k, v in (audit.get("greedy") or {}).items() if isinstance(v, Mapping)},
    }


def _relabel_view(audit: Mapping[str, Any], headline: str) -> list[dict[str, Any]]:
    """One row per label file (and one for all of them together): what changed, and how far
    the headline's macro metrics move when the stored answers are scored against it."""
    base = _get(audit, "readouts", headline, "macro") or {}
    entries = [(name, e) for name, e in (audit.get("relabel") or {}).items() if isinstance(e, Mapping)]
    combined = audit.get("relabel_combined")
    if isinstance(combined, Mapping):
        entries.append(("all files together", combined))
    rows = []
    for name, e in entries:
        after = _get(e, "metrics", headline, "macro") or {}
        rows.append(
            {
                "name": name,
                "split": e.get("split") or ", ".join(e.get("splits") or []),
                "matched": e.get("matched"),
                "removed": e.get("removed"),
                "flipped": e.get("flipped"),
                "to_yes": e.get("flipped_to_yes"),
                "to_no": e.get("flipped_to_no"),
                "added": e.get("added"),
                "before": base,
                "after": after,
                "shift": _get(e, "shift", headline, "macro") or {},
                "combined": name == "all files together",
            }
        )
    return rows


def _run_view(audit: Mapping[str, Any], rundir: Path | None, index: int, label: str | None) -> dict[str, Any]:
    facts = _run_facts(rundir) if rundir is not None else {}
    header: Mapping[str, Any] = facts.get("header") or {}
    run: Mapping[str, Any] = audit.get("run") or {}
    headline = audit.get("headline", "dynamic")
    head = (audit.get("readouts") or {}).get(headline) or {}
    splits = head.get("splits") or {}
    confusion = _get(audit, "confusion", headline)
    if not confusion:
        confusion = {s: {k: m.get(k, 0) for k in ("tp", "fp", "tn", "fn", "unknown")} for s, m in splits.items()}
    curves = audit.get("convergence") or {}
    profile = audit.get("hallucination_profile") or {}
    return {
        "index": index,
        "label": label or _short_label(run, index),
        "path": str(run.get("path") or rundir or ""),
        "model": run.get("model") or header.get("model"),
        "backend": run.get("backend") or header.get("backend"),
        "backend_info": header.get("backend_info") or {},
        "template": run.get("template") or header.get("template"),
        "prompt": facts.get("prompt") or run.get("prompt"),
        "created_at": run.get("created_at") or header.get("created_at"),
        "n": run.get("n") or head.get("pooled", {}).get("n"),
        "errors": run.get("errors"),
        "complete": run.get("complete"),
        "split_sizes": run.get("splits") or {},
        "missing_readouts": run.get("missing_readouts") or [],
        "packages": run.get("packages") or header.get("packages") or {},
        "version": run.get("halluprobe_version") or header.get("halluprobe_version") or (run.get("packages") or {}).get("halluprobe"),
        "benchmarks": header.get("benchmarks") or {},
        "benchmark_paths": header.get("benchmark_paths") or {},
        "seed": header.get("seed"),
        "headline": headline,
        "policy": audit.get("policy", "wrong"),
        "bootstrap": audit.get("bootstrap") or {},
        "headline_rows": [
            *(_metrics_row(s, m, "split") for s, m in splits.items()),
            _metrics_row("pooled", head.get("pooled"), "pooled"),
            _metrics_row("macro", head.get("macro"), "macro"),
        ],
        "readouts": _readout_rows(audit),
        "confusion": confusion,
        "curves": curves,
        "stable_after": audit.get("stable_after") or {},
        "convergence_tol": _get(audit, "convergence_rule", "tol", default=0.005),
        "convergence_metric": _get(audit, "convergence_rule", "metric", default="pooled f1"),
        "p_yes": audit.get("p_yes") or {},
        "calibration": audit.get("calibration") or {},
        "profile_objects": list(profile.get("objects") or []),
        # the audit ranks by rate, where 1 of 1 comes first; a reader wants the frequent ones
        "profile_pairs": sorted(profile.get("adversarial_pairs") or [], key=lambda p: (-(p.get("yes") or 0), -(p.get("rate") or 0))),
        "tokens": _token_view(audit, header),
        "relabel": _relabel_view(audit, headline),
        "agreement": audit.get("agreement") or {},
        "figures": {},
    }


def build_view(
    audits: Sequence[Mapping[str, Any]],
    rundirs: Sequence[Path | None],
    comparison: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The whole page: one run view per audit, and the leaderboard when there are several."""
    labels: list[str | None] = [None] * len(audits)
    if comparison:
        for i, run in enumerate(comparison.get("runs") or []):
            if i < len(labels) and run.get("label"):
                labels[i] = str(run["label"])
    runs = [_run_view(a, d, i, labels[i]) for i, (a, d) in enumerate(zip(audits, rundirs))]
    _dedupe_labels(runs)
    board = _leaderboard(runs, comparison) if len(runs) > 1 else None
    first = runs[0] if runs else {}
    boot = first.get("bootstrap") or {}
    return {
        "title": "Leaderboard: " + ", ".join(r["label"] for r in runs) if board else f"Report: {first.get('label', '')}",
        "runs": runs,
        "leaderboard": board,
        "sections": ([LEADERBOARD] if board else []) + list(SECTIONS) + ([RELABEL] if any(r["relabel"] for r in runs) else []),
        "headline": first.get("headline", "dynamic"),
        "policy": first.get("policy", "wrong"),
        "bootstrap": boot,
        "bootstrap_text": _bootstrap_text(boot),
        "show_errors": any(r.get("errors") for r in runs),
        "any_forced": any(r["forced"] or not r["valid"] for run in runs for r in run["readouts"]),
        "version": first.get("version"),
        "figures": {},
    }


def _bootstrap_text(boot: Mapping[str, Any]) -> str:
    if not boot:
        return ""
    n, seed = boot.get("n_resamples"), boot.get("seed")
    text = "percentile bootstrap over images"
    details = [f"{fmt_count(n)} resamples" if isinstance(n, int) else "", f"seed {seed}" if seed is not None else ""]
    details = [d for d in details if d]
    return text + (f" ({', '.join(details)})" if details else "")


def _dedupe_labels(runs: list[dict[str, Any]]) -> None:
    seen: dict[str, int] = {}
    for run in runs:
        count = seen.get(run["label"], 0)
        seen[run["label"]] = count + 1
        if count:
            run["label"] = f"{run['label']} ({count + 1})"


def _leaderboard(runs: list[dict[str, Any]], comparison: Mapping[str, Any] | None) -> dict[str, Any]:
    """Rows ranked by macro F1; the paired test of each run against the reference run.

    With a ``compare_runs`` result the numbers are its own (computed on the questions all runs
    share); without one they fall back to each run's own headline macro, unpaired.
    """
    table: Mapping[str, Any] = (comparison or {}).get("table") or {}
    paired: Mapping[str, Any] = (comparison or {}).get("paired") or {}
    comp_runs = list((comparison or {}).get("runs") or [])
    rows = []
    for i, run in enumerate(runs):
        key = comp_runs[i].get("label") if i < len(comp_runs) else run["label"]
        entry = table.get(key) or {}
        macro = entry.get("macro") or next((r["m"] for r in run["headline_rows"] if r["kind"] == "macro"), {})
        pooled = entry.get("pooled") or next((r["m"] for r in run["headline_rows"] if r["kind"] == "pooled"), {})
        rows.append({"run": run, "label": run["label"], "macro": macro, "pooled": pooled, "paired": paired.get(key)})
    reference = rows[0]["label"] if rows else None
    ranked = sorted(rows, key=lambda r: -(r["macro"].get("f1") or -1.0))
    for rank, row in enumerate(ranked, start=1):
        row["rank"] = rank
    return {
        "rows": ranked,
        "reference": reference,
        "common_questions": (comparison or {}).get("common_questions"),
        "readout": (comparison or {}).get("readout") or (runs[0]["headline"] if runs else None),
        "paired_available": bool(paired),
    }
