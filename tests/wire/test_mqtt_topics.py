"""MQTT topic names and filters (`airlane.wire.mqtt.topics`): the examples of the OASIS MQTT
5.0 specification, section 4.7, and the refusals of section 4.7.3 and 4.8.2."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airlane.wire.mqtt.topics import (
    FilterTree,
    check_filter,
    check_topic,
    filter_matches,
    shared_filter,
)

MATCHES: list[tuple[str, str, bool]] = [
    # section 4.7.1.2: multi-level wildcard
    ("sport/tennis/player1/#", "sport/tennis/player1", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/ranking", True),
    ("sport/tennis/player1/#", "sport/tennis/player1/score/wimbledon", True),
    ("sport/#", "sport", True),  # '#' matches the parent level too
    ("sport/#", "sport/", True),
    ("sport/#", "sports", False),
    ("#", "sport", True),
    ("#", "sport/tennis/player1", True),
    ("#", "/", True),
    # section 4.7.1.3: single-level wildcard
    ("sport/tennis/+", "sport/tennis/player1", True),
    ("sport/tennis/+", "sport/tennis/player2", True),
    ("sport/tennis/+", "sport/tennis/player1/ranking", False),
    ("sport/tennis/+", "sport/tennis", False),
    ("sport/+", "sport", False),
    ("sport/+", "sport/", True),
    ("+", "sport", True),
    ("+", "/finance", False),
    ("+/+", "/finance", True),
    ("/+", "/finance", True),
    ("+/+", "a/b", True),
    ("+/+", "a", False),
    ("+/+", "a/b/c", False),
    ("+/tennis/#", "sport/tennis/player1", True),
    ("+/tennis/#", "sport/tennis", True),
    ("sport/+/player1", "sport/tennis/player1", True),
    ("sport/+/player1", "sport/tennis/player2", False),
    # exact levels; topics are case sensitive; an empty level is a level
    ("sport/tennis", "sport/tennis", True),
    ("sport/tennis", "Sport/tennis", False),
    ("sport/tennis", "sport/tennis/", False),
    ("sport//x", "sport//x", True),
    ("sport/+/x", "sport//x", True),
    # section 4.7.2: topics beginning with $ are not matched by a leading wildcard
    ("#", "$SYS/broker/uptime", False),
    ("+/monitor/Clients", "$SYS/monitor/Clients", False),
    ("+/+/+", "$SYS/broker/uptime", False),
    ("+", "$SYS", False),
    ("$SYS/#", "$SYS/monitor/Clients", True),
    ("$SYS/monitor/+", "$SYS/monitor/Clients", True),
    ("$SYS/#", "$SYS", True),
    ("a/#", "a/$b", True),  # only the first character of the topic counts
    # section 4.8.2: a shared subscription matches as its filter does
    ("$share/g/sensor/+/vibration", "sensor/a/vibration", True),
    ("$share/g/sensor/+/vibration", "sensor/a/b/vibration", False),
    ("$share/g/sensor/+/vibration", "$share/g/sensor/a/vibration", False),
    ("$share/consumer1/sport/tennis/+", "sport/tennis/player1", True),
    ("$share/g/#", "any/thing", True),
    ("$share/g/#", "$SYS/x", False),
]


@pytest.mark.parametrize(("filter", "topic", "expected"), MATCHES)
def test_filter_matches(filter: str, topic: str, expected: bool) -> None:
    assert check_filter(filter) == filter
    assert check_topic(topic) == topic
    assert filter_matches(filter, topic) is expected


@pytest.mark.parametrize(
    "topic",
    ["sport/tennis", "/", "a", "$SYS/x", "é/ü", "a//b", "x" * 65535, "é" * 32767],
)
def test_check_topic_accepts(topic: str) -> None:
    assert check_topic(topic) == topic


@pytest.mark.parametrize(
    "topic",
    [
        "",  # section 4.7.3: at least one character
        "sport/+",  # wildcards are for filters only
        "sport/#",
        "+",
        "#",
        "a+b",
        "a\x00b",  # U+0000 (section 1.5.4)
        "x" * 65536,  # longer than a UTF-8 string can be
        "é" * 32768,  # 65536 bytes in UTF-8
    ],
)
def test_check_topic_refuses(topic: str) -> None:
    with pytest.raises(ValueError):
        check_topic(topic)


@pytest.mark.parametrize(
    "filter",
    [
        "#",
        "+",
        "sport/#",
        "sport/+/player1",
        "+/+",
        "/+",
        "+/tennis/#",
        "$SYS/#",
        "$share/g/a/+",
        "$share/g/#",
        "$share",  # no slash: an ordinary filter
        "$sharex/a",
        "a//b",
    ],
)
def test_check_filter_accepts(filter: str) -> None:
    assert check_filter(filter) == filter


@pytest.mark.parametrize(
    "filter",
    [
        "",
        "sport/tennis#",  # '#' must be a whole level
        "sport/tennis/#/ranking",  # ... and the last one
        "#/a",
        "##",
        "sport+",  # '+' must be a whole level
        "sport/+tennis",
        "++",
        "a\x00b",
        "x" * 65536,
        "$share/g",  # shared: $share/<group>/<filter>
        "$share/g/",
        "$share//a",
        "$share/g+/a",
        "$share/#/a",
        "$share/g/a#",
    ],
)
def test_check_filter_refuses(filter: str) -> None:
    with pytest.raises(ValueError):
        check_filter(filter)


@pytest.mark.parametrize(
    ("filter", "expected"),
    [
        ("sensor/+/vibration", (None, "sensor/+/vibration")),
        ("$share/g/sensor/+/vibration", ("g", "sensor/+/vibration")),
        ("$share/consumer1/sport/tennis/+", ("consumer1", "sport/tennis/+")),
        ("$share/g/#", ("g", "#")),
        ("$share/g//", ("g", "/")),
        ("$share", (None, "$share")),
        ("$SYS/#", (None, "$SYS/#")),
    ],
)
def test_shared_filter(filter: str, expected: tuple[str | None, str]) -> None:
    assert shared_filter(filter) == expected


@pytest.mark.parametrize("filter", ["$share/", "$share/g", "$share//a", "$share/g/", "$share/+/a"])
def test_shared_filter_refuses(filter: str) -> None:
    with pytest.raises(ValueError):
        shared_filter(filter)


# -- FilterTree ---------------------------------------------------------------------------------
# Invariant: for any set of valid filters and any topic, the tree returns exactly the filters
# that `filter_matches` says the topic matches (each as often as it was added).

_LEVELS = st.sampled_from(["a", "b", "", "$SYS", "+", "#", "c d"])


@st.composite
def _filters(draw: st.DrawFn) -> str:
    levels = draw(st.lists(_LEVELS, min_size=1, max_size=4))
    if "#" in levels:
        levels = [*levels[: levels.index("#")], "#"]
    return "/".join(levels)


@given(
    st.lists(_filters(), min_size=1, max_size=12),
    st.lists(st.sampled_from(["a", "b", "", "$SYS", "c d", "x"]), min_size=1, max_size=5),
)
@settings(max_examples=300, deadline=None)
def test_the_filter_tree_agrees_with_filter_matches(filters: list[str], levels: list[str]) -> None:
    topic = "/".join(levels)
    tree: FilterTree[int] = FilterTree()
    for index, f in enumerate(filters):
        tree.add(f, index)
    expected = sorted(i for i, f in enumerate(filters) if filter_matches(f, topic))
    assert sorted(tree.match(topic)) == expected


def test_the_filter_tree_with_shared_subscriptions_and_many_routes() -> None:
    tree: FilterTree[int] = FilterTree()
    for i in range(10_000):
        tree.add(f"bench/t{i}/+", i)
    tree.add("$share/g/bench/#", 10_000)
    assert sorted(tree.match("bench/t42/x")) == [42, 10_000]
    assert tree.match("other") == []
    assert tree.size == 10_001
