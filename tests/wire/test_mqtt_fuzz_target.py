"""The fuzz target ``fuzz/mqtt_client.py``, run as a test.

Its invariant (the target's docstring has it in full): the packet reader raises only
`MQTTDecodeError` and decides the same however the input is split; the client connection never
raises, whatever the broker sends, closes at most once, reports only what it published or
subscribed, keeps within the broker's receive maximum, and writes only well-formed packets.
Here `TestOneInput` runs over a hypothesis corpus of valid broker packets and mutations of
them, always; and, where atheris is installed, the real fuzzer runs briefly as a subprocess.
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
from airlane.wire.mqtt.packets import (
    MQTT_5,
    MQTT_311,
    Ack,
    ConnAck,
    Disconnect,
    Packet,
    PacketType,
    PingResp,
    Publish,
    SubAck,
    UnsubAck,
    encode_packet,
)
from airlane.wire.mqtt.properties import Properties

from .airc.test_fuzz_target import mutate, mutations
from .chunking import PROPERTY

TARGET = Path(__file__).resolve().parents[2] / "fuzz" / "mqtt_client.py"


def load_target() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mqtt_client_fuzz", TARGET)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


target = load_target()

ids = st.sampled_from([1, 2, 3, 4, 5, 50, 65535])
codes = st.sampled_from([0, 0x10, 0x80, 0x87, 0x92])
acks = st.sampled_from(
    [PacketType.PUBACK, PacketType.PUBREC, PacketType.PUBREL, PacketType.PUBCOMP]
)
packets = st.one_of(
    st.builds(
        lambda qos, packet_id, payload, retain, dup: Publish(
            "a/b", payload, qos, retain, dup, packet_id if qos else None, Properties()
        ),
        st.integers(0, 2),
        ids,
        st.binary(max_size=80),
        st.booleans(),
        st.booleans(),
    ),
    st.builds(Ack, acks, ids, codes),
    st.builds(lambda packet_id: SubAck(packet_id, (1,), Properties()), ids),
    st.builds(lambda packet_id: UnsubAck(packet_id, (0,), Properties()), ids),
    st.just(PingResp()),
    st.builds(lambda code: Disconnect(code, Properties()), codes),
    st.builds(lambda present, code: ConnAck(present, code, Properties()), st.booleans(), codes),
)


def stream(sequence: list[Packet], version: int) -> bytes:
    return b"".join(encode_packet(packet, version) for packet in sequence)


@PROPERTY
@given(st.lists(packets, max_size=10), mutations, st.sampled_from([MQTT_311, MQTT_5]))
def test_invariants_hold_on_mutated_packets(
    sequence: list[Packet], edits: list[tuple[str, int, bytes]], version: int
) -> None:
    data = stream(sequence, version)
    target.TestOneInput(data)
    target.TestOneInput(mutate(data, edits))


@PROPERTY
@given(st.binary(max_size=400))
def test_invariants_hold_on_any_bytes(data: bytes) -> None:
    target.TestOneInput(data)


def test_flows_the_corpus_must_reach() -> None:
    # A whole QoS 2 exchange each way, acknowledgements of the client's own messages, the
    # SUBACK and UNSUBACK it waits for, an unknown PUBREC, and a normal end.
    for version in (MQTT_311, MQTT_5):
        sequence: list[Packet] = [
            Ack(PacketType.PUBACK, 1),
            Ack(PacketType.PUBREC, 2),
            Ack(PacketType.PUBCOMP, 2),
            Ack(PacketType.PUBREC, 50),
            Ack(PacketType.PUBCOMP, 50),
            SubAck(3, (2,), Properties()),
            UnsubAck(4, (0,) if version == MQTT_5 else (), Properties()),
            Publish("a/b", b"m", 2, packet_id=7, properties=Properties()),
            Publish("a/b", b"m", 2, dup=True, packet_id=7, properties=Properties()),
            Ack(PacketType.PUBREL, 7),
            PingResp(),
            Disconnect(),
        ]
        target.TestOneInput(stream(sequence, version))


def test_structured_packets_are_valid_packets() -> None:
    # kind PUBACK (index 1), packet id index 0 (id 1), code 0, no body
    assert target.structured_packets(b"\x01\x00\x00\x00", MQTT_311) == encode_packet(
        Ack(PacketType.PUBACK, 1), MQTT_311
    )
    # kind PUBLISH, id index 5 (50), code 0x05: QoS 2, properties; body "xy"
    assert target.structured_packets(b"\x00\x05\x05\x02xy", MQTT_5) == encode_packet(
        Publish(
            "a", b"xy", 2, packet_id=50,
            properties=Properties(reason_string="r", user_properties=(("k", "v"),)),
        ),
        MQTT_5,
    )  # fmt: skip
    assert target.structured_packets(b"\x05\x01", MQTT_5) == b""


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
            "-runs=5000",
            "-max_total_time=10",
            f"-artifact_prefix={tmp_path}/",
        ],
        capture_output=True,
        text=True,
        timeout=100,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Done" in result.stderr
