"""The fuzz target ``fuzz/rsocket_connection.py``, run as a test.

Its invariant (the target's docstring has it in full): the frame reader raises only
`RSocketProtocolError` and decides the same however the input is split; the connection never
raises, closes at most once, and stays within its bounds; no stream is sent more payloads than
it was granted. Here `TestOneInput` runs over a hypothesis corpus of valid frames and mutations
of them, always; and, where atheris is installed, the real fuzzer runs briefly as a subprocess.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

# The package under test is imported before the target, so that loading the target here
# never instruments it (that is for the fuzzer's own process).
from airlane.wire.rsocket import Frame, FrameType, frame_with_length

from .airc.test_fuzz_target import mutate, mutations
from .chunking import PROPERTY

TARGET = Path(__file__).resolve().parents[2] / "fuzz" / "rsocket_connection.py"


def load_target() -> ModuleType:
    spec = importlib.util.spec_from_file_location("rsocket_connection_fuzz", TARGET)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


target = load_target()

REQUESTS = [
    FrameType.REQUEST_RESPONSE,
    FrameType.REQUEST_FNF,
    FrameType.REQUEST_STREAM,
    FrameType.REQUEST_CHANNEL,
]


def request(kind: FrameType, stream: int, n: int, data: bytes, meta: bytes | None) -> Frame:
    return Frame(kind, stream, data=data, metadata=meta, request_n=n)


def payload(stream: int, flags: int, data: bytes) -> Frame:
    return Frame(FrameType.PAYLOAD, stream, flags, data=data)


def error(stream: int, code: int) -> Frame:
    return Frame(FrameType.ERROR, stream, error_code=code, data=b"e")


streams = st.sampled_from([1, 3, 5])
frames = st.one_of(
    st.builds(
        request,
        st.sampled_from(REQUESTS),
        st.sampled_from([1, 3, 5, 7, 2]),
        st.integers(1, 5),
        st.binary(max_size=150),
        st.one_of(st.none(), st.binary(max_size=20)),
    ),
    st.builds(
        lambda s, n: Frame(FrameType.REQUEST_N, s, request_n=n), streams, st.integers(1, 2**31 - 1)
    ),
    st.builds(payload, streams, st.sampled_from([0x20, 0x40, 0x60, 0xA0]), st.binary(max_size=150)),
    st.builds(lambda s: Frame(FrameType.CANCEL, s), streams),
    st.builds(lambda n: Frame(FrameType.KEEPALIVE, flags=0x80, position=n), st.integers(0, 2000)),
    st.builds(error, st.sampled_from([0, 1, 3]), st.sampled_from([0x201, 0x203, 0x101])),
)


@PROPERTY
@given(st.lists(frames, max_size=10), mutations)
def test_invariants_hold_on_mutated_frames(
    sequence: list[Frame], edits: list[tuple[str, int, bytes]]
) -> None:
    data = frame_with_length(target.SETUP) + b"".join(map(frame_with_length, sequence))
    target.TestOneInput(data)
    target.TestOneInput(mutate(data, edits))


@PROPERTY
@given(st.binary(max_size=400))
def test_invariants_hold_on_any_bytes(data: bytes) -> None:
    target.TestOneInput(data)


def test_structured_frames_are_valid_frames() -> None:
    # type REQUEST_N, stream index 1 (stream 1), flags 0, n 3, no data
    kind = target._TYPES.index(FrameType.REQUEST_N)
    assert target.structured_frames(bytes([kind, 1, 0, 3, 0])) == frame_with_length(
        Frame(FrameType.REQUEST_N, 1, request_n=3)
    )
    assert target.structured_frames(b"\x05\x01") == b""


@pytest.mark.timeout(120)
def test_atheris_run(tmp_path: Path) -> None:
    if importlib.util.find_spec("atheris") is None:
        # The test extra installs atheris on Linux + CPython 3.11; CI must run it.
        if os.environ.get("CI") == "true":
            pytest.fail("atheris is not installed: pip install -e '.[test]'")
        pytest.skip("atheris is not installed")
    result = subprocess.run(
        [
            sys.executable,
            str(TARGET),
            "-runs=10000",
            "-max_total_time=20",
            f"-artifact_prefix={tmp_path}/",
        ],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Done" in result.stderr
