"""literature.md rendered from a grid and checked (issue 31): ``halluprobe check literature.md``
renders the entries of the ``literature.json`` beside it again and compares every cell; its
comment (the ``key=value`` form every version wrote) reads as the typed record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _literature import literature_cache, llava_entry, toy_coco, write_registry  # noqa: F401 - fixtures
from typer.testing import CliRunner

from halluprobe.check.verify import check_files
from halluprobe.cli import app
from halluprobe.errors import InputError
from halluprobe.literature.audit import EntryAudit, FigureCheck
from halluprobe.literature.table import LITERATURE_JSON, LITERATURE_MD, literature_markdown
from halluprobe.provenance import LiteratureProvenance

runner = CliRunner()
PROVENANCE = LiteratureProvenance(table="literature", halluprobe="0.9.0", registry_sha256="b" * 64, resamples=200, seed=0)


def _audits() -> list[EntryAudit]:
    figure = FigureCheck(metric="f1_macro", where="MODEL_ZOO row | POPE", source="docs/MODEL_ZOO.md", published=85.9, decimals=1,
                         authors=85.93, equal=True, difference=0.03, strict=84.1, ci=(84.0, 87.5))  # fmt: skip
    audited = EntryAudit(name="llava-toy", model="llava", decoding="greedy", dataset="coco@toy", parser="text:pope", status="audited",
                         figures=[figure, FigureCheck(**{**figure.__dict__, "where": "a misquote", "published": 87.9, "equal": False,
                                                         "difference": -1.97})], rule_changes=3, answers=24)  # fmt: skip
    headline = EntryAudit(name="no-figure", model="m", decoding="greedy", dataset="d", parser="text:strict", status="audited",
                          recomputed={"f1_macro": 0.5, "accuracy_macro": 0.6}, recomputed_strict={"f1_macro": 0.4}, recomputed_ci=(0.4, 0.6))  # fmt: skip
    skipped = EntryAudit(name="other-rule", model="m", decoding="d", dataset="d", parser="text:x", status="not audited: needs the text rule")
    return [audited, headline, skipped]


def _write(out: Path, audits: list[EntryAudit]) -> Path:
    """literature.md and literature.json as ``literature audit`` writes them."""
    out.mkdir(parents=True, exist_ok=True)
    (out / LITERATURE_MD).write_text(literature_markdown(audits, PROVENANCE), encoding="utf-8")
    data = {"provenance": PROVENANCE.model_dump(mode="json", exclude={"table"}), "entries": [a.as_json() for a in audits]}
    (out / LITERATURE_JSON).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return out / LITERATURE_MD


def test_the_table_and_its_comment_keep_their_bytes(tmp_path: Path) -> None:
    md = _write(tmp_path, _audits()).read_text(encoding="utf-8").split("\n")
    assert md[0] == "<!-- halluprobe literature audit: halluprobe=0.9.0, registry_sha256=" + "b" * 64 + ", resamples=200, seed=0 -->"
    assert md[2:8] == [
        "| entry | figure | published | authors' rule | reproduced | text:strict | 95% CI (images) |",
        "|---|---|---|---|---|---|---|",
        "| llava-toy | f1_macro: MODEL_ZOO row \\| POPE | 85.9 | 85.93 | equal | 84.10 | [84.00, 87.50] |",
        "| llava-toy | f1_macro: a misquote | 87.9 | 85.93 | differs by -1.97 | 84.10 | [84.00, 87.50] |",
        "| no-figure | none published | - | f1_macro 50.00, accuracy_macro 60.00 | - | f1_macro 40.00 | f1_macro [40.00, 60.00] |",
        "| other-rule | - | - | not audited: needs the text rule | - | - | - |",
    ]


def test_check_compares_every_cell_of_literature_md(tmp_path: Path) -> None:
    md = _write(tmp_path, _audits())
    result = check_files([md])
    assert result.exit_code == 0 and result.tables == 1 and result.cells == 4 * 7, result.findings
    text = md.read_text(encoding="utf-8")
    md.write_text(text.replace("| equal | 84.10", "| equal | 84.20"), encoding="utf-8")  # a hand edit
    edited = check_files([md])
    assert edited.exit_code == 1 and [(f.kind, f.line, f.expected, f.found) for f in edited.findings] == [("differs", 5, "84.10", "84.20")]


def test_a_missing_or_other_literature_json_is_a_failing_finding(tmp_path: Path) -> None:
    md = _write(tmp_path, _audits())
    stored = tmp_path / LITERATURE_JSON
    data = json.loads(stored.read_text(encoding="utf-8"))
    stored.write_text(json.dumps({**data, "provenance": {**data["provenance"], "seed": 9}}), encoding="utf-8")
    other = check_files([md])
    assert other.exit_code == 1 and [f.kind for f in other.findings] == ["file-changed"] and other.cells == 0
    stored.unlink()
    missing = check_files([md])
    assert missing.exit_code == 1 and [f.kind for f in missing.findings] == ["file-missing"]


def test_a_table_that_compares_nothing_is_bad_input_not_a_match(tmp_path: Path) -> None:
    md = _write(tmp_path, [])  # an audit of no entry: a header and no row
    with pytest.raises(InputError, match="no cell was compared"):
        check_files([md])
    result = runner.invoke(app, ["check", str(md)])
    assert result.exit_code == 2 and result.output.strip().count("\n") == 0 and f"{md}:1:" in result.output


def test_a_malformed_literature_comment_is_one_line(tmp_path: Path) -> None:
    md = _write(tmp_path, _audits())
    md.write_text(md.read_text(encoding="utf-8").replace("resamples=200", "resamples=-5"), encoding="utf-8")
    result = runner.invoke(app, ["check", str(md)])
    assert result.exit_code == 2 and "literature provenance comment: bootstrap resamples -5 is out of bounds" in result.output


@pytest.mark.usefixtures("literature_cache")  # its own cache, no mirror
def test_an_audits_literature_md_checks_end_to_end(tmp_path: Path, toy_coco: Path) -> None:  # noqa: F811
    """``literature audit`` on the offline toy mirror, then ``check`` on what it wrote."""
    entry, mean_f1 = llava_entry(toy_coco)
    published = round(100 * mean_f1, 1)
    entry["published"] = [{"metric": "f1_macro", "value": published, "scale": 100, "decimals": 1, "where": "row | POPE", "path": "README.md"}]
    reg = write_registry(tmp_path, [entry])
    out = tmp_path / "audit"
    audited = runner.invoke(app, ["literature", "audit", "--all", "--out", str(out), "--registry", str(reg), "--resamples", "50"])
    assert audited.exit_code == 0, audited.output
    checked = runner.invoke(app, ["check", str(out / LITERATURE_MD)])
    assert checked.exit_code == 0 and "1 table" in checked.output, checked.output
