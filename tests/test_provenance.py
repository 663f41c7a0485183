"""One provenance (issue 31): a typed record per table kind, one writer, one reader that reads
every mark and shape earlier versions wrote; check's registry of table kinds; one
BootstrapSettings. No model, no run dir: records and comments built in code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest

from halluprobe.check.registry import TABLE_KINDS
from halluprobe.errors import InputError
from halluprobe.provenance import (
    AnyProvenance,
    ChairProvenance,
    DecodingProvenance,
    LiteratureProvenance,
    Provenance,
    marked_comment,
    read_marked,
)
from halluprobe.provenance_sources import RunSource
from halluprobe.records_scores import BootstrapSettings, Metrics, ScoreReport

# comments as earlier versions wrote them (the CHAIR and decoding ones by hand-built dicts)
OLD_CHAIR = (
    '<!-- halluprobe-chair-provenance {"table": "chair", "source": {"run": "runs/cap", "fingerprint": null, "samples_sha256": "ab"}, '
    '"families": ["chair@lemmatizer"], "ground_truth": {"chair@lemmatizer": {"source": "shipped", "year": 2014}}, '
    '"truncate_incomplete": false, "prompt": null, "max_new_tokens": 64, "halluprobe": "0.9", "bootstrap": {"resamples": 50, "seed": 3}} -->'
)
OLD_DECODING = (
    '% halluprobe-decoding-provenance {"table": "decoding", "runs": [{"path": "g", "role": "greedy baseline", "name": "g", '
    '"fingerprint": "f1", "samples_sha256": null}, {"path": "m", "role": "method", "name": "m", "fingerprint": "f2", "samples_sha256": "s"}], '
    '"family": null, "ground_truth": null, "truncate_incomplete": null, "prove_scores": [], "bootstrap": {"n_resamples": 0, "seed": 0}, '
    '"halluprobe": "0.9"}'
)
OLD_LITERATURE = "<!-- halluprobe literature audit: halluprobe=0.9.0, registry_sha256=" + "a" * 64 + ", resamples=200, seed=1 -->"


@pytest.mark.parametrize(("line", "kind", "syntax"), [(OLD_CHAIR, ChairProvenance, "markdown"), (OLD_DECODING, DecodingProvenance, "latex"),
                                                      (OLD_LITERATURE, LiteratureProvenance, "markdown")])  # fmt: skip
def test_every_old_comment_reads_and_is_written_back_byte_for_byte(line: str, kind: type, syntax: str) -> None:
    parsed = read_marked(line, "paper.md", 7)
    assert parsed is not None
    record, read_syntax = parsed
    assert isinstance(record, kind) and read_syntax == syntax
    assert marked_comment(record, read_syntax) == line  # the one writer writes what was read


def test_a_comment_without_a_table_key_takes_its_kind_from_its_mark() -> None:
    chair = read_marked(OLD_CHAIR.replace('"table": "chair", ', ""), "p.md", 1)
    assert chair is not None and isinstance(chair[0], ChairProvenance)
    assert chair[0].bootstrap == BootstrapSettings(n_resamples=50, seed=3)
    decoding = read_marked(OLD_DECODING.replace('"table": "decoding", ', ""), "p.tex", 1)
    assert decoding is not None and isinstance(decoding[0], DecodingProvenance) and decoding[0].runs[1].role == "method"
    literature = read_marked(OLD_LITERATURE, "literature.md", 1)
    assert literature is not None and literature[0].bootstrap == BootstrapSettings(n_resamples=200, seed=1)


def test_the_score_tables_comment_round_trips_without_null_keys() -> None:
    record = Provenance(table="score", runs=(RunSource(path="runs/toy"),), readout="text:strict", unknown="wrong", seed=0, resamples=50,
                        halluprobe="0.9")  # fmt: skip
    line = marked_comment(record, "markdown")
    assert line.startswith('<!-- halluprobe-provenance {"provenance": 1, "table": "score", "runs": [{"path": "runs/toy"}]') and "null" not in line
    assert read_marked(line, "p.md", 1) == (record, "markdown")
    assert record.bootstrap == BootstrapSettings(n_resamples=50, seed=0)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (OLD_CHAIR.replace('"table": "chair"', '"table": "decoding"'), "malformed CHAIR provenance comment: table 'decoding' is not one of chair"),
        (OLD_CHAIR.replace('"families"', '"extra": 1, "families"'), "malformed CHAIR provenance comment: extra:"),
        (OLD_CHAIR.replace('"resamples": 50', '"resamples": true'), "bootstrap.n_resamples"),
        (OLD_DECODING.replace('"role": "method"', '"role": "judge"'), "malformed decoding provenance comment: runs.1.role"),
        (OLD_DECODING.replace("{", "[", 1), "decoding provenance comment is not JSON"),
        ("<!-- halluprobe-provenance [1] -->", "malformed provenance comment: expected a JSON object"),
        ('% halluprobe-provenance {"table": "chair"}', "malformed provenance comment: table 'chair' is not one of score"),
        (OLD_LITERATURE.replace("seed=1", "seed=one"), "malformed literature provenance comment: seed:"),
    ],
)
def test_a_comment_that_does_not_read_is_one_line_naming_its_line(line: str, message: str) -> None:
    with pytest.raises(InputError) as err:
        read_marked(line, "paper.md", 12)
    assert "paper.md:12" in str(err.value) and message in str(err.value) and "\n" not in str(err.value)


def test_a_mark_in_prose_is_not_a_comment_but_the_score_mark_always_is() -> None:
    assert read_marked("we add a halluprobe-chair-provenance comment above each table", "p.md", 1) is None
    assert read_marked("the halluprobe literature audit: writes literature.md", "p.md", 1) is None
    with pytest.raises(InputError):
        read_marked("we add a halluprobe-provenance comment above each table", "p.md", 1)


def test_every_provenance_kind_has_a_line_in_checks_registry() -> None:
    kinds = set()
    (union,) = get_args(AnyProvenance)[:1]  # every record of the union: a new kind cannot be left out
    for record in get_args(union):
        kinds.update(get_args(record.model_fields["table"].annotation))
    assert {k.kind for k in TABLE_KINDS} == kinds
    assert len(TABLE_KINDS) == len(kinds)  # one line each


def _metrics() -> Metrics:
    return Metrics(n=2, tp=1, fp=0, tn=1, fn=0, unknown=0, accuracy=1.0, precision=1.0, recall=1.0, f1=1.0, yes_ratio=0.5,
                   unknown_rate=0.0, htr=0.0)  # fmt: skip


def test_one_bootstrap_settings_keeps_every_files_bytes() -> None:
    metrics = {"method": "percentile", "cluster": "image", "n_clusters": 2, "n_resamples": 10, "seed": 0, "level": 0.95, "macro": "m"}
    report = ScoreReport(readout="text:strict", unknown_policy="wrong", splits={"a": _metrics()}, pooled=_metrics(), macro=_metrics(),
                         bootstrap=metrics)  # fmt: skip
    assert list(report.model_dump(mode="json")["bootstrap"].items()) == list(metrics.items())  # metrics.json's order
    assert report.bootstrap is not None and report.bootstrap.n_resamples == 10
    empty = ScoreReport.model_validate_json(report.model_copy(update={"bootstrap": None}).model_dump_json())
    assert empty.bootstrap is None and '"bootstrap":{}' in empty.model_dump_json()  # an older report without settings
    audit = BootstrapSettings(n_resamples=5, seed=1, level=0.95, unit="image", method="percentile")
    assert json.dumps(audit.model_dump(mode="json")) == '{"n_resamples": 5, "seed": 1, "level": 0.95, "unit": "image", "method": "percentile"}'
    assert BootstrapSettings.model_validate({"resamples": 7, "seed": 2}) == BootstrapSettings(n_resamples=7, seed=2)  # CHAIR's key
    corrections = BootstrapSettings(n_resamples=5, seed=1, draws=0)
    assert json.dumps(corrections.model_dump(mode="json")) == '{"n_resamples": 5, "seed": 1, "draws": 0}'


def test_the_writers_build_typed_records(tmp_path: Path) -> None:
    from halluprobe.captions.chair.evaluate import ChairResults
    from halluprobe.report.chair import chair_provenance

    truth = {"source": "shipped", "year": "2014", "family": "chair@lemmatizer", "files": {}, "note": "", "images": 500}
    settings = {"ground_truth": truth, "truncate_incomplete": False, "prompt": None, "max_new_tokens": "unknown (imported)", "tokenizer": "line"}
    summary = {"family": "chair@lemmatizer", "n": 0, "chair_s": None, "chair_i": None, "recall": None, "length": None, "settings": settings}
    results = ChairResults.model_validate({"chair@lemmatizer": {"summary": summary}})
    record = chair_provenance(results, {"captions": "c.jsonl", "sha256": "ab"}, BootstrapSettings(n_resamples=3, seed=4))
    assert isinstance(record, ChairProvenance) and record.tokenizer == "line" and record.source.captions == "c.jsonl"
    line = marked_comment(record, "latex")
    assert '"source": {"captions": "c.jsonl", "sha256": "ab"}' in line and line.endswith('"bootstrap": {"resamples": 3, "seed": 4}, "tokenizer": "line"}')


def test_a_chair_comment_of_several_questions_reads_back() -> None:
    line = OLD_CHAIR.replace('"prompt": null', '"prompt": ["Describe.", "Caption it."]')
    parsed = read_marked(line, "p.md", 1)
    assert parsed is not None and isinstance(parsed[0], ChairProvenance) and parsed[0].prompt == ["Describe.", "Caption it."]
    assert marked_comment(parsed[0], "markdown") == line
