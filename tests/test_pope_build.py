"""build_pope / write_pope: sampling semantics, determinism, articles, manifest."""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from halluprobe.benchmarks.coco import COCO_CATEGORY_NAMES
from halluprobe.benchmarks.objects import ObjectIndex
from halluprobe.benchmarks.pope import DEFAULT_TEMPLATE, SAMPLER_VERSION, SPLITS, PopeBuild, build_pope, question_text, write_pope
from halluprobe.benchmarks.question_file import read_questions
from halluprobe.errors import InputError
from halluprobe.records import Question


def synthetic_index(n_images: int = 300, seed: int = 1) -> ObjectIndex:
    """Images with 1..8 COCO objects, Zipf-like popularity, so popular/adversarial differ."""
    rng = random.Random(seed)
    names = list(COCO_CATEGORY_NAMES)
    weights = [1.0 / (r + 1) for r in range(len(names))]
    images: dict[str, tuple[str, ...]] = {}
    for i in range(n_images):
        k = rng.randint(1, 8)
        objs = rng.choices(names, weights=weights, k=k)
        images[f"COCO_val2014_{i:012d}.jpg"] = tuple(dict.fromkeys(objs))
    return ObjectIndex(images=images, source_sha256="0" * 64)


INDEX = synthetic_index()


@pytest.fixture(scope="module")
def build() -> PopeBuild:
    return build_pope(INDEX, n_images=120, per_image=3, seed=7)


def by_image(questions: list[Question]) -> dict[str, list[Question]]:
    out: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        out[q.image].append(q)
    return out


def test_structure_invariants(build: PopeBuild) -> None:
    assert set(build.splits) == set(SPLITS)
    assert len(build.images) == 120
    for split in SPLITS:
        qs = build.splits[split]
        assert [q.question_id for q in qs] == list(range(1, len(qs) + 1))
        assert len(qs) == 120 * 6
        assert all(q.split == split for q in qs)
        # positive then its negative, alternating
        assert [q.label for q in qs] == ["yes", "no"] * (len(qs) // 2)
        for img, iq in by_image(qs).items():
            objs = INDEX.images[img]
            assert len(iq) == 6
            yes = [q.object for q in iq if q.label == "yes"]
            no = [q.object for q in iq if q.label == "no"]
            assert yes == list(objs[:3])  # "first" positives
            assert len(no) == 3 and not set(no) & set(objs)  # negatives never in the image
            assert len(set(yes + no)) == 6  # never the same object twice for one image
            assert all(q.text == question_text(DEFAULT_TEMPLATE, q.object) for q in iq)  # type: ignore[arg-type]
    # the three splits ask about the same images and positives
    pos = {s: [(q.image, q.object) for q in build.splits[s] if q.label == "yes"] for s in SPLITS}
    assert pos["random"] == pos["popular"] == pos["adversarial"]
    assert build.random == build.splits["random"]


def test_sampling_only_images_with_enough_objects(build: PopeBuild) -> None:
    assert all(len(INDEX.images[img]) >= 3 for img in build.images)
    eligible = sum(len(o) >= 3 for o in INDEX.images.values())
    assert build.eligible_images == eligible
    assert len(set(build.images)) == len(build.images)


def test_ground_truth_and_co_occurrence_are_of_the_sampled_images(build: PopeBuild) -> None:
    sub = INDEX.restrict(build.images)
    assert build.ground_truth_objects == sub.frequencies()
    assert build.co_occurrence == sub.co_occurrence()
    assert build.image_objects == {img: INDEX.images[img] for img in build.images}


def test_random_negatives_come_from_sampled_objects(build: PopeBuild) -> None:
    universe = set(INDEX.restrict(build.images).objects)
    negs = [q.object for q in build.random if q.label == "no"]
    assert set(negs) <= universe
    assert len(set(negs)) > 10  # spread out, not a ranking


def test_popular_negatives_are_the_most_frequent_absent(build: PopeBuild) -> None:
    freq = build.ground_truth_objects
    ranking = sorted(freq, key=lambda o: (-freq[o], o))
    for img, iq in by_image(build.popular).items():
        absent = [o for o in ranking if o not in INDEX.images[img]]
        assert [q.object for q in iq if q.label == "no"] == absent[:3]
    assert build.random_fallbacks["popular"] == 0


def test_adversarial_negatives_are_the_most_co_occurring(build: PopeBuild) -> None:
    co = build.co_occurrence
    fallbacks = 0
    for img, iq in by_image(build.adversarial).items():
        objs = set(INDEX.images[img])
        asked: set[str] = set()
        for pos_q, neg_q in zip(iq[0::2], iq[1::2]):
            row = co[pos_q.object]  # type: ignore[index]
            ranked = sorted(row, key=lambda o: (-row[o], o))
            expected = [o for o in ranked if o not in objs and o not in asked]
            if expected:
                assert neg_q.object == expected[0]
            else:
                fallbacks += 1
                assert neg_q.object not in objs and neg_q.object not in asked
            asked.add(neg_q.object)  # type: ignore[arg-type]
    assert fallbacks == build.random_fallbacks["adversarial"]


# A small index worked out by hand.
HAND = ObjectIndex(
    images={
        "q1.jpg": ("fork", "knife", "spoon"),
        "o1.jpg": ("fork", "plate", "cup"),
        "o2.jpg": ("fork", "plate", "bowl"),
        "o3.jpg": ("knife", "cup", "bowl"),
        "o4.jpg": ("spoon", "bowl", "apple"),
    }
)


def test_hand_worked_popular_and_adversarial() -> None:
    b = build_pope(HAND, n_images=5, per_image=3, seed=0)
    # frequencies: bowl 3, fork 3, cup 2, knife 2, plate 2, spoon 2, apple 1 (ties by name)
    assert list(b.ground_truth_objects) == ["bowl", "fork", "cup", "knife", "plate", "spoon", "apple"]
    q1 = {s: [q.object for q in b.splits[s] if q.image == "q1.jpg" and q.label == "no"] for s in SPLITS}
    assert q1["popular"] == ["bowl", "cup", "plate"]
    # co(fork) = plate 2, then bowl/cup/knife/spoon 1 -> plate
    # co(knife) = bowl/cup/fork/spoon 1 -> bowl;  co(spoon) = apple/bowl/fork/knife 1 -> apple
    assert q1["adversarial"] == ["plate", "bowl", "apple"]
    # o1 (fork, plate, cup): co(plate) = fork 2, bowl 1, cup 1; fork and cup are in the image and
    # bowl was asked for fork -> a random fallback; co(cup) then gives knife.
    o1 = [q.object for q in b.adversarial if q.image == "o1.jpg" and q.label == "no"]
    assert o1[0] == "bowl" and o1[2] == "knife"
    assert o1[1] in {"apple", "spoon"}
    assert b.random_fallbacks["popular"] == 0


def test_adversarial_random_fallback() -> None:
    # "zebra" only ever appears with the other objects of its own image: its ranked list is
    # exhausted, so its negative is a random pick.
    idx = ObjectIndex(
        images={
            "z.jpg": ("zebra", "giraffe", "elephant"),
            "a.jpg": ("giraffe", "elephant", "car"),
            "b.jpg": ("car", "bus", "truck", "person"),
        }
    )
    b = build_pope(idx, n_images=3, per_image=3, seed=3)
    neg_z = [q.object for q in b.adversarial if q.image == "z.jpg" and q.label == "no"]
    assert b.random_fallbacks["adversarial"] >= 1
    assert neg_z[0] in {"car", "bus", "truck", "person"}
    assert len(set(neg_z)) == 3 and not set(neg_z) & {"zebra", "giraffe", "elephant"}


def test_not_enough_distinct_objects() -> None:
    idx = ObjectIndex(images={"a.jpg": ("cat", "dog", "cow"), "b.jpg": ("cat", "dog", "cow", "bird")})
    with pytest.raises(InputError, match="no object left to ask"):
        build_pope(idx, n_images=2, per_image=3)


def test_bad_parameters() -> None:
    with pytest.raises(InputError, match="placeholder"):
        build_pope(HAND, template="Is there something?")
    with pytest.raises(InputError, match="placeholder"):
        build_pope(HAND, template="{} or {}?")
    with pytest.raises(InputError, match="n_images"):
        build_pope(HAND, n_images=0)
    with pytest.raises(InputError, match="at least 9 objects"):
        build_pope(HAND, per_image=9)


def test_fewer_eligible_images_uses_all_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="halluprobe.benchmarks.pope"):
        b = build_pope(HAND, n_images=500, per_image=3)
    assert sorted(b.images) == sorted(HAND.images)
    assert "only 5 images" in caplog.text


def test_sample_depends_on_the_set_not_the_file_order() -> None:
    shuffled = dict(sorted(INDEX.images.items(), reverse=True))
    a = build_pope(INDEX, n_images=50, seed=11)
    b = build_pope(ObjectIndex(images=shuffled), n_images=50, seed=11)
    assert a.splits == b.splits


def test_positives_random_is_seeded() -> None:
    a = build_pope(INDEX, n_images=80, seed=5, positives="random")
    b = build_pope(INDEX, n_images=80, seed=5, positives="random")
    c = build_pope(INDEX, n_images=80, seed=6, positives="random")
    assert a.splits == b.splits
    assert a.splits != c.splits
    first = build_pope(INDEX, n_images=80, seed=5, positives="first")
    assert first.images == a.images  # the image sample does not depend on the positives rule
    differ = 0
    for img, iq in by_image(a.random).items():
        objs = INDEX.images[img]
        yes = [q.object for q in iq if q.label == "yes"]
        assert len(set(yes)) == 3 and set(yes) <= set(objs)
        differ += yes != list(objs[:3])
    assert differ > 10  # really not the first three
    pos = {s: [(q.image, q.object) for q in a.splits[s] if q.label == "yes"] for s in SPLITS}
    assert pos["random"] == pos["popular"] == pos["adversarial"]


def test_progress_callback() -> None:
    calls: list[tuple[int, int]] = []
    build_pope(HAND, n_images=5, progress=lambda d, t: calls.append((d, t)))
    assert calls[-1] == (15, 15) and len(calls) == 15


# ------------------------------------------------------------------------------------------
# articles


@pytest.mark.parametrize(
    ("template", "obj", "text"),
    [
        (DEFAULT_TEMPLATE, "umbrella", "Is there an umbrella in the image?"),
        (DEFAULT_TEMPLATE, "orange", "Is there an orange in the image?"),
        (DEFAULT_TEMPLATE, "apple", "Is there an apple in the image?"),
        (DEFAULT_TEMPLATE, "elephant", "Is there an elephant in the image?"),
        (DEFAULT_TEMPLATE, "oven", "Is there an oven in the image?"),
        (DEFAULT_TEMPLATE, "car", "Is there a car in the image?"),
        (DEFAULT_TEMPLATE, "traffic light", "Is there a traffic light in the image?"),
        ("A {} appears in a photo, yes or no?", "airplane", "An airplane appears in a photo, yes or no?"),
        ("Is there a {} in a image?", "apple", "Is there an apple in a image?"),
        ("Do you see {}? Answer about a image.", "apple", "Do you see apple? Answer about a image."),
        ("Is there a {{x}} {}?", "oven", "Is there a {{x}} oven?"),
    ],
)
def test_articles(template: str, obj: str, text: str) -> None:
    assert question_text(template, obj) == text


def test_image_survives_in_built_questions() -> None:
    b = build_pope(HAND, n_images=5, template="Is there a {} in the image?")
    texts = [q.text for s in SPLITS for q in b.splits[s]]
    assert any(t.startswith("Is there an apple") for t in texts)
    assert all(t.endswith(" in the image?") for t in texts)
    assert not any("imange" in t for t in texts)


# ------------------------------------------------------------------------------------------
# writing


def _bytes_of(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_write_is_byte_identical_for_the_same_seed(tmp_path: Path) -> None:
    a = write_pope(build_pope(INDEX, n_images=60, seed=3, name="syn"), tmp_path / "a")
    b = write_pope(build_pope(INDEX, n_images=60, seed=3, name="syn"), tmp_path / "b")
    c = write_pope(build_pope(INDEX, n_images=60, seed=4, name="syn"), tmp_path / "c")
    assert [p.name for p in a] == [
        "syn_pope_random.json",
        "syn_pope_popular.json",
        "syn_pope_adversarial.json",
        "syn_ground_truth_objects.json",
        "syn_co_occur.json",
        "manifest.json",
    ]
    ba, bb, bc = _bytes_of(tmp_path / "a"), _bytes_of(tmp_path / "b"), _bytes_of(tmp_path / "c")
    assert ba == bb
    for split in SPLITS:
        assert ba[f"syn_pope_{split}.json"] != bc[f"syn_pope_{split}.json"]
    assert ba["manifest.json"] != bc["manifest.json"]


def test_line_format(tmp_path: Path, build: PopeBuild) -> None:
    write_pope(build, tmp_path)
    raw = (tmp_path / "coco_pope_adversarial.json").read_bytes()
    assert raw.endswith(b"}\n") and b"\r" not in raw
    lines = raw.decode().splitlines()
    assert len(lines) == 720
    first = json.loads(lines[0])
    assert list(first) == ["question_id", "image", "text", "label", "object"]
    assert first["question_id"] == 1 and first["label"] == "yes"
    assert lines[0].startswith('{"question_id": 1, "image": "COCO_val2014_')  # official spacing


def test_round_trip_through_the_reader(tmp_path: Path, build: PopeBuild) -> None:
    write_pope(build, tmp_path)
    for split in SPLITS:
        assert read_questions(tmp_path / f"coco_pope_{split}.json") == build.splits[split]


def test_manifest(tmp_path: Path, build: PopeBuild) -> None:
    paths = write_pope(build, tmp_path)
    m = json.loads((tmp_path / "manifest.json").read_text())
    assert m["schema_version"] == 1 and m["sampler_version"] == SAMPLER_VERSION
    assert m["seed"] == 7
    assert m["parameters"] == {"n_images": 120, "per_image": 3, "positives": "first", "template": DEFAULT_TEMPLATE}
    assert m["input"]["sha256"] == "0" * 64
    assert m["input"]["images"] == len(INDEX.images)
    assert m["images"] == 120
    for split in SPLITS:
        c = m["splits"][split]
        assert (c["questions"], c["images"], c["yes"], c["no"]) == (720, 120, 360, 360)
    files = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths if p.name != "manifest.json"}
    assert m["files"] == files
    gt = json.loads((tmp_path / "coco_ground_truth_objects.json").read_text())
    assert gt == build.ground_truth_objects
    co = json.loads((tmp_path / "coco_co_occur.json").read_text())
    assert co == build.co_occurrence


def test_refuses_to_overwrite(tmp_path: Path) -> None:
    b = build_pope(HAND, n_images=5, name="hand")
    write_pope(b, tmp_path)
    before = _bytes_of(tmp_path)
    other = build_pope(HAND, n_images=5, name="hand", seed=99)
    with pytest.raises(InputError, match="exists") as ei:
        write_pope(other, tmp_path)
    assert ei.value.path == str(tmp_path / "hand_pope_random.json")
    assert _bytes_of(tmp_path) == before  # nothing touched
    # only the manifest left over is enough to refuse
    for name in before:
        if name != "manifest.json":
            (tmp_path / name).unlink()
    with pytest.raises(InputError, match="exists") as ei:
        write_pope(other, tmp_path)
    assert ei.value.path == str(tmp_path / "manifest.json")
    write_pope(other, tmp_path, overwrite=True)
    assert json.loads((tmp_path / "manifest.json").read_text())["seed"] == 99


def test_negative_counts_match_official_shape(build: PopeBuild) -> None:
    # every sampled image appears 6 times per split, 18 times over the three splits
    counts = Counter(q.image for s in SPLITS for q in build.splits[s])
    assert set(counts.values()) == {18}
