"""Configuration files: the documented example loads, and mistakes are reported."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from airlane.core import OrphanMode
from airlane.hub import MemoryHub
from airlane.hub.jetstream import HomeLogHub, JetStreamHub
from airlane.server import ServerConfig, build_hub, load_config

EXAMPLE = Path(__file__).parent.parent.parent / "docs" / "airlane.example.toml"


def test_the_documented_example_is_the_defaults():
    config = load_config(EXAMPLE)
    assert config == ServerConfig()


def test_sections_override_defaults(tmp_path):
    path = tmp_path / "a.toml"
    path.write_text(
        '[orphan]\nmode = "cancel"\n[http]\ncors_origins = ["*"]\n'
        '[retention]\nmax_events = 8\n[api_keys]\nk = "alice"\n'
    )
    config = load_config(path)
    assert config.orphan.mode is OrphanMode.CANCEL
    assert config.http.cors_origins == ("*",)
    assert config.retention.max_events == 8
    assert config.api_keys == {"k": "alice"}


def test_the_gc_section(tmp_path):
    path = tmp_path / "gc.toml"
    path.write_text("[gc]\npaced = false\nmax_full_interval_s = 60\n")
    config = load_config(path)
    assert not config.gc.paced and config.gc.max_full_interval_s == 60
    assert config.gc.tick_s == ServerConfig().gc.tick_s


def test_the_airc_page_example_loads(tmp_path):
    page = (EXAMPLE.parent / "airc.md").read_text()
    block = page.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "airc.toml"
    path.write_text(block)
    config = load_config(path)
    assert config.airc.port == 8421
    assert config.airc.connection.send_window == 64
    assert config.airc.connection == ServerConfig().airc.connection


@pytest.mark.parametrize(
    "text",
    [
        "nope = 1\n",
        "[http]\nnope = 1\n",
        '[orphan]\nmode = "x"\n',
        "[airc]\nnope = 1\n",
        "[airc.connection]\nnope = 1\n",
        "[airc.connection]\nsend_window = 0\n",
        "[gc]\nnope = 1\n",
        "[gc]\ntick_s = 0\n",
        "[lanes]\ncontrol_dscp = 64\n",
        "[lanes]\nnope = 1\n",
        "worker_stall_s = -1\n",
    ],
)
def test_mistakes_are_errors(tmp_path, text):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError):
        load_config(path)


def test_the_cluster_page_example_loads_and_builds_a_jetstream_hub(tmp_path):
    page = (EXAMPLE.parent / "cluster.md").read_text()
    block = page.split("```toml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "cluster.toml"
    path.write_text(block)
    config = load_config(path)
    assert config.hub == "nats://127.0.0.1:4222" and config.jetstream.node_id == "a"
    hub = build_hub(config)
    assert isinstance(hub, HomeLogHub) and hub.node == "a"  # the page's layout = "node"
    assert hub.js_config.servers == ("nats://127.0.0.1:4222",)
    assert isinstance(build_hub(ServerConfig()), MemoryHub)
    stream_layout = replace(config, jetstream=replace(config.jetstream, layout="stream"))
    hub = build_hub(stream_layout)
    assert isinstance(hub, JetStreamHub) and not isinstance(hub, HomeLogHub)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[jetstream]\nservers = ["nats://x"]\n', "hub = 'nats://"),
        ('[jetstream]\nprefix = "Bad Prefix"\n', "prefix"),
        ('[jetstream]\nstorage = "disk"\n', "storage"),
        ("[jetstream]\nheartbeat_s = 5.0\n", "node_timeout_s"),
        ('[jetstream]\nlayout = "nodes"\n', "layout"),
        ("[jetstream]\nlinger_ms = -1\n", "linger_ms"),
        ("[jetstream]\nbusy_linger_ms = 101\n", "busy_linger_ms"),
        ("[jetstream]\ntrim_every_s = -1\n", "trim_every_s"),
        ("[jetstream]\nrewrite_after_mb = -1\n", "rewrite_after_mb"),
        ('[jetstream]\ncompression = "lz4"\n', "compression"),
        ('[jetstream]\nmirror = "some"\n', "mirror"),
    ],
)
def test_jetstream_mistakes_are_reported(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_config(path)


def test_a_hub_that_is_not_memory_or_nats_is_refused():
    with pytest.raises(ValueError, match="nats://"):
        build_hub(ServerConfig(hub="redis://x"))
