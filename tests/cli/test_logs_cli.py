"""``airlane logs`` and ``airlane schemas`` against a real gateway, as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import orjson

from tests.cli.conftest import airlane


def lines(output: str) -> list[dict]:
    return [orjson.loads(line) for line in output.splitlines() if line.strip()]


def test_append_read_and_consume_from_the_shell(server, tmp_path):
    log = f"cli-{time.monotonic_ns()}"
    url = ["--url", server.url]
    created = airlane("logs", "create", log, "--max-events", "100", *url)
    assert created.returncode == 0, created.stderr
    assert lines(created.stdout)[0]["name"] == log
    appended = subprocess.run(
        [sys.executable, "-m", "airlane", "logs", "append", log, "--type", "step.v1", *url],
        input='{"i": 1}\n{"i": 2}\n\n{"i": 3}\n',
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
        check=False,
    )
    assert appended.returncode == 0, appended.stderr
    assert [r["seq"] for r in lines(appended.stdout)] == [1, 2, 3]
    one = airlane("logs", "append", log, "--type", "step.v1", "--data", '{"i": 4}', *url)
    assert lines(one.stdout)[0]["seq"] == 4
    replay = airlane("logs", "read", log, "--from-seq", "2", "--limit", "2", *url)
    assert [r["data"]["i"] for r in lines(replay.stdout)] == [2, 3]
    consumed = airlane("logs", "consume", log, "workers", "--max", "10", *url)
    assert consumed.returncode == 0, consumed.stderr
    assert [d["record"]["seq"] for d in lines(consumed.stdout)] == [1, 2, 3, 4]
    again = airlane("logs", "consume", log, "workers", *url)
    assert again.stdout == ""  # all acknowledged
    assert log in airlane("logs", "list", *url).stdout.split()
    info = lines(airlane("logs", "info", log, *url).stdout)[0]
    assert info["last_seq"] == 4

    schema = tmp_path / "step.json"
    schema.write_text('{"type": "object", "required": ["i"]}')
    subject = f"step-{time.monotonic_ns()}.v1"
    registered = airlane("schemas", "register", subject, str(schema), *url)
    assert registered.returncode == 0, registered.stderr
    assert lines(registered.stdout)[0]["version"] == 1
    stricter = tmp_path / "stricter.json"
    stricter.write_text('{"type": "object", "required": ["i", "j"]}')
    check = airlane("schemas", "check", subject, str(stricter), *url)
    assert check.returncode == 1 and "/required" in check.stderr
    refused = airlane("schemas", "register", subject, str(stricter), *url)
    assert refused.returncode == 1 and "incompatible_schema" in refused.stderr
    assert airlane("schemas", "compatibility", subject, *url).stdout.strip() == "backward"
    assert airlane("schemas", "compatibility", subject, "full", *url).stdout.strip() == "full"
    bad = airlane("logs", "append", log, "--type", subject, "--data", '{"x": 1}', *url)
    assert bad.returncode == 1 and "schema_violation" in bad.stderr
    assert subject in airlane("schemas", "list", *url).stdout.split()
    assert lines(airlane("schemas", "get", subject, *url).stdout)[0]["version"] == 1


def test_mistakes_exit_1_with_a_message(server):
    url = ["--url", server.url]
    missing = airlane("logs", "info", "no-such-log", *url)
    assert missing.returncode == 1 and "log_not_found" in missing.stderr
    not_json = airlane("logs", "append", "x", "--type", "a.v1", "--data", "{oops", *url)
    assert not_json.returncode == 1 and "not JSON" in not_json.stderr
    unreachable = airlane("logs", "list", "--url", "http://127.0.0.1:9")
    assert unreachable.returncode == 1 and "cannot reach" in unreachable.stderr
    assert "Traceback" not in missing.stderr + not_json.stderr + unreachable.stderr
