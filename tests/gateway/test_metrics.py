"""``/metrics`` is valid Prometheus text and counts what happened."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families


def scrape(url: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return {
        family.name: [(sample.labels, sample.value) for sample in family.samples]
        for family in text_string_to_metric_families(text)
    }


def test_metrics_count_streams_bytes_and_lag(server):
    before = scrape(server.url)
    with httpx.stream("GET", f"{server.url}/v1/loadtest/sse?chunks=5", timeout=10) as response:
        body = response.read()
    after = scrape(server.url)
    for name in (
        "airlane_streams",
        "airlane_subscribers",
        "airlane_generations_running",
        "airlane_stream_connections",
        "airlane_http_requests",
    ):
        assert name in after, name
    sent = after["airlane_stream_bytes_sent"][0][1] - before["airlane_stream_bytes_sent"][0][1]
    assert sent >= len(body)
    lag_count = {s[0].get("le", "count"): s[1] for s in after["airlane_delivery_lag_seconds"]}
    assert lag_count["+Inf"] >= 1
