"""The HTTP application asks the loop's admission before it sets up any request but the
health probe and the metrics scrape, and reports the waits on ``/metrics``."""

from __future__ import annotations

import asyncio
from typing import Any

import airlane
from airlane.runtime.admission import Admission


class AlwaysDue:
    """A deadline source with work due for as long as the test holds it."""

    def overdue(self, now_ns: int) -> bool:
        return True


async def _get(app: Any, path: str) -> tuple[int, bytes]:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8420),
    }  # fmt: skip
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, body


async def test_requests_wait_while_paced_work_is_due_then_are_served() -> None:
    gateway = airlane.Gateway(airlane.MemoryHub(), airlane.SyntheticBackend())
    app = airlane.create_app(gateway)
    admission = Admission.for_loop()
    deferred_before = admission.deferred
    status, _ = await _get(app, "/v1/models")
    assert status == 200
    assert admission.deferred == deferred_before  # nothing due: admitted at once

    source = AlwaysDue()
    admission.register(source)
    statuses = await asyncio.wait_for(
        asyncio.gather(*(_get(app, "/v1/models") for _ in range(5))), 10
    )
    assert [status for status, _ in statuses] == [200] * 5
    assert admission.deferred == deferred_before + 5
    # The probe and the scrape do not queue behind set-ups, even while work is due.
    assert (await _get(app, "/healthz"))[0] == 200
    assert (await _get(app, "/metrics"))[0] == 200
    assert admission.deferred == deferred_before + 5

    del source  # the source goes: scrapes are admitted at once again, and show the waits
    status, body = await _get(app, "/metrics")
    assert status == 200
    assert f"airlane_admission_deferred_total {deferred_before + 5}.0" in body.decode()
    assert "airlane_admission_waiting 0.0" in body.decode()
    await gateway.aclose()
