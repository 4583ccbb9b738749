"""The bridge logs in to a real Mosquitto the ways brokers ask for: TLS (``mqtts://``, the
broker's certificate checked against ``ca_file``), a user name and password (in the URL or in
the fields), and a client certificate (mTLS). Refused, it says why in ``stats.last_error``,
connects again with a bounded backoff, and the gateway serves on meanwhile.

The certificates come from `airlane.security.certs` (a throwaway CA, a server certificate
for 127.0.0.1 and localhost, a client one); the broker reads them, and its password file,
from its own directory, since it runs as the current user."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import ssl
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import aiomqtt
import orjson
import pytest

from airlane.eventlog import NewEvent
from airlane.gateway import Gateway
from airlane.security.certs import IssuedFiles, issue_certificate, make_ca
from airlane.transports.mqtt import MqttBridge, MqttBridgeConfig
from tests.mosquitto import Mosquitto
from tests.mqtt.support import PRINCIPAL, stored

USER, PASSWORD = "edge-bridge", "s3cret:/@pass"
"""The password has the characters a URL must escape (``:``, ``/``, ``@``)."""
FAST = {"reconnect_min_s": 0.05, "reconnect_max_s": 0.2, "connect_timeout_s": 3.0}
"""A bounded backoff, so that a refused bridge tries several times in a second."""


class Pki:
    """A throwaway CA, the broker's certificate and a client certificate, in the broker's
    directory."""

    def __init__(self, directory: Path) -> None:
        self.ca = make_ca(directory / "ca", "airlane.test")
        self.server = issue_certificate(
            directory / "ca", "spiffe://airlane.test/mosquitto", directory, name="server"
        )
        self.client = issue_certificate(
            directory / "ca", "spiffe://airlane.test/bridge", directory, name="client"
        )

    def listener(self, *, require_certificate: bool = False) -> str:
        """Mosquitto's TLS lines for a listener."""
        lines = f"cafile {self.ca.cert}\ncertfile {self.server.cert}\nkeyfile {self.server.key}\n"
        if require_certificate:
            lines += "require_certificate true\n"
        return lines

    def client_context(self, client: IssuedFiles | None = None) -> ssl.SSLContext:
        """What a publisher trusts (the CA), with a client certificate for mTLS."""
        context = ssl.create_default_context(cafile=self.ca.cert)
        if client is not None:
            context.load_cert_chain(client.cert, client.key)
        return context


@pytest.fixture
def broker_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "broker"
    directory.mkdir()
    return directory


@pytest.fixture
def pki(broker_dir: Path) -> Pki:
    return Pki(broker_dir)


@contextlib.contextmanager
def _running(broker: Mosquitto) -> Iterator[Mosquitto]:
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def _password_file(directory: Path, user: str, password: str) -> Path:
    path = directory / "passwords"
    subprocess.run(
        ["mosquitto_passwd", "-b", "-c", str(path), user, password],
        check=True,
        timeout=10,
        capture_output=True,
    )
    return path


async def _until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The bridge's warnings, both connections', in the order they were logged."""
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "airlane.mqtt" and r.levelno == logging.WARNING
    ]


def _failures(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The bridge's warnings about its subscriber connection, one per failed connection.

    The publisher connection retries on its own schedule and logs as ``publisher``; counting
    both would halve the pauses a test sees between the failures it counts."""
    return [message for message in _warnings(caplog) if ": subscriber: " in message]


async def _stores_through(
    gateway: Gateway,
    config: MqttBridgeConfig,
    state_dir: Path,
    publisher: aiomqtt.Client,
    log: str,
) -> MqttBridge:
    """Start a bridge, publish one message with ``publisher``, and wait for it in ``log``."""
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    await bridge.start()
    try:
        await bridge.wait_connected(5)
        async with publisher:
            await publisher.publish(f"airlane/logs/{log}", orjson.dumps({"log": log}), qos=1)
        records = await stored(gateway, log, 1)
    finally:
        await bridge.aclose()
    assert [r.json() for r in records] == [{"log": log}]
    assert records[0].headers["mqtt-topic"] == f"airlane/logs/{log}"
    assert bridge.stats.connects == 1
    assert bridge.stats.last_error is None
    return bridge


async def _refused(
    gateway: Gateway,
    config: MqttBridgeConfig,
    state_dir: Path,
    caplog: pytest.LogCaptureFixture,
    attempts: int = 4,
) -> MqttBridge:
    """Start a bridge the broker refuses; wait for ``attempts`` failed connections and
    check that it never connected and the gateway serves on. The bridge is left running."""
    caplog.set_level(logging.WARNING, logger="airlane.mqtt")
    bridge = MqttBridge(gateway, config, state_dir=state_dir)
    await bridge.start()
    try:
        await _until(lambda: len(_failures(caplog)) >= attempts)
        assert bridge.stats.connects == 0
        assert not bridge.stats.connected
        assert not bridge.up.is_set()
        assert bridge.stats.last_error is not None
        # ``last_error`` is the latest failure of either connection, as logged.
        assert _warnings(caplog)[-1].endswith(bridge.stats.last_error)
        # The gateway is not held up by the bridge.
        assert gateway.health()["status"] == "ok"
        await gateway.logs.create(PRINCIPAL, "direct")
        await gateway.logs.append(PRINCIPAL, "direct", [NewEvent("note", b'{"ok": 1}')])
        assert [r.json() for r in await gateway.logs.read(PRINCIPAL, "direct")] == [{"ok": 1}]
    except BaseException:
        await bridge.aclose()
        raise
    return bridge


# -- TLS ----------------------------------------------------------------------------------


async def test_tls_with_the_ca_file_connects_and_stores(
    broker_dir: Path, pki: Pki, gateway: Gateway, state_dir: Path
) -> None:
    with _running(Mosquitto(broker_dir, listener=pki.listener())) as broker:
        config = MqttBridgeConfig(f"mqtts://127.0.0.1:{broker.port}", ca_file=str(pki.ca.cert))
        assert config.address.tls
        publisher = aiomqtt.Client(
            "127.0.0.1",
            broker.port,
            identifier="tls-sensor",
            protocol=aiomqtt.ProtocolVersion.V5,
            tls_context=pki.client_context(),
        )
        await _stores_through(gateway, config, state_dir, publisher, "tls")


async def test_tls_without_the_ca_fails_verification_and_keeps_retrying(
    broker_dir: Path,
    pki: Pki,
    gateway: Gateway,
    state_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with _running(Mosquitto(broker_dir, listener=pki.listener())) as broker:
        # No ca_file: the system's trust store, which does not know the throwaway CA.
        config = MqttBridgeConfig(f"mqtts://127.0.0.1:{broker.port}", **FAST)
        bridge = await _refused(gateway, config, state_dir, caplog)
        await bridge.aclose()
    error = bridge.stats.last_error or ""
    assert error.startswith(f"the certificate of the broker 127.0.0.1:{broker.port} failed "), error
    assert "verification against the system's CAs" in error
    assert "certificate verify failed" in error
    assert bridge.stats.connects == 0


async def test_a_ca_file_that_is_missing_is_named_in_the_error(
    broker_dir: Path,
    pki: Pki,
    gateway: Gateway,
    state_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    missing = broker_dir / "no-such-ca.pem"
    with _running(Mosquitto(broker_dir, listener=pki.listener())) as broker:
        config = MqttBridgeConfig(f"mqtts://127.0.0.1:{broker.port}", ca_file=str(missing), **FAST)
        bridge = await _refused(gateway, config, state_dir, caplog, attempts=2)
        await bridge.aclose()
    assert bridge.stats.last_error is not None
    assert bridge.stats.last_error.startswith(f"cannot use the ca_file {str(missing)!r}: ")


async def test_plain_mqtt_to_a_tls_listener_does_not_connect(
    broker_dir: Path,
    pki: Pki,
    gateway: Gateway,
    state_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    with _running(Mosquitto(broker_dir, listener=pki.listener())) as broker:
        config = MqttBridgeConfig(f"mqtt://127.0.0.1:{broker.port}", **FAST)
        bridge = await _refused(gateway, config, state_dir, caplog, attempts=2)
        await bridge.aclose()
    assert bridge.stats.connects == 0
    assert (bridge.stats.last_error or "").startswith(
        ("the connection to the broker broke", "the broker closed the connection")
    ), bridge.stats.last_error


# -- user name and password ---------------------------------------------------------------


@pytest.fixture
def login_broker(broker_dir: Path) -> Iterator[Mosquitto]:
    """A broker that takes only ``USER`` with ``PASSWORD``."""
    passwords = _password_file(broker_dir, USER, PASSWORD)
    broker = Mosquitto(broker_dir, allow_anonymous=False, extra=f"password_file {passwords}\n")
    with _running(broker) as running:
        yield running


def _login_publisher(broker: Mosquitto) -> aiomqtt.Client:
    return aiomqtt.Client(
        "127.0.0.1",
        broker.port,
        identifier="login-sensor",
        username=USER,
        password=PASSWORD,
        protocol=aiomqtt.ProtocolVersion.V5,
    )


async def test_a_login_in_the_url_connects_and_stores(
    login_broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    escaped = "s3cret%3A%2F%40pass"
    config = MqttBridgeConfig(f"mqtt://{USER}:{escaped}@127.0.0.1:{login_broker.port}")
    assert config.login == (USER, PASSWORD)
    await _stores_through(gateway, config, state_dir, _login_publisher(login_broker), "url")


@pytest.mark.parametrize("protocol", [5, 4])
async def test_a_login_in_the_fields_connects_and_stores(
    login_broker: Mosquitto, gateway: Gateway, state_dir: Path, protocol: int
) -> None:
    config = MqttBridgeConfig(login_broker.url, username=USER, password=PASSWORD, protocol=protocol)
    await _stores_through(gateway, config, state_dir, _login_publisher(login_broker), "fields")


async def test_the_fields_win_over_the_url(
    login_broker: Mosquitto, gateway: Gateway, state_dir: Path
) -> None:
    config = MqttBridgeConfig(
        f"mqtt://{USER}:wrong@127.0.0.1:{login_broker.port}", password=PASSWORD
    )
    assert config.login == (USER, PASSWORD)
    await _stores_through(gateway, config, state_dir, _login_publisher(login_broker), "both")


@pytest.mark.parametrize(
    ("protocol", "login"),
    [
        (5, {"username": USER, "password": "wrong"}),
        (4, {"username": USER, "password": "wrong"}),
        (5, {}),  # no login at all, to a broker without anonymous access
    ],
    ids=["mqtt5-wrong-password", "mqtt311-wrong-password", "mqtt5-anonymous"],
)
async def test_a_refused_login_says_why_and_retries_with_a_bounded_backoff(
    login_broker: Mosquitto,
    gateway: Gateway,
    state_dir: Path,
    caplog: pytest.LogCaptureFixture,
    protocol: int,
    login: dict[str, str],
) -> None:
    config = MqttBridgeConfig(login_broker.url, protocol=protocol, **login, **FAST)
    started = asyncio.get_running_loop().time()
    bridge = await _refused(gateway, config, state_dir, caplog, attempts=5)
    elapsed = asyncio.get_running_loop().time() - started
    await bridge.aclose()
    # Mosquitto says "not authorized": 0x87 (MQTT 5), 5 (3.1.1).
    code = "0x87" if protocol == 5 else "0x05"
    assert bridge.stats.last_error == (
        f"the broker refused the connection: not authorized (CONNACK reason code {code})"
    )
    # Five tries, pauses doubling from 0.05 s up to 0.2 s (with jitter): well under 3 s,
    # and not a tight loop either.
    assert 0.1 < elapsed < 3.0
    assert bridge.stats.connects == 0


async def test_a_refused_bridge_connects_once_the_broker_accepts_its_login(
    login_broker: Mosquitto,
    broker_dir: Path,
    gateway: Gateway,
    state_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = MqttBridgeConfig(login_broker.url, username=USER, password="rotated", **FAST)
    bridge = await _refused(gateway, config, state_dir, caplog, attempts=2)
    try:
        # The operator sets the password the bridge has; SIGHUP reloads the password file.
        _password_file(broker_dir, USER, "rotated")
        assert login_broker.process is not None
        login_broker.process.send_signal(signal.SIGHUP)
        await bridge.wait_connected(5)
        assert bridge.stats.connects == 1
        assert bridge.stats.connected
    finally:
        await bridge.aclose()


# -- client certificates (mTLS) -------------------------------------------------------------

BEFORE_CONNACK = (
    "the broker refused the TLS connection before CONNACK: ",
    "the broker ended the TLS connection before CONNACK",
)
"""Under TLS 1.3 the broker checks a client certificate after the handshake: the bridge reads
its alert, or a reset when its CONNECT crossed the alert (then with a hint)."""


@pytest.fixture
def mtls_broker(broker_dir: Path, pki: Pki) -> Iterator[Mosquitto]:
    """A TLS broker that takes only clients with a certificate from the CA."""
    broker = Mosquitto(broker_dir, listener=pki.listener(require_certificate=True))
    with _running(broker) as running:
        yield running


async def test_a_client_certificate_connects_and_stores(
    mtls_broker: Mosquitto, pki: Pki, gateway: Gateway, state_dir: Path
) -> None:
    config = MqttBridgeConfig(
        f"mqtts://localhost:{mtls_broker.port}",
        ca_file=str(pki.ca.cert),
        cert_file=str(pki.client.cert),
        key_file=str(pki.client.key),
    )
    publisher = aiomqtt.Client(
        "127.0.0.1",
        mtls_broker.port,
        identifier="mtls-sensor",
        protocol=aiomqtt.ProtocolVersion.V5,
        tls_context=pki.client_context(pki.client),
    )
    await _stores_through(gateway, config, state_dir, publisher, "mtls")


async def test_without_a_client_certificate_the_bridge_is_refused(
    mtls_broker: Mosquitto,
    pki: Pki,
    gateway: Gateway,
    state_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = MqttBridgeConfig(
        f"mqtts://127.0.0.1:{mtls_broker.port}", ca_file=str(pki.ca.cert), **FAST
    )
    bridge = await _refused(gateway, config, state_dir, caplog, attempts=3)
    await bridge.aclose()
    # The broker's TLS alert, or (when the bridge's CONNECT crossed it) a reset, with a hint.
    error = bridge.stats.last_error or ""
    assert error.startswith(BEFORE_CONNACK), error
    assert "alert certificate required" in error or error.endswith(
        "(if it requires a client certificate, the bridge has none (cert_file, key_file))"
    ), error
    assert bridge.stats.connects == 0


async def test_a_client_certificate_from_another_ca_is_refused(
    mtls_broker: Mosquitto,
    pki: Pki,
    tmp_path: Path,
    gateway: Gateway,
    state_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    make_ca(tmp_path / "evil", "airlane.test")
    stranger = issue_certificate(
        tmp_path / "evil", "spiffe://airlane.test/bridge", tmp_path / "evil", name="client"
    )
    config = MqttBridgeConfig(
        f"mqtts://127.0.0.1:{mtls_broker.port}",
        ca_file=str(pki.ca.cert),
        cert_file=str(stranger.cert),
        key_file=str(stranger.key),
        **FAST,
    )
    bridge = await _refused(gateway, config, state_dir, caplog, attempts=3)
    await bridge.aclose()
    error = bridge.stats.last_error or ""
    assert error.startswith(BEFORE_CONNACK), error
    assert "alert unknown ca" in error or error.endswith(
        f"(if it requires a client certificate, it may have refused the cert_file "
        f"{str(stranger.cert)!r})"
    ), error
    assert bridge.stats.connects == 0
