"""The public surface of airlane.wire.mqtt is deliberate (STYLE.md section 6)."""

from __future__ import annotations

import importlib

import pytest

import airlane.wire.mqtt

MODULES = ["connection", "packets", "primitives", "properties", "topics"]


def test_package_exports() -> None:
    assert sorted(airlane.wire.mqtt.__all__) == sorted(
        [
            "MQTT_5",
            "MQTT_311",
            "ClientSession",
            "Connect",
            "Connected",
            "ConnectionClosed",
            "FilterTree",
            "LocalProtocolError",
            "MQTTClientConnection",
            "MQTTDecodeError",
            "MessageReceived",
            "MessageReleased",
            "PacketReader",
            "Properties",
            "Publish",
            "PublishDone",
            "State",
            "Subscribed",
            "Subscription",
            "Unsubscribed",
            "Will",
            "check_filter",
            "check_topic",
            "decode_packet",
            "encode_packet",
            "filter_matches",
            "shared_filter",
        ]
    )
    assert len(set(airlane.wire.mqtt.__all__)) == len(airlane.wire.mqtt.__all__)
    for name in airlane.wire.mqtt.__all__:
        assert getattr(airlane.wire.mqtt, name) is not None


@pytest.mark.parametrize("name", MODULES)
def test_every_public_name_exists_and_is_documented(name: str) -> None:
    module = importlib.import_module(f"airlane.wire.mqtt.{name}")
    assert module.__doc__
    for public in module.__all__:
        value = getattr(module, public)
        if callable(value):
            assert value.__doc__, f"{name}.{public} has no docstring"


def test_package_names_are_the_modules_own() -> None:
    for name in airlane.wire.mqtt.__all__:
        value = getattr(airlane.wire.mqtt, name)
        owners = [
            module
            for module in MODULES
            if name in importlib.import_module(f"airlane.wire.mqtt.{module}").__all__
        ]
        assert owners, f"{name} is exported by no module"
        for owner in owners:
            assert getattr(importlib.import_module(f"airlane.wire.mqtt.{owner}"), name) is value


def test_no_io_in_the_mqtt_wire() -> None:
    for name in ["__init__", *MODULES]:
        module = importlib.import_module(
            "airlane.wire.mqtt" if name == "__init__" else f"airlane.wire.mqtt.{name}"
        )
        assert module.__file__ is not None
        with open(module.__file__, encoding="utf-8") as file:
            text = file.read()
        for forbidden in ("import asyncio", "import socket", "import time", "from time"):
            assert forbidden not in text, f"{name} uses {forbidden!r}"
