"""JSON Schema compatibility: a table of schema changes in every mode, the rules one by one,
and properties (hypothesis) including soundness against real validation."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from airlane.registry import Compatibility, Schema
from airlane.registry.json_compat import check
from tests.registry.modes_table import MODES, expand, problems


def obj(props: dict[str, Any], required: tuple[str, ...] = (), closed: bool | None = None):
    schema: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        schema["required"] = list(required)
    if closed is not None:
        schema["additionalProperties"] = not closed
    return schema


STR, INT, NUM = {"type": "string"}, {"type": "integer"}, {"type": "number"}
A = obj({"kind": {"const": "a"}, "x": STR}, ("kind",))
B = obj({"kind": {"const": "b"}, "y": STR}, ("kind",))
C = obj({"kind": {"const": "c"}}, ("kind",))
LIST = {
    "$defs": {"node": obj({"value": INT, "next": {"$ref": "#/$defs/node"}})},
    "$ref": "#/$defs/node",
}

# (name, old, new, backward: new reads old data, forward: old reads new data)
CASES: list[tuple[str, Any, Any, bool, bool]] = [
    ("identical", obj({"a": STR}), obj({"a": STR}), True, True),
    ("annotations-only", obj({"a": STR}), {**obj({"a": STR}), "title": "T"}, True, True),
    ("integer-to-number", INT, NUM, True, False),
    ("string-to-integer", STR, INT, False, False),
    ("type-list-narrowed", {"type": ["string", "null"]}, STR, False, True),
    ("open-add-optional", obj({"a": STR}), obj({"a": STR, "b": INT}), False, True),
    (
        "closed-add-optional",
        obj({"a": STR}, closed=True),
        obj({"a": STR, "b": INT}, closed=True),
        True,
        False,
    ),
    ("open-remove", obj({"a": STR, "b": INT}), obj({"a": STR}), True, False),
    (
        "closed-remove",
        obj({"a": STR, "b": INT}, closed=True),
        obj({"a": STR}, closed=True),
        False,
        True,
    ),
    ("add-required", obj({"a": STR}), obj({"a": STR, "b": INT}, ("b",)), False, True),
    ("required-made-optional", obj({"a": STR}, ("a",)), obj({"a": STR}), True, False),
    ("enum-widened", {"enum": ["a", "b"]}, {"enum": ["a", "b", "c"]}, True, False),
    ("enum-narrowed", {"enum": ["a", "b", "c"]}, {"enum": ["a", "b"]}, False, True),
    ("const-changed", {"const": 1}, {"const": 2}, False, False),
    ("const-true-vs-1", {"const": 1}, {"const": True}, False, False),
    ("string-to-enum", STR, {"enum": ["a"]}, False, True),
    (
        "items-widened",
        {"type": "array", "items": INT},
        {"type": "array", "items": NUM},
        True,
        False,
    ),
    (
        "nested-type-change",
        obj({"address": obj({"zip": STR})}),
        obj({"address": obj({"zip": INT})}),
        False,
        False,
    ),
    (
        "minimum-raised",
        {"type": "number", "minimum": 0},
        {"type": "number", "minimum": 1},
        False,
        True,
    ),
    (
        "maxLength-lowered",
        {"type": "string", "maxLength": 10},
        {"type": "string", "maxLength": 5},
        False,
        True,
    ),
    (
        "pattern-changed",
        {"type": "string", "pattern": "^a"},
        {"type": "string", "pattern": "^b"},
        False,
        False,
    ),
    ("pattern-added", STR, {"type": "string", "pattern": "^a"}, False, True),
    (
        "integer-bounds-equivalent",
        {"type": "integer", "minimum": 1},
        {"type": "integer", "exclusiveMinimum": 0},
        True,
        True,
    ),
    (
        "multipleOf-coarser",
        {"type": "integer", "multipleOf": 2},
        {"type": "integer", "multipleOf": 4},
        False,
        True,
    ),
    (
        "ref-widened",
        {"$defs": {"id": STR}, **obj({"id": {"$ref": "#/$defs/id"}})},
        {"$defs": {"id": {"type": ["string", "null"]}}, **obj({"id": {"$ref": "#/$defs/id"}})},
        True,
        False,
    ),
    ("anyOf-widened", {"anyOf": [STR, INT]}, {"anyOf": [STR, INT, {"type": "null"}]}, True, False),
    ("oneOf-union-widened", {"oneOf": [A, B]}, {"oneOf": [A, B, C]}, True, False),
    (
        "additionalProperties-widened",
        {"type": "object", "additionalProperties": STR},
        {"type": "object", "additionalProperties": {"type": ["string", "integer"]}},
        True,
        False,
    ),
    ("unsupported-not-added", STR, {**STR, "not": {"const": "x"}}, False, True),
    ("true-to-object", True, {"type": "object"}, False, True),
    (
        "prefixItems-widened",
        {"type": "array", "prefixItems": [STR, INT], "items": False},
        {"type": "array", "prefixItems": [STR, NUM], "items": False},
        True,
        False,
    ),
    ("uniqueItems-added", {"type": "array"}, {"type": "array", "uniqueItems": True}, False, True),
    ("recursive-reformatted", LIST, {**LIST, "title": "list"}, True, True),
    (
        "recursive-value-widened",
        LIST,
        {
            "$defs": {"node": obj({"value": NUM, "next": {"$ref": "#/$defs/node"}})},
            "$ref": "#/$defs/node",
        },
        True,
        False,
    ),
]


@pytest.mark.parametrize(("mode", "old", "new", "compatible"), expand(CASES))
def test_change_in_every_mode(mode, old, new, compatible):
    found = problems(mode, Schema.json(old), Schema.json(new))
    assert (not found) is compatible, [str(p) for p in found]
    for problem in found:
        assert problem.version == 1 and problem.direction in ("backward", "forward")
        assert problem.path.startswith("/") and problem.reason


def test_reasons_point_at_the_change():
    found = check(obj({"address": obj({"zip": STR})}), obj({"address": obj({"zip": INT})}))
    assert [(p.path, p.reason) for p in found] == [
        (
            "/properties/address/properties/zip/type",
            "the writer allows type 'integer'; the reader does not",
        )
    ]
    (closed,) = check(obj({"a": STR}, closed=True), obj({"a": STR, "b": INT}, closed=True))
    assert closed.path == "/properties/b" and "additionalProperties" in closed.reason
    (required,) = check(obj({"a": STR}, ("a",)), obj({"a": STR}))
    assert "'a' is required by the reader" in required.reason


def test_unmodelled_keyword_is_reported_as_unprovable():
    (found,) = check({"type": "string", "not": {"const": "x"}}, STR)
    assert found.path == "/not" and "cannot be proved" in found.reason
    assert check({**STR, "not": {"const": "x"}}, {**STR, "not": {"const": "x"}, "title": "t"}) == []


def test_oneof_needs_other_branches_disjoint():
    # Both reader branches accept a short string: data would match two, failing oneOf.
    found = check(
        {"oneOf": [STR, {"type": "string", "maxLength": 3}]}, {"type": "string", "maxLength": 2}
    )
    assert found and "others may match" in found[0].reason
    assert check({"oneOf": [STR, INT]}, {"type": "string", "maxLength": 2}) == []


def test_writer_allof_is_merged_and_reader_allof_split():
    writer = {"allOf": [obj({"a": STR}), {"required": ["a"]}]}
    assert check(obj({"a": STR}, ("a",)), writer) == []
    reader = {"allOf": [obj({"a": STR}), {"required": ["a", "b"]}]}
    (found,) = check(reader, obj({"a": STR}, ("a",)))
    assert found.path == "/allOf/1/required"


def test_pattern_properties_paired_by_pattern():
    old = {"type": "object", "patternProperties": {"^x-": STR}, "additionalProperties": False}
    new = {
        "type": "object",
        "patternProperties": {"^x-": {"type": ["string", "null"]}},
        "additionalProperties": False,
    }
    assert check(new, old) == []
    assert check(old, new)
    # A property added under a partially open model, covered by the reader's pattern:
    assert check(old, {**old, "properties": {"x-id": STR}}) == []


def test_draft7_tuple_items_and_boolean_exclusive():
    old = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "array",
        "items": [STR, INT],
    }
    new = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "array",
        "items": [STR, NUM],
    }
    assert check(new, old) == [] and check(old, new)
    draft4 = "http://json-schema.org/draft-04/schema#"
    r = {"$schema": draft4, "type": "number", "minimum": 0, "exclusiveMinimum": True}
    w = {"$schema": draft4, "type": "number", "minimum": 0}
    assert check(w, r) == [] and check(r, w)


# -- properties ---------------------------------------------------------------------------

names = st.sampled_from(["a", "b", "c", "id", "x-y"])
leaf = st.one_of(
    st.sampled_from([STR, INT, NUM, {"type": "boolean"}, {"type": "null"}, {}]),
    st.builds(
        lambda lo, hi: {"type": "integer", "minimum": lo, "maximum": lo + hi},
        st.integers(-5, 5),
        st.integers(0, 5),
    ),
    st.builds(lambda n: {"type": "string", "maxLength": n}, st.integers(0, 4)),
    st.lists(
        st.one_of(st.integers(-2, 2), st.sampled_from(["a", "b"]), st.none()),
        min_size=1,
        max_size=4,
        unique=True,
    ).map(lambda values: {"enum": values}),
)


def _extend(children):
    objects = st.builds(
        lambda props, req, closed: obj(props, tuple(n for n in req if n in props), closed),
        st.dictionaries(names, children, max_size=3),
        st.lists(names, max_size=2, unique=True),
        st.sampled_from([None, True, False]),
    )
    arrays = st.builds(
        lambda items, n: {"type": "array", "items": items, "maxItems": n},
        children,
        st.integers(0, 3),
    )
    unions = st.lists(children, min_size=1, max_size=3).map(lambda branches: {"anyOf": branches})
    return st.one_of(objects, arrays, unions)


json_schemas = st.recursive(leaf, _extend, max_leaves=8)


def annotate(schema: Any) -> Any:
    """The same schema with a description on every subschema (so equality shortcuts fail)."""
    if isinstance(schema, dict):
        out = {
            k: annotate(v) if k in ("properties", "items", "anyOf", "additionalProperties") else v
            for k, v in schema.items()
        }
        if "properties" in schema:
            out["properties"] = {k: annotate(v) for k, v in schema["properties"].items()}
        out["description"] = "annotated"
        return out
    if isinstance(schema, list):
        return [annotate(item) for item in schema]
    return schema


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_schemas)
def test_a_schema_is_compatible_with_itself_in_every_mode(schema):
    old, new = Schema.json(schema), Schema.json(annotate(copy.deepcopy(schema)))
    assert old != new  # not a shortcut: the checker walks the whole structure
    for mode in MODES:
        assert problems(mode, old, new) == [], mode


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(names, json_schemas, max_size=3), st.sampled_from(["n1", "n2"]), json_schemas
)
def test_adding_an_optional_property(props, name, added):
    """Open content model: forward compatible (old readers ignore it). Closed: backward
    compatible (old data cannot have it). The other direction holds only when the new
    property's schema accepts anything / the old model was already closed to it."""
    for closed, mode in ((False, Compatibility.FORWARD), (True, Compatibility.BACKWARD)):
        old = Schema.json(obj(props, closed=closed))
        new = Schema.json(obj({**props, name: added}, closed=closed))
        assert problems(mode, old, new) == []


@settings(max_examples=100, deadline=None)
@given(json_schemas)
def test_widening_with_anyof_is_backward_compatible(schema):
    old, new = Schema.json(schema), Schema.json({"anyOf": [annotate(schema), {"type": "null"}]})
    assert problems(Compatibility.BACKWARD, old, new) == []


json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-6, 6),
        st.sampled_from([0.5, -1.5]),
        st.sampled_from(["", "a", "b", "abcde"]),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(names, children, max_size=3)
    ),
    max_leaves=6,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(json_schemas, json_schemas, st.lists(json_values, min_size=1, max_size=5))
def test_compatible_means_every_writer_instance_is_read(reader, writer, instances):
    """Soundness: if the checker says compatible, no instance valid under the writer is
    rejected by the reader."""
    if check(reader, writer):
        return
    read, write = Draft202012Validator(reader), Draft202012Validator(writer)
    for instance in instances:
        if write.is_valid(instance):
            assert read.is_valid(instance), instance
