"""The report figures' shared style: the Okabe-Ito palette, a readout's fixed line style, the
matplotlib settings (one ``rc_context``), a bare ``Figure`` and its inline-SVG text.

matplotlib is imported only inside the functions (see ``report.plots``).
"""

from __future__ import annotations

import io
import itertools
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = [
    "FONT_PT",
    "LABEL_COLOURS",
    "MONO",
    "PALETTE",
    "TEXT_WIDTH_IN",
    "count_text",
    "figure",
    "finite",
    "max_ticks",
    "readout_style",
    "svg",
    "thousands",
]

# Okabe & Ito (2008), "Color Universal Design".
PALETTE: dict[str, str] = {
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "green": "#009E73",
    "orange": "#E69F00",
    "sky": "#56B4E9",
    "purple": "#CC79A7",
    "yellow": "#F0E442",
    "black": "#000000",
    "grey": "#8C8C8C",
}
# True label "yes" (object present) vs "no" (absent): the same two colours in every figure.
LABEL_COLOURS: dict[str, str] = {"yes": PALETTE["blue"], "no": PALETTE["vermillion"]}

_READOUT_STYLES: dict[str, tuple[str, str, str]] = {
    "dynamic": (PALETTE["blue"], "-", "o"),
    "legacy_2tok": (PALETTE["orange"], "--", "s"),
    "legacy_8tok": (PALETTE["purple"], "-.", "D"),
    "text:pope": (PALETTE["vermillion"], ":", "^"),
    "text:exact": (PALETTE["sky"], "--", "v"),
    "text:yorn": (PALETTE["green"], "-.", "P"),
    "text:strict": (PALETTE["black"], "-", "X"),
}
_SPARE = [(PALETTE["grey"], ls, m) for ls, m in zip(("-", "--", ":", "-."), ("o", "s", "^", "D"))]

# The page's text column is 920 CSS px = 9.6 in at 96 px/in; figures are drawn at the size they
# are shown (SVG pt = 1/72 in), so their 9 pt text sits at a constant ratio to the body text.
TEXT_WIDTH_IN = 9.5
FONT_PT = 10.0
MONO = "DejaVu Sans Mono"  # readout names and token pieces, as in the page's code font

_RC: dict[str, Any] = {
    "svg.fonttype": "path",
    "svg.hashsalt": "halluprobe",  # deterministic ids: the same audit gives the same bytes
    "font.family": ["STIXGeneral", "DejaVu Sans"],
    "mathtext.fontset": "stix",
    "font.size": FONT_PT,
    "axes.titlesize": FONT_PT + 0.5,
    "axes.titleweight": "normal",
    "axes.titlelocation": "left",
    "axes.labelsize": FONT_PT,
    "axes.linewidth": 0.6,
    "axes.edgecolor": "#333333",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "axes.grid.axis": "y",
    "axes.axisbelow": True,
    "grid.color": "#E3E3E3",
    "grid.linewidth": 0.5,
    "xtick.labelsize": FONT_PT - 0.5,
    "ytick.labelsize": FONT_PT - 0.5,
    "xtick.major.width": 0.6,
    "ytick.major.width": 0.6,
    "xtick.major.size": 2.5,
    "ytick.major.size": 2.5,
    "legend.fontsize": FONT_PT - 0.5,
    "legend.frameon": False,
    "lines.linewidth": 1.2,
    "lines.markersize": 3.5,
    "patch.linewidth": 0.5,
    "figure.dpi": 72,  # with SVG, 1 inch = 72 pt: figure sizes below are print sizes
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.04,
}

_ids = itertools.count(1)


def readout_style(name: str, index: int = 0) -> tuple[str, str, str]:
    """(colour, line style, marker) of a readout: fixed for known names, so figures agree."""
    return _READOUT_STYLES.get(name, _SPARE[index % len(_SPARE)])


@contextmanager
def figure(width: float, height: float, ncols: int = 1, nrows: int = 1, **kwargs: Any) -> Iterator[tuple[Any, Any]]:
    """A bare ``Figure`` (no pyplot): no GUI backend, no global figure registry to leak into."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(width, height))
        axes = fig.subplots(nrows, ncols, squeeze=False, **kwargs)
        yield fig, axes


_ID_ATTR = re.compile(r'\bid="([^"]+)"')


def svg(fig: Any, title: str) -> str:
    """The figure as an inline ``<svg>``: no XML prologue, no metadata, ids unique in the page.

    Several figures share one HTML document, where matplotlib's ids (clip paths, glyphs) would
    collide; each figure's ids get their own prefix.
    """
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    svg = buf.getvalue()
    svg = svg[svg.index("<svg") :]
    svg = re.sub(r"\s*<metadata>.*?</metadata>", "", svg, flags=re.DOTALL)
    prefix = f"hp{next(_ids)}-"
    ids = set(_ID_ATTR.findall(svg))
    svg = _ID_ATTR.sub(lambda m: f'id="{prefix}{m.group(1)}"', svg)
    svg = re.sub(r"#([A-Za-z_][\w.:-]*)", lambda m: f"#{prefix}{m.group(1)}" if m.group(1) in ids else m.group(0), svg)
    # role/aria: screen readers and the DOM checks find each figure by its title
    safe = title.replace("&", "&amp;").replace("<", "&lt;").replace('"', "&quot;")
    return svg.replace("<svg ", f'<svg class="plot" role="img" aria-label="{safe}" ', 1).strip()


def finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def count_text(value: Any) -> str:
    """Thousands with a narrow no-break space, as in the page's tables (9 000, never 9,000)."""
    return f"{int(value):,}".replace(",", "\u202f")


def thousands() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda value, _pos: count_text(value) if float(value).is_integer() else f"{value:g}")


def max_ticks(n: int) -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(nbins=n, integer=True)
