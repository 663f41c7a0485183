"""The report's "Training images" section: for runs on COCO images, how many of the images are
COCO train2017 images and the headline (on the CHAIR page, CHAIR) over the held-out (val2017)
part with its CI. Runs of other images get no section (the CLI says so on stderr), so a page of
such runs is unchanged."""

from __future__ import annotations

import html
from collections.abc import Sequence

from halluprobe.audit.overlap import chair_overlap_lines, overlap_lines
from halluprobe.captions.chair.held_out import ChairHeldOut
from halluprobe.records_audit import AuditReport

__all__ = ["OVERLAP_SECTION", "caption_overlap_section", "overlap_section"]

OVERLAP_SECTION = ("training-images", "Training images")  # id, table-of-contents entry
_LEDE = ("A benchmark image a model was trained on is not held out. Counts use the COCO val2017 id list "
         "halluprobe ships (pinned by sha256); each part is scored with the headline readout, image-clustered 95% CIs.")  # fmt: skip


def overlap_section(audits: Sequence[AuditReport], labels: Sequence[str]) -> tuple[str, str] | None:
    """(Markdown, HTML) of the section; None when no run has a COCO image."""
    found = [(label, overlap_lines(a.training_overlap)) for label, a in zip(labels, audits) if a.training_overlap is not None]
    return _section(found, _LEDE, multi=len(audits) > 1)


def caption_overlap_section(runs: Sequence[tuple[str, ChairHeldOut | None]]) -> tuple[str, str] | None:
    """The CHAIR page's section: each caption run's images by COCO 2017 split and its CHAIR over
    the held-out (val2017) images alone (``runs``: label, ``captions.chair.held_out.chair_held_out``'s
    record, None where no image has a COCO name); None when no run has a COCO image."""
    found = [(label, chair_overlap_lines(held)) for label, held in runs if held is not None]
    lede = ("A benchmark image a model was trained on is not held out. Counts use the COCO val2017 id list halluprobe ships "
            "(pinned by sha256); CHAIR over the held-out images alone, image-clustered 95% CIs.")  # fmt: skip
    return _section(found, lede, multi=len(runs) > 1)


def _section(found: Sequence[tuple[str, list[str]]], lede: str, *, multi: bool) -> tuple[str, str] | None:
    if not found:
        return None
    md = [f"## {OVERLAP_SECTION[1]}", "", lede, ""]
    page = [f'<section id="{OVERLAP_SECTION[0]}">', f"<h2>{OVERLAP_SECTION[1]}</h2>", f'<p class="lede">{html.escape(lede)}</p>']
    for label, lines in found:
        if multi:
            md.append(f"**{label}**")
            md.append("")
            page.append(f"<h3>{html.escape(label)}</h3>")
        md += [f"- {line}" for line in lines] + [""]
        page.append("<ul>" + "".join(f"<li>{html.escape(line)}</li>" for line in lines) + "</ul>")
    page.append("</section>")
    return "\n".join(md).rstrip("\n") + "\n", "\n".join(page) + "\n"
