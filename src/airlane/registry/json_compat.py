"""Structural JSON Schema compatibility: can every instance valid under ``writer`` be accepted
by ``reader``? (pure; no I/O)

`check(reader, writer)` answers with a list of `Incompatibility` (empty means compatible).
BACKWARD compatibility of a new schema is ``check(reader=new, writer=old)``, FORWARD is
``check(reader=old, writer=new)``, FULL is both.

The question is set inclusion (writer ⊆ reader), which is undecidable for JSON Schema in
general, so the checker is *conservative*: it proves inclusion keyword by keyword and reports
an incompatibility whenever it cannot, including for keywords it does not model (then the
reason says so). A reported incompatibility may therefore be a false alarm; "compatible" is
never wrong for the keywords listed below. Two principles keep it sound:

- Ignoring a *writer* constraint only widens the writer's set, so it is always safe; the
  checker does it where a keyword cannot be modelled (and when it merges ``allOf`` branches).
- A *reader* constraint must be proved: the writer has the identical keyword (and the same
  ``$defs``), or a modelled rule shows it.

Rules, per keyword (writer → reader):

============================  ======================================================
``true`` / ``false`` / ``{}``  writer false, or reader true/``{}``: compatible. Reader false: not.
``type``                      every writer type is a reader type (``integer`` ⊂ ``number``).
``enum`` / ``const``          a finite writer (``enum``, ``const``, or only ``null``/``boolean``
                              types): each value the writer accepts is validated against the
                              reader, exactly. A reader enum against an infinite writer: not.
numeric bounds                the writer's bounds are at least as tight (``exclusive*`` and
                              draft-4 boolean forms; integer bounds normalised when the writer
                              only allows integers); ``multipleOf``: the writer's is a multiple.
string bounds                 ``minLength``/``maxLength`` as tight; ``pattern``: equal or absent
                              in the reader (regular-expression inclusion is not attempted).
``properties``                per property, the writer's subschema (or its
                              ``patternProperties``/``additionalProperties`` fallback) is
                              checked against every reader subschema that applies to the name.
``additionalProperties``      the writer's ⊆ the reader's for all other names: an open writer
                              against a closed reader is incompatible.
``patternProperties``         paired by pattern when both sides have the same patterns;
                              otherwise every possible pairing is checked (conservative).
``required``                  every name the reader requires, the writer requires.
``min/maxProperties``,        the writer's bounds are at least as tight; ``uniqueItems``: if the
``min/maxItems``              reader has it, the writer must.
``items``, ``prefixItems``,   position by position, then the tail schemas.
``additionalItems``
``$ref``                      local ``#/...`` pointers, followed on both sides with cycle
                              protection (a pair under check is assumed compatible).
``allOf``                     reader: each branch must hold. Writer: branches are merged into
                              one schema (conflicting or context-dependent keywords dropped,
                              which only widens the writer).
``anyOf``                     writer: every branch must fit. Reader: one branch must fit the
                              whole writer (union splitting is not attempted).
``oneOf``                     writer: as ``anyOf``. Reader: one branch fits and every other
                              branch is provably disjoint from the writer (disjoint types,
                              values, or a discriminating required property).
anything else                 compatible only if the writer has the identical keyword.
============================  ======================================================

Annotations (``title``, ``description``, ``default``, ``examples``, ``format`` (validation runs
without a format checker, so ``format`` asserts nothing) ...) are ignored.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from typing import Any

import referencing
from jsonschema import Draft202012Validator
from jsonschema.validators import validator_for

from airlane.registry.schemas import Incompatibility, iter_refs, resolve_pointer

__all__ = ["check"]

# Recursion through allOf-merged or self-referencing schemas is cut off here; deeper than any
# hand-written schema, shallow enough to stay far from Python's own recursion limit.
MAX_DEPTH = 64
# Enumerating a writer's enum against the reader is exact, but costs one validation per value.
MAX_ENUM_VALUES = 10_000

ALL_TYPES = frozenset({"null", "boolean", "object", "array", "number", "integer", "string"})
_ANNOTATIONS = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$comment",
        "$defs",
        "$vocabulary",
        "$dynamicAnchor",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "format",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
    }
)
_MODELLED = frozenset(
    {
        "type",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "items",
        "prefixItems",
        "additionalItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "properties",
        "patternProperties",
        "additionalProperties",
        "required",
        "minProperties",
        "maxProperties",
        "allOf",
        "anyOf",
        "oneOf",
        "$ref",
    }
)
_MISSING: Any = object()
Bound = tuple[Any, bool]  # (limit, exclusive)


def check(reader: Any, writer: Any) -> list[Incompatibility]:
    """Why data valid under ``writer`` might be rejected by ``reader`` (root documents).

    An empty list means every instance valid under ``writer`` is valid under ``reader``.
    """
    if _same(reader, writer):
        return []
    return _Checker(reader, writer).subset(reader, writer, "", 0)


def _legacy_ref(root: Any) -> bool:
    """Up to draft 7, keywords beside ``$ref`` are ignored; from 2019-09 they apply."""
    return isinstance(root, dict) and "draft-0" in str(root.get("$schema", ""))


def _validator(root: Any) -> Any:
    cls = validator_for(root, default=Draft202012Validator)
    # An empty registry: references outside the document are never fetched.
    return cls(root, registry=referencing.Registry())


class _Side:
    """One document (reader or writer): its root, $ref rules and a validator for values."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.legacy_ref = _legacy_ref(root)
        self.validator = _validator(root)
        self.defs = (root.get("$defs"), root.get("definitions")) if isinstance(root, dict) else None

    def accepts(self, node: Any, value: Any) -> bool:
        """True if ``value`` is valid under subschema ``node`` of this document."""
        return bool(self.validator.evolve(schema=node).is_valid(value))

    def deref(self, node: Any) -> tuple[Any, bool]:
        """Follow a chain of ``$ref``; returns the target (None on a loop) and whether a
        reference was followed. ``$ref`` with sibling keywords becomes ``allOf``."""
        followed = False
        for _ in range(MAX_DEPTH):
            if not isinstance(node, dict) or "$ref" not in node:
                return node, followed
            rest = {k: v for k, v in node.items() if k != "$ref" and k not in _ANNOTATIONS}
            if rest and not self.legacy_ref:
                rest["allOf"] = [*rest.get("allOf", []), {"$ref": node["$ref"]}]
                return rest, followed
            node = resolve_pointer(self.root, node["$ref"])
            followed = True
            if node is None:
                return None, followed
        return None, followed


class _Checker:
    def __init__(self, reader_root: Any, writer_root: Any) -> None:
        self.reader = _Side(reader_root)
        self.writer = _Side(writer_root)
        self.same_defs = self.reader.defs == self.writer.defs
        # Pairs of referenced subschemas under check: assumed compatible on re-entry, which is
        # what makes recursive schemas (trees, linked lists) terminate.
        self.assumed: set[tuple[int, int]] = set()
        # Keeps every pair in `assumed` alive, so that no id is reused by a later object.
        self._alive: list[Any] = []

    # -- the recursion -------------------------------------------------------------------

    def subset(self, reader: Any, writer: Any, path: str, depth: int) -> list[Incompatibility]:
        """Incompatibilities of subschema ``writer`` ⊆ subschema ``reader`` at ``path``."""
        if depth > MAX_DEPTH:
            return [_inc(path, "schema is nested or recursive too deeply to check")]
        reader, reader_ref = self.reader.deref(reader)
        writer, writer_ref = self.writer.deref(writer)
        if writer is None:
            writer = True  # an unresolvable writer: assume it allows anything (safe)
        if reader is None:
            return [_inc(path, "reader $ref cannot be resolved (loop)")]
        if reader_ref or writer_ref:
            key = (id(reader), id(writer))
            if key in self.assumed:
                return []
            self.assumed.add(key)
            self._alive.append((reader, writer))
        return self._subset(reader, writer, path, depth + 1)

    def _subset(self, reader: Any, writer: Any, path: str, depth: int) -> list[Incompatibility]:
        if writer is False or reader is True or reader == {}:
            return []
        if reader is False:
            return [_inc(path, "the reader accepts nothing here (false schema)")]
        if writer is True:
            writer = {}
        if _same(reader, writer) and self._refs_agree(reader):
            return []
        for key in ("anyOf", "oneOf"):
            if key in writer:
                return self._writer_union(reader, writer, key, path, depth)
        if "allOf" in writer:
            merged = self._merge_writer_all_of(writer)
            return self.subset(reader, merged, path, depth)
        problems: list[Incompatibility] = []
        if "allOf" in reader:
            for i, branch in enumerate(reader["allOf"]):
                problems += self.subset(branch, writer, f"{path}/allOf/{i}", depth)
            reader = _without(reader, "allOf")
        if "anyOf" in reader or "oneOf" in reader:
            return problems + self._reader_union(reader, writer, path, depth)
        return problems + self._plain(reader, writer, path, depth)

    def _refs_agree(self, node: Any) -> bool:
        """Equal subschemas are compatible if their references mean the same on both sides."""
        return self.same_defs or not any(True for _ in iter_refs(node))

    # -- unions and intersections --------------------------------------------------------

    def _writer_union(
        self, reader: Any, writer: dict[str, Any], key: str, path: str, depth: int
    ) -> list[Incompatibility]:
        siblings = _without(writer, key)
        problems: list[Incompatibility] = []
        for i, branch in enumerate(writer[key]):
            merged = self._merge(siblings, branch)
            problems += self.subset(reader, merged, f"{path}/{key}/{i}", depth)
        return problems

    def _merge_writer_all_of(self, writer: dict[str, Any]) -> Any:
        merged: Any = _without(writer, "allOf")
        for branch in writer["allOf"]:
            merged = self._merge(merged, branch)
        return merged

    def _merge(self, base: Any, branch: Any) -> Any:
        """A writer schema accepting at least ``base ∧ branch``: keywords of ``branch`` are
        added unless ``base`` has a different value or the keyword is not known to be safe
        to add (then dropped: a wider writer is safe)."""
        branch, _ = self.writer.deref(branch)
        if base is False or branch is False:
            return False
        if branch is None or branch is True or base is True:
            return base if branch is None or branch is True else branch
        merged = dict(base)
        for key, value in branch.items():
            if not _mergeable(key, value, base):
                continue
            if key not in merged or _same(merged[key], value):
                merged[key] = value
            elif key == "required":
                merged[key] = sorted({*merged[key], *value})
            elif key == "properties":
                merged[key] = {**value, **merged[key]}
        return merged

    def _reader_union(
        self, reader: dict[str, Any], writer: dict[str, Any], path: str, depth: int
    ) -> list[Incompatibility]:
        key = "anyOf" if "anyOf" in reader else "oneOf"
        problems = self.subset(_without(reader, key), writer, path, depth)
        branches = reader[key]
        closest: list[Incompatibility] | None = None
        for i, branch in enumerate(branches):
            found = self._trial(branch, writer, f"{path}/{key}/{i}", depth)
            if not found and (key == "anyOf" or self._others_disjoint(branches, i, writer)):
                return problems
            if found and (closest is None or len(found) < len(closest)):
                closest = found
        reason = f"the writer's data does not fit exactly one {key} branch of the reader"
        if key == "anyOf":
            reason = "the writer's data does not fit any single anyOf branch of the reader"
        if closest:
            reason += f" (closest: {closest[0]})"
        elif key == "oneOf":
            reason += " (a matching branch exists, but others may match too)"
        return [*problems, _inc(f"{path}/{key}", reason)]

    def _trial(self, reader: Any, writer: Any, path: str, depth: int) -> list[Incompatibility]:
        """`subset` without leaving assumptions behind when it fails."""
        saved = set(self.assumed)
        found = self.subset(reader, writer, path, depth)
        if found:
            self.assumed = saved
        return found

    def _others_disjoint(self, branches: list[Any], chosen: int, writer: Any) -> bool:
        return all(self._disjoint(b, writer, 0) for i, b in enumerate(branches) if i != chosen)

    def _disjoint(self, reader: Any, writer: Any, depth: int) -> bool:
        """True if provably no instance is valid under both (conservative: False if unsure)."""
        reader, _ = self.reader.deref(reader)
        writer, _ = self.writer.deref(writer)
        if reader is False or writer is False:
            return True
        if not isinstance(reader, dict) or not isinstance(writer, dict) or depth > MAX_DEPTH:
            return False
        r_types, w_types = _types(reader), _types(writer)
        if (
            r_types is not None
            and w_types is not None
            and not {_numeric(t) for t in r_types} & {_numeric(t) for t in w_types}
        ):
            return True
        values = _finite_values(writer)
        if values is not None and not any(
            self.writer.accepts(writer, v) and self.reader.accepts(reader, v) for v in values
        ):
            return True
        objects_only = (w_types is not None and w_types <= {"object"}) or (
            r_types is not None and r_types <= {"object"}
        )
        return objects_only and self._disjoint_by_property(reader, writer, depth)

    def _disjoint_by_property(self, reader: Any, writer: Any, depth: int) -> bool:
        """A discriminator: a property the writer requires that cannot satisfy both sides."""
        r_props = reader.get("properties", {})
        for name in writer.get("required", ()):
            if name in r_props:
                w_schema = _schema_for(writer, name)
                if self._disjoint(r_props[name], w_schema, depth + 1):
                    return True
        return False

    # -- plain keywords ------------------------------------------------------------------

    def _plain(self, reader: Any, writer: Any, path: str, depth: int) -> list[Incompatibility]:
        values = _finite_values(writer)
        if values is not None:
            return self._finite(reader, writer, values, path)
        problems: list[Incompatibility] = []
        r_types, w_types = _types(reader), _types(writer)
        writer_types = w_types if w_types is not None else ALL_TYPES
        shared = writer_types
        if r_types is not None:
            shared = frozenset(t for t in writer_types if _covered(t, r_types))
            problems += _type_problems(writer_types - shared, r_types, w_types is None, path)
        if "enum" in reader or "const" in reader:
            kinds = ", ".join(sorted(shared)) or "values"
            reason = f"the reader accepts only listed values; the writer allows any {kinds}"
            problems.append(_inc(path, reason))
        if shared & {"number", "integer"}:
            problems += _numeric_problems(reader, writer, "number" not in shared, path)
        if "string" in shared:
            problems += _string_problems(reader, writer, path)
        if "array" in shared:
            problems += self._array(reader, writer, path, depth)
        if "object" in shared:
            problems += self._object(reader, writer, path, depth)
        return problems + self._unmodelled(reader, writer, path)

    def _finite(
        self, reader: Any, writer: Any, values: list[Any], path: str
    ) -> list[Incompatibility]:
        problems = []
        for value in values:
            if self.writer.accepts(writer, value) and not self.reader.accepts(reader, value):
                problems.append(
                    _inc(path, f"the writer allows {_show(value)}; the reader rejects it")
                )
        return problems

    def _unmodelled(self, reader: Any, writer: Any, path: str) -> list[Incompatibility]:
        problems = []
        for key, value in reader.items():
            if key in _MODELLED or key in _ANNOTATIONS:
                continue
            if _same(writer.get(key, _MISSING), value) and self._refs_agree(value):
                continue
            change = "differs from the writer's" if key in writer else "is not in the writer"
            reason = f"the reader's {key!r} {change}; compatibility cannot be proved for it"
            problems.append(_inc(f"{path}/{key}", reason))
        return problems

    def _array(self, reader: Any, writer: Any, path: str, depth: int) -> list[Incompatibility]:
        problems = _bound_problems(reader, writer, "minItems", "maxItems", "items", path)
        if reader.get("uniqueItems") is True and writer.get("uniqueItems") is not True:
            problems.append(_inc(f"{path}/uniqueItems", "the reader requires unique items"))
        r_prefix, r_tail = _item_layout(reader)
        w_prefix, w_tail = _item_layout(writer)
        for i in range(max(len(r_prefix), len(w_prefix))):
            r_item = r_prefix[i] if i < len(r_prefix) else r_tail
            w_item = w_prefix[i] if i < len(w_prefix) else w_tail
            problems += self.subset(r_item, w_item, f"{path}/items/{i}", depth)
        return problems + self.subset(r_tail, w_tail, f"{path}/items", depth)

    def _object(self, reader: Any, writer: Any, path: str, depth: int) -> list[Incompatibility]:
        problems = _bound_problems(
            reader, writer, "minProperties", "maxProperties", "properties", path
        )
        required = set(writer.get("required", ()))
        for name in reader.get("required", ()):
            if name not in required:
                reason = f"property {name!r} is required by the reader but optional in the writer"
                problems.append(_inc(f"{path}/required", reason))
        names = {**writer.get("properties", {}), **reader.get("properties", {})}
        for name in names:
            problems += self._property(reader, writer, name, path, depth)
        return problems + self._other_properties(reader, writer, path, depth)

    def _property(
        self, reader: Any, writer: Any, name: str, path: str, depth: int
    ) -> list[Incompatibility]:
        w_schema = _schema_for(writer, name)
        here = f"{path}/properties/{_escape(name)}"
        if self.writer.deref(w_schema)[0] in (True, {}):
            return self._undeclared_property(reader, name, here, depth)
        problems = []
        for r_schema, closed in _reader_schemas_for(reader, name):
            if closed and w_schema is not False and self.writer.deref(w_schema)[0] is not False:
                reason = (
                    f"property {name!r} is allowed by the writer, but the reader's "
                    "additionalProperties rejects it"
                )
                problems.append(_inc(here, reason))
                continue
            problems += self.subset(r_schema, w_schema, here, depth)
        return problems

    def _undeclared_property(
        self, reader: Any, name: str, here: str, depth: int
    ) -> list[Incompatibility]:
        """The writer allows any value for ``name`` (open content model, or ``{}``)."""
        for r_schema, _ in _reader_schemas_for(reader, name):
            if self.subset(r_schema, True, here, depth):
                reason = (
                    f"property {name!r} may hold any value in the writer (undeclared in an "
                    "open content model, or unconstrained); the reader constrains it"
                )
                return [_inc(here, reason)]
        return []

    def _other_properties(
        self, reader: Any, writer: Any, path: str, depth: int
    ) -> list[Incompatibility]:
        """Names listed in neither ``properties``: patternProperties and additionalProperties."""
        r_patterns = reader.get("patternProperties", {})
        w_patterns = writer.get("patternProperties", {})
        r_extra = reader.get("additionalProperties", True)
        w_extra = writer.get("additionalProperties", True)
        pairs: list[tuple[Any, Any, str]] = []
        if r_patterns.keys() == w_patterns.keys():
            for pattern, schema in r_patterns.items():
                pairs.append(
                    (schema, w_patterns[pattern], f"/patternProperties/{_escape(pattern)}")
                )
        else:
            # Regular expressions may overlap in ways not analysed: every pairing can occur.
            for pattern, schema in r_patterns.items():
                at = f"/patternProperties/{_escape(pattern)}"
                pairs += [(schema, w, at) for w in (w_extra, *w_patterns.values())]
            pairs += [(r_extra, w, "/patternProperties") for w in w_patterns.values()]
        problems: list[Incompatibility] = []
        for r_schema, w_schema, at in pairs:
            problems += self.subset(r_schema, w_schema, path + at, depth)
        if self.reader.deref(r_extra)[0] is False and self.writer.deref(w_extra)[0] is not False:
            reason = "the writer allows additional properties; the reader's content model is closed"
            return [*problems, _inc(f"{path}/additionalProperties", reason)]
        return problems + self.subset(r_extra, w_extra, f"{path}/additionalProperties", depth)


# -- helpers (no checker state) ------------------------------------------------------------


def _inc(path: str, reason: str) -> Incompatibility:
    return Incompatibility(path or "/", reason)


# Keywords that may be copied from one writer schema into another without narrowing it: each
# either asserts on its own, or (properties, patternProperties, prefixItems...) only removes
# names or positions from a sibling's reach, which widens. Others, such as if/then/else,
# contains/maxContains or draft 4's boolean exclusiveMinimum, change what a sibling means.
_MERGEABLE = frozenset(
    {
        "type",
        "enum",
        "const",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "uniqueItems",
        "properties",
        "patternProperties",
        "additionalProperties",
        "required",
        "minProperties",
        "maxProperties",
        "allOf",
        "anyOf",
        "oneOf",
    }
)


def _mergeable(key: str, value: Any, base: dict[str, Any]) -> bool:
    if key not in _MERGEABLE or (isinstance(value, bool) and key.startswith("exclusive")):
        return False
    if key == "items" and isinstance(value, list):
        return False  # draft 4-7 tuple form: would switch on the base's additionalItems
    # Draft 4: a boolean exclusiveMinimum in the base is ignored until a minimum joins it.
    return not (
        key in ("minimum", "maximum")
        and any(isinstance(base.get(k), bool) for k in ("exclusiveMinimum", "exclusiveMaximum"))
    )


def _same(a: Any, b: Any) -> bool:
    """JSON equality: unlike ``==``, ``true`` is not ``1`` (a ``const`` may tell them apart)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(v, b[k]) for k, v in a.items())
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def _without(schema: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != key}


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _types(schema: Any) -> frozenset[str] | None:
    declared = schema.get("type") if isinstance(schema, dict) else None
    if declared is None:
        return None
    if isinstance(declared, str):
        return frozenset({declared})
    return frozenset(t for t in declared if isinstance(t, str))


def _covered(kind: str, types: frozenset[str]) -> bool:
    return kind in types or (kind == "integer" and "number" in types)


def _numeric(kind: str) -> str:
    return "number" if kind == "integer" else kind


def _type_problems(
    missing: frozenset[str], r_types: frozenset[str], untyped: bool, path: str
) -> list[Incompatibility]:
    if not missing:
        return []
    if untyped:
        allowed = ", ".join(sorted(r_types))
        return [_inc(f"{path}/type", f"the writer allows any type; the reader only {allowed}")]
    problems = []
    for kind in sorted(missing):
        if kind == "number" and "integer" in r_types:
            reason = "the writer allows non-integer numbers; the reader only integers"
        else:
            reason = f"the writer allows type {kind!r}; the reader does not"
        problems.append(_inc(f"{path}/type", reason))
    return problems


def _finite_values(schema: Any) -> list[Any] | None:
    """Every value the schema could possibly accept, if that is a short, known list."""
    if not isinstance(schema, dict):
        return None
    if "const" in schema:
        return [schema["const"]]
    if "enum" in schema and len(schema["enum"]) <= MAX_ENUM_VALUES:
        return list(schema["enum"])
    types = _types(schema)
    if types and types <= {"null", "boolean"}:
        return [None, True, False]
    return None


def _item_layout(schema: Any) -> tuple[list[Any], Any]:
    """(per-position schemas, schema for the rest) in either draft's tuple form."""
    items = schema.get("items", True)
    if isinstance(items, list):  # draft 4-7: items array + additionalItems
        return items, schema.get("additionalItems", True)
    return schema.get("prefixItems", []), items


def _schema_for(schema: Any, name: str) -> Any:
    """The writer subschema a property value satisfies (one of them: dropping the rest of a
    conjunction only widens the writer)."""
    if name in schema.get("properties", {}):
        return schema["properties"][name]
    for pattern, sub in schema.get("patternProperties", {}).items():
        if _matches(pattern, name):
            return sub
    return schema.get("additionalProperties", True)


def _reader_schemas_for(schema: Any, name: str) -> list[tuple[Any, bool]]:
    """Every reader subschema a property value must satisfy, each flagged if it is the
    additionalProperties of a closed content model."""
    found = []
    if name in schema.get("properties", {}):
        found.append((schema["properties"][name], False))
    for pattern, sub in schema.get("patternProperties", {}).items():
        if _matches(pattern, name):
            found.append((sub, False))
    if not found:
        extra = schema.get("additionalProperties", True)
        found.append((extra, extra is False))
    return found


def _matches(pattern: str, name: str) -> bool:
    try:
        return re.search(pattern, name) is not None
    except re.error:
        return True  # an ECMA-only pattern: assume it may match (both sides are then checked)


def _lower(schema: Any) -> Bound | None:
    low: Bound | None = None
    if "minimum" in schema:
        low = (schema["minimum"], schema.get("exclusiveMinimum") is True)
    exclusive = schema.get("exclusiveMinimum")
    numeric = not isinstance(exclusive, bool) and exclusive is not None
    if numeric and (low is None or exclusive >= low[0]):
        low = (exclusive, True)
    return low


def _upper(schema: Any) -> Bound | None:
    high: Bound | None = None
    if "maximum" in schema:
        high = (schema["maximum"], schema.get("exclusiveMaximum") is True)
    exclusive = schema.get("exclusiveMaximum")
    numeric = not isinstance(exclusive, bool) and exclusive is not None
    if numeric and (high is None or exclusive <= high[0]):
        high = (exclusive, True)
    return high


def _integer_bound(bound: Bound | None, lower: bool) -> Bound | None:
    """The same bound over integers, made inclusive (``> 1.5`` is ``>= 2``)."""
    if bound is None:
        return None
    limit, exclusive = bound
    if lower:
        return (math.floor(limit) + 1 if exclusive else math.ceil(limit)), False
    return (math.ceil(limit) - 1 if exclusive else math.floor(limit)), False


def _tighter(reader: Bound | None, writer: Bound | None, lower: bool) -> bool:
    """True if the writer's bound is at least as tight as the reader's."""
    if reader is None:
        return True
    if writer is None:
        return False
    (r_limit, r_excl), (w_limit, w_excl) = reader, writer
    if w_limit == r_limit:
        return w_excl or not r_excl
    return bool(w_limit > r_limit if lower else w_limit < r_limit)


def _numeric_problems(
    reader: Any, writer: Any, integers_only: bool, path: str
) -> list[Incompatibility]:
    problems = []
    for lower, word in ((True, "minimum"), (False, "maximum")):
        get = _lower if lower else _upper
        r_bound, w_bound = get(reader), get(writer)
        if integers_only:
            r_bound, w_bound = _integer_bound(r_bound, lower), _integer_bound(w_bound, lower)
        if not _tighter(r_bound, w_bound, lower):
            problems.append(_inc(f"{path}/{word}", _bound_reason(word, r_bound, w_bound)))
    if "multipleOf" in reader and not _divides(reader, writer, integers_only):
        reason = f"the reader requires multiples of {reader['multipleOf']}"
        if "multipleOf" in writer:
            reason += f"; the writer's multiples of {writer['multipleOf']} are not always such"
        problems.append(_inc(f"{path}/multipleOf", reason))
    return problems


def _bound_reason(word: str, reader: Bound | None, writer: Bound | None) -> str:
    def show(bound: Bound | None) -> str:
        if bound is None:
            return "none"
        return f"{bound[0]}{' (exclusive)' if bound[1] else ''}"

    return f"{word} tightened: the reader's is {show(reader)}, the writer's {show(writer)}"


def _divides(reader: Any, writer: Any, integers_only: bool) -> bool:
    r_step = Fraction(str(reader["multipleOf"]))
    if "multipleOf" in writer and (Fraction(str(writer["multipleOf"])) / r_step).denominator == 1:
        return True
    return bool(integers_only and (1 / r_step).denominator == 1)  # 0.5 divides integers


def _string_problems(reader: Any, writer: Any, path: str) -> list[Incompatibility]:
    problems = _bound_problems(reader, writer, "minLength", "maxLength", "characters", path)
    if "pattern" in reader and writer.get("pattern") != reader["pattern"]:
        reason = (
            f"the reader requires pattern {reader['pattern']!r}; the writer's "
            f"{writer.get('pattern', 'none')!r} cannot be proved to match only such strings"
        )
        problems.append(_inc(f"{path}/pattern", reason))
    return problems


def _bound_problems(
    reader: Any, writer: Any, low: str, high: str, unit: str, path: str
) -> list[Incompatibility]:
    """Integer count bounds (lengths, item and property counts)."""
    problems = []
    if low in reader and writer.get(low, 0) < reader[low]:
        has = writer.get(low, "none")
        reason = f"the reader requires at least {reader[low]} {unit}; the writer {has}"
        problems.append(_inc(f"{path}/{low}", reason))
    if high in reader and writer.get(high, math.inf) > reader[high]:
        has = writer.get(high, "none")
        reason = f"the reader allows at most {reader[high]} {unit}; the writer {has}"
        problems.append(_inc(f"{path}/{high}", reason))
    return problems
