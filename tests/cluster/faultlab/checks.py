"""The invariants, checked against every node once the faults are over.

Each check returns the violations it found, as sentences; an empty list means the promise held.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import time
from collections import Counter
from typing import Any

import httpx

from tests.cluster.faultlab.cluster import Cluster, Incarnation
from tests.cluster.faultlab.rooms import check_rooms
from tests.cluster.faultlab.workload import (
    ACK_WAIT_S,
    LOG,
    NAMED,
    Generation,
    Ledger,
    Workload,
    path,
    read_stream,
)
from tests.cluster.faultlab.yjs import check_yjs

__all__ = ["check_all"]

READ_TIMEOUT_S = 20.0
FINISH_REASONS = ("stop", "length")


async def check_all(cluster: Cluster, workload: Workload) -> list[str]:
    """Every invariant, on every node."""
    client, ledger, nodes = workload.client, workload.ledger, cluster.live()
    problems = [f"a client got: {error}" for error in ledger.errors]
    finals: dict[str, list[dict[str, Any]]] = {}
    problems += await check_named_streams(client, nodes, ledger, finals)
    problems += await check_generations(client, nodes, ledger, finals, cluster.broker_kills)
    problems += check_readers(ledger, finals)
    problems += await check_group(cluster, workload)
    problems += await check_log(client, nodes, ledger)
    problems += await check_rooms(cluster, client, workload.rooms)
    problems += await check_yjs(cluster, client, workload.yjs)
    return problems


async def _everywhere(
    client: httpx.AsyncClient, nodes: list[Incarnation], stream_id: str
) -> tuple[list[list[dict[str, Any]]], list[str]]:
    """The stream as each node serves it; problems for a node where it does not end."""
    reads = await asyncio.gather(
        *(read_stream(client, node, stream_id, READ_TIMEOUT_S) for node in nodes),
        return_exceptions=True,
    )
    problems, events = [], []
    for node, read in zip(nodes, reads, strict=True):
        if isinstance(read, BaseException):
            problems.append(f"{stream_id}: node {node.node_id} did not end it ({read!r})")
        else:
            events.append(read)
    return events, problems


def _consistent(stream_id: str, reads: list[list[dict[str, Any]]]) -> list[str]:
    """Seqs only grow (a reader behind gets consecutive deltas merged into one frame, named
    by the last seq it covers), and every node serves the same history."""
    problems = []
    for events in reads:
        seqs = [event["seq"] for event in events]
        if any(b <= a for a, b in itertools.pairwise(seqs)):
            problems.append(f"{stream_id}: seqs out of order or repeated: {_short(seqs)}")
    shapes = [_shape(events) for events in reads]
    if any(shape != shapes[0] for shape in shapes[1:]):
        lengths = [len(events) for events in reads]
        problems.append(f"{stream_id}: nodes serve different histories ({lengths} events)")
    return problems


def _shape(events: list[dict[str, Any]]) -> tuple[str, list[tuple[Any, ...]]]:
    """What every node must agree on: the text, and every other event by seq and content
    (not usage, whose delivery counts are each node's own)."""
    others = [
        (e["seq"], e["kind"], e.get("payload"), e.get("finish_reason"), e.get("code"))
        for e in events
        if e["kind"] not in ("delta", "usage")
    ]
    return text_of(events), others


def text_of(events: list[dict[str, Any]]) -> str:
    """The content text a client rebuilds from the frames."""
    return "".join(
        e["text"] for e in events if e["kind"] == "delta" and e.get("channel") == "content"
    )


async def check_named_streams(
    client: httpx.AsyncClient,
    nodes: list[Incarnation],
    ledger: Ledger,
    finals: dict[str, list[dict[str, Any]]],
) -> list[str]:
    """Every acknowledged publish is at the seq its ack named, on every node; nothing twice."""
    problems = []
    for name in NAMED:
        response = await client.post(
            f"{nodes[0].url}/v1/streams/{path(name)}/events", json={"kind": "done"}
        )
        if response.status_code != 200:
            problems.append(f"{name}: ending it failed: {response.status_code} {response.text}")
            continue
        reads, trouble = await _everywhere(client, nodes, name)
        problems += trouble
        if not reads:
            continue
        problems += _consistent(name, reads)
        finals[name] = events = reads[0]
        by_seq = {event["seq"]: event for event in events}
        for seq, payload in ledger.published[name].items():
            got = by_seq.get(seq, {}).get("payload")
            if got != payload:
                problems.append(f"{name}: acknowledged {payload} at seq {seq}, found {got!r}")
        counts = Counter(e.get("payload") for e in events if e["kind"] == "message")
        acked = set(ledger.published[name].values())
        for payload, count in counts.items():
            if count > 1:
                problems.append(f"{name}: {payload} stored {count} times")
            if payload not in acked and payload not in ledger.maybe:
                problems.append(f"{name}: {payload} stored but never sent")
    return problems


async def check_generations(
    client: httpx.AsyncClient,
    nodes: list[Incarnation],
    ledger: Ledger,
    finals: dict[str, list[dict[str, Any]]],
    broker_kills: list[float],
) -> list[str]:
    """Every generation ends, the same on every node: normally, with ``producer_lost`` when
    its producer died (or was paused or cut off past the timeout), or with
    ``hub_unavailable`` when the broker was away meanwhile; usage is sane."""
    problems = []
    for generation in ledger.generations:
        sid = generation.stream_id
        reads, trouble = await _everywhere(client, nodes, sid)
        problems += trouble
        if not reads:
            continue
        problems += _consistent(sid, reads)
        finals[sid] = events = reads[0]
        problems += _ending(generation, events[-1] if events else None, broker_kills)
        problems += await _usage(client, nodes, sid)
    return problems


def _ending(
    generation: Generation, last: dict[str, Any] | None, broker_kills: list[float]
) -> list[str]:
    sid, producer = generation.stream_id, generation.producer
    if last is None:
        return [f"{sid}: no events at all"]
    if last["kind"] == "done" and last.get("finish_reason") in FINISH_REASONS:
        return []
    if last["kind"] == "error" and last.get("code") == "hub_unavailable":
        # An append gave up on a broker away (or unreachable) past unavailable_after_s.
        if any(kill >= generation.started for kill in broker_kills) or producer.troubled:
            return []
        return [f"{sid}: hub_unavailable, but the broker and {producer.node_id} were fine"]
    if last["kind"] == "error" and last.get("code") == "producer_lost":
        if producer.killed is None and not producer.troubled:
            return [f"{sid}: producer_lost, but {producer.node_id} never failed"]
        return []
    return [f"{sid}: ended with {last}"]


async def _usage(client: httpx.AsyncClient, nodes: list[Incarnation], sid: str) -> list[str]:
    problems, tokens = [], set()
    for node in nodes:
        response = await client.get(f"{node.url}/v1/streams/{path(sid)}")
        if response.status_code != 200:
            problems.append(f"{sid}: info on {node.node_id}: {response.status_code}")
            continue
        usage = response.json()["usage"]
        ttft = usage.get("time_to_first_token_ms")
        if ttft is not None and ttft < 0:
            problems.append(f"{sid}: time to first token {ttft} ms on {node.node_id}")
        if min(usage["completion_tokens"], usage["prompt_tokens"]) < 0:
            problems.append(f"{sid}: negative token counts on {node.node_id}: {usage}")
        tokens.add(usage["completion_tokens"])
    if len(tokens) > 1:
        problems.append(f"{sid}: completion tokens differ between nodes: {sorted(tokens)}")
    return problems


def check_readers(ledger: Ledger, finals: dict[str, list[dict[str, Any]]]) -> list[str]:
    """A reader that resumed across nodes saw each event once, in order, with no gap: its
    seqs only grow and its text is the start of the stream's."""
    problems = []
    for sid, events in ledger.reads:
        seqs = [event["seq"] for event in events]
        if any(b <= a for a, b in itertools.pairwise(seqs)):
            problems.append(f"{sid}: a resuming reader saw seqs {_short(seqs)}")
        final = finals.get(sid)
        if final is not None and not text_of(final).startswith(text_of(events)):
            problems.append(f"{sid}: a resuming reader's text is not the stream's")
    return problems


async def check_group(cluster: Cluster, workload: Workload) -> list[str]:
    """Drain the group, acking everything; then every appended record was acked (or its ack
    went unanswered and the broker kept it, the record never coming again), no fetch
    sent after an ack was confirmed (within the record's ack wait) got the record again
    (unless the broker was SIGKILLed after the ack was sent and before that fetch was
    answered: it flushes ack state lazily, documented as at least once), and every record
    left unacknowledged came again."""
    ledger = workload.ledger
    deadline = time.monotonic() + 30
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        node = cluster.live()[0]
        try:
            got = await workload.consume_once(node, leave_some=False)
        except httpx.HTTPError:
            got = 0
        now = time.monotonic()
        if got:
            quiet_since = now
        elif (
            set(ledger.log_appended) <= ledger.settled | ledger.ack_in_doubt
            and now - quiet_since > 2.5 * ACK_WAIT_S
        ):
            break
    problems = []
    # A record whose ack went unanswered and that never came again: the broker stored that
    # ack. One that came again was acked in the drain above like any other.
    missing = sorted(set(ledger.log_appended) - ledger.settled - ledger.ack_in_doubt)
    if missing:
        delivered = collections.Counter(handout.seq for handout in ledger.deliveries)
        times = {seq: delivered[seq] for seq in missing[:10]}
        problems.append(
            f"group: appended records never acked: {_short(missing)} "
            f"(times delivered: {times}; acks in doubt: {len(ledger.ack_in_doubt)})"
        )
    for handout in ledger.deliveries:
        ack = ledger.acked.get(handout.seq)
        if ack is None or ack.confirmed >= handout.sent:
            continue
        # A kill after the acked delivery was fetched: the broker may have confirmed the ack
        # just before it died (the confirmation reaching the lab after the kill) without
        # storing it; or the ack, sent while it was down, reached the broker come back,
        # whose state, restored from what it had flushed, lacks that delivery (the ack is
        # answered, and counts for nothing). A fetch in flight across the kill, or made
        # after it, gets the record again: at least once.
        if not any(ack.fetched <= kill <= handout.received for kill in cluster.broker_kills):
            problems.append(
                f"group: record {handout.seq} redelivered after its ack: delivery "
                f"{handout.count} by {handout.node}, fetched "
                f"{handout.sent - ack.confirmed:.3f} s after the ack through {ack.node} "
                f"was confirmed (acked {ack.confirmed - ack.fetched:.3f} s after the fetch "
                "that delivered it)"
            )
    return problems


async def check_log(
    client: httpx.AsyncClient, nodes: list[Incarnation], ledger: Ledger
) -> list[str]:
    """Every acknowledged append is in the event log at its seq, as every node replays it."""
    problems = []
    for node in nodes:
        stored: dict[int, str] = {}
        next_seq: int | None = 1
        while next_seq is not None:
            response = await client.get(
                f"{node.url}/v1/logs/{LOG}/events", params={"from_seq": next_seq, "limit": 1000}
            )
            if response.status_code != 200:
                problems.append(f"log replay on {node.node_id}: {response.status_code}")
                break
            body = response.json()
            stored.update((r["seq"], r["data"]["p"]) for r in body["records"])
            next_seq = body["next_seq"]
        wrong = [seq for seq, p in ledger.log_appended.items() if stored.get(seq) != p]
        if wrong:
            problems.append(f"log on {node.node_id}: acknowledged records missing: {_short(wrong)}")
    return problems


def _short(values: list[int]) -> str:
    return str(values) if len(values) <= 30 else f"{values[:12]} ... {values[-12:]}"
