"""CHAIR ground truth: the COCO annotation path, object lines, and the shipped sets of the
two standard lists checked against the annotation path on small COCO-shaped files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _chair import wordnet_or_skip, families, write_coco


@pytest.fixture(autouse=True, scope="module")
def _wordnet() -> None:
    wordnet_or_skip()

from halluprobe.captions.chair.groundtruth import (
    GroundTruth,
    coco_annotation_files,
    ground_truth_from_coco,
    ground_truth_from_objects,
    image_id_of,
    load_ground_truth,
    shipped_ground_truth,
)
from halluprobe.captions.chair.lists import STANDARD_LISTS, read_image_list
from halluprobe.errors import InputError


def test_builder_reads_instances_then_captions_per_family(tmp_path: Path) -> None:
    folder = write_coco(tmp_path / "ann", "2014", {1: ["dog", "dog", "hair drier"], 2: ["skis"]},
                        {1: ["a red bus near two men", "a teddy bear"], 2: ["a man skiing", "people"], 3: ["two ties"]})  # fmt: skip
    instances, captions = coco_annotation_files(folder, "2014")
    fams = families()
    lem = ground_truth_from_coco(
        instances, captions, fams["chair@lemmatizer"], year="2014"
    )
    sing = ground_truth_from_coco(
        instances, captions, fams["chair@singularize"], year="2014"
    )
    assert lem.objects == {
        1: ["bus", "dog", "hair drier", "teddy bear"],
        2: ["person", "skis"],
        3: ["tie"],
    }
    assert sing.objects == {
        1: ["dog", "hair drier", "person", "teddy bear"],
        2: ["person", "skis"],
        3: [],
    }
    assert (
        lem.year == "2014"
        and len(lem.files) == 4
        and all(len(v) == 64 for v in lem.files.values())
    )
    saved = lem.save(tmp_path / "gt.json")
    assert load_ground_truth(saved) == lem


def test_builder_refuses_missing_annotation_files(tmp_path: Path) -> None:
    with pytest.raises(
        InputError, match="instances_val2017.json.*COCO 2017 annotation file not found"
    ):
        coco_annotation_files(tmp_path, "2017")
    with pytest.raises(InputError, match="2014 or 2017"):
        coco_annotation_files(tmp_path, "2015")


def test_object_lines(tmp_path: Path) -> None:
    path = tmp_path / "objects.jsonl"
    path.write_text(
        '{"image": "COCO_val2014_000000000042.jpg", "objects": ["dog", "Sofa"]}\n{"image_id": 7, "objects": []}\n'
    )
    gt = ground_truth_from_objects(path)
    assert gt.objects == {42: ["couch", "dog"], 7: []} and gt.source == "objects"
    path.write_text(
        '{"image_id": 7, "objects": ["dog"]}\n{"image_id": 8, "objects": ["unicorn"]}\n'
    )
    with pytest.raises(
        InputError,
        match=r"objects.jsonl:2: image 8: object 'unicorn' is not a COCO category",
    ):
        ground_truth_from_objects(path)


def test_image_ids() -> None:
    assert image_id_of("COCO_val2014_000000002239.jpg") == 2239
    assert (
        image_id_of("000000002239.jpg") == 2239
        and image_id_of("17") == 17
        and image_id_of(5) == 5
    )
    with pytest.raises(InputError):
        image_id_of("cat.jpg")


def test_standard_lists_are_pinned() -> None:
    lim, opera = (read_image_list(name) for name in STANDARD_LISTS)
    assert (
        len(lim.ids) == len(set(lim.ids)) == 500
        and len(opera.ids) == len(set(opera.ids)) == 500
    )
    assert len(set(lim.ids) & set(opera.ids)) == 10
    assert (
        "1be0e63f33e57a81d543930c8a0701ebb5e3680c" in lim.source
        and "77379aa45836" in opera.source
    )
    assert (
        lim.images[0] == "000000002239.jpg"
        and opera.images[0] == "COCO_val2014_000000226988.jpg"
    )
    with pytest.raises(InputError, match="unknown image list 'chair500'"):
        read_image_list("chair500")


def test_shipped_sets_match_the_builder(tmp_path: Path) -> None:
    """Instances holding each image's singularize-family set, plus one caption naming what only the
    lemmatizer reads (bus, ties, skiing, seating, training): the builder then gives exactly the
    shipped sets of both families, on all 990 images; the families differ on 5 and 9 images."""
    lem, sing = (
        shipped_ground_truth("chair@lemmatizer"),
        shipped_ground_truth("chair@singularize"),
    )
    assert lem.objects.keys() == sing.objects.keys() and len(lem.objects) == 990
    phrase = {
        "bus": "a red bus",
        "tie": "two ties",
        "skis": "a man skiing",
        "chair": "seating area",
        "train": "training",
    }
    captions: dict[int, list[str]] = {}
    for image, objects in lem.objects.items():
        extra = sorted(set(objects) - set(sing.objects[image]))
        assert set(sing.objects[image]) <= set(objects)
        captions[image] = [
            " ".join(phrase[name] for name in extra) or "a photo"
        ]  # every COCO image has captions
    folder = write_coco(tmp_path / "ann", "2014", sing.objects, captions)
    instances, caps = coco_annotation_files(folder, "2014")
    fams = families()
    assert (
        ground_truth_from_coco(instances, caps, fams["chair@lemmatizer"]).objects
        == lem.objects
    )
    assert (
        ground_truth_from_coco(instances, caps, fams["chair@singularize"]).objects
        == sing.objects
    )
    for name, differ in (("chair500-lim", 5), ("chair500-opera", 9)):
        ids = read_image_list(name).ids
        assert sum(lem.objects[i] != sing.objects[i] for i in ids) == differ
    data = json.loads(
        (
            Path(__file__).parents[1]
            / "src/halluprobe/captions/chair/data/ground_truth_lemmatizer.json"
        ).read_text()
    )
    assert "CC BY 4.0" in data["attribution"] and "6cabb6fc0dea" in data["source"]
    assert isinstance(lem, GroundTruth) and lem.source == "shipped"


def test_the_tools_script_unpickles_only_containers_and_strings(tmp_path: Path) -> None:
    import pickle
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "tools"))
    try:
        from chair_shipped_ground_truth import read_cache
    finally:
        sys.path.pop(0)
    # a CHAIR-evaluator-shaped cache, written by hand: __main__.CHAIR with a defaultdict of sets
    cache = (b"\x80\x04\x8c\x08__main__\x94\x8c\x05CHAIR\x94\x93\x94)\x81\x94}\x94\x8c\x0fimid_to_objects\x94"
             + pickle.dumps({42: {"dog", "person"}}, protocol=4)[2:-1] + b"sb.")  # fmt: skip
    path = tmp_path / "chair.pkl"
    path.write_bytes(cache)
    assert read_cache(path) == {42: ["dog", "person"]}
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps(print, protocol=4))
    with pytest.raises(pickle.UnpicklingError, match="refused global builtins.print"):
        read_cache(evil)
