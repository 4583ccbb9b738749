"""docs/rsocket.md's client sessions, run as written against a real gateway: the Python one
with the ``rsocket`` package, the JavaScript one under Node with RSocket-JS."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.rsocket.test_js_clients import NODE_DIR, node_binary
from tests.servers import ServerProcess

DOC = Path(__file__).resolve().parents[2] / "docs" / "rsocket.md"


def block(language: str, index: int = 0) -> str:
    found = re.findall(rf"^```{language}\n(.*?)^```", DOC.read_text(), re.MULTILINE | re.DOTALL)
    assert len(found) > index, f"no {language} block {index} in {DOC.name}"
    return str(found[index])


def test_the_python_session(gateway: ServerProcess, tmp_path: Path) -> None:
    assert gateway.rsocket is not None
    code = block("python")
    assert 'HOST, PORT = "127.0.0.1", 8423' in code
    code = code.replace("8423", str(gateway.rsocket[1]))
    script = tmp_path / "session.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    text, finish_reason = done.stdout.splitlines()
    assert text and finish_reason == "length"


def test_the_javascript_session(gateway: ServerProcess) -> None:
    node = node_binary()
    code = block("javascript")
    url = gateway.url.replace("http://", "ws://") + "/v1/rsocket"
    assert "ws://127.0.0.1:8420/v1/rsocket" in code
    script = NODE_DIR / "doc-session.cjs"  # beside node_modules, so that require finds them
    script.write_text(code.replace("ws://127.0.0.1:8420/v1/rsocket", url))
    try:
        done = subprocess.run(
            [node, str(script)], capture_output=True, text=True, timeout=60, check=False
        )
    finally:
        script.unlink()
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip(), "the session printed no text"


def test_the_resumable_client(gateway: ServerProcess, tmp_path: Path) -> None:
    assert gateway.rsocket is not None
    snippet = block("python", 1)
    assert '"127.0.0.1", 8423' in snippet
    body = textwrap.indent(snippet.replace("8423", str(gateway.rsocket[1])), "    ")
    script = tmp_path / "client.py"
    script.write_text(f"import asyncio\n\n\nasync def main():\n{body}\n\nasyncio.run(main())\n")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip()
