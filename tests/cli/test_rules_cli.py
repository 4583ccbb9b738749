"""``airlane rules`` against a real gateway, as a user runs them: add, list, show, test, the
approval of a held row, errors, delete, and rules still there after the gateway restarts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.cli.conftest import airlane
from tests.servers import FAST_SYNTHETIC, run_server


def lines(output: str) -> list[Any]:
    return [orjson.loads(line) for line in output.splitlines() if line.strip()]


def _config(tmp_path: Path) -> str:
    return FAST_SYNTHETIC + f'\n[rules]\ndir = "{tmp_path / "rules"}"\nlate_s = 0.05\n'


def _until(check: Any, timeout: float = 15.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        time.sleep(0.05)
    raise AssertionError("not reached in time")


def test_rules_from_the_shell_with_an_approval(tmp_path: Path) -> None:
    with run_server(config=_config(tmp_path)) as server:
        url = ["--url", server.url]
        added = airlane(
            "rules", "add", "stop-hot",
            "--sql", "SELECT machine, temp FROM readings WHERE temp > 90",
            "--action", '{"append": {"log": "requests"}}',
            "--action", '{"hold": {"timeout_s": 600}}',
            "--action", '{"append": {"log": "stops.{machine}"}}',
            *url,
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert lines(added.stdout)[0]["output_log"] == "rules.stop-hot.out"
        listed = lines(airlane("rules", "list", *url).stdout)
        assert [(r["name"], r["actions"]) for r in listed] == [
            ("stop-hot", ["append", "hold", "append"])
        ]

        # The rule was added before its log exists: it reads the log from its first record.
        assert airlane("logs", "create", "readings", *url).returncode == 0
        readings = '{"machine": "m1", "temp": 95}\n{"machine": "m2", "temp": 60}\n'
        appended = subprocess.run(
            [sys.executable, "-m", "airlane", "logs", "append", "readings", "--type", "r", *url],
            input=readings,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "NO_COLOR": "1"},
            check=False,
        )
        assert appended.returncode == 0, appended.stderr
        held = _until(lambda: lines(airlane("rules", "approvals", "stop-hot", *url).stdout))
        assert [h["row"] for h in held] == [{"machine": "m1", "temp": 95}]
        approved = airlane("rules", "approve", "stop-hot", held[0]["id"], *url)
        assert approved.returncode == 0, approved.stderr
        assert lines(approved.stdout)[0]["approved"] is True
        stops = _until(lambda: lines(airlane("logs", "read", "stops.m1", *url).stdout))
        assert [s["data"] for s in stops] == [{"machine": "m1", "temp": 95}]
        again = airlane("rules", "approve", "stop-hot", held[0]["id"], *url)
        assert again.returncode == 1 and "not_found" in again.stderr

        shown = lines(airlane("rules", "show", "stop-hot", *url).stdout)[0]
        assert shown["stats"]["approved"] == 1 and shown["stats"]["rows_filtered"] == 1

        bad = airlane("rules", "add", "broken", "--sql", "SELECT avg(t) FROM readings", *url)
        assert bad.returncode == 1 and "needs a window" in bad.stderr
        samples = tmp_path / "samples.jsonl"
        samples.write_text('{"t": 1}\n{"payload": {"t": 5}, "ts": 12}\n{"t": 7}\n')
        tested = airlane(
            "rules", "test", str(samples),
            "--sql", "SELECT max(t) AS peak FROM s GROUP BY TUMBLINGWINDOW(ss, 10)", *url,
        )  # fmt: skip
        assert tested.returncode == 0, tested.stderr
        assert [r["peak"] for r in lines(tested.stdout)] == [1, 7]

        # The HTTP API itself: a clear status and code for what is wrong.
        with httpx.Client(base_url=server.url) as http:
            missing = http.get("/v1/rules/nope")
            assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
            refused = http.put(
                "/v1/rules/x", content=b"{not json", headers={"content-type": "application/json"}
            )
            assert refused.status_code == 400
            wrong = http.post("/v1/rules/stop-hot")
            assert wrong.status_code == 405
            bad_name = http.put("/v1/rules/a%20b", json={"sql": "SELECT * FROM s"})
            assert bad_name.status_code == 400 and bad_name.json()["error"]["param"] == "name"

    with run_server(config=_config(tmp_path)) as restarted:
        url = ["--url", restarted.url]
        kept = lines(airlane("rules", "list", *url).stdout)
        assert [r["name"] for r in kept] == ["stop-hot"]
        assert kept[0]["stats"]["approved"] == 1
        deleted = airlane("rules", "delete", "stop-hot", *url)
        assert deleted.returncode == 0, deleted.stderr
        assert lines(airlane("rules", "list", *url).stdout) == []
    assert not list((tmp_path / "rules").glob("*.json"))
