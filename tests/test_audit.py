"""The audit, every figure recomputed here from ``samples.jsonl`` lines parsed with ``json``.

Two runs are audited: a tiny LLaVA (random weights, the real LLaMA-2 vocabulary, real photos)
whose answer head is steered so that decisions vary by question, some first-token argmaxes fall
outside both token sets, and ``legacy_2tok`` and ``legacy_8tok`` really differ; and a larger
scripted run (convergence, adversarial pairing, errors, relabelling, several runs).

The recomputations below use only ``json``, ``collections``, plain Python arithmetic and scipy:
never the audit's own helpers. The one shared piece is the bootstrap draw order
(``stats.paired_bootstrap_diff``), which the vectorised paired CI must reproduce exactly.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image
from scipy.stats import binomtest

from halluprobe.audit import (
    AUDIT_SCHEMA_VERSION,
    audit_run,
    compare_runs,
    summarise_audit,
)
from halluprobe.backends.scripted import ScriptedBackend
from halluprobe.benchmarks.question_file import read_questions, split_name
from halluprobe.errors import InputError
from halluprobe.metrics.stats import paired_bootstrap_diff
from halluprobe.records_audit import AuditReport, RunComparison
from halluprobe.rundir import RunDir, sha256_file
from halluprobe.run_setup import RunConfig, make_header
from halluprobe.runner import run_questions

RESAMPLES = 200
SCRIPTED_OBJECTS = ["cat", "dog", "umbrella", "cup", "car", "person", "bus", "apple", "chair", "kite", "oven", "bird"]
LLAVA_OBJECTS = ["person", "cat", "cup", "umbrella", "motorcycle", "dog"]


# ---------------------------------------------------------------------------------------------
# independent recomputation from samples.jsonl


def _lines(run: Path) -> list[dict[str, Any]]:
    """samples.jsonl as JSON, each line with the decisions of every readout applied (score time):
    the figures below are recomputed from these by hand."""
    from _scored import scored_samples

    lines = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines() if line.strip()]
    scored = {s.key: s.readouts for s in scored_samples(run)}
    for line in lines:
        line["readouts"] = {name: r.model_dump(mode="json") for name, r in scored[(line["split"], line["question_id"])].items()}
    return lines


def _decision(line: dict[str, Any], readout: str) -> str:
    return line["readouts"][readout]["decision"] if readout in line["readouts"] else "unknown"


def _f1(lines: list[dict[str, Any]], readout: str) -> float | None:
    """F1 under the ``wrong`` policy: 2TP / (2TP + FP + every yes label not answered yes)."""
    tp = sum(1 for x in lines if x["error"] is None and x["label"] == "yes" and _decision(x, readout) == "yes")
    fp = sum(1 for x in lines if x["error"] is None and x["label"] == "no" and _decision(x, readout) == "yes")
    yes_labels = sum(1 for x in lines if x["label"] == "yes")
    den = 2 * tp + fp + (yes_labels - tp)
    return 2 * tp / den if den else None


def _macro_f1(lines: list[dict[str, Any]], readout: str) -> float | None:
    splits = list(dict.fromkeys(x["split"] for x in lines))
    values = [_f1([x for x in lines if x["split"] == s], readout) for s in splits]
    return None if any(v is None for v in values) else sum(values) / len(values)  # type: ignore[arg-type]


def _check_against_samples(audit: AuditReport, run: Path, top: int) -> None:
    """Every figure of ``audit`` recomputed from the run's samples.jsonl and run.json."""
    lines = _lines(run)
    header = json.loads((run / "run.json").read_text())
    answered = [x for x in lines if x["error"] is None]
    readouts = list(audit.readouts)
    headline = audit.headline
    assert audit.run.n == len(lines) and audit.run.errors == len(lines) - len(answered)

    # confusion per split, and the metric dicts' counts
    for r in readouts:
        for split, cell in audit.confusion[r].items():
            mine = [x for x in answered if x["split"] == split]
            expect = {
                "tp": sum(x["label"] == "yes" and _decision(x, r) == "yes" for x in mine),
                "fp": sum(x["label"] == "no" and _decision(x, r) == "yes" for x in mine),
                "tn": sum(x["label"] == "no" and _decision(x, r) == "no" for x in mine),
                "fn": sum(x["label"] == "yes" and _decision(x, r) == "no" for x in mine),
                "unknown": sum(_decision(x, r) == "unknown" for x in mine),
            }
            assert cell.model_dump() == expect, (r, split)
            m = audit.readouts[r].splits[split]
            assert m.f1 == pytest.approx(_f1([x for x in lines if x["split"] == split], r))
        assert audit.readouts[r].macro.f1 == pytest.approx(_macro_f1(lines, r))
        assert audit.readouts[r].pooled.f1 == pytest.approx(_f1(lines, r))

    # agreement: fraction of answered questions decided alike (unknown alike included)
    for a in readouts:
        for b in readouts:
            same = sum(_decision(x, a) == _decision(x, b) for x in answered)
            assert audit.agreement[a][b] == pytest.approx(same / len(answered)), (a, b)

    # first-token diagnostics
    offset = Counter(x["offset_argmax"] for x in answered if x["offset_argmax"] is not None)
    assert audit.offset_rate == pytest.approx(sum(offset.values()) / len(answered))
    expect_pieces = sorted(offset.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    assert [(p.piece, p.count) for p in audit.offset_pieces] == expect_pieces
    first = Counter(x["first_token"][0]["piece"] for x in answered)
    expect_first = sorted(first.items(), key=lambda kv: (-kv[1], kv[0]))[:top]
    assert [(p.piece, p.count) for p in audit.first_pieces] == expect_first
    assert all(p.share == pytest.approx(p.count / len(answered)) for p in audit.first_pieces)

    # each readout against greedy decoding's first token (in the run's own yes / no sets)
    sets = header["token_sets"]
    for r, counts in audit.greedy.items():
        greedy = ["yes" if x["first_token"][0]["id"] in sets["yes_ids"] else "no" if x["first_token"][0]["id"] in sets["no_ids"] else None for x in answered]
        in_set = [(g, _decision(x, r)) for g, x in zip(greedy, answered) if g is not None]
        assert counts.model_dump() == {
            "in_set": len(in_set),
            "agree": sum(g == d for g, d in in_set),
            "disagree": sum(g != d for g, d in in_set),
            "offset": greedy.count(None),
        }

    # text rules against dynamic
    for rule, counts in audit.text_dynamic_disagreements.items():
        pairs = [(_decision(x, f"text:{rule}"), _decision(x, "dynamic")) for x in answered]
        assert counts.differ == sum(t != "unknown" and d != "unknown" and t != d for t, d in pairs)
        assert counts.text_unknown == sum(t == "unknown" and d != "unknown" for t, d in pairs)
        assert counts.dynamic_unknown == sum(t != "unknown" and d == "unknown" for t, d in pairs)

    # paired: McNemar on the discordant pairs, and the F1 differences
    for r, entry in audit.paired.items():
        right_r = [_decision(x, r) == x["label"] for x in answered]
        right_h = [_decision(x, headline) == x["label"] for x in answered]
        b = sum(p and not q for p, q in zip(right_r, right_h))
        c = sum(q and not p for p, q in zip(right_r, right_h))
        assert (entry.b, entry.c, entry.n) == (b, c, len(answered)), r
        expect_p = binomtest(min(b, c), b + c, 0.5).pvalue if b + c else 1.0
        assert entry.mcnemar_p == pytest.approx(expect_p, rel=1e-9)
        assert entry.delta_f1 == pytest.approx(_macro_f1(answered, r) - _macro_f1(answered, headline))
        assert entry.delta_f1_pooled == pytest.approx(_f1(answered, r) - _f1(answered, headline))
    assert headline not in audit.paired

    # convergence: pooled F1 after the first k lines, k = 100, 200, ..., n; stable_after by hand
    n = len(lines)
    ks = list(range(100, n, 100)) + [n]
    for r in readouts:
        curve = audit.convergence[r]
        assert [p.k for p in curve] == ks
        for k, value in curve:
            assert value == pytest.approx(_f1(lines[:k], r)), (r, k)
        final = curve[-1][1]
        stable = None
        for k, value in curve:
            if value is not None and abs(value - final) <= 0.005:
                stable = k if stable is None else stable
            else:
                stable = None
        assert audit.stable_after[r] == stable

    # hallucination profile of the headline over absent objects
    yes, total = Counter(), Counter()
    for x in answered:
        if x["label"] == "no":
            total[x["object"]] += 1
            yes[x["object"]] += _decision(x, headline) == "yes"
    expect_objects = sorted(total, key=lambda o: (-yes[o] / total[o], -yes[o], o))[:top]
    profile = audit.hallucination_profile
    assert [o.object for o in profile.objects] == expect_objects
    assert all((o.yes, o.n) == (yes[o.object], total[o.object]) for o in profile.objects)

    # p_yes lists and calibration of every logit readout
    for r, lists in audit.p_yes.items():
        got_yes = [round(x["readouts"][r]["p_yes"], 4) for x in answered if x["label"] == "yes" and r in x["readouts"]]
        got_no = [round(x["readouts"][r]["p_yes"], 4) for x in answered if x["label"] == "no" and r in x["readouts"]]
        assert (lists.yes, lists.no) == (got_yes, got_no)
        probs = [(x["readouts"][r]["p_yes"], x["label"] == "yes") for x in answered]
        bins = audit.calibration[r].bins
        ece = 0.0
        for i, cell in enumerate(bins):
            inside = [(p, y) for p, y in probs if min(int(p * 10), 9) == i]
            assert cell.count == len(inside)
            if inside:
                assert cell.mean_p == pytest.approx(sum(p for p, _ in inside) / len(inside))
                assert cell.frac_yes == pytest.approx(sum(y for _, y in inside) / len(inside))
                ece += abs(sum(y for _, y in inside) - sum(p for p, _ in inside)) / len(probs)
        assert audit.calibration[r].ece == pytest.approx(ece)


# ---------------------------------------------------------------------------------------------
# the tiny LLaVA run (real LLaMA-2 vocabulary, real photos)


def _llava_benchmark(root: Path, images: list[str]) -> dict[str, Path]:
    """Three splits; each asks the six objects about every photo, positive then negative, in an
    order rotated by one per split: an object is present in one split and absent in the next, so
    the steered model's fixed answer per (photo, object) is right in one and a hallucination or
    a miss in the other."""
    files = {}
    for r, split in enumerate(("random", "popular", "adversarial")):
        objects = LLAVA_OBJECTS[r:] + LLAVA_OBJECTS[:r]
        lines, qid = [], 1
        for image in images:
            for i, obj in enumerate(objects):
                article = "an" if obj[0] in "aeiou" else "a"
                text = f"Is there {article} {obj} in the image?"
                lines.append(json.dumps({"question_id": qid, "image": image, "text": text, "label": "yes" if i % 2 == 0 else "no", "object": obj}))
                qid += 1
        files[split] = root / f"tiny_pope_{split}.json"
        files[split].write_text("\n".join(lines) + "\n")
    return files


def _steer_within_image(model: Any, inputs_list: list[Any], n_images: int, scale: float) -> None:
    """Make ``▁Yes``/``▁No`` (3869/1939) read one direction of the final hidden state and
    ``yes``/``no`` (3582/1217, legacy_2tok's ids) another, both orthogonal to the per-image mean
    states: decisions then vary with the question about one photo, the two legacy readouts
    disagree where the two directions do, and at this scale the random rows still win the
    argmax on some questions (off-set)."""
    import torch

    head = model.get_output_embeddings()
    captured: list[Any] = []
    hook = head.register_forward_hook(lambda mod, args, out: captured.append(args[0][:, -1, :].detach().clone()))
    with torch.no_grad():
        for inputs in inputs_list:
            model(**inputs)
    hook.remove()
    hidden = torch.cat(captured)
    per_image = hidden.view(n_images, -1, hidden.shape[-1])
    means = per_image.mean(1)
    residual = (per_image - means[:, None, :]).reshape(hidden.shape)
    basis = torch.linalg.qr(means.T).Q
    residual = residual - (residual @ basis) @ basis.T
    directions = torch.linalg.svd(residual, full_matrices=False).Vh
    with torch.no_grad():
        for d, yes_id, no_id in ((directions[0], 3869, 1939), (directions[1], 3582, 1217)):
            w = d / (residual @ d).std() * scale
            head.weight[yes_id] = w
            head.weight[no_id] = -w


@pytest.fixture(scope="module")
def llava_run(tmp_path_factory: pytest.TempPathFactory, llama_tokenizer_dir: Path) -> Path:
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from halluprobe.backends.hf.backend import HFBackend
    from halluprobe.tiny import build_tiny_llava, demo_photos

    root = tmp_path_factory.mktemp("audit_llava")
    photos, _ = demo_photos(root / "photos")
    images = sorted(p.name for p in photos.iterdir())
    model_dir = build_tiny_llava(root / "model", llama_tokenizer_dir, seed=0, image_size=112)
    processor = AutoProcessor.from_pretrained(model_dir)
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    inputs_list = []
    for image in images:
        with Image.open(photos / image) as img:
            rgb = img.convert("RGB")
        for obj in LLAVA_OBJECTS:
            article = "an" if obj[0] in "aeiou" else "a"
            inputs_list.append(processor(images=rgb, text=f"USER: <image>\nIs there {article} {obj} in the image?\nASSISTANT:", return_tensors="pt"))
    _steer_within_image(model, inputs_list, len(images), scale=0.6)
    model.save_pretrained(model_dir)

    files = _llava_benchmark(root, images)
    questions = [q for split, f in files.items() for q in read_questions(f, split=split)]
    backend = HFBackend(str(model_dir), batch_size=8, dtype="float32", device="cpu")
    config = RunConfig(model=str(model_dir), template="llava", max_new_tokens=3, overwrite=True)
    header = make_header(config, backend, {s: (f, sha256_file(f)) for s, f in files.items()}, photos)
    run_questions(backend, questions, photos, RunDir(root / "run"), config, header)
    return root / "run"


@pytest.mark.slow  # builds, steers and runs a tiny LLaVA (about 15 s with the transformers import)
def test_llava_audit_every_figure_recomputed_from_samples(llava_run: Path) -> None:
    lines = _lines(llava_run)
    assert len(lines) == 90 and not any(x["error"] for x in lines)
    # the run exercises what the audit is for: the two legacy readouts really differ, some
    # argmaxes are off-set and some in-set, decisions vary within a photo, text and dynamic differ
    differ = sum(_decision(x, "legacy_2tok") != _decision(x, "legacy_8tok") for x in lines)
    assert differ > 0
    offset = sum(x["offset_argmax"] is not None for x in lines)
    assert 0 < offset < len(lines)
    by_image = {}
    for x in lines:
        by_image.setdefault(x["image"], set()).add(_decision(x, "dynamic"))
    assert any(len(d) > 1 for d in by_image.values())

    audit = audit_run(llava_run, n_resamples=RESAMPLES, seed=3, top=5)
    assert audit.schema_version == AUDIT_SCHEMA_VERSION
    assert audit.run.token_sets is not None and audit.run.token_sets.yes_ids == [3582, 3869, 4874, 8241, 21143, 22483]
    assert audit.run.legacy_valid is True
    assert set(audit.readouts) == {"legacy_2tok", "legacy_8tok", "dynamic", "text:pope", "text:exact", "text:yorn", "text:strict"}
    assert all(v.valid and not v.forced for v in audit.readouts.values())
    assert audit.agreement["legacy_2tok"]["legacy_8tok"] == pytest.approx(1 - differ / 90)
    assert audit.offset_rate == pytest.approx(offset / 90)
    assert sum(c.differ + c.text_unknown for c in audit.text_dynamic_disagreements.values()) > 0
    _check_against_samples(audit, llava_run, top=5)
    # 90 questions: a one-point curve ending at n
    assert all(len(curve) == 1 and curve[0].k == 90 for curve in audit.convergence.values())
    # the adversarial split pairs each negative with the positive asked just before it
    objects = LLAVA_OBJECTS[2:] + LLAVA_OBJECTS[:2]
    expect_pairs = Counter()
    for x in lines:
        if x["split"] == "adversarial" and x["label"] == "no":
            expect_pairs[(objects[objects.index(x["object"]) - 1], x["object"])] += 1
    pairs = audit.hallucination_profile.adversarial_pairs
    assert sum(p.n for p in pairs) == 15 and all(p.n == expect_pairs[(p.positive, p.negative)] for p in pairs)


@pytest.mark.slow
def test_llava_paired_ci_equals_the_reference_paired_bootstrap(llava_run: Path) -> None:
    """The vectorised paired CI must equal stats.paired_bootstrap_diff with the macro F1 coded
    here as a function of resampled row indices (same seed, same image draws)."""
    lines = _lines(llava_run)
    audit = audit_run(llava_run, n_resamples=RESAMPLES, seed=11)
    images = [x["image"] for x in lines]

    def stat(readout: str):
        def macro(rows: np.ndarray) -> float | None:
            return _macro_f1([lines[i] for i in rows], readout)

        return macro

    for r in ("legacy_2tok", "legacy_8tok", "text:pope"):
        lo, hi = paired_bootstrap_diff(images, stat(r), stat("dynamic"), n_resamples=RESAMPLES, seed=11)  # type: ignore[misc]
        assert audit.paired[r].delta_f1_ci == pytest.approx((lo, hi), abs=1e-12), r


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["no", "drop"])
def test_llava_paired_under_other_unknown_policies(llava_run: Path, policy: str) -> None:
    """Text rules leave many gibberish answers unknown: ``no`` reads them as no; ``drop`` removes a
    question from a pair when either side is unknown."""
    answered = _lines(llava_run)
    audit = audit_run(llava_run, policy=policy, n_resamples=0)  # type: ignore[arg-type]
    assert audit.policy == policy
    for r in ("text:strict", "text:yorn"):
        pairs = [(_decision(x, r), _decision(x, "dynamic"), x["label"]) for x in answered]
        if policy == "no":
            pairs = [("no" if a == "unknown" else a, "no" if b == "unknown" else b, lab) for a, b, lab in pairs]
        else:
            pairs = [(a, b, lab) for a, b, lab in pairs if a != "unknown" and b != "unknown"]
        b = sum(a == lab and d != lab for a, d, lab in pairs)
        c = sum(a != lab and d == lab for a, d, lab in pairs)
        entry = audit.paired[r]
        assert (entry.n, entry.b, entry.c) == (len(pairs), b, c), r
        assert entry.delta_f1_ci is None  # no resamples, no interval

        kept = [x["split"] for x in answered if policy == "no" or (_decision(x, r) != "unknown" and _decision(x, "dynamic") != "unknown")]
        by_split = list(zip(pairs, kept))

        def f1(i: int, split: str, by_split: list[Any] = by_split) -> float | None:
            tp = sum(p[i] == "yes" and p[2] == "yes" for p, x in by_split if x == split)
            fp = sum(p[i] == "yes" and p[2] == "no" for p, x in by_split if x == split)
            fn = sum(p[i] == "no" and p[2] == "yes" for p, x in by_split if x == split)
            return 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else None

        splits = sorted(set(kept))
        macro = [(f1(0, s), f1(1, s)) for s in splits]
        assert all(a is not None and d is not None for a, d in macro)  # every split keeps yes labels
        assert entry.delta_f1 == pytest.approx(sum(a - d for a, d in macro) / len(splits)), r  # type: ignore[operator]


# ---------------------------------------------------------------------------------------------
# scripted runs


def _scripted_world(
    root: Path,
    *,
    n_images: int,
    splits: tuple[str, ...] = ("random", "popular", "adversarial"),
    hallucinate: dict[str, float] | None = None,
    errors: tuple[int, ...] = (),
    offset: tuple[int, ...] = (),
    seed: int = 1,
) -> tuple[Path, dict[str, Path], Path]:
    """Images, POPE-like split files (3 positives per image, each followed by its negative),
    and a script. Returns (images dir, split -> file, script)."""
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    present: dict[str, list[str]] = {}
    for i in range(n_images):
        name = f"img{i:03d}.png"
        if not (images / name).exists():
            Image.new("RGB", (4, 4), (i % 255, 0, 0)).save(images / name)
        present[name] = [SCRIPTED_OBJECTS[(i + j * 4) % 12] for j in range(3)]
    files = {}
    for split in splits:
        rng = random.Random(split)  # the questions do not depend on the script's seed
        lines, qid = [], 1
        for name, objs in present.items():
            absent = [o for o in SCRIPTED_OBJECTS if o not in objs]
            for pos in objs:
                if split == "adversarial":  # a fixed "co-occurring" partner per positive
                    neg = next(o for o in SCRIPTED_OBJECTS[SCRIPTED_OBJECTS.index(pos) + 1 :] + SCRIPTED_OBJECTS if o in absent)
                else:
                    neg = rng.choice(absent)
                absent.remove(neg)
                for obj, label in ((pos, "yes"), (neg, "no")):
                    article = "an" if obj[0] in "aeiou" else "a"
                    lines.append(json.dumps({"question_id": qid, "image": name, "text": f"Is there {article} {obj} in the image?", "label": label, "object": obj}))
                    qid += 1
        files[split] = root / f"toy_pope_{split}.json"
        files[split].write_text("\n".join(lines) + "\n")
    script = root / f"script{seed}.json"
    script.write_text(
        json.dumps(
            {
                "present": present,
                "hallucinate": hallucinate if hallucinate is not None else {"dog": 0.6, "car": 0.4, "kite": 0.3, "oven": 0.2},
                "errors": [f"img{i:03d}.png" for i in errors],
                "offset": {f"img{i:03d}.png": "▁Maybe" for i in offset},
                "seed": seed,
            }
        )
    )
    return images, files, script


def _scripted_run(
    out: Path, images: Path, files: dict[str, Path], script: Path, template: str | None = None, shuffle: bool = False
) -> Path:
    """Run the scripted backend; ``shuffle`` asks the questions in a seeded random order, so run
    order (convergence) and question-id order (adversarial pairing) differ."""
    backend = ScriptedBackend(str(script), batch_size=16)
    questions = [q for split, f in files.items() for q in read_questions(f, split=split)]
    if shuffle:
        random.Random(0).shuffle(questions)
    config = RunConfig(model=str(script), backend="scripted", template=template, overwrite=True)
    header = make_header(config, backend, {s: (f, sha256_file(f)) for s, f in files.items()}, images)
    run_questions(backend, questions, images, RunDir(out), config, header)
    return out


@pytest.fixture(scope="module")
def scripted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("audit_scripted")
    images, files, script = _scripted_world(root, n_images=60, errors=(7,), offset=(3, 11))
    run = _scripted_run(root / "run", images, files, script, shuffle=True)
    return {"root": root, "images": images, "files": files, "script": script, "run": run}


def test_scripted_audit_convergence_pairs_errors_and_forced_legacy(scripted: dict[str, Any]) -> None:
    run = scripted["run"]
    lines = _lines(run)
    assert len(lines) == 1080 and sum(x["error"] is not None for x in lines) == 18
    audit = audit_run(run, n_resamples=RESAMPLES, seed=0, top=8)
    _check_against_samples(audit, run, top=8)
    # the scripted vocabulary is not LLaMA-2: legacy readouts shown, invalid, forced
    assert audit.run.legacy_valid is False
    for r in ("legacy_2tok", "legacy_8tok"):
        assert audit.readouts[r].valid is False and audit.readouts[r].forced is True
        assert audit.paired[r].forced is True
    assert audit.readouts["dynamic"].valid is True
    # convergence: 10 points of 100 then n; F1 really moves and settles
    curve = audit.convergence["dynamic"]
    assert [p.k for p in curve] == [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1080]
    # a true negative leaves F1 unchanged: make sure some checkpoints end on a sample that counts
    moving = [k for k, _ in curve if not (lines[k - 1]["label"] == "no" and _decision(lines[k - 1], "dynamic") == "no")]
    assert len(moving) >= 3
    stable = audit.stable_after["dynamic"]
    assert stable is not None and stable > 100
    # adversarial pairing from the file: each negative follows its positive line
    file_lines = [json.loads(x) for x in scripted["files"]["adversarial"].read_text().splitlines()]
    decided = {x["question_id"]: _decision(x, "dynamic") for x in lines if x["split"] == "adversarial" and x["error"] is None}
    expect_yes, expect_n = Counter(), Counter()
    for prev, cur in itertools.pairwise(file_lines):
        if cur["label"] == "no" and cur["question_id"] in decided:
            assert prev["label"] == "yes" and prev["image"] == cur["image"]
            expect_n[(prev["object"], cur["object"])] += 1
            expect_yes[(prev["object"], cur["object"])] += decided[cur["question_id"]] == "yes"
    pairs = audit.hallucination_profile.adversarial_pairs
    ranked = sorted(expect_n, key=lambda k: (-expect_yes[k] / expect_n[k], -expect_yes[k], k))[:8]
    assert [(p.positive, p.negative) for p in pairs] == ranked
    assert all((p.yes, p.n) == (expect_yes[(p.positive, p.negative)], expect_n[(p.positive, p.negative)]) for p in pairs)
    assert pairs[0].rate > 0  # hallucinated objects exist
    # the argmax of two images is ▁Maybe: the off-set diagnostic names it
    assert audit.offset_pieces == [("▁Maybe", 36)]
    assert audit.greedy["dynamic"].offset == 36
    lines_out = summarise_audit(audit)
    assert any("headline dynamic: macro F1" in x for x in lines_out)
    assert any("FORCED" in x and "legacy_2tok" in x for x in lines_out)
    assert any("3.4%" in x for x in lines_out)  # 36 of 1062 answered


def test_bootstrap_is_seeded_and_audit_json_byte_identical(scripted: dict[str, Any]) -> None:
    run = scripted["run"]
    first = audit_run(run, n_resamples=RESAMPLES, seed=5)
    path = RunDir(run).write_audit(first)
    assert path == run / "audit.json" == RunDir(run).audit_path
    data = path.read_bytes()
    second = audit_run(run, n_resamples=RESAMPLES, seed=5)
    assert RunDir(run).write_audit(second).read_bytes() == data
    assert json.loads(data) == first.to_json_dict()  # JSON-ready: nothing changes through a round trip
    assert RunDir(run).read_audit() == first
    other = audit_run(run, n_resamples=RESAMPLES, seed=6)
    assert other.paired["text:pope"].delta_f1 == first.paired["text:pope"].delta_f1
    assert other.readouts["dynamic"].macro.ci["f1"] != first.readouts["dynamic"].macro.ci["f1"]
    assert not list(run.glob(".audit.json.tmp*"))


def test_relabelling_counts_flips_removals_additions_and_shifts(scripted: dict[str, Any], tmp_path: Path) -> None:
    run = scripted["run"]
    lines = _lines(run)
    original = [json.loads(x) for x in scripted["files"]["random"].read_text().splitlines()]
    flip = {2, 5, 6, 9, 40}  # question ids whose label changes
    remove = {1, 3, 8}
    relabelled = []
    for q in original:
        if q["question_id"] in remove:
            continue
        if q["question_id"] in flip:
            q = dict(q, label="no" if q["label"] == "yes" else "yes")
        relabelled.append(q)
    relabelled.append({"question_id": 9999, "image": "img000.png", "text": "Is there a zebra in the image?", "label": "no"})
    labels_file = tmp_path / "coco_repope_random.json"
    labels_file.write_text("\n".join(json.dumps(q) for q in relabelled) + "\n")

    audit = audit_run(run, labels=[labels_file], n_resamples=RESAMPLES, seed=0)
    entry = audit.relabel[str(labels_file)]
    assert entry.split == "random" and entry.file == str(labels_file) and entry.files is None
    assert (entry.matched, entry.removed, entry.flipped, entry.added) == (357, 3, 5, 1)
    to_yes = sum(1 for q in original if q["question_id"] in flip and q["label"] == "no")
    assert (entry.flipped_to_yes, entry.flipped_to_no) == (to_yes, 5 - to_yes)

    # by hand: the same answers, the random split's labels replaced and removed questions dropped
    new_labels = {q["question_id"]: q["label"] for q in relabelled}
    rescored = []
    for x in lines:
        if x["split"] == "random":
            if x["question_id"] not in new_labels:
                continue
            x = dict(x, label=new_labels[x["question_id"]])
        rescored.append(x)
    for r in ("dynamic", "text:pope"):
        new_macro, old_macro = _macro_f1(rescored, r), _macro_f1(lines, r)
        assert entry.metrics[r].macro.f1 == pytest.approx(new_macro)
        assert entry.shift[r].macro["f1"] == pytest.approx(new_macro - old_macro)
        assert entry.shift[r].pooled["f1"] == pytest.approx(_f1(rescored, r) - _f1(lines, r))
        assert entry.metrics[r].splits["random"].n == 357
    assert entry.shift["dynamic"].macro["f1"] != 0
    assert "legacy_2tok" not in entry.metrics  # forced readouts are not rescored
    assert audit.relabel_combined is None and "relabel_combined" not in audit.to_json_dict()
    # the per-file entry's JSON has file and split first, and no "files" key
    assert list(audit.to_json_dict()["relabel"][str(labels_file)])[:3] == ["file", "split", "splits"]

    # SPLIT=FILE names the split; two files of distinct splits are also scored together
    plain = tmp_path / "fixed.json"
    plain.write_text(labels_file.read_text())
    adversarial = tmp_path / "x_pope_adversarial.json"
    adversarial.write_text(scripted["files"]["adversarial"].read_text())
    both = audit_run(run, labels=[f"random={plain}", adversarial], n_resamples=0)
    assert both.relabel[f"random={plain}"].flipped == 5
    assert both.relabel[str(adversarial)].flipped == 0 and both.relabel[str(adversarial)].matched == 360
    combined = both.relabel_combined
    assert combined is not None and combined.flipped == 5 and combined.matched == 717
    assert combined.files == [f"random={plain}", str(adversarial)] and combined.file is None
    assert list(both.to_json_dict()["relabel_combined"])[:2] == ["files", "splits"]
    assert combined.shift["dynamic"].macro["f1"] == pytest.approx(entry.shift["dynamic"].macro["f1"])

    with pytest.raises(InputError, match="not in the run"):
        audit_run(run, labels=[f"nosuchsplit={plain}"], n_resamples=0)


def test_bad_headline_is_an_input_error(scripted: dict[str, Any]) -> None:
    with pytest.raises(InputError, match="not in this run"):
        audit_run(scripted["run"], headline="nonsense", n_resamples=0)
    with pytest.raises(InputError, match="LLaMA-2"):
        audit_run(scripted["run"], headline="legacy_2tok", n_resamples=0)


def test_labels_file_split_names() -> None:
    from halluprobe.audit.relabel import labels_spec

    assert labels_spec("a/coco_repope_adversarial.json")[0] == "adversarial"
    assert labels_spec("coco_pope_popular.json")[0] == split_name("coco_pope_popular.json") == "popular"
    assert labels_spec("random=any/file.jsonl")[:2] == ("random", Path("any/file.jsonl"))
    assert labels_spec("other.json")[0] == "other"


def test_compare_runs_differing_in_template_then_in_model(scripted: dict[str, Any], tmp_path: Path) -> None:
    images, files, script = _scripted_world(tmp_path / "w", n_images=20, splits=("random", "adversarial"), seed=1)
    a = _scripted_run(tmp_path / "a", images, files, script, template="llava")
    b = _scripted_run(tmp_path / "b", images, files, script, template="Q: {question} A:")
    result = compare_runs([a, b], n_resamples=RESAMPLES)
    assert result.differ_in == "template" and result.common_questions == 240
    assert [r.label for r in result.runs] == ["llava", "Q: {question} A:"]
    # the scripted backend's answers do not depend on the prompt: identical decisions
    entry = result.paired["Q: {question} A:"]
    assert (entry.b, entry.c, entry.mcnemar_p, entry.delta_f1) == (0, 0, 1.0, 0.0)
    assert entry.delta_f1_ci == (0.0, 0.0) and entry.forced is None
    assert "forced" not in result.to_json_dict()["paired"]["Q: {question} A:"]  # runs compared carry no forced flag
    assert result.table["llava"].macro == result.table["Q: {question} A:"].macro

    # another "model" (script) over the same questions: real differences, checked by hand
    _, _, script2 = _scripted_world(tmp_path / "w", n_images=20, splits=("random", "adversarial"), hallucinate={"dog": 0.1, "bus": 0.7, "apple": 0.5}, seed=2)
    c = _scripted_run(tmp_path / "c", images, files, script2, template="llava")
    result = compare_runs([a, c], n_resamples=RESAMPLES, seed=4)
    assert result.differ_in == "model" and (result.differs.model, result.differs.template) == (True, False)
    first, second = (r.label for r in result.runs)
    assert (first, second) == ("script1.json", "script2.json")
    la, lc = _lines(a), {(x["split"], x["question_id"]): x for x in _lines(c)}
    right_a = [_decision(x, "dynamic") == x["label"] for x in la]
    right_c = [_decision(lc[(x["split"], x["question_id"])], "dynamic") == x["label"] for x in la]
    nb = sum(q and not p for p, q in zip(right_a, right_c))
    nc = sum(p and not q for p, q in zip(right_a, right_c))
    entry = result.paired[second]
    assert (entry.b, entry.c) == (nb, nc) and nb + nc > 0
    assert entry.mcnemar_p == pytest.approx(binomtest(min(nb, nc), nb + nc, 0.5).pvalue)
    assert entry.delta_f1 == pytest.approx(_macro_f1(list(lc.values()), "dynamic") - _macro_f1(la, "dynamic"))
    assert entry.delta_f1_ci is not None and entry.delta_f1 is not None
    lo, hi = entry.delta_f1_ci
    assert lo <= entry.delta_f1 <= hi

    # runs that share no question
    _, other_files, _ = _scripted_world(tmp_path / "v", n_images=4, splits=("other",))
    d = _scripted_run(tmp_path / "d", images, other_files, script)
    with pytest.raises(InputError, match="share no question"):
        compare_runs([a, d], n_resamples=0)
    with pytest.raises(InputError, match="at least two"):
        compare_runs([a], n_resamples=0)


# ---------------------------------------------------------------------------------------------
# the typed records against files written before the audit was typed

# Written by the untyped audit (commit 81a45a1, the dict that json.dumps wrote) for a scripted
# run of 4 images x 2 splits with an errored image, an off-set argmax, the text:pope rule and
# two label files (so every optional key is present: relabel_combined, paired "forced").
GOLDEN = Path(__file__).parent / "golden"


def test_audit_json_written_before_typing_reads_and_writes_back_byte_identical(tmp_path: Path) -> None:
    data = (GOLDEN / "audit_v1.json").read_bytes()
    audit = AuditReport.model_validate_json(data)
    assert audit.relabel_combined is not None and audit.relabel_combined.files is not None
    assert audit.paired["legacy_2tok"].forced is True and audit.readouts["legacy_2tok"].forced is True
    assert audit.run.errors == 12 and audit.offset_pieces == [("▁Maybe", 12)]
    assert audit.to_json().encode() == data  # key order, float repr, indentation, UTF-8
    assert audit.to_json_dict() == json.loads(data)  # what `audit --json` printed
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.audit_path.write_bytes(data)
    assert run.read_audit() == audit
    assert run.write_audit(audit).read_bytes() == data


def test_comparison_json_written_before_typing_reads_and_writes_back_byte_identical() -> None:
    data = (GOLDEN / "compare_v1.json").read_bytes()
    comparison = RunComparison.model_validate_json(data)
    assert comparison.differ_in == "model" and len(comparison.runs) == 2
    assert all(p.forced is None for p in comparison.paired.values())
    assert comparison.to_json().encode() == data
    assert comparison.to_json_dict() == json.loads(data)


def test_fresh_audit_round_trips_through_its_json(scripted: dict[str, Any]) -> None:
    audit = audit_run(scripted["run"], n_resamples=RESAMPLES, seed=2, top=4)
    text = audit.to_json()
    again = AuditReport.model_validate_json(text)
    assert again == audit and again.to_json() == text


def test_reading_a_missing_or_broken_audit_is_an_input_error(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    with pytest.raises(InputError, match="no audit file") as missing:
        run.read_audit()
    assert missing.value.path == str(run.audit_path)
    data = json.loads((GOLDEN / "audit_v1.json").read_text())
    del data["headline"]
    run.audit_path.write_text(json.dumps(data))
    with pytest.raises(InputError, match="invalid audit file: headline") as broken:
        run.read_audit()
    assert broken.value.path == str(run.audit_path)


def test_overwriting_a_run_removes_its_stale_audit(tmp_path: Path) -> None:
    images, files, script = _scripted_world(tmp_path / "w", n_images=3, splits=("random",))
    run = _scripted_run(tmp_path / "run", images, files, script)
    RunDir(run).write_audit(audit_run(run, n_resamples=0))
    assert RunDir(run).audit_path.exists()
    _scripted_run(run, images, files, script)  # overwrite=True: a new run, the old audit is not its audit
    assert not RunDir(run).audit_path.exists()


def test_an_imported_run_is_audited_under_the_rule_its_tool_recorded(tmp_path: Path) -> None:
    """No ``dynamic`` in an lmms-eval import: the headline is the tool's own stored decision
    (``lmms-eval:exact``), said in one line; ``headline=`` still overrides."""
    from typer.testing import CliRunner

    from halluprobe.cli import app

    answers = ["yes", "no", "Yes", "no", "yes", "maybe"]
    logs = []
    for qid in range(12):
        label = "yes" if qid % 2 == 0 else "no"
        answer = answers[qid % len(answers)]
        text = f"Is there a {SCRIPTED_OBJECTS[qid]} in the image?"
        logs.append({"doc_id": qid, "target": label, "filtered_resps": [answer], "resps": [[answer]],
                     "doc": {"question_id": str(qid + 1), "question": text, "answer": label, "category": "random"},
                     "arguments": [text], "pope_accuracy": {"question_id": str(qid + 1), "score": 0.0,
                     "prediction": answer.lower(), "ground_truth": label}})  # fmt: skip
    log_file = tmp_path / "20240601_samples_pope_random.jsonl"
    log_file.write_text("".join(json.dumps(x) + "\n" for x in logs), encoding="utf-8")
    result = CliRunner().invoke(app, ["import", "lmms-eval", str(log_file), "--out", str(tmp_path / "run")])
    assert result.exit_code == 0, result.output
    audit = audit_run(tmp_path / "run", n_resamples=0)
    assert audit.headline == "lmms-eval:exact" and "the rule the importing tool recorded" in (audit.headline_note or "")
    assert summarise_audit(audit)[0] == audit.headline_note
    imported = audit.run.imported
    assert imported is not None and imported.tool == "lmms-eval" and "lmms-eval:exact" in imported.tool_readouts
    assert [f.name for f in imported.files] == [log_file.name]
    chosen = audit_run(tmp_path / "run", headline="text:pope", n_resamples=0)
    assert chosen.headline == "text:pope" and chosen.headline_note is None
    with pytest.raises(InputError, match="not in this run"):
        audit_run(tmp_path / "run", headline="dynamic", n_resamples=0)
