"""AttriBait evaluation: letter sets from real tokenizers (the yes/no derivation walk), the text
parse table, metrics and the consistency table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from halluprobe.benchmarks.autoprobe.choice import (
    ChoiceSample,
    choice_metrics,
    consistency_table,
    letter_scores,
    logit_choice,
    parse_choice,
)
from halluprobe.readouts.tokensets import classify_letter
from halluprobe.records import ReadoutResult, Sample, TokenLogprob

pytestmark = pytest.mark.slow  # builds, loads or runs models: the slow tier

_OPTIONS = {"A": "Red", "B": "Blue", "C": "Others", "D": "There is no umbrella in the image"}


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("▁A", "A"), ("ĠD", "D"), ("D", "D"), (" C\n", "C"), ("a", None), ("▁a", None),
        ("E", None), ("AB", None), ("A.", None), ("", None),
    ],
)
def test_classify_letter(text: str, letter: str | None) -> None:
    assert classify_letter(text) == letter


@pytest.mark.parametrize("fixture", ["llama_tokenizer_dir", "qwen2_tokenizer_dir"])
def test_letter_sets_from_real_vocabularies(fixture: str, request: pytest.FixtureRequest) -> None:
    pytest.importorskip("transformers")
    from transformers import AutoTokenizer

    from halluprobe.readouts.tokensets import derive_letter_sets

    tokenizer = AutoTokenizer.from_pretrained(str(request.getfixturevalue(fixture)), local_files_only=True)
    sets = derive_letter_sets(tokenizer)
    assert set(sets) == {"A", "B", "C", "D"}
    for letter, ids in sets.items():
        assert ids, letter
        for i in ids:
            assert tokenizer.decode([i]).strip() == letter
        # the word-start variant (what a model emits after "ASSISTANT:") is in the set
        (spaced,) = tokenizer.encode(" " + letter, add_special_tokens=False)[-1:]
        assert spaced in ids
    lower = tokenizer.convert_tokens_to_ids("a")
    assert all(lower not in ids for ids in sets.values())


@pytest.mark.parametrize(
    ("text", "letter"),
    [
        ("D", "D"), ("D.", "D"), ("(d)", "D"), ("Answer: B", "B"), ("The answer is D.", "D"),
        ("A. Red", "A"), ("A red umbrella.", "A"), ("There is no umbrella in the image.", "D"),
        ("Blue", "B"), ("a", None), ("Red or blue", None), ("I cannot tell.", None), ("", None), (None, None),
        # options match as whole words only: "blurred" and "tired" do not say "red"
        ("The picture is blurred.", None), ("tired and bored", None), ("It is RED.", "A"), ("Others.", "C"),
        # a denial of the object is D; a denial that also names an option is ambiguous
        ("No, there is no umbrella.", "D"), ("No umbrella.", "D"), ("I see no umbrellas here.", "D"),
        ("There isn't one.", "D"), ("The umbrella is not in the image.", "D"),
        ("No, there is no red umbrella.", None), ("There are no umbrellas, but it would be blue.", None),
    ],
)  # fmt: skip
def test_parse_choice(text: str | None, letter: str | None) -> None:
    assert parse_choice(text, _OPTIONS, "umbrella") == letter  # type: ignore[arg-type]


def test_parse_choice_without_the_object_still_reads_denials() -> None:
    assert parse_choice("There is no umbrella in the image.", _OPTIONS) == "D"  # type: ignore[arg-type]
    assert parse_choice("No umbrella.", _OPTIONS) is None  # type: ignore[arg-type]


def test_letter_scores_by_id_and_by_piece() -> None:
    first = [TokenLogprob(id=10, piece="▁D", logprob=-0.5), TokenLogprob(id=11, piece="D", logprob=-2.0),
             TokenLogprob(id=12, piece="▁A", logprob=-1.0), TokenLogprob(id=13, piece="▁The", logprob=-3.0)]  # fmt: skip
    by_id = letter_scores(first, {"A": [12], "B": [], "C": [], "D": [10, 11]})
    assert by_id["B"] is None and by_id["A"] == -1.0
    assert by_id["D"] == pytest.approx(-0.5 + __import__("math").log(1 + __import__("math").exp(-1.5)))
    assert logit_choice(by_id) == "D"
    assert letter_scores(first, None) == by_id  # pieces classified the same way
    assert logit_choice({"A": None, "B": None, "C": None, "D": None}) is None
    # an exact tie at the top is unknown (the yes/no readouts' rule), not the earliest letter
    assert logit_choice({"A": -1.0, "B": None, "C": -3.0, "D": -1.0}) is None
    assert logit_choice({"A": -2.0, "B": None, "C": -3.0, "D": -1.0}) == "D"
    # letters with no mass at all (-inf): -inf, never nan (records refuse -inf, so it is built unvalidated here)
    no_mass = TokenLogprob.model_construct(id=12, piece="▁A", logprob=float("-inf"))
    assert letter_scores([no_mass], {"A": [12], "B": [], "C": [], "D": []})["A"] == float("-inf")


def _choice(qid: int, image: str, obj: str, logit: str | None, error: str | None = None) -> ChoiceSample:
    return ChoiceSample(question_id=qid, image=image, object=obj, label="D", prompt="p",
                        decisions={} if error else {"logit": logit, "text": None}, error=error)  # type: ignore[arg-type]  # fmt: skip


def _existence(qid: int, image: str, obj: str, label: str, decision: str) -> Sample:
    return Sample(split="existence", question_id=qid, image=image, object=obj, label=label, prompt="p",  # type: ignore[arg-type]
                  readouts={"dynamic": ReadoutResult(decision=decision)})  # type: ignore[arg-type]  # fmt: skip


def test_metrics_and_consistency_table() -> None:
    choices = [_choice(0, "a.jpg", "dog", "D"), _choice(1, "a.jpg", "cup", "A"), _choice(2, "b.jpg", "cat", "C"),
               _choice(3, "b.jpg", "bus", None), _choice(4, "c.jpg", "car", None, error="cannot read image")]  # fmt: skip
    metrics = choice_metrics(choices)["logit"]
    assert metrics["n"] == 5 and metrics["correct"] == 1 and metrics["accuracy"] == 0.2
    assert metrics["unknown"] == 1 and metrics["errors"] == 1 and metrics["attribute_rate"] == 0.2
    existence = [_existence(0, "a.jpg", "dog", "no", "no"), _existence(1, "a.jpg", "cup", "no", "no"),
                 _existence(2, "b.jpg", "cat", "no", "yes"), _existence(3, "b.jpg", "bus", "no", "unknown"),
                 _existence(4, "a.jpg", "person", "yes", "yes")]  # fmt: skip
    table = consistency_table(existence, choices)
    assert table["pairs"] == 4  # the car has no existence question, the person no AttriBait one
    assert table["table"]["no"] == {"D": 1, "attribute": 1, "other": 0, "unknown": 0, "error": 0}
    assert table["table"]["yes"]["other"] == 1 and table["table"]["unknown"]["unknown"] == 1
    assert table["inconsistent"] == 1


def test_probe_choice_through_the_hf_backend(tmp_path: Path) -> None:
    """A tiny LLaVA answers an AttriBait question; with the whole vocabulary as top-k every
    letter is scored from the model's own tokenizer ids."""
    pytest.importorskip("torch")
    pytest.importorskip("skimage")
    import _autoprobe_assets
    from typer.testing import CliRunner

    from halluprobe.benchmarks.autoprobe.questions import AttriBaitDraft, attribait_question, write_choice_questions
    from halluprobe.cli import app
    from halluprobe.tiny import demo_photos

    model_dir = _autoprobe_assets.tiny_llava_dir()
    photos, _ = demo_photos(tmp_path / "demo")
    q = attribait_question(0, "coffee.jpg", "umbrella", AttriBaitDraft(question="What colour is the umbrella?", options=("Red", "Blue")))
    path = write_choice_questions(tmp_path / "autoprobe_attribait.jsonl", [q])
    result = CliRunner().invoke(app, ["probe", "choice", "--questions", str(path), "--images", str(photos), "--backend", "hf",
                                      "--model", str(model_dir), "--out", str(tmp_path / "choice.jsonl"), "--top-k", "32064",
                                      "--backend-option", "device=cpu"])  # fmt: skip
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert all(report["letter_ids"][letter] for letter in "ABCD")
    # split on "\n" only: the stored top-k pieces include U+2028 and other line breaks that str.splitlines takes
    (sample,) = [json.loads(line) for line in (tmp_path / "choice.jsonl").read_text(encoding="utf-8").split("\n") if line]
    scores = sample["letter_scores"]
    assert all(isinstance(scores[letter], float) for letter in "ABCD")
    assert sample["decisions"]["logit"] == max(scores, key=lambda k: scores[k])
    # recomputable offline from what the sample stores
    stored = [TokenLogprob.model_validate(t) for t in sample["first_token"]]
    assert len(stored) == 32064 and letter_scores(stored, report["letter_ids"]) == scores
    assert sample["prompt"].startswith("USER: <image>\nWhat colour is the umbrella?\nA. Red\n")
    assert report["metrics"]["logit"]["n"] == 1


def test_probe_choice_keeps_first_token_and_refuses_to_overwrite(tmp_path: Path) -> None:
    """The stored top-k first token gives the same letter scores offline; an existing --out is
    replaced only with --overwrite."""
    from typer.testing import CliRunner

    from halluprobe.benchmarks.autoprobe.questions import AttriBaitDraft, attribait_question, write_choice_questions
    from halluprobe.cli import app

    images = tmp_path / "images"
    images.mkdir()
    (images / "a.jpg").write_bytes(b"the scripted backend does not read the bytes")
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"seed": 1}))
    q = attribait_question(0, "a.jpg", "umbrella", AttriBaitDraft(question="What colour is the umbrella?", options=("Red", "Blue")))
    questions = write_choice_questions(tmp_path / "q.jsonl", [q])
    out = tmp_path / "choice.jsonl"
    args = ["probe", "choice", "--questions", str(questions), "--images", str(images), "--backend", "scripted",
            "--model", str(script), "--out", str(out)]  # fmt: skip
    runner = CliRunner()
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    (sample,) = [ChoiceSample.model_validate_json(line) for line in out.read_text().splitlines()]
    # the scripted backend's top-5 pieces (yes/no variants: no letter among them), kept as returned
    assert [t.piece for t in sample.first_token][:1] in (["▁Yes"], ["▁No"]) and len(sample.first_token) == 5
    assert sample.latency_s is not None and sample.latency_s >= 0
    assert letter_scores(sample.first_token, None) == sample.letter_scores == dict.fromkeys("ABCD")

    out.write_text("earlier answers\n")
    refused = runner.invoke(app, args)
    assert refused.exit_code == 2 and "--overwrite" in refused.output and str(out) in refused.output
    assert out.read_text() == "earlier answers\n"
    replaced = runner.invoke(app, [*args, "--overwrite"])
    assert replaced.exit_code == 0, replaced.output
    assert ChoiceSample.model_validate_json(out.read_text().splitlines()[0]).first_token == sample.first_token
