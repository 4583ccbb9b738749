"""The audit log: a JSON line for every refusal and every admin action, without secrets,
rotated by size, and counted on /metrics."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from airlane.backends.synthetic import SyntheticBackend
from airlane.client import RequestRejected
from airlane.client.airc import AircClient
from airlane.eventlog import LogNotFound
from airlane.gateway import Gateway
from airlane.hub import MemoryHub, StreamNotFound
from airlane.registry import SubjectNotFound
from airlane.security import ANONYMOUS, Action, PermissionDenied, Principal
from airlane.security.audit import AuditConfig, AuditLog
from tests.servers import run_server

WRONG = "sk-wrong-but-secret-0123456789"


def records(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_refusals_and_admin_actions_are_recorded(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    config = f'[audit]\npath = "{log}"\n'
    with run_server("--api-key", "alice=sk-a", config=config) as gateway:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
            assert (await http.get("/v1/streams/x")).status_code == 401
            wrong = await http.get("/v1/streams/x", headers={"authorization": f"Bearer {WRONG}"})
            assert wrong.status_code == 401
            alice = {"authorization": "Bearer sk-a"}
            event = {"kind": "message", "payload": "private words"}
            await http.post("/v1/streams/notes/events", json=event, headers=alice)
            assert (await http.delete("/v1/streams/notes", headers=alice)).status_code == 204
            assert (await http.put("/v1/logs/orders", headers=alice)).status_code == 201
            assert (await http.delete("/v1/logs/orders", headers=alice)).status_code == 204
            metrics = (await http.get("/metrics")).text
    entries = records(log)
    denials = [e for e in entries if e["decision"] == "deny"]
    assert [e["code"] for e in denials] == ["unauthenticated", "unauthenticated"]
    assert all(e["from"] == "127.0.0.1" and e["time"].endswith("+00:00") for e in denials)
    admin = [(e["code"], e["resource"], e["principal"], e["tenant"]) for e in entries
             if e["decision"] == "admin"]  # fmt: skip
    assert admin == [
        ("delete_stream", "notes", "alice", "alice"),
        ("delete_log", "logs/orders", "alice", "alice"),
    ]
    text = log.read_text()
    assert WRONG not in text and "sk-a" not in text and "private words" not in text
    assert 'airlane_security_decisions_total{code="unauthenticated",decision="deny"} 2.0' in metrics


class ReadOnly:
    """Everyone is 'reader', who may not publish."""

    def authenticate(self, bearer: str | None) -> Principal:
        return Principal("reader", tenant="team")

    def authorize(self, principal: Principal, action: Action, stream_id: str) -> None:
        if action is Action.PUBLISH:
            raise PermissionDenied(f"{principal.name} may not publish to {stream_id}")


async def test_a_permission_refusal_names_the_rule_and_the_resource(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    audit = AuditLog(AuditConfig(path=str(log)))
    gateway = Gateway(MemoryHub(), SyntheticBackend(), security=ReadOnly(), audit=audit)
    reader = gateway.authenticate(None, origin="10.1.2.3")
    from airlane.core import Event

    with pytest.raises(PermissionDenied):
        await gateway.publish(reader, "board", Event.message({"x": 1}))
    await gateway.aclose()
    audit.close()
    [entry] = records(log)
    assert entry["decision"] == "deny" and entry["code"] == "permission_denied"
    assert (entry["principal"], entry["tenant"], entry["action"], entry["resource"]) == (
        "reader", "team", "publish", "board",
    )  # fmt: skip
    assert entry["rule"] == "ReadOnly" and entry["from"] == "10.1.2.3"


async def test_a_name_not_found_is_recorded_for_a_principal_not_for_anonymous(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.log"
    audit = AuditLog(AuditConfig(path=str(log)))
    gateway = Gateway(MemoryHub(), SyntheticBackend(), audit=audit)
    with pytest.raises(StreamNotFound):
        await gateway.info(ANONYMOUS, "nowhere")  # a gateway without keys: nobody to probe
    bob = Principal("bob", tenant="beta", origin="10.0.0.9")
    with pytest.raises(StreamNotFound):
        await gateway.cancel(bob, "chatcmpl-guessed")
    with pytest.raises(LogNotFound):
        await gateway.logs.read(bob, "orders")
    with pytest.raises(SubjectNotFound):
        await gateway.schemas.describe(bob, "orders-value")
    await gateway.aclose()
    audit.close()
    assert [(e["code"], e["action"], e["resource"], e["tenant"], e["from"], e["rule"])
            for e in records(log)] == [
        ("stream_not_found", "cancel", "chatcmpl-guessed", "beta", "10.0.0.9", "tenant-scope"),
        ("log_not_found", "logs.read", "logs/orders", "beta", "10.0.0.9", "tenant-scope"),
        ("subject_not_found", "schemas.read", "schemas/orders-value", "beta", "10.0.0.9",
         "tenant-scope"),
    ]  # fmt: skip


def test_the_file_is_rotated_and_bounded(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    audit = AuditLog(AuditConfig(path=str(log), max_bytes=2048, backups=2))
    for n in range(200):
        audit.record("deny", "unauthenticated", reason=f"attempt {n}", origin="127.0.0.1")
    audit.close()
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.log", "audit.log.1", "audit.log.2"]
    assert all((tmp_path / name).stat().st_size <= 2048 for name in files)
    assert audit.counts[("deny", "unauthenticated")] == 200


def test_an_unwritable_audit_path_stops_the_start_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "airlane", "serve", "--port", "0", "--audit-log",
         str(tmp_path / "missing" / "audit.log")],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2 and "audit.log" in result.stderr
    assert "Traceback" not in result.stderr


async def test_a_client_that_authenticates_leaves_no_refusal(tmp_path: Path) -> None:
    """An AIRC/TCP connection that sends AUTH, and an HTTP request with its key, are no
    refusals: the record of a refusal is a refusal's, never a step of a good login."""
    log = tmp_path / "audit.log"
    with run_server("--api-key", "alice=sk-a", config=f'[audit]\npath = "{log}"\n') as gateway:
        assert gateway.airc is not None
        async with await AircClient.tcp(*gateway.airc, "sk-a") as client:
            with pytest.raises(RequestRejected) as caught:
                await client.subscribe("nowhere")
        assert caught.value.code == "stream_not_found"
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
            ok = await http.get("/v1/models", headers={"authorization": "Bearer sk-a"})
            assert ok.status_code == 200
    assert [(e["decision"], e["code"]) for e in records(log)] == [("deny", "stream_not_found")]
