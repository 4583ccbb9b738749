"""The bridge's configuration: ``[[mqtt]]`` tables, ``--mqtt URL``, and the mistakes that are
refused with a message naming the setting."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from airlane.server.config import ConfigError, load_config
from airlane.transports.mqtt import (
    DEFAULT_INBOUND,
    DataClass,
    InboundRoute,
    MqttBridgeConfig,
    OutboundRoute,
    parse_broker_url,
)

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_edge_page_example_loads(tmp_path: Path) -> None:
    page = (DOCS / "edge.md").read_text()
    block = page.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "edge.toml"
    path.write_text(block)
    (bridge,) = load_config(path).mqtt
    assert bridge.name == "plant-7"
    assert bridge.identifier == "airlane-plant-7"
    assert bridge.address.tls and bridge.address.port == 8883
    assert bridge.login == ("airlane", "change-me")
    assert [r.filter for r in bridge.inbound] == [
        "sensor/+/vibration",
        "commands/#",
        "agents/+/events",
    ]
    assert bridge.inbound[1].require_json and bridge.inbound[1].qos == 2
    assert bridge.inbound[2].stream == "agents/{2}/events"
    assert bridge.outbound == (OutboundRoute("agents/42/results", "results/42", 1, False, 300),)


def test_a_url_alone_gets_the_default_routes(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text('[[mqtt]]\nurl = "mqtt://user:p%40ss@broker"\n[[mqtt]]\nurl = "mqtt://b2"\n')
    first, second = load_config(path).mqtt
    assert first.inbound == DEFAULT_INBOUND and first.outbound == ()
    assert first.login == ("user", "p@ss") and first.address.port == 1883
    assert (first.name, second.name) == ("mqtt1", "mqtt2")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('[[mqtt]]\nname = "x"\n', "has no url"),
        ('[[mqtt]]\nurl = "http://broker"\n', "mqtt://host:port"),
        ('[[mqtt]]\nurl = "mqtt://b"\nnope = 1\n', "unknown [[mqtt]] settings ['nope']"),
        ('[[mqtt]]\nurl = "mqtt://b"\nprotocol = 3\n', "protocol is 5"),
        ('[[mqtt]]\nurl = "mqtt://b"\nreceive_maximum = "many"\n', "receive_maximum must be"),
        ('[[mqtt]]\nurl = "mqtt://b"\n[[mqtt.inbound]]\nfilter = "a/#/b"\nlog = "x"\n', "'#'"),
        ('[[mqtt]]\nurl = "mqtt://b"\n[[mqtt.inbound]]\nfilter = "a/+"\n', "exactly one of"),
        ('[[mqtt]]\nurl = "mqtt://b"\n[[mqtt.inbound]]\nfilter = "a"\nlog = "{0}"\n', "{1}"),
        (
            '[[mqtt]]\nurl = "mqtt://b"\n[[mqtt.outbound]]\nstream = "s"\ntopic = "a/+"\n',
            "wildcard",
        ),
        ("mqtt = 1\n", "mqtt must be an array"),
        ('[[mqtt]]\nurl = "mqtt://b"\nca_file = "ca.pem"\n', "need an mqtts:// url"),
        ('[[mqtt]]\nurl = "mqtts://b"\nkey_file = "k.pem"\n', "key_file goes with a cert_file"),
    ],
)
def test_mistakes_are_refused_with_the_setting_named(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert says in str(caught.value)


def test_broker_urls() -> None:
    assert parse_broker_url("mqtts://h").port == 8883
    assert parse_broker_url("mqtt://[::1]:1884").host == "::1"
    for bad in ("mqtt://", "mqtt://h:99999", "mqtt://h/path", "ws://h"):
        with pytest.raises(ValueError):
            parse_broker_url(bad)
    with pytest.raises(ValueError, match="max_message"):
        MqttBridgeConfig("mqtt://h", max_message=10, max_packet=5)
    with pytest.raises(ValueError, match="qos"):
        InboundRoute("a", log="b", qos=3)


def test_serve_refuses_a_bad_broker_url_in_one_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "airlane", "serve", "--port", "0", "--mqtt", "http://broker"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert "mqtt://host:port" in done.stderr
    assert "Traceback" not in done.stderr


def test_data_classes_replace_and_add_by_name(tmp_path: Path) -> None:
    path = tmp_path / "classes.toml"
    path.write_text(
        '[[mqtt]]\nurl = "mqtt://b"\n'
        '[[mqtt.classes]]\nname = "telemetry"\nqos = 0\nmax_age_s = 3600.0\nlane = "bulk"\n'
        '[[mqtt.classes]]\nname = "alarm"\nqos = 1\nlane = "control"\n'
        '[[mqtt.inbound]]\nfilter = "alarms/#"\nlog = "alarms"\ndata_class = "alarm"\n'
    )
    (bridge,) = load_config(path).mqtt
    classes = {c.name: c for c in bridge.classes}
    assert set(classes) == {"telemetry", "event", "command", "alarm"}
    assert classes["telemetry"].max_age_s == 3600.0
    assert bridge.qos(bridge.inbound[0]) == 1
    with pytest.raises(ValueError, match="no data class 'nope'"):
        MqttBridgeConfig("mqtt://b", inbound=(InboundRoute("a", log="b", data_class="nope"),))
    with pytest.raises(ValueError, match="lane"):
        MqttBridgeConfig("mqtt://b", classes=(DataClass("x", qos=0, lane="fast"),))


def test_the_edge_page_tiers_example_loads(tmp_path: Path) -> None:
    page = (DOCS / "edge.md").read_text()
    block = page.split("```toml\n")[2].split("```", 1)[0]
    path = tmp_path / "tiers.toml"
    path.write_text(block)
    (bridge,) = load_config(path).mqtt
    assert [bridge.qos(route) for route in bridge.inbound] == [0, 1, 2]
    assert {c.name: c.max_age_s for c in bridge.classes}["telemetry"] == 21600.0


def test_the_edge_page_plant_example_loads(tmp_path: Path) -> None:
    page = (DOCS / "edge.md").read_text()
    (block,) = [
        b.split("```", 1)[0] for b in page.split("```toml\n")[1:] if b.startswith("[rules]")
    ]
    path = tmp_path / "plant.toml"
    path.write_text(block)
    config = load_config(path)
    assert config.rules.dir == "/var/lib/airlane/rules"
    (bridge,) = config.mqtt
    assert [bridge.qos(route) for route in bridge.inbound] == [0]
