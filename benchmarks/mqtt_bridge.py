"""The MQTT bridge under load: messages per second stored at each QoS, and the gateway's memory
with many subscribed topics.

A Mosquitto broker (the Debian package) and an ``airlane serve --mqtt`` gateway are started on
loopback; the gateway is pinned to one core, the broker and the publisher (this process) to
another. Two measurements:

- ``--mode rate``: the publisher sends ``--messages`` messages of ``--payload-bytes`` to
  ``airlane/logs/bench-q<QoS>`` as fast as the broker takes them, and
  the clock runs until the gateway's log holds them all (polled over HTTP every 20 ms): what the
  bridge stores per second on its core, end to end, with each QoS 1/2 message acknowledged
  only once stored. Run per QoS in ``--qos``.
- ``--mode drain``: the bridge alone. The messages wait at the broker for the bridge's
  persistent session while its gateway is stopped; a new gateway drains them, timed from its
  ready line until the log holds them all. ``rate`` shares one core between the publisher
  and the broker, which can be slower than the bridge; ``drain`` takes them out.
- ``--mode memory``: the gateway's resident memory with a bridge of ``--topics`` inbound
  routes (one subscription each), against the same gateway without a bridge.

    .venv/bin/python benchmarks/mqtt_bridge.py                       # 20000 messages, QoS 0,1,2
    .venv/bin/python benchmarks/mqtt_bridge.py --mode memory --topics 10000
    .venv/bin/python benchmarks/mqtt_bridge.py --messages 500 --json -   # a smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import getpass
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import paho.mqtt.client as mqtt
import psutil

from airlane.bench.spawn import LocalGateway, pin_client, pin_process
from airlane.transports.mqtt import MqttBridgeConfig
from airlane.transports.mqtt.link import BrokerLink, LinkClosed
from airlane.wire.mqtt import ClientSession

SOLO = ("--airc-port", "-1", "--grpc-port", "-1", "--http3-port", "-1", "--rsocket-port", "-1")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def mosquitto() -> Iterator[int]:
    """A Mosquitto broker on a free loopback port; its port."""
    binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not os.access(binary, os.X_OK):
        sys.exit("mosquitto is not installed (Debian package mosquitto)")
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="airlane-bench-mqtt-") as tmp:
        config = Path(tmp) / "mosquitto.conf"
        config.write_text(
            f"listener {port} 127.0.0.1\nallow_anonymous true\nuser {getpass.getuser()}\n"
            "max_queued_messages 0\nmax_inflight_messages 0\nqueue_qos0_messages true\n"
            # Without it Mosquitto's small PUBRELs wait for Nagle: QoS 2 runs ~7x slower.
            "set_tcp_nodelay true\nlog_type error\n"
        )
        broker = subprocess.Popen(
            [binary, "-c", str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline:
                with contextlib.suppress(OSError):
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                time.sleep(0.05)
            yield port
        finally:
            broker.terminate()
            broker.wait(10)


def _gateway(args: list[str], server_cpus: set[int] | None) -> LocalGateway:
    gateway = LocalGateway([*SOLO, *args])
    gateway.start()
    try:
        if server_cpus is not None:
            pin_process(gateway.pid, server_cpus)
    except BaseException:
        gateway.stop()
        raise
    return gateway


def _last_seq(client: httpx.Client, url: str, log: str) -> int:
    response = client.get(f"{url}/v1/logs/{log}")
    return int(response.json()["last_seq"]) if response.status_code == 200 else 0


def _wait_subscribed(port: int, client: httpx.Client, url: str, topic: str, log: str) -> None:
    """Publish probes to ``topic`` until its log exists: the bridge's subscriptions are in."""
    probe = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id="bench-probe")
    probe.connect("127.0.0.1", port)
    probe.loop_start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            probe.publish(topic, b"{}", qos=1).wait_for_publish(5)
            if _last_seq(client, url, log):
                return
            time.sleep(0.1)
        sys.exit("the bridge never subscribed")
    finally:
        probe.loop_stop()
        probe.disconnect()


async def _publish_all(port: int, topic: str, payload: bytes, qos: int, messages: int) -> None:
    """Send ``messages`` as fast as the broker takes them. The publisher is Airlane's own MQTT
    client (`airlane.transports.mqtt.link`), which keeps as many QoS 1/2 messages in flight as
    the broker allows; paho-mqtt walks its whole queue on every acknowledgement, and with tens
    of thousands queued it, not the bridge, would be what is measured."""
    config = MqttBridgeConfig(f"mqtt://127.0.0.1:{port}", client_id=f"bench-pub-{qos}")
    link = BrokerLink(
        config,
        ClientSession(),
        lambda link, message: None,
        lambda packet_ids: None,
        {},
        max_pending=1,
    )
    await link.connect()
    reader = asyncio.create_task(link.run())
    try:
        waiters = []
        for _ in range(messages):
            waiter = await link.publish(topic, payload, qos=qos)
            if waiter is not None:
                waiters.append(waiter)
            if len(waiters) >= 4096:
                await asyncio.gather(*waiters)
                waiters.clear()
            await link.drain()
        await asyncio.gather(*waiters)
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, LinkClosed):
            await reader
        await link.disconnect()


def rate(port: int, url: str, qos: int, messages: int, size: int) -> dict[str, Any]:
    """Publish ``messages`` at ``qos``; the stored rate."""
    log = f"bench-q{qos}"
    topic = f"airlane/logs/{log}"
    payload = orjson.dumps({"v": "x" * max(size - 10, 0)})
    with httpx.Client(timeout=10) as client:
        _wait_subscribed(port, client, url, topic, log)
        base = _last_seq(client, url, log)
        done = threading.Event()
        published: list[float] = []

        def publish() -> None:
            begun = time.perf_counter()
            asyncio.run(_publish_all(port, topic, payload, qos, messages))
            published.append(time.perf_counter() - begun)
            done.set()

        started = time.perf_counter()
        thread = threading.Thread(target=publish, daemon=True)
        thread.start()
        deadline = time.monotonic() + max(60.0, messages / 500)
        stored = 0
        while time.monotonic() < deadline:
            stored = _last_seq(client, url, log) - base
            if stored >= messages:
                break
            time.sleep(0.02)
        elapsed = time.perf_counter() - started
        thread.join(10)
    return {
        "qos": qos,
        "messages": messages,
        "stored": stored,
        "payload_bytes": len(payload),
        "seconds": round(elapsed, 3),
        "published_s": round(published[0], 3) if published else None,
        "stored_per_s": round(stored / elapsed) if elapsed else None,
    }


def drain(
    port: int, config: Path, server_cpus: set[int] | None, qos: int, messages: int, size: int
) -> dict[str, Any]:
    """The bridge alone: ``messages`` wait at the broker for the bridge's persistent session
    while its gateway is stopped; a new gateway then drains them, and the clock runs from its
    start until the log holds them all (the publisher is done before it starts)."""
    log = f"drain-q{qos}"
    topic = f"airlane/logs/{log}"
    payload = orjson.dumps({"v": "x" * max(size - 10, 0)})
    first = _gateway(["--config", str(config)], server_cpus)
    try:
        with httpx.Client(timeout=10) as client:
            # Probed on a log of its own: the drained log then holds only the measured ones.
            _wait_subscribed(port, client, first.url, "airlane/logs/drain-probe", "drain-probe")
    finally:
        first.stop()  # DISCONNECT: the broker keeps the session and queues for it
    asyncio.run(_publish_all(port, topic, payload, qos, messages))
    started = time.perf_counter()
    second = _gateway(["--config", str(config)], server_cpus)
    try:
        ready_s = time.perf_counter() - started
        with httpx.Client(timeout=10) as client:
            base = 0  # an in-memory hub: the new gateway's log starts empty
            deadline = time.monotonic() + max(60.0, messages / 500)
            stored = 0
            while time.monotonic() < deadline:
                stored = _last_seq(client, second.url, log) - base
                if stored >= messages:
                    break
                time.sleep(0.02)
            elapsed = time.perf_counter() - started - ready_s
    finally:
        second.stop()
    return {
        "qos": qos,
        "messages": messages,
        "stored": stored,
        "payload_bytes": len(payload),
        "seconds_after_ready": round(elapsed, 3),
        "stored_per_s": round(stored / elapsed) if elapsed > 0 else None,
    }


def memory(port: int, topics: int, server_cpus: set[int] | None) -> dict[str, Any]:
    """RSS of a gateway with a bridge of ``topics`` routes, against one without a bridge."""
    with tempfile.TemporaryDirectory(prefix="airlane-bench-mqtt-") as tmp:
        bare = _gateway([], server_cpus)
        try:
            time.sleep(1.0)
            bare_rss = psutil.Process(bare.pid).memory_info().rss
        finally:
            bare.stop()
        routes = "".join(
            f'[[mqtt.inbound]]\nfilter = "bench/t{i}/+"\nlog = "t{i}"\n' for i in range(topics)
        )
        config = Path(tmp) / "bridge.toml"
        config.write_text(
            f'[[mqtt]]\nurl = "mqtt://127.0.0.1:{port}"\nstate_dir = "{tmp}/state"\n' + routes
        )
        bridged = _gateway(["--config", str(config)], server_cpus)
        try:
            with httpx.Client(timeout=10) as client:
                last = topics - 1
                _wait_subscribed(port, client, bridged.url, f"bench/t{last}/x", f"t{last}")
            bridged_rss = psutil.Process(bridged.pid).memory_info().rss
        finally:
            bridged.stop()
    return {
        "topics": topics,
        "rss_mb_without_bridge": round(bare_rss / 2**20, 1),
        "rss_mb_with_bridge": round(bridged_rss / 2**20, 1),
        "bridge_mb": round((bridged_rss - bare_rss) / 2**20, 1),
        "bytes_per_topic": round((bridged_rss - bare_rss) / topics),
    }


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["rate", "drain", "memory"], default="rate")
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--qos", default="0,1,2", help="comma-separated QoS levels")
    parser.add_argument("--payload-bytes", type=int, default=64)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument(
        "--receive-maximum", type=int, default=64, help="the bridge's in-flight window"
    )
    parser.add_argument("--json", type=Path, default=None, help="write results ('-': stdout)")
    args = parser.parse_args()
    server_cpus, pinning = pin_client()
    with mosquitto() as port:
        if args.mode == "memory":
            results: dict[str, Any] = {"memory": memory(port, args.topics, server_cpus)}
        else:
            with tempfile.TemporaryDirectory(prefix="airlane-bench-mqtt-") as tmp:
                config = Path(tmp) / "bridge.toml"
                config.write_text(
                    f'[[mqtt]]\nurl = "mqtt://127.0.0.1:{port}"\nstate_dir = "{tmp}/state"\n'
                    f"receive_maximum = {args.receive_maximum}\n"
                )
                levels = [int(q) for q in args.qos.split(",")]
                if args.mode == "drain":
                    results = {
                        "drain": [
                            drain(port, config, server_cpus, q, args.messages, args.payload_bytes)
                            for q in levels
                        ]
                    }
                else:
                    gateway = _gateway(["--config", str(config)], server_cpus)
                    try:
                        results = {
                            "rate": [
                                rate(port, gateway.url, q, args.messages, args.payload_bytes)
                                for q in levels
                            ]
                        }
                    finally:
                        gateway.stop()
    results["pinning"] = pinning
    if args.json is not None and str(args.json) == "-":
        sys.stdout.write(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    for row in results.get("rate", []):
        print(
            f"QoS {row['qos']}: {row['stored']}/{row['messages']} messages of "
            f"{row['payload_bytes']} B stored in {row['seconds']} s: {row['stored_per_s']:,}/s"
        )
    for row in results.get("drain", []):
        print(
            f"QoS {row['qos']}: {row['stored']}/{row['messages']} queued messages of "
            f"{row['payload_bytes']} B drained in {row['seconds_after_ready']} s after the "
            f"gateway was ready: {row['stored_per_s']:,}/s"
        )
    if "memory" in results:
        m = results["memory"]
        print(
            f"{m['topics']} subscribed topics: gateway RSS {m['rss_mb_with_bridge']} MB vs "
            f"{m['rss_mb_without_bridge']} MB without the bridge ({m['bytes_per_topic']} B/topic)"
        )
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
