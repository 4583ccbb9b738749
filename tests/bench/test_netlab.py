"""The lossy-network lab (`airlane.bench.netlab`): delay, loss, TCP across it, rate limit, and
cleanup of its namespaces.

These need root, /dev/net/tun and iproute2. Where the lab cannot run they skip with the reason,
except under ``CI=true``, where they fail: a CI machine is meant to run them.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from airlane.bench.netlab import NetLab, NetLabError, Side, netlab_available

# Bounds of every wait here: a broken lab fails a test, it does not hang it.
READY_TIMEOUT_S = 10.0
RUN_TIMEOUT_S = 30.0

# Echoes every datagram back to its sender.
UDP_ECHO = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
while True:
    data, peer = s.recvfrom(65535)
    s.sendto(data, peer)
"""

# Sends N datagrams (sequence number and send time) every INTERVAL seconds while reading the
# echoes; waits up to 2 s after the last for stragglers; prints the RTTs in ms as JSON.
UDP_PING = """
import json, select, socket, struct, sys, time
host, port, n, interval = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.connect((host, port))
s.setblocking(False)
rtts = {}
sent = 0
next_send = time.monotonic()
deadline = None
while True:
    now = time.monotonic()
    if sent < n and now >= next_send:
        s.send(struct.pack("!Id", sent, now) + bytes(52))
        sent += 1
        next_send += interval
        if sent == n:
            deadline = now + 2.0
    if deadline is not None and (len(rtts) == n or now >= deadline):
        break
    wait = max(0.0, (next_send if sent < n else deadline) - now)
    readable, _, _ = select.select([s], [], [], wait)
    while readable:
        try:
            data = s.recv(2048)
        except BlockingIOError:
            break
        seq, t0 = struct.unpack("!Id", data[:12])
        rtts[seq] = (time.monotonic() - t0) * 1000.0
print(json.dumps({"sent": sent, "rtts": list(rtts.values())}))
"""

# Counts datagrams until its stdin closes and then 0.3 s pass with none (or 30 s in all).
UDP_COUNT = """
import select, socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
s.bind((sys.argv[1], int(sys.argv[2])))
print("ready", flush=True)
count = 0
watch = [s, sys.stdin]
end = time.monotonic() + 30.0
while time.monotonic() < end:
    readable, _, _ = select.select(watch, [], [], 0.3 if len(watch) == 1 else 1.0)
    if not readable and len(watch) == 1:
        break
    if sys.stdin in readable:
        sys.stdin.read()
        watch = [s]
    if s in readable:
        s.recv(65535)
        count += 1
print(count, flush=True)
"""

# Sends N datagrams, paced (so no kernel queue on the way overflows), and exits.
UDP_SEND = """
import socket, sys, time
host, port, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(n):
    s.sendto(i.to_bytes(4, "big") + bytes(60), (host, port))
    time.sleep(0.0005)
"""

# Downloads a URL and prints its size, sha256 and the seconds it took as JSON.
HTTP_GET = """
import hashlib, json, sys, time, urllib.request
t0 = time.monotonic()
with urllib.request.urlopen(sys.argv[1], timeout=30) as response:
    data = response.read()
print(json.dumps({
    "seconds": time.monotonic() - t0,
    "size": len(data),
    "sha256": hashlib.sha256(data).hexdigest(),
}))
"""


@pytest.fixture
def need_netlab() -> None:
    reason = netlab_available()
    if reason is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but the network lab cannot run: {reason}")
    pytest.skip(reason)


def netns_names() -> set[str]:
    listing = subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True, check=True, timeout=10
    ).stdout
    return {line.split()[0] for line in listing.splitlines() if line.strip()}


@contextmanager
def open_lab(**kw: Any) -> Iterator[NetLab]:
    """A lab for one test, checked afterwards to have left no namespace behind."""
    lab = NetLab(**kw)
    try:
        with lab:
            yield lab
            assert lab.error is None, lab.error
    finally:
        left = {lab.a, lab.b} & netns_names()
        assert not left, f"namespaces left behind: {left}"


def wait_line(proc: subprocess.Popen[str], needle: str) -> None:
    """Read ``proc``'s stdout until a line contains ``needle``, within READY_TIMEOUT_S."""
    assert proc.stdout is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([proc.stdout], [], [], left)
        if not readable:
            break
        line = proc.stdout.readline()
        if not line:
            pytest.fail(f"{proc.args!r} exited (rc {proc.poll()}) before printing {needle!r}")
        if needle in line:
            return
    pytest.fail(f"{proc.args!r} printed no {needle!r} within {READY_TIMEOUT_S} s")


def python_in(lab: NetLab, side: Side, script: str, *args: object) -> subprocess.Popen[str]:
    return lab.popen(
        side,
        [sys.executable, "-c", script, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def run_python(lab: NetLab, side: Side, script: str, *args: object) -> str:
    done = lab.run(
        side,
        [sys.executable, "-c", script, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


def test_udp_round_trip_is_twice_the_delay(need_netlab: None) -> None:
    with open_lab(delay_ms=20, loss=0.0, seed=1) as lab:
        echo = python_in(lab, "b", UDP_ECHO, lab.addr_b, 9000)
        wait_line(echo, "ready")
        result = json.loads(run_python(lab, "a", UDP_PING, lab.addr_b, 9000, 200, 0.005))
        rtts = result["rtts"]
        assert result["sent"] == 200
        assert len(rtts) == 200, f"{200 - len(rtts)} of 200 not echoed"
        median = statistics.median(rtts)
        print(f"RTT ms: min {min(rtts):.2f} median {median:.2f} max {max(rtts):.2f}")
        assert 30.0 <= median <= 50.0
        stats = lab.stats()
        assert stats.a_to_b.forwarded >= 200
        assert stats.b_to_a.forwarded >= 200


# Binds to an address (argv[1]) and says what happened: "bound", or the error's name.
BIND = """
import socket, sys
try:
    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).bind((sys.argv[1], 0))
    print("bound")
except OSError as exc:
    print(exc.__class__.__name__, exc.errno)
"""


def test_a_side_that_moves_reaches_the_other_from_its_new_address(need_netlab: None) -> None:
    with open_lab(delay_ms=1, seed=1) as lab:
        old = lab.addr_a
        lab.move("a", "10.77.0.3")
        assert lab.addr_a == "10.77.0.3"
        echo = python_in(lab, "b", UDP_ECHO, lab.addr_b, 9002)
        wait_line(echo, "ready")
        result = json.loads(run_python(lab, "a", UDP_PING, lab.addr_b, 9002, 20, 0.005))
        assert len(result["rtts"]) == 20
        # The old address is gone: nothing can send from it any more.
        assert run_python(lab, "a", BIND, old).strip() == "OSError 99"
        assert run_python(lab, "a", BIND, "10.77.0.3").strip() == "bound"


def count_one_way(seed: int) -> tuple[int, int]:
    """1000 datagrams A to B at 10 % loss: (datagrams B received, packets the bridge passed)."""
    with open_lab(delay_ms=5, loss=0.1, seed=seed) as lab:
        counter = python_in(lab, "b", UDP_COUNT, lab.addr_b, 9001)
        wait_line(counter, "ready")
        run_python(lab, "a", UDP_SEND, lab.addr_b, 9001, 1000)
        # Done when the bridge has dealt with every datagram; then the counter is told to
        # finish what reached its socket.
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while (stats := lab.stats().a_to_b).handled < 1000 or stats.queued:
            assert time.monotonic() < deadline, stats
            time.sleep(0.01)
        out, _ = counter.communicate(timeout=RUN_TIMEOUT_S)
        assert stats.handled == 1000, stats
        assert stats.dropped_queue == 0
        assert stats.write_errors == 0
        return int(out.split()[-1]), stats.forwarded


def test_loss_is_random_per_packet_and_reproducible(need_netlab: None) -> None:
    first, forwarded = count_one_way(seed=42)
    print(f"received {first} of 1000 at loss 0.1 (bridge forwarded {forwarded})")
    assert first == forwarded
    assert 850 <= first <= 950
    again, _ = count_one_way(seed=42)
    assert again == first


def http_download(tmp_path: Path, size: int, **lab_kw: Any) -> dict[str, Any]:
    """Serve ``size`` random bytes over HTTP in B and fetch them from A; the client's JSON."""
    payload = os.urandom(size)
    (tmp_path / "blob").write_bytes(payload)
    with open_lab(**lab_kw) as lab:
        server = lab.popen(
            "b",
            [
                *(sys.executable, "-u", "-m", "http.server"),
                *("--bind", lab.addr_b, "--directory", str(tmp_path), "8000"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        wait_line(server, "Serving HTTP")
        result: dict[str, Any] = json.loads(
            run_python(lab, "a", HTTP_GET, f"http://{lab.addr_b}:8000/blob")
        )
        result["stats"] = lab.stats()
    assert result["size"] == size
    assert result["sha256"] == hashlib.sha256(payload).hexdigest()
    return result


def test_tcp_crosses_a_lossy_link_intact(need_netlab: None, tmp_path: Path) -> None:
    result = http_download(tmp_path, 1 << 20, delay_ms=10, loss=0.02, seed=7)
    stats = result["stats"]
    print(f"1 MiB over 10 ms / 2 % loss: {result['seconds']:.2f} s, {stats}")
    # The loss really hit this connection, and TCP repaired it.
    assert stats.b_to_a.dropped_loss > 0


def test_rate_limit_bounds_throughput(need_netlab: None, tmp_path: Path) -> None:
    result = http_download(tmp_path, 2 << 20, delay_ms=2, loss=0.0, seed=3, rate_mbit=10)
    seconds = result["seconds"]
    print(f"2 MiB at 10 Mbit/s: {seconds:.2f} s ({(2 << 20) * 8 / seconds / 1e6:.1f} Mbit/s)")
    # 2 MiB at 10 Mbit/s is 1.68 s; the bucket's burst lets a little through at once.
    assert 1.4 <= seconds <= 10.0


def test_close_removes_namespaces(need_netlab: None) -> None:
    with NetLab(delay_ms=1, seed=0) as lab:
        assert {lab.a, lab.b} <= netns_names()
        sleeper = lab.popen("a", ["sleep", "60"])
    assert not {lab.a, lab.b} & netns_names()
    # A process the test left running was stopped with the lab.
    assert sleeper.poll() is not None
    lab.close()  # again: a no-op


def test_failed_setup_removes_namespaces(
    need_netlab: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_tbf(*args: object) -> None:
        raise NetLabError("tbf refused (injected)")

    lab = NetLab(delay_ms=1, rate_mbit=5, seed=0)
    monkeypatch.setattr(lab, "_tbf", broken_tbf)
    with pytest.raises(NetLabError, match="injected"), lab:
        pass
    assert not {lab.a, lab.b} & netns_names()


@pytest.mark.parametrize(
    "kw",
    [
        {"delay_ms": -1.0},
        {"loss": 1.5},
        {"rate_mbit": 0.0},
        {"queue_packets": 0},
        {"mtu": 20},
    ],
)
def test_rejects_bad_parameters(kw: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        NetLab(**kw)
