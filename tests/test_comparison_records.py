"""The decoding comparison's records: `--json` is their JSON (keys, order, absent keys), and it
reads back into equal records."""

from __future__ import annotations

import json
from pathlib import Path

from _decoding_runs import (  # noqa: F401 (autouse fixtures)
    GREEDY,
    METHOD,
    SAMPLED,
    chair_wordnet,
    decoding_run,
    fixture_nltk,
    write_truth,
)
from typer.testing import CliRunner

from halluprobe.captions.comparison.records import ComparisonResult
from halluprobe.cli import app

runner = CliRunner()


def test_json_reads_back_into_equal_records_with_the_table_keys(tmp_path: Path) -> None:
    greedy, vcd = decoding_run(tmp_path / "greedy", GREEDY), decoding_run(tmp_path / "vcd", METHOD, decode="vcd:alpha=1", sample=True, seed=0)
    sampled = decoding_run(tmp_path / "sampled", SAMPLED, sample=True, seed=0)
    for extra in ([], ["--sampled-baseline", str(sampled)]):
        shown = runner.invoke(app, ["decoding", str(greedy), str(vcd), *extra, "--ground-truth", str(write_truth(tmp_path)), "--json", "--bootstrap", "20"])
        assert shown.exit_code == 0, shown.output
        data = json.loads(shown.stdout)
        assert list(data) == ["runs", "bootstrap", "chair"] and data["bootstrap"] == {"n_resamples": 20, "seed": 0}
        result = ComparisonResult.model_validate(data)
        assert result.bootstrap.level == 0.95 and result.bootstrap.unit == "image"
        assert json.dumps(result.model_dump(mode="json"), indent=2, ensure_ascii=False) + "\n" == shown.stdout
        chair = data["chair"]
        assert list(chair["per_run"][0]) == ["name", "role", "family", "n", "chair_s", "chair_i", "recall", "length", "ci",
                                             "halluc_per_100_words", "chair_s_at_baseline_length"]  # fmt: skip
        if extra:  # a method beside a sampled baseline: both differences and whether it sampled alike; the sampled row: greedy only
            assert list(chair["paired"][0]) == ["name", "vs_greedy", "vs_sampled", "sampling_matches"] and list(chair["paired"][1]) == ["name", "vs_greedy"]
        else:
            assert [list(p) for p in chair["paired"]] == [["name", "vs_greedy"]]
