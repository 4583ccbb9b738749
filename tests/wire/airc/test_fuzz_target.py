"""The fuzz target ``fuzz/airc_decoder.py``, run as a test.

Its invariant (the target's docstring has it in full): the decoder raises only
`AircProtocolError` and decides the same however the input is split; the connection never
raises and stays within its configured bounds. Here `TestOneInput` runs over a hypothesis
corpus of valid frames and mutations of them, always; and, where atheris is installed, the
real fuzzer runs briefly as a subprocess.
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
from airlane.wire.airc.errors import ErrorCode
from airlane.wire.airc.frame import SIGNALLING_STREAM, Flags, Frame, encode_frame
from airlane.wire.airc.signalling import (
    Cancel,
    GoAway,
    TimeRequest,
    TimeResponse,
    encode_signal,
)

from ..chunking import PROPERTY

TARGET = Path(__file__).resolve().parents[3] / "fuzz" / "airc_decoder.py"


def load_target() -> ModuleType:
    spec = importlib.util.spec_from_file_location("airc_decoder_fuzz", TARGET)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


target = load_target()

signal_payloads = st.one_of(
    st.builds(lambda n: encode_signal(TimeRequest(n)), st.integers(0, 3)),
    st.builds(lambda n: encode_signal(TimeResponse(1, n, n)), st.integers(0, 2**32 - 1)),
    st.builds(lambda c: encode_signal(GoAway(c, "bye")), st.sampled_from(ErrorCode)),
    st.builds(lambda r, s: encode_signal(Cancel(r, s)), st.integers(0, 9), st.integers(0, 9)),
    st.binary(max_size=8),
)
frames = st.builds(
    Frame,
    stream_id=st.sampled_from([0, 1, 2, 3, 7, SIGNALLING_STREAM, 0xFFFF]),
    seq=st.sampled_from([0, 1, 2, 3, 4, 5, 9, 0xFFFFFFFF]),
    timestamp=st.integers(0, 2**32 - 1),
    payload=st.one_of(st.binary(max_size=120), signal_payloads, st.just(b"x" * 301)),
    flags=st.sampled_from([Flags(bits) for bits in range(8)]),
)
mutations = st.lists(
    st.tuples(
        st.sampled_from(["flip", "truncate", "insert", "delete", "repeat"]),
        st.integers(0, 10_000),
        st.binary(min_size=1, max_size=4),
    ),
    max_size=3,
)


def mutate(data: bytes, edits: list[tuple[str, int, bytes]]) -> bytes:
    for kind, where, extra in edits:
        at = where % (len(data) + 1)
        if kind == "flip" and at < len(data):
            data = data[:at] + bytes([data[at] ^ extra[0]]) + data[at + 1 :]
        elif kind == "truncate":
            data = data[:at]
        elif kind == "insert":
            data = data[:at] + extra + data[at:]
        elif kind == "delete":
            data = data[:at] + data[at + len(extra) :]
        elif kind == "repeat":
            data = data[:at] + data[at:] * 2
    return data


@PROPERTY
@given(st.lists(frames, max_size=8), mutations)
def test_invariants_hold_on_mutated_frames(
    sequence: list[Frame], edits: list[tuple[str, int, bytes]]
) -> None:
    data = b"".join(map(encode_frame, sequence))
    target.TestOneInput(data)
    target.TestOneInput(mutate(data, edits))


@PROPERTY
@given(st.binary(max_size=400))
def test_invariants_hold_on_any_bytes(data: bytes) -> None:
    target.TestOneInput(data)


def test_structured_frames_carry_valid_crcs() -> None:
    # flags EOM, stream index 1 (StreamID 1), seq 1, 3 bytes of payload
    assert target.structured_frames(b"\x02\x01\x01\x03abc") == encode_frame(
        Frame(1, 1, 1000, b"abc", Flags.EOM)
    )
    assert target.structured_frames(b"\x02\x01") == b""


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
