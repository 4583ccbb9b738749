"""The ICE restart's pieces that need no network: reading a restart fragment, and the check
that the installed aiortc still has the internals the restart reaches into (the restart
itself is exercised end to end with Chromium in tests/webrtc/test_peers.py)."""

from __future__ import annotations

from airlane.transports.http.webrtc.restart import parse_fragment, supported
from tests.webrtc.support import require_aiortc


def test_a_restart_fragment_is_read() -> None:
    remote = parse_fragment(
        "a=ice-ufrag:Ab1\r\na=ice-pwd:secretsecretsecret\r\n"
        "m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\na=mid:0\r\n"
        "a=candidate:1 1 udp 2113937151 10.0.0.2 5000 typ host\r\na=end-of-candidates\r\n"
    )
    assert (remote.ufrag, remote.pwd, remote.ended) == ("Ab1", "secretsecretsecret", True)
    assert remote.candidates == ["candidate:1 1 udp 2113937151 10.0.0.2 5000 typ host"]
    assert remote.mid == "0"
    plain = parse_fragment("a=mid:0\r\n")
    assert (plain.ufrag, plain.pwd, plain.candidates, plain.ended) == (None, None, [], False)
    assert plain.mid == "0" and parse_fragment("").mid is None


def test_the_installed_aiortc_has_what_a_restart_reaches_into() -> None:
    aiortc = require_aiortc()
    transport = aiortc.RTCIceTransport(aiortc.RTCIceGatherer())
    assert supported(transport), "an aiortc upgrade moved an internal: see restart.py"
    assert not supported(object())  # then restarts are refused (422), not attempted
