"""The edge path end to end: a sensor's MQTT message through a rule to a generation's events on
a result topic, and how long that takes.

    sensor --QoS 1--> Mosquitto --> airlane serve --mqtt (bridge -> rule -> generate)
                          ^                                            |
    subscriber <--QoS 1---+------------ advice/<device> <---------------+

A Mosquitto broker (the Debian package) and an ``airlane serve`` gateway with one bridge to it
are started on loopback; the gateway is pinned to one core, the broker and this process (sensor
and subscriber) to another (`benchmarks/mqtt_bridge.py` does the same). The gateway's
configuration lives in a temporary directory, its rules too (``[rules] dir``): nothing is
written to the working directory. Its synthetic backend is made fast (``[synthetic]``:
``--ttft-ms``, ``--itl-ms``, constant inter-token time), so that what is measured is the path,
not a model.

One rule is added over HTTP (``PUT /v1/rules/bench``): a mapping rule, no window, so that each
sensor message makes one output row at once, and each row starts a generation whose events are
published to ``advice/<deviceId>``::

    SELECT deviceId, vibration, sent FROM "sensor/+/vibration" WHERE vibration > 3.5
    -> generate {"prompt": "Vibration alarm: {row}", "max_tokens": 8,
                 "result_topic": "advice/{deviceId}", "qos": 1}

A subscriber (paho-mqtt, MQTT 5) takes ``advice/#`` at QoS 1 before anything is sent. The
bridge subscribes to the rule's filter in the background: a warm-up sensor message on its own
device (``warmup``) is sent every half second until its first result arrives. Then the sensor
sends ``--messages`` QoS 1 messages to ``sensor/dev-<i % devices>/vibration``, paced at
``--rate`` a second (latency, not queueing, is measured). Each generation's events carry the
user property ``stream`` (``rules/bench/<row>.0``); the first event of a new stream on
``advice/<device>`` belongs to that device's oldest sensor message still unanswered (the rule
runs rows in order; the row numbers each device's streams get are checked to rise). For each
message two times from its publication: to the first result event (``first_event_ms``), and to
the ``done`` (or ``error``) event that ends the generation (``done_ms``). Results missing at the
deadline (``messages / rate + 30`` s) are counted, not waited for.

    .venv/bin/python benchmarks/mqtt_rules.py                       # 200 messages at 20/s
    .venv/bin/python benchmarks/mqtt_rules.py --rate 100 --messages 500
    .venv/bin/python benchmarks/mqtt_rules.py --messages 20 --rate 50 --json -   # a smoke run
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import httpx
import orjson
import paho.mqtt.client as mqtt
from mqtt_bridge import _gateway, mosquitto  # a sibling script, not a package
from paho.mqtt.properties import Properties

from airlane.bench.spawn import pin_client
from airlane.bench.stats import Percentiles

RULE = "bench"
WARMUP_DEVICE = "warmup"
WARMUP_S = 60.0
"""How long the bridge may take to subscribe to the rule's filter."""
GRACE_S = 30.0
"""How long results may come after the last sensor message was sent."""


def rule_definition(max_tokens: int) -> dict[str, Any]:
    """The measured rule: every sensor message above the threshold starts a generation."""
    return {
        "sql": 'SELECT deviceId, vibration, sent FROM "sensor/+/vibration" WHERE vibration > 3.5',
        "qos": 1,
        "actions": [
            {
                "generate": {
                    "prompt": "Vibration alarm: {row}",
                    "max_tokens": max_tokens,
                    "result_topic": "advice/{deviceId}",
                    "qos": 1,
                }
            }
        ],
    }


def _stream_of(message: mqtt.MQTTMessage) -> str | None:
    props: Properties | None = getattr(message, "properties", None)
    for name, value in getattr(props, "UserProperty", None) or ():
        if name == "stream":
            return str(value)
    return None


def _row_of(stream: str) -> int | None:
    """The output row a rule's stream id names (``rules/<rule>/<row>.<action>``)."""
    try:
        return int(stream.rsplit("/", 1)[1].split(".", 1)[0])
    except (IndexError, ValueError):
        return None


class Results:
    """What the subscriber saw, matched to what the sensor sent (thread-safe: paho calls
    `on_message` from its network thread)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.warm = threading.Event()
        self.finished = threading.Event()
        self.expected = 0
        self.unanswered: dict[str, deque[tuple[int, float]]] = {}
        """Per device, the sensor messages whose first result has not come yet: (n, sent)."""
        self.streams: dict[str, tuple[int, float]] = {}
        """Stream id -> the sensor message (n, sent) it answers."""
        self.rows: dict[str, list[int]] = {}
        """Per device, the output rows of its streams in the order they came."""
        self.first_ms: dict[int, float] = {}
        self.done_ms: dict[int, float] = {}
        self.errors = 0
        self.unmatched = 0
        """Streams on a measured device with no sensor message left to answer."""
        self.events = 0

    def sent(self, device: str, n: int, at: float) -> None:
        """The sensor published message ``n`` for ``device`` at ``at`` (perf_counter)."""
        with self.lock:
            self.unanswered.setdefault(device, deque()).append((n, at))

    def on_message(self, _client: Any, _userdata: Any, message: mqtt.MQTTMessage) -> None:
        """paho's callback: one result event."""
        now = time.perf_counter()
        device = message.topic.partition("/")[2]
        if device == WARMUP_DEVICE:
            self.warm.set()
            return
        stream = _stream_of(message)
        try:
            kind = orjson.loads(message.payload).get("kind")
        except (orjson.JSONDecodeError, AttributeError):
            kind = None
        with self.lock:
            self.events += 1
            if stream is None:
                self.unmatched += 1
                return
            owner = self.streams.get(stream)
            if owner is None:
                queue = self.unanswered.get(device)
                if not queue:
                    self.unmatched += 1
                    return
                owner = self.streams[stream] = queue.popleft()
                self.first_ms[owner[0]] = (now - owner[1]) * 1000
                row = _row_of(stream)
                if row is not None:
                    self.rows.setdefault(device, []).append(row)
            if kind in ("done", "error") and owner[0] not in self.done_ms:
                self.done_ms[owner[0]] = (now - owner[1]) * 1000
                self.errors += kind == "error"
                if len(self.done_ms) >= self.expected:
                    self.finished.set()

    def out_of_order(self) -> int:
        """Streams whose output row is not above the previous one of their device: the
        first-event matching assumes the rule answers each device in order."""
        with self.lock:
            return sum(
                1 for rows in self.rows.values() for a, b in itertools.pairwise(rows) if b <= a
            )


def _client(client_id: str) -> mqtt.Client:
    return mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=mqtt.MQTTv5)


def _sensor_payload(device: str, n: int) -> bytes:
    return orjson.dumps({"deviceId": device, "vibration": 5.0, "sent": time.time(), "n": n})


def _warm_up(sensor: mqtt.Client, results: Results) -> float:
    """Send warm-up messages until one comes back as a result; the seconds it took."""
    begun = time.perf_counter()
    topic = f"sensor/{WARMUP_DEVICE}/vibration"
    n = 0
    while time.perf_counter() - begun < WARMUP_S:
        sensor.publish(topic, _sensor_payload(WARMUP_DEVICE, -1 - n), qos=1).wait_for_publish(5)
        n += 1
        if results.warm.wait(0.5):
            return time.perf_counter() - begun
    sys.exit(f"no result for a warm-up message in {WARMUP_S:.0f} s: the rule never ran")


def measure(
    port: int, url: str, messages: int, rate: float, devices: int, max_tokens: int
) -> dict[str, Any]:
    """Add the rule, warm up, send ``messages`` at ``rate``; the latencies."""
    with httpx.Client(timeout=10) as http:
        response = http.put(f"{url}/v1/rules/{RULE}", json=rule_definition(max_tokens))
        if response.status_code != 201:
            sys.exit(f"PUT /v1/rules/{RULE}: {response.status_code} {response.text}")
        results = Results()
        results.expected = messages
        subscriber = _client("bench-results")
        subscriber.on_message = results.on_message
        subscribed = threading.Event()
        subscriber.on_subscribe = lambda *_: subscribed.set()
        sensor = _client("bench-sensor")
        subscriber.connect("127.0.0.1", port)
        subscriber.loop_start()
        sensor.connect("127.0.0.1", port)
        sensor.loop_start()
        try:
            subscriber.subscribe("advice/#", qos=1)
            if not subscribed.wait(10):
                sys.exit("the subscriber's SUBSCRIBE was never acknowledged")
            warmup_s = _warm_up(sensor, results)
            time.sleep(0.5)  # late warm-up results out of the way
            interval = 1.0 / rate
            started = time.perf_counter()
            for n in range(messages):
                due = started + n * interval
                pause = due - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
                device = f"dev-{n % devices}"
                payload = _sensor_payload(device, n)
                # Registered before the publish: its first result cannot overtake it.
                results.sent(device, n, time.perf_counter())
                sensor.publish(f"sensor/{device}/vibration", payload, qos=1)
            sending_s = time.perf_counter() - started
            deadline_s = messages / rate + GRACE_S
            results.finished.wait(max(0.0, started + deadline_s - time.perf_counter()))
            elapsed_s = time.perf_counter() - started
            stats = http.get(f"{url}/v1/rules/{RULE}").json().get("stats", {})
        finally:
            for client in (sensor, subscriber):
                client.loop_stop()
                client.disconnect()
    with results.lock:
        first = sorted(results.first_ms.values())
        done = sorted(results.done_ms.values())
        errors, unmatched, events = results.errors, results.unmatched, results.events
    return {
        "messages": messages,
        "rate": rate,
        "devices": devices,
        "max_tokens": max_tokens,
        "received_first": len(first),
        "received_done": len(done),
        "missing_first": messages - len(first),
        "missing_done": messages - len(done),
        "errors": errors,
        "unmatched": unmatched,
        "out_of_order": results.out_of_order(),
        "result_events": events,
        "first_event_ms": Percentiles.of(first).to_dict(),
        "done_ms": Percentiles.of(done).to_dict(),
        "warmup_s": round(warmup_s, 3),
        "sending_s": round(sending_s, 3),
        "elapsed_s": round(elapsed_s, 3),
        "rule_stats": stats,
    }


def main() -> None:
    """Command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0, help="sensor messages a second")
    parser.add_argument("--devices", type=int, default=10, help="dev-0 .. dev-<N-1>")
    parser.add_argument("--max-tokens", type=int, default=8, help="the generate action's")
    parser.add_argument("--ttft-ms", type=float, default=0.0, help="synthetic time to first")
    parser.add_argument("--itl-ms", type=float, default=1.0, help="synthetic inter-token time")
    parser.add_argument("--json", type=Path, default=None, help="write results ('-': stdout)")
    args = parser.parse_args()
    if args.messages < 1 or args.rate <= 0 or args.devices < 1:
        parser.error("--messages and --devices must be at least 1, --rate above 0")
    synthetic = {
        "ttft_ms": args.ttft_ms,
        "itl_ms": args.itl_ms,
        "itl_jitter_ms": 0.0,
        "itl_distribution": "constant",
        "speed": 1.0,
    }
    server_cpus, pinning = pin_client()
    with mosquitto() as port, tempfile.TemporaryDirectory(prefix="airlane-bench-rules-") as tmp:
        config = Path(tmp) / "gateway.toml"
        config.write_text(
            f'[[mqtt]]\nurl = "mqtt://127.0.0.1:{port}"\nstate_dir = "{tmp}/bridge"\n\n'
            f'[rules]\ndir = "{tmp}/rules"\n\n[synthetic]\n'
            + "".join(
                f"{key} = {orjson.dumps(value).decode()}\n" for key, value in synthetic.items()
            )
        )
        gateway = _gateway(["--config", str(config)], server_cpus)
        try:
            results = measure(
                port, gateway.url, args.messages, args.rate, args.devices, args.max_tokens
            )
        finally:
            gateway.stop()
    results.update(synthetic=synthetic, qos=1, machine={"cpus": os.cpu_count()}, pinning=pinning)
    if args.json is not None and str(args.json) == "-":
        sys.stdout.write(orjson.dumps(results, option=orjson.OPT_INDENT_2).decode() + "\n")
        return
    first, done = results["first_event_ms"], results["done_ms"]
    print(
        f"{results['messages']} sensor messages at {results['rate']:g}/s over "
        f"{results['devices']} devices, generations of up to {results['max_tokens']} tokens "
        f"(synthetic: first token {args.ttft_ms:g} ms, {args.itl_ms:g} ms a token)"
    )
    print(
        f"first result event: {results['received_first']}/{results['messages']}, "
        f"p50 {first['p50']} ms, p99 {first['p99']} ms, max {first['max']} ms"
    )
    print(
        f"done event:         {results['received_done']}/{results['messages']}, "
        f"p50 {done['p50']} ms, p99 {done['p99']} ms, max {done['max']} ms"
        + (f" ({results['errors']} errors)" if results["errors"] else "")
    )
    if results["unmatched"] or results["out_of_order"]:
        print(
            f"warning: {results['unmatched']} unmatched streams, "
            f"{results['out_of_order']} out of order: the matching is off"
        )
    if args.json is not None:
        args.json.write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))


if __name__ == "__main__":
    main()
