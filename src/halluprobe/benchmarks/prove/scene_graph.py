"""Typed scene-graph tuples and the :class:`SceneGraph` built from them.

A scene graph is what PROVE derives from an image's detailed caption: entities (with an
optional count), attributes of an entity, and relations between two entities. Three frozen
records hold them; :func:`parse_tuple` reads the loose shapes found in files (lists, dicts,
``"a | b | c"`` strings). Names are normalised once (:func:`normalize`: lower case, single
spaces) so that ``"Red "`` and ``"red"`` are one attribute.

The query methods of :class:`SceneGraph` return plain Python values (str, int, lists and
tuples of them): they are the API a verification program sees in the sandbox, and plain values
give such a program nothing to walk from.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Annotated, Any, Literal, Union

from pydantic import Field, TypeAdapter

from halluprobe.jsonl import loads
from halluprobe.records import FrozenRecord

__all__ = [
    "EntityTuple",
    "AttributeTuple",
    "RelationTuple",
    "SceneTuple",
    "SCENE_TUPLE_ADAPTER",
    "SANDBOX_API",
    "SceneGraph",
    "normalize",
    "parse_tuple",
    "render_tuple",
    "tuple_key",
]

# The SceneGraph methods a sandboxed verification program may call (see sandbox.py).
SANDBOX_API: tuple[str, ...] = (
    "entities",
    "has_entity",
    "count",
    "attributes_of",
    "has_attribute",
    "relations_of",
    "relations_between",
    "has_relation",
    "entities_with_attribute",
    "subgraph",
)

# A relation word that is a preposition reads "X is on Y" (a verb reads "X holding Y").
_PREPOSITIONS = frozenset(
    "on in at under over above below behind beside near next inside outside between against "
    "along across around by with without beneath underneath atop into onto toward towards of".split()
)


def normalize(name: str) -> str:
    """Lower case, surrounding whitespace removed, inner whitespace runs made single spaces."""
    return " ".join(str(name).lower().split())


class EntityTuple(FrozenRecord):
    """An entity, e.g. ``("dog",)``; ``count`` when the caption says how many."""

    kind: Literal["entity"] = "entity"
    entity: str = Field(min_length=1)
    count: int | None = Field(default=None, ge=0)


class AttributeTuple(FrozenRecord):
    """An attribute of an entity, e.g. ``("dog", "brown")``."""

    kind: Literal["attribute"] = "attribute"
    entity: str = Field(min_length=1)
    attribute: str = Field(min_length=1)


class RelationTuple(FrozenRecord):
    """A relation between two entities, e.g. ``("dog", "on", "sofa")``."""

    kind: Literal["relation"] = "relation"
    subject: str = Field(min_length=1)
    relation: str = Field(min_length=1)
    object: str = Field(min_length=1)


SceneTuple = Annotated[Union[EntityTuple, AttributeTuple, RelationTuple], Field(discriminator="kind")]
SCENE_TUPLE_ADAPTER: TypeAdapter[Any] = TypeAdapter(SceneTuple)


def _normalized(t: EntityTuple | AttributeTuple | RelationTuple) -> EntityTuple | AttributeTuple | RelationTuple:
    if isinstance(t, EntityTuple):
        return EntityTuple(entity=normalize(t.entity), count=t.count)
    if isinstance(t, AttributeTuple):
        return AttributeTuple(entity=normalize(t.entity), attribute=normalize(t.attribute))
    return RelationTuple(subject=normalize(t.subject), relation=normalize(t.relation), object=normalize(t.object))


def parse_tuple(raw: Any) -> EntityTuple | AttributeTuple | RelationTuple:
    """A typed, normalised tuple from a record, a dict, a list of 1-3 strings, ``"a | b | c"`` or ``"(a, b, c)"``.

    Lists: ``[e]`` entity, ``[e, a]`` attribute, ``[s, r, o]`` relation; a leading kind word
    (``["entity", e]``, ``["attribute", e, a]``, ``["relation", s, r, o]``) is accepted too.
    Raises ValueError with a one-line reason on anything else.
    """
    if isinstance(raw, (EntityTuple, AttributeTuple, RelationTuple)):
        return _normalized(raw)
    if isinstance(raw, dict):
        try:
            return _normalized(SCENE_TUPLE_ADAPTER.validate_python(raw))
        except Exception as err:  # pydantic's ValidationError: keep one line
            first = str(err).splitlines()
            raise ValueError(f"invalid tuple {raw!r}: {first[-1].strip() if first else err}") from None
    if isinstance(raw, str):
        text = raw.strip()
        if text.startswith("(") and text.endswith(")"):
            raw = text[1:-1].split(",")
        else:
            raw = text.split("|")
    if not isinstance(raw, (list, tuple)) or not all(isinstance(x, str) for x in raw):
        raise ValueError(f"a tuple must be a list of strings, a dict or 'a | b | c', not {raw!r}")
    parts = [normalize(x) for x in raw]
    if any(not p for p in parts):
        raise ValueError(f"empty element in tuple {list(raw)!r}")
    if parts and parts[0] in ("entity", "attribute", "relation") and len(parts) == {"entity": 2, "attribute": 3, "relation": 4}[parts[0]]:
        parts = parts[1:]
    if len(parts) == 1:
        return EntityTuple(entity=parts[0])
    if len(parts) == 2:
        return AttributeTuple(entity=parts[0], attribute=parts[1])
    if len(parts) == 3:
        return RelationTuple(subject=parts[0], relation=parts[1], object=parts[2])
    raise ValueError(f"a tuple has 1 (entity), 2 (attribute) or 3 (relation) elements, not {len(parts)}: {list(raw)!r}")


def tuple_key(t: EntityTuple | AttributeTuple | RelationTuple) -> tuple[str, ...]:
    """Identity of a tuple for exact comparison (an entity's count is not part of it)."""
    if isinstance(t, EntityTuple):
        return ("entity", normalize(t.entity))
    if isinstance(t, AttributeTuple):
        return ("attribute", normalize(t.entity), normalize(t.attribute))
    return ("relation", normalize(t.subject), normalize(t.relation), normalize(t.object))


def render_tuple(t: EntityTuple | AttributeTuple | RelationTuple) -> str:
    """A short sentence for embedding: ``There is a dog.`` / ``The dog is brown.`` / ``The dog is on the sofa.``

    A relation whose first word is a preposition or ends in "-ing" gets "is" ("The cat is
    sleeping on the rug."); other relations are used as written ("The man holds the cup.").
    """
    if isinstance(t, EntityTuple):
        if t.count is not None and t.count != 1:
            return f"There are {t.count} {t.entity}."
        return f"There is a {t.entity}."
    if isinstance(t, AttributeTuple):
        return f"The {t.entity} is {t.attribute}."
    first = t.relation.split(" ", 1)[0]
    verb = f"is {t.relation}" if first in _PREPOSITIONS or first.endswith("ing") else t.relation
    return f"The {t.subject} {verb} the {t.object}."


class SceneGraph:
    """Entities, their attributes and the relations between them, built from tuples.

    An attribute or relation naming an entity that has no entity tuple adds that entity.
    Duplicate tuples collapse; an entity's count is the largest count given for it.
    """

    def __init__(self, tuples: Iterable[Any] = ()) -> None:
        self._counts: dict[str, int | None] = {}
        self._attributes: dict[str, list[str]] = {}
        self._relations: list[tuple[str, str, str]] = []
        for raw in tuples:
            self.add(parse_tuple(raw))

    # -- building -----------------------------------------------------------------------
    def _add_entity(self, name: str, count: int | None = None) -> None:
        old = self._counts.get(name)
        if name not in self._counts or (count is not None and (old is None or count > old)):
            self._counts[name] = count if count is not None else old
        self._attributes.setdefault(name, [])

    def add(self, t: EntityTuple | AttributeTuple | RelationTuple) -> None:
        t = _normalized(t)
        if isinstance(t, EntityTuple):
            self._add_entity(t.entity, t.count)
        elif isinstance(t, AttributeTuple):
            self._add_entity(t.entity)
            if t.attribute not in self._attributes[t.entity]:
                self._attributes[t.entity].append(t.attribute)
        else:
            self._add_entity(t.subject)
            self._add_entity(t.object)
            triple = (t.subject, t.relation, t.object)
            if triple not in self._relations:
                self._relations.append(triple)

    # -- queries (the sandbox API: plain values only) ------------------------------------
    def entities(self) -> list[str]:
        """Entity names in insertion order."""
        return list(self._counts)

    def has_entity(self, entity: str) -> bool:
        return normalize(entity) in self._counts

    def count(self, entity: str) -> int:
        """How many: the stated count, 1 for an entity without one, 0 for an absent entity."""
        name = normalize(entity)
        if name not in self._counts:
            return 0
        stated = self._counts[name]
        return 1 if stated is None else stated

    def attributes_of(self, entity: str) -> list[str]:
        return list(self._attributes.get(normalize(entity), []))

    def has_attribute(self, entity: str, attribute: str) -> bool:
        return normalize(attribute) in self._attributes.get(normalize(entity), [])

    def entities_with_attribute(self, attribute: str) -> list[str]:
        a = normalize(attribute)
        return [e for e, attrs in self._attributes.items() if a in attrs]

    def relations_of(self, entity: str) -> list[tuple[str, str, str]]:
        """Every (subject, relation, object) that the entity takes part in."""
        name = normalize(entity)
        return [r for r in self._relations if name in (r[0], r[2])]

    def relations_between(self, subject: str, obj: str) -> list[str]:
        """Relation words from ``subject`` to ``obj`` (directed)."""
        s, o = normalize(subject), normalize(obj)
        return [r for (a, r, b) in self._relations if a == s and b == o]

    def has_relation(self, subject: str, relation: str, obj: str) -> bool:
        return (normalize(subject), normalize(relation), normalize(obj)) in self._relations

    def subgraph(self, entity: str) -> list[list[str]]:
        """The entity's tuples and those of its direct neighbours, as plain lists ([e], [e, a], [s, r, o])."""
        return [list(tuple_key(t)[1:]) for t in self.subgraph_graph(entity).tuples()]

    # -- typed views ---------------------------------------------------------------------
    def subgraph_graph(self, entity: str) -> SceneGraph:
        """The entity, its neighbours (one relation away), their attributes and the relations among them."""
        name = normalize(entity)
        if name not in self._counts:
            return SceneGraph()
        keep = {name} | {r[2] for r in self._relations if r[0] == name} | {r[0] for r in self._relations if r[2] == name}
        return SceneGraph(
            t
            for t in self.tuples()
            if (isinstance(t, EntityTuple) and t.entity in keep)
            or (isinstance(t, AttributeTuple) and t.entity in keep)
            or (isinstance(t, RelationTuple) and t.subject in keep and t.object in keep)
        )

    def tuples(self) -> list[EntityTuple | AttributeTuple | RelationTuple]:
        """Every tuple: entities, then attributes, then relations (each in insertion order)."""
        out: list[EntityTuple | AttributeTuple | RelationTuple] = [
            EntityTuple(entity=e, count=c) for e, c in self._counts.items()
        ]
        out += [AttributeTuple(entity=e, attribute=a) for e, attrs in self._attributes.items() for a in attrs]
        out += [RelationTuple(subject=s, relation=r, object=o) for s, r, o in self._relations]
        return out

    def __len__(self) -> int:
        return len(self.tuples())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SceneGraph) and self.tuples() == other.tuples()

    def __repr__(self) -> str:
        return f"SceneGraph({len(self._counts)} entities, {sum(map(len, self._attributes.values()))} attributes, {len(self._relations)} relations)"

    # -- JSON ----------------------------------------------------------------------------
    def to_json(self) -> str:
        """``{"tuples": [typed tuple dicts]}``: :meth:`from_json` gives an equal graph back."""
        return json.dumps({"tuples": [t.model_dump() for t in self.tuples()]}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> SceneGraph:
        data = loads(text)
        if not isinstance(data, dict) or not isinstance(data.get("tuples"), list):
            raise ValueError('a scene graph JSON is {"tuples": [...]}')
        return cls(data["tuples"])
