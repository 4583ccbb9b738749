"""``airlane rules``: the streaming SQL rules of a running gateway, from a shell.

Each command is an HTTP request to ``--url`` (default ``http://127.0.0.1:8420``;
``AIRLANE_API_KEY`` for its key); answers print as JSON lines, errors as the gateway's message
on stderr with exit status 1.

    airlane rules add hot --sql 'SELECT deviceId, avg(t) AS t FROM "sensor/+/temp"
        GROUP BY deviceId, TUMBLINGWINDOW(ss, 10) HAVING avg(t) > 30' \\
        --action '{"publish": {"topic": "alerts/{deviceId}", "qos": 1}}'
    airlane rules add hot --file hot.json           # the whole definition as JSON
    airlane rules list
    airlane rules test --sql 'SELECT * FROM s WHERE t > 30' samples.jsonl
    airlane rules approvals hot
    airlane rules approve hot 3f2a9c0d1e2b4a5c
    airlane rules delete hot
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer

from airlane.cli.logs import DEFAULT_URL, ApiKey, Url, _fail, _Gateway, _line, _segment

__all__ = ["rules_app"]

rules_app = typer.Typer(
    help="Streaming SQL rules over MQTT topics, event logs and streams.", no_args_is_help=True
)


def _json(text: str, what: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        _fail(f"{what} is not JSON: {exc}")


@rules_app.command("add")
def add_rule(
    name: str,
    sql: Annotated[str | None, typer.Option(help="The rule's SELECT statement.")] = None,
    action: Annotated[
        list[str] | None,
        typer.Option(help='An action as JSON, e.g. \'{"append": {"log": "alerts"}}\'.'),
    ] = None,
    file: Annotated[
        Path | None, typer.Option(help="The definition as a JSON file (--sql/--action add).")
    ] = None,
    bridge: Annotated[str | None, typer.Option(help="The MQTT bridge to read through.")] = None,
    qos: Annotated[int | None, typer.Option(min=0, max=2, help="QoS of the subscription.")] = None,
    source: Annotated[
        str | None, typer.Option(help="What a bare FROM name is: 'log' or 'stream'.")
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Add a rule, or replace the one of that name; print it."""
    body: dict[str, Any] = {}
    if file is not None:
        try:
            body = _json(file.read_text("utf-8"), str(file))
        except OSError as exc:
            _fail(f"cannot read {file}: {exc.strerror or exc}")
        if not isinstance(body, dict):
            _fail(f"{file} does not hold a JSON object")
    if sql is not None:
        body["sql"] = sql
    if action:
        body["actions"] = [_json(a, "--action") for a in action]
    for key, value in (("bridge", bridge), ("qos", qos), ("source", source)):
        if value is not None:
            body[key] = value
    if "sql" not in body:
        _fail("give the rule's SQL: --sql 'SELECT ...' or --file rule.json")
    _line(_Gateway(url, api_key)("PUT", f"/v1/rules/{_segment(name)}", body))


@rules_app.command("list")
def list_rules(url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """The rules, one JSON line each (name, SQL, actions, held rows, counters)."""
    for rule in _Gateway(url, api_key)("GET", "/v1/rules")["rules"]:
        _line(rule)


@rules_app.command("show")
def show_rule(name: str, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """One rule: its definition, counters and held rows."""
    _line(_Gateway(url, api_key)("GET", f"/v1/rules/{_segment(name)}"))


@rules_app.command("delete")
def delete_rule(name: str, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Stop a rule and forget it, its state and its logs."""
    _Gateway(url, api_key)("DELETE", f"/v1/rules/{_segment(name)}")


@rules_app.command("test")
def test_rule(
    sql: Annotated[str, typer.Option(help="The SELECT statement to try.")],
    messages: Annotated[
        Path | None,
        typer.Argument(
            help='JSON lines: each a payload, or {"payload": ..., "ts": s, "topic": t} '
            "(default: standard input)."
        ),
    ] = None,
    url: Url = DEFAULT_URL,
    api_key: ApiKey = None,
) -> None:
    """Run SQL over sample messages (nothing is kept); print each output row, then the
    counters."""
    try:
        text = messages.read_text("utf-8") if messages is not None else sys.stdin.read()
    except OSError as exc:
        _fail(f"cannot read {messages}: {exc.strerror or exc}")
    items = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        item = _json(line, f"line {number}")
        is_message = isinstance(item, dict) and isinstance(item.get("payload"), dict)
        items.append(item if is_message else {"payload": item})
    answer = _Gateway(url, api_key)("POST", "/v1/rules/test", {"sql": sql, "messages": items})
    for row in answer["outputs"]:
        _line(row)
    typer.echo(orjson.dumps({"stats": answer["stats"]}).decode(), err=True)


@rules_app.command("approvals")
def approvals(name: str, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """The rows a rule holds for approval, one JSON line each (with the id to decide on)."""
    path = f"/v1/rules/{_segment(name)}/approvals"
    for item in _Gateway(url, api_key)("GET", path)["approvals"]:
        _line(item)


def _decide(name: str, approval: str, approve: bool, url: str, api_key: str | None) -> None:
    path = f"/v1/rules/{_segment(name)}/approvals/{_segment(approval)}"
    _line(_Gateway(url, api_key)("POST", path, {"approve": approve}))


@rules_app.command("approve")
def approve(name: str, approval: str, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Approve a held row: the rule's actions after its hold run (audited)."""
    _decide(name, approval, True, url, api_key)


@rules_app.command("reject")
def reject(name: str, approval: str, url: Url = DEFAULT_URL, api_key: ApiKey = None) -> None:
    """Reject a held row: the actions after its hold never run (audited)."""
    _decide(name, approval, False, url, api_key)
