"""``@airlane/client`` (clients/js) in Node, against a real gateway: the package is compiled
with its own ``tsc`` and its tests run with Node's test runner (``node --test``), which starts
nothing itself: the gateway is this module's, and the tests reach it through ``AIRLANE_URL``."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from airlane.core.errors import ErrorCode
from airlane.transports.http.console.files import STATIC_DIR
from tests.js.support import CLIENT_DIR, build, long_seeds, node_or_skip
from tests.servers import ServerProcess, run_server

pytestmark = pytest.mark.timeout(300)

CONFIG = """
[synthetic]
ttft_ms = 5.0
itl_ms = 4.0
itl_jitter_ms = 0.5
"""


@pytest.fixture(scope="module")
def gateway() -> Iterator[ServerProcess]:
    with run_server(config=CONFIG) as running:
        yield running


def test_the_client_s_error_codes_are_the_gateway_s() -> None:
    """`ERROR_CODES` in errors.ts lists exactly the gateway's codes, in its order."""
    source = (CLIENT_DIR / "src" / "errors.ts").read_text()
    block = source.split("export const ERROR_CODES = [", 1)[1].split("] as const", 1)[0]
    assert re.findall(r'"([a-z_]+)"', block) == [code.value for code in ErrorCode]


def test_the_node_suite_passes_against_a_real_gateway(gateway: ServerProcess) -> None:
    node = node_or_skip()
    build(node)
    done = subprocess.run(
        [node, "--test", "--experimental-websocket", "--test-reporter=spec", "test/"],
        cwd=CLIENT_DIR,
        env={
            **os.environ,
            "AIRLANE_URL": gateway.url,
            "AIRLANE_SEEDS": ",".join(map(str, long_seeds())),
            "NODE_NO_WARNINGS": "1",
        },
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-3000:]
    passed = re.search(r"\bpass (\d+)", done.stdout)  # the spec reporter's summary
    assert passed is not None and int(passed.group(1)) >= 10, done.stdout[-3000:]


def test_the_console_s_files_in_the_package_are_built_from_the_sources(tmp_path: Path) -> None:
    """The package ships the console compiled (``transports/http/console/static``: no Node at
    run time): it must be what ``npm run build`` makes of ``clients/js`` now."""
    node = node_or_skip()
    done = subprocess.run(
        [node, "build.mjs", "--static", str(tmp_path)],
        cwd=CLIENT_DIR,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    for part in ("client", "app"):
        built = {p.relative_to(tmp_path): p.read_bytes() for p in (tmp_path / part).rglob("*.js")}
        shipped_dir = STATIC_DIR / part
        shipped = {p.relative_to(STATIC_DIR): p.read_bytes() for p in shipped_dir.rglob("*.js")}
        assert built.keys() == shipped.keys(), "run 'npm run build' in clients/js"
        stale = [str(name) for name in built if built[name] != shipped[name]]
        assert not stale, f"out of date, run 'npm run build' in clients/js: {stale}"
