"""PROVE scene graph: typed tuples, queries, JSON round trip."""

from __future__ import annotations

import pytest

from halluprobe.benchmarks.prove.scene_graph import (
    AttributeTuple,
    EntityTuple,
    RelationTuple,
    SceneGraph,
    parse_tuple,
    render_tuple,
    tuple_key,
)


@pytest.fixture()
def graph() -> SceneGraph:
    return SceneGraph(
        [
            ["dog"],
            ["dog", "brown"],
            ["Dog ", "Fluffy"],
            ["dog", "on", "sofa"],
            {"kind": "entity", "entity": "cat", "count": 2},
            "cat | sleeping on | rug",
            ["sofa", "red"],
            ["rug", "striped"],
            ["lamp"],
            ["dog", "brown"],  # duplicate: collapses
        ]
    )


def test_parse_shapes() -> None:
    assert parse_tuple(["Dog"]) == EntityTuple(entity="dog")
    assert parse_tuple(["attribute", "dog", "brown"]) == AttributeTuple(entity="dog", attribute="brown")
    assert parse_tuple("man |  holding | Cup") == RelationTuple(subject="man", relation="holding", object="cup")
    assert parse_tuple("(dog, brown)") == AttributeTuple(entity="dog", attribute="brown")
    assert parse_tuple({"kind": "entity", "entity": "cat", "count": 3}).count == 3
    for bad in (["a", "b", "c", "d"], [], ["a", ""], 7, {"kind": "thing", "entity": "x"}, ["a", 3]):
        with pytest.raises(ValueError):
            parse_tuple(bad)


def test_queries(graph: SceneGraph) -> None:
    assert graph.entities() == ["dog", "sofa", "cat", "rug", "lamp"]
    assert graph.count("cat") == 2 and graph.count("dog") == 1 and graph.count("horse") == 0
    assert graph.attributes_of("DOG") == ["brown", "fluffy"]
    assert graph.has_attribute("dog", "Brown") and not graph.has_attribute("dog", "red")
    assert graph.entities_with_attribute("red") == ["sofa"]
    assert graph.relations_between("dog", "sofa") == ["on"]
    assert graph.relations_between("sofa", "dog") == []  # directed
    assert graph.has_relation("cat", "sleeping on", "rug")
    assert graph.relations_of("rug") == [("cat", "sleeping on", "rug")]


def test_subgraph(graph: SceneGraph) -> None:
    sub = graph.subgraph_graph("dog")
    assert sub.entities() == ["dog", "sofa"]
    assert {tuple_key(t) for t in sub.tuples()} == {
        ("entity", "dog"),
        ("entity", "sofa"),
        ("attribute", "dog", "brown"),
        ("attribute", "dog", "fluffy"),
        ("attribute", "sofa", "red"),
        ("relation", "dog", "on", "sofa"),
    }
    assert ["dog", "on", "sofa"] in graph.subgraph("dog")
    assert graph.subgraph("unicorn") == []


def test_json_round_trip(graph: SceneGraph) -> None:
    again = SceneGraph.from_json(graph.to_json())
    assert again == graph and again.count("cat") == 2
    assert len(graph) == 11  # 5 entities, 4 attributes, 2 relations
    with pytest.raises(ValueError):
        SceneGraph.from_json("[1, 2]")


def test_render() -> None:
    assert render_tuple(EntityTuple(entity="dog")) == "There is a dog."
    assert render_tuple(EntityTuple(entity="cats", count=2)) == "There are 2 cats."
    assert render_tuple(AttributeTuple(entity="dog", attribute="brown")) == "The dog is brown."
    assert render_tuple(RelationTuple(subject="dog", relation="on", object="sofa")) == "The dog is on the sofa."
    assert render_tuple(RelationTuple(subject="cat", relation="sleeping on", object="rug")) == "The cat is sleeping on the rug."
    assert render_tuple(RelationTuple(subject="man", relation="holds", object="cup")) == "The man holds the cup."


def test_records_are_frozen() -> None:
    t = EntityTuple(entity="dog")
    with pytest.raises(Exception):
        t.entity = "cat"  # type: ignore[misc]
