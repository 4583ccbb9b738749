"""The in-order merge of a redundant subscription's stream and its datagram copies."""

from __future__ import annotations

from airlane.client.webtransport import Arrival, _InOrder


def event(seq: int, prev: int | None = None) -> Arrival:
    body: dict[str, object] = {"op": "event", "stream": "s", "event": {"seq": seq}}
    if prev is not None:
        body["prev"] = prev
    return Arrival(body)


def seqs(messages: list[Arrival]) -> list[int]:
    return [m["event"]["seq"] for m in messages]


def test_copies_go_out_at_once_and_the_stream_fills_what_they_lost() -> None:
    order = _InOrder(0)
    assert seqs(order.from_copy(event(1, 0))) == [1]
    assert seqs(order.from_copy(event(3, 2))) == []  # 2's copy was lost: 3 waits
    assert seqs(order.from_stream(event(1))) == []  # already handed out
    assert seqs(order.from_stream(event(2))) == [2, 3]
    assert seqs(order.from_stream(event(3))) == []
    assert seqs(order.from_stream(event(4))) == [4]
    assert seqs(order.from_copy(event(4, 3))) == []


def test_copies_before_the_reply_wait_for_it() -> None:
    order = _InOrder(None)
    assert seqs(order.from_copy(event(6, 5))) == []
    assert seqs(order.start(5)) == [6]
    assert seqs(order.from_stream(event(6))) == []


def test_what_is_held_is_bounded() -> None:
    order = _InOrder(0)
    for n in range(2, _InOrder.MAX_HELD + 100):
        order.from_copy(event(n + 1, n))
    assert len(order.held) <= _InOrder.MAX_HELD
