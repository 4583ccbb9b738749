"""The README's OpenAI SDK example: the command it gives to install the SDK, then the snippet
itself, run as a user would (a fresh interpreter) against a real gateway."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.servers import ServerProcess

README = Path(__file__).parents[2] / "README.md"
DEFAULT_URL = "http://127.0.0.1:8420"


def blocks() -> list[tuple[str, str]]:
    """The README's fenced code blocks, as (language, text), in order."""
    fence = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
    return [(match[1], match[2]) for match in fence.finditer(README.read_text())]


def sdk_example() -> tuple[str, str]:
    """The block before the SDK snippet, and the snippet."""
    found = blocks()
    index = next(i for i, (_, text) in enumerate(found) if "from openai import OpenAI" in text)
    return found[index - 1][1], found[index][1]


def test_the_readme_says_how_to_install_the_sdk() -> None:
    before, _ = sdk_example()
    assert re.search(r"pip install openai\b", before), before


def test_the_readme_sdk_snippet_streams_a_completion(server: ServerProcess) -> None:
    _, snippet = sdk_example()
    assert DEFAULT_URL in snippet
    code = snippet.replace(DEFAULT_URL, server.url)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.split()) > 10, result.stdout
