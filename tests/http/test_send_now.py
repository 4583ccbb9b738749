"""`send_now`: in place when ``send`` does not wait, in order through a task when it does."""

from __future__ import annotations

import asyncio
from collections.abc import MutableMapping
from typing import Any

import pytest

from airlane.transports.http.send_now import send_now
from tests.waiting import settle


class Server:
    """An ASGI-like ``send`` that waits until ``resume`` is set, as servers apply flow control;
    ``waiting`` is set once a send waits."""

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self.resume = asyncio.Event()
        self.resume.set()
        self.waiting = asyncio.Event()

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if not self.resume.is_set():
            self.waiting.set()
            await self.resume.wait()
        if message.get("fail"):
            raise RuntimeError("the server refused the message")
        self.sent.append(message["n"])


async def test_a_send_that_does_not_wait_completes_in_place() -> None:
    server = Server()
    assert send_now(server.send, {"n": 1}) is None
    assert server.sent == [1]


async def test_a_send_that_waits_completes_in_a_task_once_the_server_resumes() -> None:
    server = Server()
    server.resume.clear()
    task = send_now(server.send, {"n": 1})
    assert task is not None
    assert server.waiting.is_set()  # it got as far as the wait, in place
    await settle()  # the task runs on, and waits still
    assert server.sent == [] and not task.done()
    server.resume.set()
    await asyncio.wait_for(task, 1.0)
    assert server.sent == [1]


async def test_an_error_after_waiting_reaches_the_task() -> None:
    server = Server()
    server.resume.clear()
    task = send_now(server.send, {"n": 1, "fail": True})
    assert task is not None
    server.resume.set()
    with pytest.raises(RuntimeError, match="refused"):
        await asyncio.wait_for(task, 1.0)


async def test_an_error_without_waiting_is_raised_at_once() -> None:
    server = Server()
    with pytest.raises(RuntimeError, match="refused"):
        send_now(server.send, {"n": 1, "fail": True})


async def test_cancelling_the_task_cancels_the_waiting_send() -> None:
    server = Server()
    server.resume.clear()
    task = send_now(server.send, {"n": 1})
    assert task is not None
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    server.resume.set()
    await settle()  # a send left waiting would now complete
    assert server.sent == []


async def test_a_bare_yield_is_resumed_on_the_next_loop_turn() -> None:
    async def send(message: MutableMapping[str, Any]) -> None:
        await asyncio.sleep(0)
        sent.append(message["n"])

    sent: list[int] = []
    task = send_now(send, {"n": 7})
    assert task is not None
    await asyncio.wait_for(task, 1.0)
    assert sent == [7]
