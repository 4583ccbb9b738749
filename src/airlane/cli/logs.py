"""``airlane logs`` and ``airlane schemas``: the event log and registry APIs from a shell.

Each command is one or a few HTTP requests to a running gateway (``--url``, default
``http://127.0.0.1:8420``; ``AIRLANE_API_KEY`` for its key). Records and deliveries print as
JSON lines on stdout, so they pipe into ``jq`` or a file; errors print the gateway's message on
stderr and exit with status 1.

    airlane logs create rewards --max-events 100000
    echo '{"episode": 1, "reward": 0.5}' | airlane logs append rewards --type reward.v1
    airlane logs read rewards --from-time 2026-11-30T05:00:00Z
    airlane logs consume rewards trainers --max 100          # acks what it printed
    airlane schemas register reward.v1 reward.schema.json
    airlane schemas register rl.Reward reward.desc --protobuf rl.Reward
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn
from urllib.parse import quote

import httpx
import orjson
import typer

from airlane.cli.reach import unreachable
from airlane.server.address import DEFAULT_HOST, DEFAULT_PORT

__all__ = ["logs_app", "schemas_app"]

DEFAULT_URL = f"http://{DEFAULT_HOST}:{DEFAULT_PORT}"
MAX_LINES = 1000
"""Events one ``append`` reads from standard input (one request)."""

logs_app = typer.Typer(
    help="Event logs: append, replay, consume with groups.", no_args_is_help=True
)
schemas_app = typer.Typer(help="The schema registry.", no_args_is_help=True)

Url = Annotated[str, typer.Option(help="The gateway's HTTP URL.")]
ApiKey = Annotated[
    str | None, typer.Option(envvar="AIRLANE_API_KEY", help="Bearer key for the gateway.")
]


class _Gateway:
    """A small HTTP client that turns error answers into a message and exit status 1."""

    def __init__(self, url: str, api_key: str | None, timeout: float = 30.0) -> None:
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)

    def __call__(self, method: str, path: str, body: Any = None, **params: Any) -> Any:
        query = {k: v for k, v in params.items() if v is not None}
        try:
            response = self.http.request(method, path, json=body, params=query)
        except httpx.ConnectError as exc:
            _fail(unreachable(str(self.http.base_url).rstrip("/"), exc))
        except httpx.HTTPError as exc:
            _fail(f"cannot reach the gateway: {exc}")
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
                message = f"{error.get('code') or response.status_code}: {error['message']}"
                details = error.get("incompatibilities")
                if details:
                    message += "".join(f"\n  {d['path']}: {d['reason']}" for d in details)
            except (ValueError, KeyError, TypeError):
                message = f"HTTP {response.status_code}: {response.text[:500]}"
            _fail(message)
        return response.json() if response.content else None


def _fail(message: str) -> NoReturn:
    typer.echo(message, err=True)
    raise typer.Exit(1)


def _line(obj: Any) -> None:
    sys.stdout.write(orjson.dumps(obj).decode() + "\n")
    sys.stdout.flush()


def _segment(name: str) -> str:
    return quote(name, safe="")


# -- logs ---------------------------------------------------------------------------------------


@logs_app.command("list")
def list_logs(url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """The logs' names, one per line."""
    for name in _Gateway(url, api_key)("GET", "/v1/logs")["logs"]:
        typer.echo(name)


@logs_app.command("create")
def create_log(
    log: str,
    max_events: Annotated[int | None, typer.Option(min=1)] = None,
    max_bytes: Annotated[int | None, typer.Option(min=1)] = None,
    max_age_s: Annotated[float | None, typer.Option(min=0.001)] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Create a log (nothing happens if it exists) and print its info."""
    limits = {"max_events": max_events, "max_bytes": max_bytes, "max_age_s": max_age_s}
    body = {k: v for k, v in limits.items() if v is not None}
    _line(_Gateway(url, api_key)("PUT", f"/v1/logs/{_segment(log)}", body))


@logs_app.command("info")
def log_info(log: str, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """A log's first and last seq, counts and limits."""
    _line(_Gateway(url, api_key)("GET", f"/v1/logs/{_segment(log)}"))


@logs_app.command("delete")
def delete_log(log: str, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Delete a log and its consumer groups."""
    _Gateway(url, api_key)("DELETE", f"/v1/logs/{_segment(log)}")


@logs_app.command("append")
def append(
    log: str,
    event_type: Annotated[str, typer.Option("--type", help="The events' type, e.g. reward.v1.")],
    data: Annotated[
        str | None, typer.Option(help="One event's JSON payload (default: JSON lines on stdin).")
    ] = None,
    key: Annotated[
        str | None, typer.Option("--idempotency-key", help="Makes a retry of this one event safe.")
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Append events (--data, or one JSON payload per line of standard input); print the
    stored records."""
    lines = [data] if data is not None else [line for line in sys.stdin if line.strip()]
    if not lines:
        _fail("nothing to append: give --data or JSON lines on standard input")
    if len(lines) > MAX_LINES:
        _fail(f"at most {MAX_LINES} events per append")
    if key is not None and len(lines) != 1:
        _fail("--idempotency-key goes with one event")
    events = []
    for number, text in enumerate(lines, 1):
        try:
            payload = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            _fail(f"line {number} is not JSON: {exc}")
        event: dict[str, Any] = {"type": event_type, "data": payload}
        if key is not None:
            event["idempotency_key"] = key
        events.append(event)
    answer = _Gateway(url, api_key)("POST", f"/v1/logs/{_segment(log)}/events", {"events": events})
    for record in answer["records"]:
        _line(record)


@logs_app.command("read")
def read(
    log: str,
    from_seq: Annotated[int | None, typer.Option(min=1, help="Replay from this seq.")] = None,
    from_time: Annotated[
        str | None, typer.Option(help="Replay from this time (RFC 3339 or Unix ns).")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="Stop after this many records.")] = 1000,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Replay records, paging through the log up to --limit."""
    if from_seq is not None and from_time is not None:
        _fail("give --from-seq or --from-time, not both")
    gateway = _Gateway(url, api_key)
    path = f"/v1/logs/{_segment(log)}/events"
    printed = 0
    page = gateway("GET", path, from_seq=from_seq, from_time=from_time, limit=min(limit, 1000))
    while page["records"]:
        for record in page["records"][: limit - printed]:
            _line(record)
            printed += 1
        if printed >= limit or page["next_seq"] is None:
            break
        page = gateway("GET", path, from_seq=page["next_seq"], limit=min(limit - printed, 1000))


@logs_app.command("consume")
def consume(
    log: str,
    group: str,
    max_events: Annotated[int, typer.Option("--max", min=1, help="Stop after this many.")] = 100,
    ack_wait_s: Annotated[
        float | None,
        typer.Option(
            min=0.001,
            help="A new group's ack deadline (an existing group keeps its own; a different "
            "one is refused).",
        ),
    ] = None,
    follow: Annotated[bool, typer.Option(help="Keep waiting for new events.")] = False,
    ack: Annotated[bool, typer.Option(help="Acknowledge each delivery once printed.")] = True,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Take events as a member of consumer group GROUP and print each delivery (token,
    deliveries, record) as a JSON line; acknowledge it once printed, unless --no-ack."""
    gateway = _Gateway(url, api_key, timeout=60)
    base = f"/v1/logs/{_segment(log)}/groups/{_segment(group)}"
    taken = 0
    while taken < max_events:
        body: dict[str, Any] = {"max_events": min(64, max_events - taken), "timeout_s": 5.0}
        if ack_wait_s is not None:
            body["ack_wait_s"] = ack_wait_s
        deliveries = gateway("POST", f"{base}/fetch", body)["deliveries"]
        for delivery in deliveries:
            _line(delivery)
        if ack and deliveries:
            gateway("POST", f"{base}/ack", {"tokens": [d["token"] for d in deliveries]})
        taken += len(deliveries)
        if not deliveries and not follow:
            break


@logs_app.command("ack")
def settle(
    log: str,
    group: str,
    tokens: list[str],
    nak: Annotated[bool, typer.Option(help="Ask for redelivery instead.")] = False,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Acknowledge (or --nak) deliveries by their tokens (from consume --no-ack)."""
    action = "nak" if nak else "ack"
    path = f"/v1/logs/{_segment(log)}/groups/{_segment(group)}/{action}"
    _line(_Gateway(url, api_key)("POST", path, {"tokens": tokens}))


# -- schemas ------------------------------------------------------------------------------------


@schemas_app.command("list")
def list_subjects(url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """The subjects, one per line."""
    for subject in _Gateway(url, api_key)("GET", "/v1/schemas")["subjects"]:
        typer.echo(subject)


def _schema_body(path: Path, protobuf: str | None) -> dict[str, Any]:
    try:
        content = path.read_bytes()
    except OSError as exc:
        _fail(f"cannot read {path}: {exc}")
    if protobuf is not None:
        encoded = base64.b64encode(content).decode()
        return {"schema_type": "protobuf", "message": protobuf, "descriptor_set_base64": encoded}
    try:
        return {"schema_type": "json", "schema": orjson.loads(content)}
    except orjson.JSONDecodeError as exc:
        _fail(f"{path} is not JSON: {exc}")


Protobuf = Annotated[
    str | None,
    typer.Option(
        help="FILE is a FileDescriptorSet (protoc --include_imports --descriptor_set_out) and "
        "this is the message's full name."
    ),
]


@schemas_app.command("register")
def register(
    subject: str,
    file: Path,
    protobuf: Protobuf = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Register FILE (a JSON Schema, or with --protobuf a descriptor set) under SUBJECT."""
    path = f"/v1/schemas/{_segment(subject)}/versions"
    _line(_Gateway(url, api_key)("POST", path, _schema_body(file, protobuf)))


@schemas_app.command("check")
def check(
    subject: str,
    file: Path,
    protobuf: Protobuf = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Would FILE register under SUBJECT? Exit status 1, with the reasons, if not."""
    path = f"/v1/schemas/{_segment(subject)}/check"
    answer = _Gateway(url, api_key)("POST", path, _schema_body(file, protobuf))
    if not answer["compatible"]:
        for problem in answer["incompatibilities"]:
            typer.echo(f"{problem['path']}: {problem['reason']}", err=True)
        raise typer.Exit(1)
    typer.echo("compatible")


@schemas_app.command("get")
def get(
    subject: str,
    version: Annotated[str, typer.Option(help="A version number or 'latest'.")] = "latest",
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Print a registered version."""
    path = f"/v1/schemas/{_segment(subject)}/versions/{_segment(version)}"
    _line(_Gateway(url, api_key)("GET", path))


@schemas_app.command("compatibility")
def compatibility(
    subject: str,
    mode: Annotated[
        str | None,
        typer.Argument(help="backward, forward, full (or *_transitive), none; omit to show."),
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Show or set SUBJECT's compatibility mode."""
    path = f"/v1/schemas/{_segment(subject)}/compatibility"
    gateway = _Gateway(url, api_key)
    answer = gateway("GET", path) if mode is None else gateway("PUT", path, {"compatibility": mode})
    typer.echo(answer["compatibility"])


@schemas_app.command("delete")
def delete_subject(subject: str, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Delete every version of SUBJECT."""
    _Gateway(url, api_key)("DELETE", f"/v1/schemas/{_segment(subject)}")
