"""Object HalBench with a judge as word extractor (RLAIF-V's ``--use_gpt``): the prompt, the
reply's parse and the normalisation of the judge's words, before the judge-free rules' last step
(:func:`~halluprobe.captions.objhal.rules.extracted_objects`).

The prompt is the official script's: ``eval/eval_gpt_obj_halbench.py`` at :data:`RLAIFV_COMMIT`,
fetched pinned by sha256 and cached; its module-level ``prompt_template`` string is read from
its syntax tree, never executed. halluprobe carries no copy of it. Filled as the script fills it
(``{question}`` replaced, then ``{answer}``).

The script's steps, and where halluprobe differs (docs/design/chair.md):

- an answer of at most three whitespace words is not sent: its list is empty (:func:`is_short`);
- the reply is read as JSON, or, when it holds ``["``, its last line as JSON; halluprobe also
  requires a list of strings (the script would iterate a dict's keys or a string's letters);
- the script retries a failed parse up to 100 times at the API's default temperature; the judge
  here is greedy, so a failed parse is stored as ``unparseable`` and scored by a stated policy;
- every listed name ``x`` is read by spaCy as ``"a x"``: its lemmas' double words if any, else
  the runs of noun lemmas (tags NN, NNS, NNP, NNPS) joined by a space; repeats are dropped.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from halluprobe.benchmarks.download import default_cache_dir, fetch_pinned
from halluprobe.benchmarks.script_strings import module_string
from halluprobe.captions.chair.families import CaptionObjects
from halluprobe.captions.objhal.rules import ObjhalVocabulary, extracted_objects
from halluprobe.captions.objhal.sources import RLAIFV_COMMIT, RLAIFV_REPOSITORY
from halluprobe.errors import InputError, RuntimeFailure

__all__ = [
    "NOUN_TAGS",
    "OBJHAL_JUDGE_SCRIPT_SHA256",
    "OBJHAL_JUDGE_SCRIPT_URL",
    "SHORT_ANSWER_WORDS",
    "SpacyTagger",
    "Tagger",
    "extraction_prompt_template",
    "fetch_objhal_judge_script",
    "fill_extraction_prompt",
    "is_short",
    "judged_objects",
    "normalise_objects",
    "parse_object_list",
]

OBJHAL_JUDGE_SCRIPT_URL = f"https://raw.githubusercontent.com/{RLAIFV_REPOSITORY}/{RLAIFV_COMMIT}/eval/eval_gpt_obj_halbench.py"
OBJHAL_JUDGE_SCRIPT_SHA256 = "f7447f9218ccecb63f60ecc244d6e50f8b3a3d9263df90523ca4da663fbf9719"
SHORT_ANSWER_WORDS = 3  # the script asks no judge about an answer this short
NOUN_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
_SLOTS = ("{question}", "{answer}")


def fetch_objhal_judge_script(*, url: str | None = None, cache_dir: Path | None = None) -> Path:
    """The official script (``url``: a mirror of the same file), cached and checked against its pin."""
    return fetch_pinned(url or OBJHAL_JUDGE_SCRIPT_URL, "eval_gpt_obj_halbench.py", OBJHAL_JUDGE_SCRIPT_SHA256,
                        cache_dir=cache_dir or default_cache_dir(), kind="objhal", size=200_000)  # fmt: skip


def extraction_prompt_template(script: str | Path | None = None) -> str:
    """The module-level ``prompt_template`` string of ``script`` (default: the official script,
    fetched pinned), read from its syntax tree, never executed."""
    path = Path(script) if script is not None else fetch_objhal_judge_script()
    text, line = module_string(path, "prompt_template", "Object HalBench's script")
    if not all(slot in text for slot in _SLOTS):
        raise InputError("its `prompt_template` has not the {question} and {answer} slots", path, line)
    return text


def fill_extraction_prompt(template: str, question: str, answer: str) -> str:
    # the script's order: a question holding "{answer}" is filled too, as there
    return template.replace("{question}", question).replace("{answer}", answer)


def is_short(answer: str) -> bool:
    return len(answer.strip().split()) <= SHORT_ANSWER_WORDS


def parse_object_list(reply: str) -> tuple[list[str] | None, str | None]:
    """(names, None) or (None, why): the script's ``parse_object_list``, then a list of strings."""
    try:
        value = json.loads(reply)
    except ValueError:
        if '["' not in reply:
            return None, "not JSON, and no '[\"' in the reply"
        try:
            value = json.loads(reply.strip().split("\n")[-1])
        except ValueError:
            return None, "not JSON, nor is its last line"
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        return None, f"JSON but not a list of strings ({type(value).__name__})"
    return value, None


class Tagger(Protocol):
    """Text -> (lemma, fine-grained tag) per token; ``identity`` is recorded with the scores."""

    identity: str

    def analyse(self, text: str) -> list[tuple[str, str]]: ...


class SpacyTagger:
    """The script's English pipeline (``en_core_web_trf``), loaded on first use."""

    def __init__(self, model: str = "en_core_web_trf") -> None:
        import spacy  # heavy: only where a judge's words are scored

        try:
            self._nlp = spacy.load(model)
        except OSError:
            raise RuntimeFailure(f"spaCy model {model!r} is not installed; get it with: python -m spacy download {model}") from None
        self.identity = f"spacy {spacy.__version__} {model} {self._nlp.meta.get('version', '?')}"

    def analyse(self, text: str) -> list[tuple[str, str]]:
        return [(t.lemma_, t.tag_) for t in self._nlp(text)]


def _double_words_only(vocab: ObjhalVocabulary, lemmas: list[str]) -> list[str]:
    found, i = [], 0
    while i < len(lemmas):
        pair = " ".join(lemmas[i : i + 2])
        if pair in vocab.double_words:
            found.append(vocab.double_words[pair])
            i += 2
        else:
            i += 1
    return found


def _noun_runs(tokens: list[tuple[str, str]]) -> list[str]:
    runs, current = [], ""
    for lemma, tag in tokens:
        if tag in NOUN_TAGS:
            current += f" {lemma}"
        elif current:
            runs.append(current.strip())
            current = ""
    if current:
        runs.append(current.strip())
    return runs


def normalise_objects(vocab: ObjhalVocabulary, tagger: Tagger, names: Sequence[str]) -> list[str]:
    """The script's ``get_pred_objs_match`` on one answer's listed names."""
    refined: list[str] = []
    for name in names:
        tokens = tagger.analyse(f"a {name}")
        doubles = _double_words_only(vocab, [lemma for lemma, _ in tokens])
        refined += doubles if doubles else _noun_runs(tokens)
    return list(dict.fromkeys(refined))


def judged_objects(vocab: ObjhalVocabulary, tagger: Tagger, names: Sequence[str]) -> CaptionObjects:
    """A judge's names -> the COCO objects the script counts."""
    return extracted_objects(vocab, normalise_objects(vocab, tagger, names))
