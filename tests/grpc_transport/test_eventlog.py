"""``airlane.v1.EventLogs`` with the official grpcio client: the same logs, groups and tokens
as the HTTP API, and its errors as gRPC status codes."""

from __future__ import annotations

import time

import grpc
import httpx
import pytest

from airlane.v1 import eventlog_pb2 as pb
from airlane.v1 import eventlog_pb2_grpc


@pytest.fixture
def logs(channel: grpc.aio.Channel) -> eventlog_pb2_grpc.EventLogsStub:
    return eventlog_pb2_grpc.EventLogsStub(channel)


async def test_append_read_fetch_and_settle_over_grpc(logs, gateway):
    name = f"grpc-{time.monotonic_ns()}"
    info = await logs.CreateLog(pb.CreateLogRequest(name=name, max_events=100))
    assert info.name == name and info.max_events == 100 and info.last_seq == 0
    appended = await logs.Append(
        pb.AppendRequest(
            log=name,
            events=[pb.LogEvent(type="step.v1", data=b'{"i": %d}' % i) for i in range(5)]
            + [pb.LogEvent(type="blob.v1", data=b"\x00", content_type="application/x-blob")],
        )
    )
    assert [r.seq for r in appended.records] == [1, 2, 3, 4, 5, 6]
    assert appended.records[5].content_type == "application/x-blob"
    read = [r async for r in logs.Read(pb.ReadRequest(log=name, from_seq=3, limit=2))]
    assert [r.seq for r in read] == [3, 4]
    later = await logs.Append(pb.AppendRequest(log=name, events=[pb.LogEvent(type="a.v1")]))
    since = later.records[0].time_ns
    # Stamped after the earlier records (a later request, on a nanosecond wall clock): a
    # read from its time starts with it.
    assert since > appended.records[-1].time_ns
    by_time = [r async for r in logs.Read(pb.ReadRequest(log=name, from_time_ns=since))]
    assert [r.seq for r in by_time] == [7]
    assert name in (await logs.ListLogs(pb.ListLogsRequest())).names

    fetched = await logs.Fetch(pb.FetchRequest(log=name, group="g", max_events=10, ack_wait_s=0.5))
    assert [d.record.seq for d in fetched.deliveries] == [1, 2, 3, 4, 5, 6, 7]
    tokens = [d.token for d in fetched.deliveries]
    settled = await logs.Settle(pb.SettleRequest(log=name, group="g", tokens=tokens[:6]))
    assert settled.settled == 6
    # The last one is acknowledged over HTTP: tokens work across APIs.
    async with httpx.AsyncClient(base_url=gateway.url) as http:
        response = await http.post(f"/v1/logs/{name}/groups/g/ack", json={"tokens": tokens[6:]})
        assert response.status_code == 200, response.text
    # A long poll past the 0.5 s ack deadline: a delivery left unsettled would be handed out
    # again within it (the server wakes the poll at the deadline); the settled ones are not.
    again = await logs.Fetch(pb.FetchRequest(log=name, group="g", timeout_s=1.0))
    assert list(again.deliveries) == []
    group = await logs.GetGroup(pb.GroupRequest(log=name, group="g"))
    assert group.pending_acks == 0 and group.next_seq == 8
    await logs.DeleteGroup(pb.GroupRequest(log=name, group="g"))
    await logs.DeleteLog(pb.LogRequest(name=name))


async def test_redelivery_and_nak_over_grpc(logs):
    name = f"grpc-nak-{time.monotonic_ns()}"
    await logs.CreateLog(pb.CreateLogRequest(name=name))
    await logs.Append(pb.AppendRequest(log=name, events=[pb.LogEvent(type="a.v1", data=b"1")]))
    first = await logs.Fetch(pb.FetchRequest(log=name, group="g", ack_wait_s=30))
    (delivery,) = first.deliveries
    await logs.Settle(
        pb.SettleRequest(log=name, group="g", tokens=[delivery.token], action=pb.SettleRequest.NAK)
    )
    second = await logs.Fetch(pb.FetchRequest(log=name, group="g", timeout_s=2))
    assert [(d.record.seq, d.deliveries) for d in second.deliveries] == [(1, 2)]


async def test_a_fetch_asking_for_other_group_settings_fails_its_precondition(logs):
    name = f"grpc-settings-{time.monotonic_ns()}"
    await logs.CreateLog(pb.CreateLogRequest(name=name))
    await logs.Fetch(pb.FetchRequest(log=name, group="g", ack_wait_s=0.5, timeout_s=0))
    # Fields left unset are not asked for: the group keeps its own.
    await logs.Fetch(pb.FetchRequest(log=name, group="g", max_events=5, timeout_s=0))
    await logs.Fetch(pb.FetchRequest(log=name, group="g", ack_wait_s=0.5, timeout_s=0))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await logs.Fetch(pb.FetchRequest(log=name, group="g", ack_wait_s=30, timeout_s=0))
    assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    trailers = dict(raised.value.trailing_metadata() or ())
    assert trailers.get("airlane-error-code") == "group_settings_conflict"
    details = raised.value.details() or ""
    assert details.startswith("ack_wait_s: ") and "0.5" in details and "30.0" in details
    group = await logs.GetGroup(pb.GroupRequest(log=name, group="g"))
    assert group.ack_wait_s == 0.5


@pytest.mark.parametrize(
    ("call", "code"),
    [
        (lambda s: s.GetLog(pb.LogRequest(name="no-such-log")), grpc.StatusCode.NOT_FOUND),
        (
            lambda s: s.CreateLog(pb.CreateLogRequest(name="bad name")),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (lambda s: s.Append(pb.AppendRequest(log="x")), grpc.StatusCode.INVALID_ARGUMENT),
        (
            lambda s: s.Append(pb.AppendRequest(log="missing", events=[pb.LogEvent(type="a.v1")])),
            grpc.StatusCode.NOT_FOUND,
        ),
        (
            lambda s: s.Settle(pb.SettleRequest(log="x", group="g", tokens=["forged"])),
            grpc.StatusCode.INVALID_ARGUMENT,
        ),
        (
            lambda s: s.Append(
                pb.AppendRequest(log="x", events=[pb.LogEvent(type="a.v1", data=b"x" * 2_000_000)])
            ),
            grpc.StatusCode.RESOURCE_EXHAUSTED,
        ),
    ],
)
async def test_errors_are_status_codes(logs, call, code):
    await logs.CreateLog(pb.CreateLogRequest(name="x"))
    with pytest.raises(grpc.aio.AioRpcError) as raised:
        await call(logs)
    assert raised.value.code() == code, raised.value.details()
    assert raised.value.details()
