"""`airlane.bench.stats.steady_window`: the lag samples taken while every stream ran."""

from __future__ import annotations

from array import array

from airlane.bench.config import BenchConfig
from airlane.bench.stats import steady_window, summarize
from airlane.bench.tally import StreamTally

MS = 1_000_000
T0 = 1_000 * MS
"""A clock reading to count from (a tally takes 0 for "no chunk yet")."""


def _chunk(tally: StreamTally, seq: int, lag_ms: int, now_ms: int) -> None:
    tally.chunk(seq, T0 + (now_ms - lag_ms) * MS, 10, T0 + now_ms * MS)


def test_the_window_runs_from_the_last_start_to_the_first_end() -> None:
    lags: array[int] = array("q")
    a, b, c = (StreamTally(lags) for _ in range(3))
    _chunk(a, 1, 50, 0)  # only a running: a start-up sample
    _chunk(b, 1, 40, 1)
    _chunk(c, 1, 30, 2)  # the last stream's first chunk: the window opens here
    _chunk(a, 2, 2, 3)
    _chunk(b, 2, 3, 4)
    _chunk(c, 2, 4, 5)
    _chunk(a, 3, 60, 6)  # a's last chunk: the window closed before it
    _chunk(b, 3, 70, 7)
    _chunk(c, 3, 80, 8)
    assert steady_window([a, b, c]) == (2, 6)
    assert [lag // MS for lag in lags[2:6]] == [30, 2, 3, 4]

    result = summarize("sse", BenchConfig(streams=3, chunks=3, mode="paced"), [a, b, c], lags, MS)
    assert result.steady_lag_ms is not None
    assert result.steady_lag_ms.count == 4 and result.steady_lag_ms.max == 30.0
    assert result.lag_ms.max == 80.0
    assert result.to_dict()["steady_lag_ms"]["count"] == 4


def test_no_window_when_the_streams_never_all_ran() -> None:
    lags: array[int] = array("q")
    a, b = StreamTally(lags), StreamTally(lags)
    _chunk(a, 1, 1, 0)
    _chunk(a, 2, 1, 1)  # a is done before b starts
    _chunk(b, 1, 1, 2)
    _chunk(b, 2, 1, 3)
    assert steady_window([a, b]) is None
    silent = StreamTally(lags)  # a stream that got nothing
    assert steady_window([a, silent]) is None
    assert steady_window([]) is None
    result = summarize("sse", BenchConfig(streams=2, chunks=2), [a, b], lags, MS)
    assert result.steady_lag_ms is None and result.to_dict()["steady_lag_ms"] is None


def test_buffers_of_chunks_mark_the_window_as_single_chunks_do() -> None:
    lags: array[int] = array("q")
    a, b = StreamTally(lags), StreamTally(lags)

    def at(ms: int) -> bytes:
        return b"%d" % (T0 + ms * MS)

    a.record([b"1", b"2"], [at(0), at(0)], 20, T0 + 1 * MS)
    b.record([b"1"], [at(1)], 10, T0 + 2 * MS)
    a.record([b"3"], [at(2)], 10, T0 + 3 * MS)
    b.record([b"2", b"3"], [at(2), at(2)], 20, T0 + 4 * MS)
    # Open at b's first chunk (index 2), closed at a's last buffer (index 3).
    assert steady_window([a, b]) == (2, 3)
