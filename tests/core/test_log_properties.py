"""Property: for any interleaving of appends, trims and resumes, a reader resuming from any
position it has reached ends with exactly what the producer produced (per channel text and
tool calls): no gap, no duplicate, in order."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from airlane.core import Channel, Event, Kind, Position, Retention, StreamLog
from airlane.core.usage import _BUCKET_STARTS, LatencyHistogram, _upper_edge_ns

SECOND = 1_000_000_000


@dataclass
class ReaderState:
    """What a client reconstructs from the frames it received."""

    text: dict[str, str] = field(default_factory=lambda: {c.value: "" for c in Channel})
    tools: dict[int, str] = field(default_factory=dict)
    messages: int = 0

    def apply(self, event: Event) -> None:
        if event.kind is Kind.SNAPSHOT:
            assert event.data is not None
            self.text = dict(event.data["text"])
            self.tools = {c["index"]: c["arguments"] for c in event.data["tool_calls"]}
        elif event.kind is Kind.DELTA:
            self.text[event.channel.value] += event.text
        elif event.kind is Kind.TOOL_CALL:
            assert event.data is not None
            index = event.data["index"]
            self.tools[index] = self.tools.get(index, "") + event.text

    def copy(self) -> ReaderState:
        return ReaderState(dict(self.text), dict(self.tools), self.messages)


appends = st.one_of(
    st.tuples(st.just("delta"), st.sampled_from(list(Channel)), st.text(max_size=6)),
    st.tuples(st.just("tool"), st.integers(0, 2), st.text(max_size=4)),
    st.tuples(st.just("message"), st.none(), st.none()),
)
operations = st.lists(
    st.one_of(
        appends,
        st.tuples(st.just("tick"), st.integers(0, 3), st.none()),
        st.tuples(st.just("read"), st.integers(0, 2), st.integers(1, 5)),
        st.tuples(st.just("resume"), st.integers(0, 2), st.integers(0, 1000)),
    ),
    max_size=120,
)
retentions = st.builds(
    Retention,
    max_events=st.integers(1, 12),
    max_bytes=st.integers(100, 2000),
    ttl_s=st.one_of(st.none(), st.floats(0.5, 3.0)),
)


@settings(max_examples=300, deadline=None)
@given(operations, retentions, st.booleans())
def test_resume_from_any_position_ends_with_exact_output(ops, retention, coalesce):
    now = 0
    log = StreamLog("s", "e1", now_ns=now, retention=retention)
    produced = ReaderState()
    readers = [log.cursor(f"r{i}") for i in range(3)]
    states = [ReaderState() for _ in readers]
    # Every (position, state) each reader has been at: a resume may go back to any of them.
    history: list[list[tuple[int, ReaderState]]] = [[(0, ReaderState())] for _ in readers]

    def read(i: int, limit: int) -> None:
        before = readers[i].after
        events = log.read(readers[i], limit, coalesce=coalesce)
        for event in events:
            states[i].apply(event)
        seqs = [e.seq for e in events if e.kind is not Kind.SNAPSHOT]
        assert seqs == sorted(set(seqs)) and all(s > before for s in seqs)
        if events:
            assert events[-1].seq == readers[i].after
        history[i].append((readers[i].after, states[i].copy()))

    for op, a, b in ops:
        if op == "delta":
            produced.apply(log.append(Event.delta(b, channel=a), now))
        elif op == "tool":
            produced.apply(log.append(Event.tool_call(a, b), now))
        elif op == "message":
            log.append(Event.message({"n": 1}), now)
        elif op == "tick":
            now += a * SECOND
            log.trim(now)
        elif op == "read":
            read(a, b)
        else:
            seq, state = history[a][b % len(history[a])]
            readers[a] = log.cursor(f"r{a}", Position("e1", seq))
            states[a] = state.copy()

    log.append(Event.done(), now)
    for i in range(len(readers)):
        while log.pending(readers[i]):
            read(i, 7)
        assert readers[i].finished
        assert states[i].text == produced.text
        assert states[i].tools == produced.tools


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=5), max_size=40), st.integers(1, 10))
def test_stale_epoch_restarts_with_a_reset_snapshot(texts, max_events):
    log = StreamLog("s", "new", now_ns=0, retention=Retention(max_events=max_events))
    for text in texts:
        log.append(Event.delta(text), 0)
    cursor = log.cursor("r", Position("old", 3))
    first = log.read(cursor, 1)[0]
    assert first.kind is Kind.SNAPSHOT and first.data is not None
    assert first.data["reset"] is True
    state = ReaderState()
    state.apply(first)
    while log.pending(cursor):
        for event in log.read(cursor, 4):
            state.apply(event)
    assert state.text["content"] == "".join(texts)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.integers(min_value=-10, max_value=10**12), min_size=1, max_size=200),
    st.sampled_from([0.0, 0.01, 0.5, 0.9, 0.99, 1.0]),
)
def test_histogram_quantile_is_the_upper_edge_of_the_sample_s_bucket(values, q):
    """The quantile is the ``ceil(q * n)``-th smallest sample's bucket edge, capped at max."""
    histogram = LatencyHistogram()
    for value in values:
        histogram.observe(value)
    ordered = sorted(max(value, 0) for value in values)
    rank = max(1, math.ceil(q * len(ordered)))
    sample = ordered[rank - 1]
    bucket = bisect.bisect_right(_BUCKET_STARTS, sample)
    assert histogram.quantile_ns(q) == min(_upper_edge_ns(bucket), ordered[-1])
