"""``@airlane/client`` and the web console in a real browser: headless Chromium (Debian's)
through Playwright, against a real gateway.

- The client's README example, as written, on a page of the gateway's origin.
- The client in the browser: a chat stream and a WebSocket subscription cut mid-stream by a
  proxy resume with exactly the stream's text.
- Every console view, driven as a person would (keyboard included), in light and dark, at
  1280x800 and at a phone's width, with no error in the browser's console; screenshots of
  each go to ``AIRLANE_SCREENSHOTS`` (docs/console.md shows those of ``docs/console``) or to
  the test's temporary folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from airlane.artifacts.packer import pack
from airlane.sync.hlc import HybridClock
from airlane.sync.lww import LWWMap
from tests.artifacts.support import checkpoint
from tests.browser.test_eventsource import CHROMIUM, CHROMIUM_ARGS, require_browser
from tests.cluster.test_nodes import node
from tests.js.support import CLIENT_DIR, PROMPT, CuttingProxy, long_seeds
from tests.natsserver import running_nats
from tests.servers import ServerProcess, run_server

pytestmark = [pytest.mark.browser, pytest.mark.timeout(180)]

CONFIG = """
[synthetic]
ttft_ms = 5.0
itl_ms = 6.0
itl_jitter_ms = 0.5
"""
TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def gateway() -> Iterator[ServerProcess]:
    with run_server(config=CONFIG) as running:
        yield running


class Browser:
    """A Chromium page that records every error the page reports."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(str(e)))


@contextlib.asynccontextmanager
async def chromium(**context: Any) -> AsyncIterator[Browser]:
    require_browser()
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        # A page the test fulfils itself has no network address, so Chromium's local network
        # access checks would take it for a public page and block its WebSocket to 127.0.0.1
        # (a page the gateway or any server on this host serves is not affected).
        args = [*CHROMIUM_ARGS, "--disable-features=LocalNetworkAccessChecks"]
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        try:
            page = await (await browser.new_context(**context)).new_page()
            page.set_default_timeout(TIMEOUT_MS)
            yield Browser(page)
        finally:
            await browser.close()


async def serve_page(browser: Browser, url: str, html: str) -> None:
    """Open ``url`` with ``html`` as its document: the page has that origin, and everything
    else it loads comes from the real server there."""
    await browser.page.route(url, lambda route: route.fulfill(body=html, content_type="text/html"))
    await browser.page.goto(url)


def snapshot_text(gateway: ServerProcess, stream_id: str) -> str:
    with httpx.Client(base_url=gateway.url, timeout=10) as http:
        for _ in range(200):
            info = http.get(f"/v1/streams/{stream_id}").json()
            if info["ended"]:
                break
        return str(http.get(f"/v1/streams/{stream_id}/snapshot").json()["text"]["content"])


async def test_the_readme_browser_example_works_as_written(gateway: ServerProcess) -> None:
    readme = (CLIENT_DIR / "README.md").read_text()
    html = re.findall(r"^```html\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)[0]
    assert len(html.strip().splitlines()) <= 12
    async with chromium() as browser:
        await serve_page(browser, f"{gateway.url}/example.html", html)
        out = browser.page.locator("#out")
        await out.filter(has_text=re.compile(r"\n\d+ tokens$")).wait_for()
        text = await out.text_content()
        assert text is not None and len(text.split("\n")[0]) > 20
        assert browser.errors == []


PAGE = """<!doctype html><script type="module">
import { AirlaneClient, AirlaneSocket } from "/console/assets/client/index.js";
const request = (tokens, seed) => ({ model: "synthetic", max_tokens: tokens, seed,
  messages: [{ role: "user", content: %(prompt)s }] });
try {
  if (location.hash === "#chat") {
    const client = new AirlaneClient({ baseUrl: location.origin });
    const chat = client.chatStream(request(200, %(seed0)d));
    for await (const piece of chat) {}
    window.result = { id: chat.streamId, text: chat.text, resumed: chat.resumes,
                      finish: chat.state.finishReason };
  } else {
    const socket = await AirlaneSocket.connect({ baseUrl: location.origin });
    const sub = await socket.generate(request(200, %(seed1)d));
    for await (const event of sub) {}
    socket.close();
    window.result = { id: sub.streamId, text: sub.state.text(), resumed: socket.reconnects,
                      finish: sub.state.finishReason };
  }
} catch (error) { window.result = { error: String(error) }; }
</script>"""


@pytest.mark.parametrize("kind", ["chat", "ws"])
async def test_the_client_resumes_in_chromium_after_the_network_drops(
    gateway: ServerProcess, kind: str
) -> None:
    """Through a proxy that resets the first streaming connection (the chat's SSE response,
    or the socket's upgrade) after 3 KB, the stream resumes and ends with its exact text."""
    seeds = long_seeds()
    page = PAGE % {"prompt": json.dumps(PROMPT), "seed0": seeds[0], "seed1": seeds[1]}
    host, port = gateway.url.removeprefix("http://").rsplit(":", 1)
    async with CuttingProxy((host, int(port)), after=3000) as proxy, chromium() as browser:
        await browser.page.route(
            f"{proxy.url}/client.html",
            lambda route: route.fulfill(body=page, content_type="text/html"),
        )
        await browser.page.goto(f"{proxy.url}/client.html#{kind}")
        await browser.page.wait_for_function("window.result !== undefined", timeout=60_000)
        result = await browser.page.evaluate("window.result")
        assert "error" not in result, result
        assert proxy.cuts == 1
        # The browser reports the reset connection itself as a failed load; nothing else.
        assert all("ERR_" in error for error in browser.errors), browser.errors
    assert result["resumed"] == 1 and result["finish"] == "length"
    assert result["text"] == snapshot_text(gateway, result["id"])


def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("AIRLANE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.mark.parametrize(
    ("scheme", "viewport"),
    [("light", (1280, 800)), ("dark", (1280, 800)), ("light", (390, 844))],
    ids=["light-1280", "dark-1280", "phone"],
)
async def test_every_console_view_works_and_reports_no_error(
    gateway: ServerProcess, tmp_path: Path, scheme: str, viewport: tuple[int, int]
) -> None:
    shots = screenshots(tmp_path)
    suffix = "" if viewport[0] == 1280 and scheme == "light" else f"-{scheme}-{viewport[0]}"
    width, height = viewport
    async with chromium(color_scheme=scheme, viewport={"width": width, "height": height}) as b:
        page = b.page
        with httpx.Client(base_url=gateway.url, timeout=10) as http:  # traffic for the plots
            for seed in long_seeds():
                body = {"model": "synthetic", "max_tokens": 250, "seed": seed,
                        "messages": [{"role": "user", "content": PROMPT}]}  # fmt: skip
                assert http.post("/v1/streams", json=body).status_code == 201
        await page.goto(f"{gateway.url}/console/")
        # Overview: live samples of the metrics stream.
        await page.get_by_text("live, a sample a second").wait_for()
        await page.locator(".card .label", has_text="Streams").wait_for()
        await page.wait_for_timeout(2500)  # a few samples on the plots
        await page.screenshot(path=shots / f"overview{suffix}.png", full_page=True)

        # Keyboard: the skip link first, then the views; Enter follows a link.
        await page.keyboard.press("Tab")
        assert await page.evaluate("document.activeElement.className") == "skip"
        await page.keyboard.press("Tab")
        await page.keyboard.press("Tab")
        await page.keyboard.press("Tab")
        assert await page.evaluate("document.activeElement.textContent") == "Playground"
        await page.keyboard.press("Enter")
        await page.get_by_role("heading", name="Playground").wait_for()

        # Playground: a streamed answer, then its usage ledger.
        await page.get_by_label("Max tokens").fill("60")
        await page.get_by_role("button", name="Generate").click()
        await page.get_by_text("Completion tokens").wait_for()
        answer = await page.get_by_label("the answer").text_content()
        assert answer and len(answer) > 40
        await page.screenshot(path=shots / f"playground{suffix}.png", full_page=True)

        await page.get_by_role("link", name="Open in the stream viewer").click()
        await page.get_by_role("heading", name="Text").wait_for()

        # The streams the gateway holds: those started for the plots and the playground's.
        await page.get_by_role("link", name="Streams", exact=True).click()
        await page.locator("tbody tr").nth(3).wait_for()
        assert await page.locator("tbody a", has_text="chatcmpl-").count() >= 4

        # Stream viewer: a long generation, dropped and resumed with no gap.
        with httpx.Client(base_url=gateway.url, timeout=10) as http:
            body = {"model": "synthetic", "max_tokens": 250, "seed": long_seeds()[2],
                    "messages": [{"role": "user", "content": PROMPT}]}  # fmt: skip
            created = http.post("/v1/streams", json=body)
            assert created.status_code == 201, created.text
            stream_id = created.json()["id"]
        await page.goto(f"{gateway.url}/console/#/streams?id={stream_id}")
        await page.locator(".log li").nth(20).wait_for()
        await page.get_by_role("button", name="Drop and resume").click()
        await page.locator("[data-resume]").wait_for()
        assert await page.locator("[data-resume]").get_attribute("data-resume") == "ok"
        await page.get_by_text("ended: length").wait_for()
        await page.get_by_role("button", name="Snapshot").click()
        await page.get_by_text("Agrees with the text above").wait_for()
        assert await page.locator("dd", has_text=re.compile("^yes")).count() == 1
        await page.screenshot(path=shots / f"streams{suffix}.png", full_page=True)
        assert b.errors == [], b.errors


async def test_the_main_command_prints_a_console_that_shows_live_streams() -> None:
    """The README's main job (``airlane demo``; from a terminal it stays): the console address
    it prints opens on an overview where streams are being delivered."""
    demo = subprocess.Popen(
        [sys.executable, "-m", "airlane", "demo", "--stay", "--stay-limit", "20"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
    )
    try:
        assert demo.stdout is not None
        url = None
        for _ in range(400):
            line = demo.stdout.readline()
            found = re.search(r"web console: (http://\S+/console/)", line)
            if found or not line:
                url = found and found.group(1)
                break
        assert url, "the demo printed no console address"
        async with chromium() as browser:
            await browser.page.goto(url)
            delivered = browser.page.locator(".card", has_text="Delivered").locator(".value")
            await delivered.filter(has_text=re.compile(r"^[1-9][\d,]*/s$")).wait_for()
            assert browser.errors == []
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(timeout=20)
        except subprocess.TimeoutExpired:
            demo.kill()
            raise
    assert demo.returncode == 0


@pytest.fixture(scope="module")
def stocked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A gateway with something in each data browser: two versions of a model that share
    most of their chunks, an event log, a schema."""
    folder = tmp_path_factory.mktemp("artifacts")
    store = folder / "store"
    for version, layers in (("1", 2), ("2", 3)):
        weights = checkpoint(folder / f"v{version}.safetensors", seed=1, layers=layers, hidden=64)
        pack([weights], store, name="base", version=version)
    with run_server("--artifacts", str(store), config=CONFIG) as running:
        with httpx.Client(base_url=running.url, timeout=10) as http:
            assert http.put("/v1/logs/orders", json={}).status_code in (200, 201)
            records = [{"type": "order.v1", "data": {"id": n, "item": f"part-{n}"}} for n in
                       range(1, 121)]  # fmt: skip
            assert http.post("/v1/logs/orders/events", json={"events": records}).is_success
            schema = {"schema_type": "json", "schema": {"type": "object", "required": ["id"],
                      "properties": {"id": {"type": "integer"}}}}  # fmt: skip
            assert http.post("/v1/schemas/order.v1/versions", json=schema).is_success
        yield running


async def test_the_data_browsers_show_logs_schemas_rooms_and_artifacts(
    stocked: ServerProcess, tmp_path: Path
) -> None:
    shots = screenshots(tmp_path)
    async with chromium(viewport={"width": 1280, "height": 800}) as b:
        page = b.page
        # Event logs: the log, its bounds, a replay from seq 100 and the next page.
        await page.goto(f"{stocked.url}/console/#/logs")
        await page.get_by_role("link", name="orders").click()
        await page.get_by_text("120 (seq 1 to 120)").wait_for()
        await page.get_by_label("Replay from seq").fill("100")
        await page.get_by_role("button", name="Replay").click()
        await page.get_by_text("records 100 to 120").wait_for()
        assert await page.locator("tbody tr").count() == 21
        assert await page.locator("tbody tr").first.locator("td").first.text_content() == "100"
        await page.screenshot(path=shots / "logs.png", full_page=True)

        # Schemas: the subject, its mode, its latest version.
        await page.get_by_role("link", name="Schemas").click()
        await page.get_by_role("link", name="order.v1").click()
        await page.get_by_text("backward").wait_for()
        await page.get_by_label("the schema").filter(has_text='"required"').wait_for()
        await page.screenshot(path=shots / "schemas.png", full_page=True)

        # Rooms: joined, then a change made elsewhere shows up live.
        await page.get_by_role("link", name="Rooms").click()
        await page.get_by_label("Room").fill("doc-1")
        await page.get_by_role("button", name="Join").click()
        await page.get_by_text("joined: changes appear as they are made").wait_for()
        alice = LWWMap(HybridClock("alice"))
        ops = [alice.set("title", "draft", now_ms()).to_dict(),
               alice.set("owner", "carol", now_ms()).to_dict()]  # fmt: skip
        with httpx.Client(base_url=stocked.url, timeout=10) as http:
            assert http.post("/v1/rooms/doc-1/ops", json={"ops": ops}).status_code == 202
        await page.locator("td", has_text="owner").wait_for()
        await page.get_by_text('set title = "draft"').wait_for()
        await page.screenshot(path=shots / "rooms.png", full_page=True)

        # Artifacts: versions, what version 2 shares with version 1, its manifest.
        await page.get_by_role("link", name="Artifacts").click()
        await page.get_by_role("link", name="base").click()
        await page.get_by_text("Manifest of version 2").wait_for()
        reuse = await page.locator("tbody tr").nth(1).locator("td").nth(4).text_content()
        assert reuse is not None and re.search(r"\((\d+) %\)", reuse), reuse
        assert int(re.search(r"\((\d+) %\)", reuse).group(1)) >= 50  # type: ignore[union-attr]
        await page.screenshot(path=shots / "artifacts.png", full_page=True)
        assert b.errors == [], b.errors


def now_ms() -> int:
    return time.time_ns() // 1_000_000


async def test_the_cluster_view_shows_two_nodes_and_one_that_died(tmp_path: Path) -> None:
    """Two ``airlane serve --hub nats://...`` nodes: node a's console lists both alive, and
    the stream b produces, then, once b is SIGKILLed, b as silent within the node timeout."""
    with running_nats() as nats, node(nats, "a") as a, node(nats, "b") as b:
        async with chromium(viewport={"width": 1280, "height": 800}) as browser:
            page = browser.page
            with httpx.Client(base_url=b.url, timeout=10) as http:  # b produces a stream
                body = {"model": "synthetic", "max_tokens": 250, "seed": long_seeds()[0],
                        "messages": [{"role": "user", "content": PROMPT}]}  # fmt: skip
                created = http.post("/v1/streams", json=body)
                assert created.status_code == 201, created.text
            await page.goto(f"{a.url}/console/#/cluster")
            await page.get_by_text("2 nodes alive, as this node hears them").wait_for()
            await page.locator("td", has_text=f"1: {created.json()['id']}").wait_for()
            assert await page.locator("td", has_text="a (this node)").count() == 1
            await page.screenshot(path=screenshots(tmp_path) / "cluster.png", full_page=True)
            b.kill()
            await page.get_by_text("1 node alive, 1 gone").wait_for(timeout=15_000)
            await page.locator("tr.dead td", has_text="silent: dead").wait_for()
            assert browser.errors == [], browser.errors
