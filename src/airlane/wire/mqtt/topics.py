"""MQTT topic names and topic filters (OASIS MQTT 5.0, section 4.7): checks and matching.

A filter's levels are split on ``/``; ``+`` matches exactly one level, ``#`` (last, alone in
its level) matches the rest including none. Topics starting with ``$`` are not matched by a
filter starting with a wildcard. A shared subscription ``$share/<group>/<filter>`` matches as
its ``<filter>`` does.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")

__all__ = ["FilterTree", "check_filter", "check_topic", "filter_matches", "shared_filter"]

MAX_TOPIC_BYTES = 65535


def check_topic(topic: str) -> str:
    """``topic`` if it is a valid topic name to publish to; ValueError otherwise."""
    if not topic:
        raise ValueError("a topic name may not be empty")
    if "+" in topic or "#" in topic:
        raise ValueError(f"a topic name may not hold a wildcard: {topic!r}")
    if "\x00" in topic or len(topic.encode("utf-8")) > MAX_TOPIC_BYTES:
        raise ValueError(f"not a valid topic name: {topic[:80]!r}")
    return topic


def shared_filter(filter: str) -> tuple[str | None, str]:
    """(share group, filter) for ``$share/<group>/<filter>``; (None, filter) otherwise."""
    if not filter.startswith("$share/"):
        return None, filter
    parts = filter.split("/", 2)
    if len(parts) < 3 or not parts[1] or not parts[2] or set(parts[1]) & set("+#"):
        raise ValueError(f"a shared subscription is $share/<group>/<filter>, not {filter!r}")
    return parts[1], parts[2]


def check_filter(filter: str) -> str:
    """``filter`` if it is a valid topic filter (shared or not); ValueError otherwise."""
    _, inner = shared_filter(filter)
    if not inner or "\x00" in inner or len(filter.encode("utf-8")) > MAX_TOPIC_BYTES:
        raise ValueError(f"not a valid topic filter: {filter[:80]!r}")
    levels = inner.split("/")
    for i, level in enumerate(levels):
        if "#" in level and (level != "#" or i != len(levels) - 1):
            raise ValueError(f"'#' must be the whole last level of a filter: {filter!r}")
        if "+" in level and level != "+":
            raise ValueError(f"'+' must be a whole level of a filter: {filter!r}")
    return filter


def filter_matches(filter: str, topic: str) -> bool:
    """Whether ``topic`` matches ``filter`` (both assumed valid)."""
    _, filter = shared_filter(filter)
    if topic.startswith("$") and filter[:1] in ("+", "#"):
        return False
    wanted = filter.split("/")
    levels = topic.split("/")
    for i, level in enumerate(wanted):
        if level == "#":
            return True
        if i >= len(levels) or (level != "+" and level != levels[i]):
            return False
    return len(levels) == len(wanted)


class _Node(Generic[T]):
    __slots__ = ("children", "rest", "values")

    def __init__(self) -> None:
        self.children: dict[str, _Node[T]] = {}
        self.values: list[T] = []
        """Values of filters that end at this node."""
        self.rest: list[T] = []
        """Values of filters that end here with ``#`` (this level and everything below)."""


class FilterTree(Generic[T]):
    """Topic filters by level, so that a topic finds the filters it matches in time that
    depends on its own depth, not on how many filters there are (10,000 routes cost a walk
    of a few dictionary lookups per message, not 10,000 comparisons)."""

    def __init__(self) -> None:
        self._root: _Node[T] = _Node()
        self.size = 0

    def add(self, filter: str, value: T) -> None:
        """Index ``value`` under ``filter`` (a valid filter; a shared one by its inner
        filter)."""
        _, inner = shared_filter(filter)
        node = self._root
        levels = inner.split("/")
        for level in levels:
            if level == "#":
                node.rest.append(value)
                self.size += 1
                return
            node = node.children.setdefault(level, _Node())
        node.values.append(value)
        self.size += 1

    def match(self, topic: str) -> list[T]:
        """The values of every filter ``topic`` matches (in no particular order)."""
        levels = topic.split("/")
        found: list[T] = []
        # A topic starting with "$" is not matched by a wildcard in the first level.
        dollar = topic.startswith("$")
        nodes = [self._root]
        for depth, level in enumerate(levels):
            following: list[_Node[T]] = []
            for node in nodes:
                if not (dollar and depth == 0):
                    found += node.rest
                exact = node.children.get(level)
                if exact is not None:
                    following.append(exact)
                plus = node.children.get("+")
                if plus is not None and not (dollar and depth == 0):
                    following.append(plus)
            nodes = following
            if not nodes:
                return found
        for node in nodes:
            found += node.values
            found += node.rest  # "a/#" matches "a" too
        return found
