"""The gateway's artifacts API, against a real ``airlane serve --artifacts`` process."""

from __future__ import annotations

import hashlib
import socket
import time

import httpx
import pytest

from airlane.artifacts.store import read_manifest
from airlane.transports.http.artifacts import parse_range
from airlane.transports.http.asgi import HttpError
from tests.artifacts.conftest import SCAN
from tests.servers import run_server
from tests.sockets import ss_tos


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        (None, 100, None),
        ("bytes=0-9", 100, (0, 10)),
        ("bytes=90-", 100, (90, 100)),
        ("bytes=90-200", 100, (90, 100)),
        ("bytes=-10", 100, (90, 100)),
        ("bytes=-500", 100, (0, 100)),
        ("bytes=0-0", 100, (0, 1)),
        ("bytes=0-9,20-29", 100, None),  # several: the whole file
        ("bytes=9-0", 100, None),  # invalid: ignored
        ("items=0-9", 100, None),
        ("bytes=abc", 100, None),
        ("bytes=-", 100, None),
        ("bytes = 5-6", 100, (5, 7)),
    ],
)
def test_parse_range(header, size, expected):
    assert parse_range(header, size) == expected


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=500-600", "bytes=-0"])
def test_unsatisfiable_ranges_are_416_with_the_size(header):
    with pytest.raises(HttpError) as caught:
        parse_range(header, 100)
    assert caught.value.code == "range_not_satisfiable"
    assert (b"content-range", b"bytes */100") in caught.value.headers


@pytest.fixture
def http(artifact_server):
    with httpx.Client(base_url=artifact_server.url, timeout=10) as client:
        yield client


def test_listing_and_versions(http):
    listing = http.get("/v1/artifacts").json()["artifacts"]
    assert {a["name"]: a["versions"] for a in listing} == {"plain": ["1"], "tiny": ["1", "2"]}
    tiny = http.get("/v1/artifacts/tiny").json()
    assert tiny["latest"] == "2"
    assert tiny["stream"] == "artifacts/tiny"
    assert all(v["signed"] for v in tiny["versions"])
    assert http.get("/v1/artifacts/nope").status_code == 404


def test_manifest_and_latest(http, store):
    expected = read_manifest(store / "tiny" / "2")
    response = http.get("/v1/artifacts/tiny/latest/manifest.json")
    assert response.status_code == 200
    assert response.headers["cache-control"] == "no-cache"
    assert response.json()["sha256"] == expected.sha256
    fixed = http.get("/v1/artifacts/tiny/2/manifest.json")
    assert "immutable" in fixed.headers["cache-control"]


def test_whole_file_and_ranges(http, store):
    data = (store / "tiny" / "1" / "model.safetensors").read_bytes()
    url = "/v1/artifacts/tiny/1/model.safetensors"
    whole = http.get(url)
    assert whole.status_code == 200
    assert whole.content == data
    assert whole.headers["accept-ranges"] == "bytes"
    etag = whole.headers["etag"]
    assert etag == f'"{hashlib.sha256(data).hexdigest()}"'
    part = http.get(url, headers={"range": "bytes=1000-4999"})
    assert part.status_code == 206
    assert part.content == data[1000:5000]
    assert part.headers["content-range"] == f"bytes 1000-4999/{len(data)}"
    tail = http.get(url, headers={"range": "bytes=-100"})
    assert tail.content == data[-100:]
    beyond = http.get(url, headers={"range": f"bytes={len(data)}-"})
    assert beyond.status_code == 416
    assert beyond.headers["content-range"] == f"bytes */{len(data)}"
    stale = http.get(url, headers={"range": "bytes=0-9", "if-range": '"other"'})
    assert stale.status_code == 200 and stale.content == data
    fresh = http.get(url, headers={"range": "bytes=0-9", "if-range": etag})
    assert fresh.status_code == 206 and fresh.content == data[:10]
    several = http.get(url, headers={"range": "bytes=0-1,5-6"})
    assert several.status_code == 200 and len(several.content) == len(data)


def test_head_says_the_length_without_a_body(http, store):
    size = (store / "tiny" / "1" / "model.safetensors").stat().st_size
    head = http.head("/v1/artifacts/tiny/1/model.safetensors", headers={"range": "bytes=10-19"})
    assert head.status_code == 206
    assert head.headers["content-length"] == "10"
    assert head.content == b""
    assert http.head("/v1/artifacts/tiny/1/model.safetensors").headers["content-length"] == str(
        size
    )


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("/v1/artifacts/tiny/1/nothing.bin", 404),  # not in the manifest: not there
        ("/v1/artifacts/tiny/9/model.safetensors", 404),
        ("/v1/artifacts/tiny/1/..%2F..%2Fplain%2F1%2Fmanifest.json", 422),
        ("/v1/artifacts/tiny/.hidden/model.safetensors", 422),
        ("/v1/artifacts/tiny/1", 404),
    ],
)
def test_bad_paths_are_clear_errors(http, path, status):
    response = http.get(path)
    assert response.status_code == status
    assert response.json()["error"]["message"]


def test_methods_are_checked(http):
    response = http.post("/v1/artifacts/tiny/1/model.safetensors")
    assert response.status_code == 405
    assert "GET" in response.headers["allow"]
    assert http.get("/healthz").status_code == 200  # still serving


def test_a_gateway_without_a_store_says_so(server):
    response = httpx.get(f"{server.url}/v1/artifacts", timeout=10)
    assert response.status_code == 404
    assert "--artifacts" in response.json()["error"]["message"]


def test_a_model_update_goes_out_in_the_bulk_lane_then_the_connection_is_as_it_was(store):
    """While a download at least ``[lanes] bulk_response_bytes`` long is sent, the gateway's
    end of the connection carries the bulk lane's marks (read with ``ss``, outside the
    process); once it is sent, the marks it had come back (docs/lanes.md)."""
    path = "/v1/artifacts/tiny/1/model.safetensors"
    size = (store / "tiny" / "1" / "model.safetensors").stat().st_size
    config = SCAN + f"\n[lanes]\nbulk_response_bytes = {size // 2}\n"
    with run_server("--artifacts", str(store), "--airc-port", "-1", "--grpc-port", "-1",
                    config=config) as server:  # fmt: skip
        host, port = server.url.removeprefix("http://").rsplit(":", 1)
        client = socket.socket()
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the download stalls
        client.connect((host, int(port)))
        local = client.getsockname()[1]

        def server_side() -> str:
            return ss_tos("dport", local)

        with client:
            client.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            assert client.recv(1024).startswith(b"HTTP/1.1 200")
            deadline = time.monotonic() + 10
            while "tos:0x28" not in (shown := server_side()):
                assert time.monotonic() < deadline, shown
                time.sleep(0.05)
            assert "class_id:0x2" in shown  # the bulk lane's SO_PRIORITY
            client.settimeout(10)
            received = 1024
            while received < size:  # the rest (headers make it a little more)
                received += len(client.recv(1 << 20))
            deadline = time.monotonic() + 10
            while "tos:0x28" in (shown := server_side()):
                assert time.monotonic() < deadline, f"the bulk marks stayed: {shown}"
                time.sleep(0.05)
            assert "class_id:0x2" not in shown
