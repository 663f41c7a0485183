"""formatting.py, the one place numbers are written for people: both families (plain
``format_*`` for terminals, papers and CLI lines; the report's ``fmt_*``) and that the report
reads the same functions, not copies."""

from __future__ import annotations

import math

from halluprobe import formatting
from halluprobe.formatting import (
    MINUS,
    fmt_ci,
    fmt_count,
    fmt_delta,
    fmt_p,
    fmt_pct,
    fmt_score,
    format_ci,
    format_percent,
    format_ratio,
    format_signed,
)


def test_plain_family() -> None:
    assert format_ratio(0.857512, [0.8321, 0.8809]) == "0.8575 [0.832, 0.881]"
    assert format_ratio(None) == "-" and format_ratio(None, missing="--") == "--"
    assert format_ratio(0.25, digits=3) == "0.250"
    assert format_ci(None) == "" and format_ci([0.1, 0.2], 2) == " [0.10, 0.20]"
    assert format_ci([-0.0061, 0.0072], 3, plus=True) == " [-0.006, +0.007]"
    assert format_signed(0.0012) == "+0.001" and format_signed(-0.791) == "-0.791" and format_signed(None) == "-"
    assert format_percent(0.86291, [0.8321, 0.88105], digits=2) == "86.29 [83.21, 88.11]"
    assert format_percent(None, missing="n/a") == "n/a"


def test_report_family() -> None:
    assert fmt_pct(0.8629) == "86.3" and fmt_pct(0.5, 0) == "50" and fmt_pct(None) == "–" and fmt_pct(math.nan) == "–"
    assert fmt_score(0.84549) == "0.845" and fmt_score(True) == "–"
    assert fmt_count(9000) == "9\u202f000" and fmt_count(9.0) == "–" and fmt_count(False) == "–"
    assert fmt_ci([0.832, 0.881]) == "[83.2, 88.1]" and fmt_ci([0.1, math.inf]) == "" and fmt_ci(None) == ""
    assert fmt_ci([-0.012, 0.0004], signed=True) == f"[{MINUS}1.2, 0.0]"
    assert fmt_delta(0.012) == "+1.2" and fmt_delta(-0.012) == f"{MINUS}1.2" and fmt_delta(0.0001) == "0.0"
    assert [fmt_p(p) for p in (0.0001, 0.004, 0.0123, 0.5, 0.999, None)] == ["<0.001", "0.004", "0.01", "0.50", "1.00", "–"]


def test_the_report_and_tables_use_these_functions_not_copies() -> None:
    from halluprobe import tables
    from halluprobe.report import view

    # neither defines a copy: where they hold the name at all, it is formatting's own function
    for module in (view, tables):
        for name in ("fmt_ci", "fmt_count", "fmt_delta", "fmt_p", "fmt_pct", "fmt_score", "format_ratio"):
            assert getattr(module, name, getattr(formatting, name)) is getattr(formatting, name)
