"""`NodeTable`: liveness and remote readers from heartbeats (time passed in).

Silence is counted while this process hears its own heartbeats coming back (``me`` below), so
each test says when they came back (`hear`).
"""

from __future__ import annotations

from airlane.hub.jetstream.presence import MAX_PAUSE_S, Heartbeat, Member, NodeTable

ME = Member("me", "1")
B, X = Member("b", "rb"), Member("x", "rx")


def hear(table: NodeTable, start: float, end: float) -> None:
    """This process's own heartbeats came back every 0.5 s from ``start`` to ``end``."""
    t = start
    while t <= end + 1e-9:
        assert table.observe(Heartbeat("me", run="1"), t) == []
        t += 0.5


def test_heartbeats_round_trip_and_garbage_is_ignored():
    beat = Heartbeat("a", {"s": 2}, ["p"], partial=True, run="r1")
    assert Heartbeat.from_bytes(beat.to_bytes()) == beat
    following = Heartbeat("a", run="r1", logs={"YQ.r2": 17})
    assert Heartbeat.from_bytes(following.to_bytes()) == following
    pausing = Heartbeat("a", partial=True, run="r1", pause_s=2.5)
    assert Heartbeat.from_bytes(pausing.to_bytes()) == pausing
    assert b"pause_s" not in beat.to_bytes()  # only when there is one
    # An announced pause is bounded, and a negative one is none.
    assert Heartbeat.from_bytes(b'{"node": "a", "pause_s": 1e9}').pause_s == MAX_PAUSE_S
    assert Heartbeat.from_bytes(b'{"node": "a", "pause_s": -5}').pause_s == 0.0
    for junk in (
        b"",
        b"[]",
        b'{"readers": 1}',
        b'{"node": "a", "readers": {"s": "x"}}',
        b'{"node": "a", "logs": {"YQ.r2": "x"}}',
        b'{"node": "a", "pause_s": "long"}',
    ):
        assert Heartbeat.from_bytes(junk) is None


def test_liveness_needs_time_to_tell():
    table = NodeTable(ME, started=100.0, timeout_s=3.0)
    assert table.alive(ME) is True
    hear(table, 100.0, 102.0)
    assert table.alive(X) is None  # too early to call a stranger dead
    hear(table, 102.5, 104.0)
    assert table.alive(X) is False
    table.observe(Heartbeat("x", run="rx"), 104.2)
    hear(table, 104.5, 107.0)
    assert table.alive(X) is True
    hear(table, 107.5, 107.5)
    assert table.alive(X) is False


def test_a_process_that_heard_nobody_declares_nobody_dead():
    table = NodeTable(ME, started=0.0, timeout_s=3.0)
    table.observe(Heartbeat("b", {"s": 1}, ["gen"], run="rb"), 1.0)
    hear(table, 0.0, 2.0)
    # Paused (or cut off from the broker, or the broker was down) from 2 s to 30 s: it heard
    # nothing, not even its own heartbeats, so the silence is not b's.
    hear(table, 30.0, 30.0)
    assert table.alive(B) is True
    assert table.expire() == ([], [])
    # b comes back a little later than this process (its reconnection took longer): fine.
    hear(table, 30.5, 31.5)
    table.observe(Heartbeat("b", {"s": 1}, run="rb"), 31.7)
    table.observe(Heartbeat("x", run="rx"), 31.7)
    hear(table, 32.0, 34.5)
    assert table.alive(B) is True and table.alive(X) is True
    table.observe(Heartbeat("x", run="rx"), 34.6)
    # b died: its silence, heard, passes the timeout.
    hear(table, 35.0, 35.0)
    assert table.alive(B) is False and table.alive(X) is True
    dead, changes = table.expire()
    assert dead == [B] and changes == [("s", 1, 0)]


def test_a_member_that_announced_a_pause_is_not_dead_until_the_timeout_after_it():
    table = NodeTable(ME, started=0.0, timeout_s=3.0)
    hear(table, 0.0, 5.0)
    table.observe(Heartbeat("b", run="rb"), 5.0)
    table.observe(Heartbeat("x", run="rx"), 5.0)
    table.observe(Heartbeat("b", partial=True, run="rb", pause_s=4.0), 5.1)
    # b's regular heartbeat, sent before its pause began, does not take the allowance back.
    table.observe(Heartbeat("b", run="rb"), 5.12)
    hear(table, 5.5, 10.0)
    # Both silent since ~5 s: x past the timeout, b's silence counts from 9.12 only.
    assert table.alive(X) is False
    assert table.alive(B) is True
    hear(table, 10.5, 12.0)
    assert table.alive(B) is True
    hear(table, 12.5, 12.5)
    assert table.alive(B) is False  # 3.38 s of silence after its pause
    dead, _ = table.expire()
    assert set(dead) == {B, X}
    assert B not in table.paused_until


def test_an_announced_pause_is_at_most_max_pause_s():
    table = NodeTable(ME, started=0.0, timeout_s=3.0)
    hear(table, 0.0, 5.0)
    table.observe(Heartbeat("b", partial=True, run="rb", pause_s=1e6), 5.0)
    end = 5.0 + MAX_PAUSE_S + 3.0
    hear(table, 5.5, end - 0.5)
    assert table.alive(B) is True
    hear(table, end, end + 0.5)
    assert table.alive(B) is False


def test_reader_counts_change_with_full_and_partial_beats_and_death():
    table = NodeTable(ME, started=0.0, timeout_s=3.0)
    assert sorted(table.observe(Heartbeat("b", {"s": 1, "t": 2}, run="rb"), 1.0)) == [
        ("s", 0, 1),
        ("t", 0, 2),
    ]
    assert table.remote_readers("s") == 1
    assert table.observe(Heartbeat("b", {"s": 0}, partial=True, run="rb"), 1.5) == [("s", 1, 0)]
    assert table.remote_readers("t") == 1  # a partial beat leaves the others alone
    assert table.observe(Heartbeat("b", {"t": 2, "v": 3}, partial=True, run="rb"), 1.6) == [
        ("v", 0, 3)
    ]
    assert table.observe(Heartbeat("b", {"v": 0}, partial=True, run="rb"), 1.7) == [("v", 3, 0)]
    assert table.observe(Heartbeat("b", {}, run="rb"), 2.0) == [("t", 2, 0)]  # a full one replaces
    table.observe(Heartbeat("b", {"u": 1}, ["gen"], run="rb"), 2.5)
    hear(table, 2.5, 6.0)
    dead, changes = table.expire()
    assert dead == [B] and changes == [("u", 1, 0)]
    assert table.producers["gen"] == B and table.alive(B) is False


def test_a_leaving_node_is_forgotten_at_once_and_own_beats_are_ignored():
    table = NodeTable(ME, started=0.0, timeout_s=3.0)
    hear(table, 0.0, 3.5)
    table.observe(Heartbeat("b", {"s": 1}, run="rb"), 3.6)
    assert table.observe(Heartbeat("b", leaving=True, run="rb"), 3.7) == [("s", 1, 0)]
    assert table.alive(B) is False  # at once, not after a timeout
    assert table.observe(Heartbeat("me", {"s": 5}, run="1"), 3.8) == []


def test_a_node_restarted_under_its_id_is_a_new_member_and_the_old_one_dies():
    table = NodeTable(ME, started=0.0, timeout_s=3.0)
    old, new = Member("a", "r1"), Member("a", "r2")
    table.observe(Heartbeat("a", {"s": 1}, ["gen"], run="r1"), 1.0)
    hear(table, 0.0, 1.0)
    # SIGKILL, and the node is back under its id a moment later: its beats do not keep the
    # old process (and the streams it produced) alive.
    for t in (1.5, 2.5, 3.5, 4.5):
        table.observe(Heartbeat("a", {}, run="r2"), t)
        hear(table, t, t + 0.5)
    assert table.alive(new) is True
    assert table.alive(old) is False
    assert table.producers["gen"] == old
    dead, changes = table.expire()
    assert dead == [old] and changes == [("s", 1, 0)]
    # A record made before runs existed names only the node: any of its processes will do.
    assert table.alive(Member("a", "")) is True


def test_another_run_of_this_nodes_own_id_is_dead_at_once():
    table = NodeTable(ME, started=0.0, timeout_s=3.0)
    assert table.alive(Member("me", "0")) is False  # this node before its restart
    assert table.alive(Member("me", "")) is None  # too early to tell for an old record
    table.observe(Heartbeat("me", run="0"), 0.2)  # two live processes share the id
    hear(table, 0.3, 1.0)
    assert table.alive(Member("me", "0")) is True


def test_the_report_lists_the_living_then_the_gone_and_forgets_the_oldest():
    table = NodeTable(ME, started=0.0, timeout_s=3.0)
    table.observe(Heartbeat("b", {"s": 2, "t": 1}, ["gen"], run="rb"), 0.5)
    table.observe(Heartbeat("x", run="rx"), 0.5)
    hear(table, 0.0, 1.0)
    me, b, x = table.report(1.0)
    assert me["self"] is True and me["node"] == "me"
    assert (b["node"], b["alive"], b["producing"], b["readers"]) == ("b", True, 1, 3)
    assert b["streams"] == ["gen"]
    assert x["heard_s_ago"] == 0.5
    table.observe(Heartbeat("x", run="rx", leaving=True), 1.2)  # x shuts down cleanly
    hear(table, 1.5, 5.0)  # b says nothing more: silent past the timeout
    dead, _ = table.expire()
    assert dead == [B]
    rows = table.report(5.0)
    assert [(r["node"], r["alive"], r.get("gone")) for r in rows] == [
        ("me", True, None), ("b", False, "silent"), ("x", False, "left")]  # fmt: skip
    assert rows[1]["heard_s_ago"] == 4.5
    table.observe(Heartbeat("b", run="rb"), 5.2)  # b is back: no longer gone
    assert [r["node"] for r in table.report(5.2) if r.get("gone")] == ["x"]
    for n in range(40):
        table.observe(Heartbeat(f"n{n}", run="r", leaving=True), 6.0)
    assert len([r for r in table.report(6.0) if r.get("gone")]) == 32
