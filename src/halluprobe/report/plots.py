"""Figures of the report, each returned as an inline SVG string (no files, no network).

matplotlib is imported only inside the functions, and a figure is a bare ``Figure`` drawn by
the SVG backend: no pyplot, no GUI backend, no global figure registry, and every style setting
lives in one ``rc_context``, so nothing global changes. Text is drawn as glyph paths in fonts
that ship with matplotlib (STIX, a Times-like serif matching the page, falling back to DejaVu
for pieces such as ``▁``; DejaVu Sans Mono for readout names and pieces), so a figure looks the
same in every browser and in print. Colours are the Okabe-Ito palette (safe for the common
colour-vision deficiencies), and series also differ by line style, marker or hatching, so a
greyscale print still reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from halluprobe.records_audit import Calibration, ConfusionCounts, CurvePoint, ObjectRate, PieceShare, PYesByLabel
from halluprobe.report.figure_style import (
    FONT_PT,
    LABEL_COLOURS,
    MONO,
    PALETTE,
    TEXT_WIDTH_IN,
    count_text,
    figure,
    finite,
    max_ticks,
    readout_style,
    svg,
    thousands,
)

__all__ = [
    "confusion_plot",
    "convergence_plot",
    "first_pieces_plot",
    "forest_plot",
    "p_yes_histograms",
    "profile_plot",
    "reliability_diagram",
]


# -- figures -----------------------------------------------------------------------------
# Ratios are drawn in % (as in the page's tables); probabilities (p_yes) stay on [0, 1].
# ``xlim`` / ``ylim`` let a leaderboard give side-by-side panels the same scale.


def forest_plot(
    rows: Sequence[tuple[str, float | None, tuple[float, float] | None, bool]],
    *,
    xlabel: str = "macro F1 (%)",
    title: str = "",
    reference: float | None = None,
    width: float = 5.0,
    mono_labels: bool = True,
    xlim: tuple[float, float] | None = None,
) -> str:
    """Point estimates with 95% CIs, one row each: ``(label, value, (lo, hi) | None, muted)``,
    values in %. ``muted`` rows (a readout scored only because it was forced) are hollow grey.
    """
    rows = [r for r in rows if finite(r[1])]
    height = 0.6 + 0.26 * max(len(rows), 1)
    with figure(width, height) as (fig, axes):
        ax = axes[0][0]
        ax.grid(axis="x")
        ax.grid(axis="y", visible=False)
        ys = list(range(len(rows)))[::-1]
        for y, (_, value, ci, muted) in zip(ys, rows):
            colour = PALETTE["grey"] if muted else PALETTE["black"]
            if ci is not None:
                ax.errorbar(
                    [value],
                    [y],
                    xerr=[[max(value - ci[0], 0)], [max(ci[1] - value, 0)]],
                    fmt="none",
                    ecolor=colour,
                    elinewidth=1.0,
                    capsize=2.5,
                    capthick=0.8,
                    clip_on=False,
                )
            # unclipped: a readout at F1 = 0 sits on the axis edge and must stay whole
            ax.plot([value], [y], "o", ms=4.5, color=colour, mfc="white" if muted else colour, mew=0.9, zorder=3, clip_on=False)
        if reference is not None:
            ax.axvline(reference, color=PALETTE["blue"], lw=0.8, ls=(0, (3, 2)), zorder=0)
        ax.set_yticks(ys, [r[0] for r in rows], family=MONO if mono_labels else None, fontsize=FONT_PT - 1)
        ax.set_ylim(-0.6, len(rows) - 0.4)
        if xlim is not None:
            ax.set_xlim(*xlim)
        ax.tick_params(axis="y", length=0)
        ax.spines["left"].set_visible(False)
        ax.set_xlabel(xlabel)
        if title:
            ax.set_title(title)
        return svg(fig, title or xlabel)


def confusion_plot(confusion: Mapping[str, ConfusionCounts], *, title: str = "", width: float = TEXT_WIDTH_IN) -> str:
    """One panel per split: true label (rows) x decision (columns), count and row share per cell.

    Shading is the row share, so splits of different sizes compare. Unknown answers (a total,
    not split by label) are written under the panel.
    """
    import matplotlib
    import numpy as np
    from matplotlib.patches import Rectangle

    splits = list(confusion)
    n = max(len(splits), 1)
    any_unknown = any(c.unknown for c in confusion.values())
    cols = 2
    width = min(width, 0.6 + (1.25 * cols + 0.35) * n)
    with figure(width, 2.05, ncols=n) as (fig, axes):
        for ax, split in zip(axes[0], splits):
            c = confusion[split]
            rows = [[c.tp, c.fn], [c.fp, c.tn]]
            grid = np.array(rows, dtype=float)
            share = grid / np.maximum(grid.sum(axis=1, keepdims=True), 1)
            # cells as vector rectangles (imshow would embed a PNG: blurry when zoomed or printed)
            cmap = matplotlib.colormaps["Blues"]
            for (i, j), value in np.ndenumerate(share):
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=cmap(value / 1.15), edgecolor="white", lw=1.0))
            ax.set_xlim(-0.5, cols - 0.5)
            ax.set_ylim(1.5, -0.5)
            names = {(0, 0): "TP", (0, 1): "FN", (1, 0): "FP", (1, 1): "TN"}
            for (i, j), value in np.ndenumerate(grid):
                ink = "white" if share[i, j] > 0.55 else "#111111"
                ax.text(j, i - 0.12, count_text(value), ha="center", va="center", fontsize=FONT_PT, color=ink)
                sub = f"{names.get((i, j), 'unk.')} {100 * share[i, j]:.1f}%"
                ax.text(j, i + 0.24, sub, ha="center", va="center", fontsize=FONT_PT - 2.5, color=ink, alpha=0.85)
            ax.set_xticks(range(cols), ["yes", "no", "unknown"][:cols])
            ax.set_yticks([0, 1], ["yes", "no"])
            ax.tick_params(length=0)
            ax.grid(False)
            for side in ("left", "bottom"):
                ax.spines[side].set_visible(False)
            ax.set_title(split, fontsize=FONT_PT, loc="center")
            xlabel = "decision"
            if any_unknown:
                xlabel += f"  (unknown: {count_text(c.unknown)})"
            ax.set_xlabel(xlabel, fontsize=FONT_PT - 1)
        axes[0][0].set_ylabel("label")
        fig.subplots_adjust(wspace=0.22)
        return svg(fig, title or "confusion matrices")


def convergence_plot(
    curves: Mapping[str, Sequence[CurvePoint]],
    *,
    headline: str,
    final_ci: tuple[float, float] | None = None,
    stable_after: int | None = None,
    ylabel: str = "pooled F1 (%)",
    title: str = "",
    width: float = 6.5,
    ylim: tuple[float, float] | None = None,
) -> str:
    """A metric (in %) after the first k questions, one line per readout; the headline's final
    95% CI as a band, and the k from which the headline stays within tolerance as a rule."""
    with figure(width, 2.5) as (fig, axes):
        ax = axes[0][0]
        order = sorted(curves, key=lambda name: name != headline)
        for index, name in enumerate(order):
            points = [(k, 100 * v) for k, v in curves[name] if finite(v)]
            if not points:
                continue
            colour, style, marker = readout_style(name, index)
            xs, ys = zip(*points)
            ax.plot(
                xs,
                ys,
                color=colour,
                ls=style,
                lw=1.6 if name == headline else 1.0,
                marker=marker if len(xs) <= 30 else None,
                ms=2.6,
                label=name,
                zorder=3 if name == headline else 2,
            )
        if final_ci is not None:
            ax.axhspan(100 * final_ci[0], 100 * final_ci[1], color=PALETTE["sky"], alpha=0.2, lw=0, zorder=0, label=f"{headline} 95% CI")
        if ylim is not None:
            ax.set_ylim(*ylim)
        if stable_after is not None:
            ax.axvline(stable_after, color=PALETTE["grey"], lw=0.7, ls=(0, (2, 2)), zorder=1)
            last_k = max((k for curve in curves.values() for k, _ in curve), default=stable_after)
            right_half = stable_after > 0.6 * last_k  # then write the note left of the rule, inside the axes
            ax.annotate(
                f"stable from k = {count_text(stable_after)}",
                (stable_after, 0.5),
                xycoords=("data", "axes fraction"),
                xytext=(-3 if right_half else 3, 0),
                textcoords="offset points",
                va="center",
                ha="right" if right_half else "left",
                bbox={"boxstyle": "square,pad=0.15", "facecolor": "white", "edgecolor": "none"},
                fontsize=FONT_PT - 1.5,
                color="#555555",
            )
        ax.set_xlabel("questions answered (first k)")
        ax.set_ylabel(ylabel)
        legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0, handlelength=2.2)
        for text in legend.get_texts():
            if text.get_text() in curves:
                text.set_family(MONO)
                text.set_fontsize(FONT_PT - 1.5)
        ax.xaxis.set_major_formatter(thousands())
        if title:
            ax.set_title(title)
        return svg(fig, title or f"{ylabel} convergence")


def p_yes_histograms(
    p_yes: Mapping[str, PYesByLabel],
    *,
    bins: int = 20,
    title: str = "",
    width: float = TEXT_WIDTH_IN,
    ymax: float | None = None,
) -> str:
    """Distribution of ``p_yes`` by true label, one panel per readout; the 0.5 threshold dashed."""
    import numpy as np

    names = [name for name, by_label in p_yes.items() if by_label.yes or by_label.no]
    n = max(len(names), 1)
    width = min(width, 0.6 + 2.9 * n)
    edges = np.linspace(0.0, 1.0, bins + 1)
    with figure(width, 2.1, ncols=n, sharey=False) as (fig, axes):
        for ax, name in zip(axes[0], names):
            for label, by_label in (("yes", p_yes[name].yes), ("no", p_yes[name].no)):
                values = np.asarray(by_label, dtype=float)
                values = values[np.isfinite(values)]
                if values.size == 0:
                    continue
                counts, _ = np.histogram(np.clip(values, 0, 1), bins=edges)
                colour = LABEL_COLOURS[label]
                ax.stairs(counts, edges, fill=True, color=colour, alpha=0.22, lw=0)
                ax.stairs(
                    counts,
                    edges,
                    color=colour,
                    lw=1.1,
                    ls="-" if label == "yes" else (0, (3, 1.5)),
                    label=f"label {label} (n = {count_text(values.size)})",
                )
            ax.axvline(0.5, color="#555555", lw=0.6, ls=(0, (2, 2)))
            ax.set_xlim(0, 1)
            ax.set_xlabel("$p_{\\mathrm{yes}}$")
            ax.set_title(name, fontsize=FONT_PT - 1, family=MONO)
            ax.legend(loc="upper center", fontsize=FONT_PT - 1.5, handlelength=1.6)
            ax.set_ylim(0, (ymax if ymax is not None else ax.get_ylim()[1]) * 1.3)  # room for the legend
            ax.yaxis.set_major_formatter(thousands())
        axes[0][0].set_ylabel("questions")
        fig.subplots_adjust(wspace=0.3)
        return svg(fig, title or "p_yes histograms by label")


def reliability_diagram(calibration: Mapping[str, Calibration], *, title: str = "", width: float = 4.2) -> str:
    """Fraction of label-yes questions against mean ``p_yes`` per bin, one line per readout,
    above a bar chart of how many questions each bin holds (so sparse bins are visible)."""
    import numpy as np

    with figure(width, 3.3, nrows=2, gridspec_kw={"height_ratios": [3.2, 1], "hspace": 0.08}, sharex=True) as (
        fig,
        axes,
    ):
        top, bottom = axes[0][0], axes[1][0]
        top.plot([0, 1], [0, 1], color="#999999", lw=0.7, ls=(0, (3, 2)), label="perfect calibration")
        names = list(calibration)
        share = 1.0 / max(len(names), 1)
        for index, name in enumerate(names):
            bins = [b for b in calibration[name].bins if b.count]
            if not bins:
                continue
            colour, style, marker = readout_style(name, index)
            ece = calibration[name].ece
            label = name + (f" (ECE {ece:.3f})" if finite(ece) else "")
            top.plot([b.mean_p for b in bins], [b.frac_yes for b in bins], color=colour, ls=style, marker=marker, ms=3.4, lw=1.1, label=label)
            lo = np.array([b.lo for b in bins])
            hi = np.array([b.hi for b in bins])
            bar_w = (hi - lo) * share
            bottom.bar(lo + bar_w * index, [b.count for b in bins], width=bar_w, align="edge", color=colour, alpha=0.75, lw=0)
        top.set_xlim(0, 1)
        top.set_ylim(-0.02, 1.02)
        top.set_ylabel("fraction labelled yes")
        top.grid(axis="x")
        legend = top.legend(loc="upper left", fontsize=FONT_PT - 1.5)
        for text in legend.get_texts()[1:]:
            text.set_family(MONO)
        bottom.set_ylabel("questions")
        bottom.yaxis.set_major_formatter(thousands())
        bottom.yaxis.set_major_locator(max_ticks(3))
        bottom.set_xlabel("mean $p_{\\mathrm{yes}}$ in bin")
        bottom.grid(axis="y", which="major")
        if title:
            top.set_title(title)
        return svg(fig, title or "reliability diagram")


def _hbar_axes(ax: Any) -> None:
    ax.grid(axis="y", visible=False)
    ax.grid(axis="x")
    ax.tick_params(axis="y", length=0)


def profile_plot(
    objects: Sequence[ObjectRate],
    *,
    top: int = 15,
    title: str = "",
    width: float = 4.6,
    xmax: float | None = None,
) -> str:
    """Objects most often hallucinated: % of an object's label-no questions answered yes.

    Bars are sorted, with the counts beside them (3 of 4 is not 300 of 400).
    """
    rows = [o for o in objects if finite(o.rate)][:top]
    rows = sorted(rows, key=lambda o: o.rate)
    height = 0.6 + 0.19 * max(len(rows), 1)
    with figure(width, height) as (fig, axes):
        ax = axes[0][0]
        _hbar_axes(ax)
        ys = list(range(len(rows)))
        rates = [100 * o.rate for o in rows]
        ax.barh(ys, rates, height=0.68, color=PALETTE["vermillion"], alpha=0.85, lw=0)
        top_x = xmax if xmax is not None else max(rates + [5.0])
        for y, rate, o in zip(ys, rates, rows):
            ax.text(rate + top_x * 0.015, y, f"{count_text(o.yes)}/{count_text(o.n)}", va="center", fontsize=FONT_PT - 1.5, color="#444444")
        ax.set_yticks(ys, [o.object for o in rows])
        ax.set_xlim(0, min(100.0, top_x * 1.2))
        ax.set_xlabel("answered yes when absent (%)")
        if title:
            ax.set_title(title)
        return svg(fig, title or "hallucination profile")


def first_pieces_plot(
    pieces: Sequence[PieceShare],
    *,
    yes_pieces: Sequence[str],
    no_pieces: Sequence[str],
    top: int = 10,
    title: str = "",
    width: float = 4.2,
    xmax: float | None = None,
) -> str:
    """% of questions whose first-token argmax is each piece, coloured by set membership: in
    the yes set, in the no set, or outside both (where every logit readout reads the tail)."""
    from matplotlib.patches import Patch

    rows = [(p.piece, p.count, 100 * p.share) for p in pieces[:top]][::-1]
    yes, no = set(yes_pieces), set(no_pieces)
    height = 0.75 + 0.21 * max(len(rows), 1)
    with figure(width, height) as (fig, axes):
        ax = axes[0][0]
        _hbar_axes(ax)
        outside = [piece not in yes and piece not in no for piece, _, _ in rows]
        colours = [LABEL_COLOURS["yes"] if p in yes else LABEL_COLOURS["no"] if p in no else PALETTE["orange"] for p, _, _ in rows]
        bars = ax.barh(range(len(rows)), [r[2] for r in rows], height=0.68, color=colours, lw=0)
        for bar, hatched in zip(bars, outside):
            if hatched:  # a second cue besides colour, for greyscale prints
                bar.set_hatch("////")
                bar.set_edgecolor("white")
        top_x = xmax if xmax is not None else max([r[2] for r in rows] + [5.0])
        for y, (_, count, pct) in enumerate(rows):
            ax.text(pct + top_x * 0.015, y, count_text(count), va="center", fontsize=FONT_PT - 1.5, color="#444444")
        ax.set_yticks(range(len(rows)), [repr(r[0]) for r in rows], family=MONO, fontsize=FONT_PT - 1)
        ax.set_xlim(0, min(100.0, top_x * 1.2))
        ax.set_xlabel("questions with this first-token argmax (%)")
        ax.legend(
            handles=[
                Patch(color=LABEL_COLOURS["yes"], label="yes set"),
                Patch(color=LABEL_COLOURS["no"], label="no set"),
                Patch(facecolor=PALETTE["orange"], edgecolor="white", hatch="////", label="outside both"),
            ],
            loc="lower right",
            fontsize=FONT_PT - 1.5,
        )
        if title:
            ax.set_title(title)
        return svg(fig, title or "first-token pieces")
