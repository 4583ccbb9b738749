"""`Heartbeats`: one registry per loop; `ahead` asks every member, counts those that beat,
and goes on past one that fails."""

from __future__ import annotations

import asyncio
import logging

from airlane.runtime.heartbeats import Heartbeats, heartbeats


class Member:
    def __init__(self, due: float, *, fails: bool = False) -> None:
        self.due, self.fails, self.beats = due, fails, 0

    def beat_before(self, deadline: float) -> bool:
        if self.fails:
            raise RuntimeError("broken member")
        if self.due > deadline:
            return False
        self.beats += 1
        return True


async def test_members_due_within_the_window_beat_and_the_rest_wait(caplog):
    loop = asyncio.get_running_loop()
    registry = Heartbeats(loop)
    now = loop.time()
    soon, later, broken = Member(now + 1), Member(now + 10), Member(now, fails=True)
    for member in (soon, later, broken, soon):
        registry.add(member)
    assert len(registry) == 3
    with caplog.at_level(logging.ERROR, "airlane.heartbeats"):
        assert registry.ahead(2.0) == 1
    assert (soon.beats, later.beats) == (1, 0)
    assert "an early heartbeat failed" in caplog.text
    registry.discard(soon)
    registry.discard(soon)
    assert registry.ahead(20.0) == 1 and later.beats == 1


async def test_one_registry_per_loop():
    assert heartbeats() is heartbeats(asyncio.get_running_loop())
    other = asyncio.new_event_loop()
    try:
        assert heartbeats(other) is not heartbeats()
    finally:
        other.close()
