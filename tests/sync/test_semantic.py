"""Semantic merge: equal meanings merge as one; real conflicts go to an arbiter whose decision
is recorded as an edit, and replicas converge whatever the delivery order."""

from __future__ import annotations

import itertools
import random

import pytest

from airlane.sync import (
    ArbitrationRequest,
    ClockDriftError,
    Edit,
    HybridClock,
    MalformedError,
    ModelArbiter,
    SemanticMap,
    Stamp,
    normalized_text_hash,
)
from airlane.sync.semantic import ARBITER_NODE, decision_stamp

NOW = 1_000_000
NODES = ("ios", "android", "web")


def replicas():
    return [SemanticMap(HybridClock(node)) for node in NODES]


def test_the_default_hash_ignores_case_width_and_whitespace():
    assert normalized_text_hash("Hello   World\n") == normalized_text_hash("hello world")
    fullwidth_hello = "\uff28\uff25\uff2c\uff2c\uff2f"
    assert normalized_text_hash(fullwidth_hello) == normalized_text_hash("hello")
    assert normalized_text_hash("hello") != normalized_text_hash("hullo")


def test_concurrent_edits_with_equal_hashes_merge_as_one():
    ios, web, _ = replicas()
    a = ios.edit("title", "Quarterly  Report", NOW)
    b = web.edit("title", "quarterly report", NOW + 1)
    ios.apply(b, NOW + 2)
    web.apply(a, NOW + 2)
    assert ios.conflicts() == web.conflicts() == []
    assert ios.resolve(NOW + 3) == []  # nothing for an arbiter to do
    assert ios.value("title") == web.value("title") == "quarterly report"


def test_sequential_edits_are_not_conflicts():
    ios, web, _ = replicas()
    first = ios.edit("body", "draft", NOW)
    web.apply(first, NOW)
    second = web.edit("body", "final", NOW + 1)
    assert second.parents == (first.stamp,)
    ios.apply(second, NOW + 2)
    assert ios.conflicts() == []
    assert ios.value("body") == "final"


def conflicting_edits():
    """Three replicas edit one field concurrently, on top of a shared first version."""
    nodes = replicas()
    base = nodes[0].edit("body", "The model is fast.", NOW)
    for node in nodes[1:]:
        node.apply(base, NOW)
    texts = ["The model is very fast.", "The model is slow.", "The model is fast!"]
    edits = [node.edit("body", text, NOW + 10) for node, text in zip(nodes, texts, strict=True)]
    return base, edits


def test_conflicting_edits_on_three_replicas_in_any_order_converge_with_the_decision_recorded():
    base, edits = conflicting_edits()
    outcomes = set()
    for order in itertools.permutations(edits):
        nodes = replicas()
        for node in nodes:
            node.apply(base, NOW)
        rng = random.Random(str(order))
        for node in nodes:  # each replica gets the edits in its own order, resolving as it goes
            decisions = []
            for edit in rng.sample(order, len(order)):
                node.apply(edit, NOW + 20)
                decisions += node.resolve(NOW + 20)
            assert all(d.is_decision for d in decisions)
        # Exchange everything (decisions included) until nothing new is decided.
        for _ in range(3):
            for receiver, sender in itertools.permutations(nodes, 2):
                receiver.merge(sender, NOW + 30)
            decided = [node.resolve(NOW + 30) for node in nodes]  # every replica resolves
            if not any(decided):
                break
        states = {node.edits() for node in nodes}
        assert len(states) == 1
        assert all(node.conflicts() == [] for node in nodes)
        # Decisions taken on partial views may remain as heads, but they agree semantically.
        final = nodes[0].heads("body")
        assert len({head.digest for head in final}) == 1
        assert final[-1].is_decision
        assert final[-1].stamp.node.startswith(f"{ARBITER_NODE}.")
        outcomes.add(nodes[0].value("body"))
    # The default arbiter is LWW: the latest edit's text wins, in every order.
    latest = max(edits, key=lambda edit: edit.stamp)
    assert outcomes == {latest.text}


def test_replicas_that_each_ran_the_arbiter_record_the_same_decision():
    base, edits = conflicting_edits()
    nodes = replicas()
    for node in nodes:
        node.apply(base, NOW)
        for edit in edits:
            node.apply(edit, NOW + 20)
    decisions = [node.resolve(NOW + 20) for node in nodes]
    assert decisions[0] == decisions[1] == decisions[2]
    (decision,) = decisions[0]
    heads = sorted(edit.stamp for edit in edits)
    assert decision.parents == tuple(heads)
    assert decision.stamp == decision_stamp(heads)
    assert decision.stamp.logical == heads[-1].logical + 1  # max stamp + 1 tick
    nodes[0].merge(nodes[1], NOW + 30)
    assert len(nodes[0].edits()) == 5  # base, three edits, one decision: stored once


def test_a_model_arbiter_is_asked_once_and_its_decision_travels():
    base, edits = conflicting_edits()
    asked: list[ArbitrationRequest] = []

    def ask(request: ArbitrationRequest) -> str:
        asked.append(request)
        return "The model is fast, mostly."

    gateway, *others = replicas()
    for node in [gateway, *others]:
        node.apply(base, NOW)
        for edit in edits:
            node.apply(edit, NOW + 20)
    (decision,) = gateway.resolve(NOW + 20, arbiter=ModelArbiter(ask))
    assert len(asked) == 1
    assert asked[0].key == "body"
    assert len(asked[0].candidates) == 3
    wire = Edit.from_dict(decision.to_dict())
    for node in others:
        node.apply(wire, NOW + 30)
        assert node.conflicts() == []
        assert node.value("body") == "The model is fast, mostly."


def test_a_model_without_an_answer_falls_back_to_lww():
    _, edits = conflicting_edits()
    node = SemanticMap(HybridClock("ios"))
    for edit in edits:
        node.apply(edit, NOW + 20)
    (decision,) = node.resolve(NOW + 20, arbiter=ModelArbiter(lambda request: None))
    assert decision.text == max(edits, key=lambda edit: edit.stamp).text


def test_non_deterministic_arbiters_on_two_replicas_still_converge():
    _, edits = conflicting_edits()
    a, b = SemanticMap(HybridClock("ios")), SemanticMap(HybridClock("web"))
    for node in (a, b):
        for edit in edits:
            node.apply(edit, NOW + 20)
    a.resolve(NOW + 20, arbiter=ModelArbiter(lambda r: "answer one"))
    b.resolve(NOW + 20, arbiter=ModelArbiter(lambda r: "answer two"))
    a.merge(b, NOW + 30)
    b.merge(a, NOW + 30)
    assert a.edits() == b.edits()
    assert a.value("body") == b.value("body")
    assert a.conflicts() == b.conflicts() == []


def test_edits_travel_as_json_and_forged_decisions_are_refused():
    _, edits = conflicting_edits()
    for edit in edits:
        assert Edit.from_dict(edit.to_dict()) == edit
    node = SemanticMap(HybridClock("ios"))
    for edit in edits:
        node.apply(edit, NOW + 20)
    (decision,) = node.resolve(NOW + 20)
    forged = decision.to_dict() | {"stamp": Stamp(NOW + 99, 0, decision.stamp.node).encode()}
    with pytest.raises(MalformedError, match="derived"):
        Edit.from_dict(forged)
    with pytest.raises(MalformedError):
        Edit.from_dict({"key": "k", "text": 1, "stamp": "x", "parents": [], "digest": ""})


def test_an_edit_from_a_clock_far_ahead_is_refused():
    node = SemanticMap(HybridClock("ios", max_drift_ms=1_000))
    ahead = SemanticMap(HybridClock("web")).edit("k", "from the future", NOW + 60_000)
    with pytest.raises(ClockDriftError):
        node.apply(ahead, NOW)
    assert node.items() == {}


def test_gc_forgets_superseded_edits_but_keeps_the_value():
    base, edits = conflicting_edits()
    node = SemanticMap(HybridClock("ios"))
    node.apply(base, NOW)
    for edit in edits:
        node.apply(edit, NOW + 20)
    (decision,) = node.resolve(NOW + 20)
    assert node.gc(decision.stamp) == 4
    assert node.edits() == (decision,)
    assert node.value("body") == decision.text
    node.apply(edits[0], NOW + 40)  # a late duplicate changes nothing
    assert node.edits() == (decision,)
