"""`WorkerMetrics`: one ``/metrics`` across the processes of ``airlane serve --workers``.

Each worker writes its own exposition to a file of a directory the workers share, once a
second (`WorkerMetrics.run`). The worker that answers a scrape adds its siblings' samples to
its own (`WorkerMetrics.merged`), every sample labelled with its ``worker``: one scrape of
any worker shows them all, and ``sum without (worker)`` gives the whole machine. A sibling's
numbers are up to a second old; a file not renewed for `STALE_S` (a worker that died) is left
out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["STALE_S", "WorkerMetrics", "merge_expositions", "published_at"]

log = logging.getLogger("airlane.workers")

PUBLISH_EVERY_S = 1.0
STALE_S = 10.0
"""A sibling's file older than this is a worker that stopped: its samples are left out."""
_SUFFIX = ".prom"


class WorkerMetrics:
    """This worker's file in ``directory`` and its view of its siblings'."""

    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.name = name
        self._path = directory / f"{name}{_SUFFIX}"

    def publish(self, text: bytes) -> None:
        """Replace this worker's file with ``text`` (atomically: a reader never sees half)."""
        partial = self._path.with_suffix(".tmp")
        partial.write_bytes(text)
        os.replace(partial, self._path)

    def merged(self, own: bytes) -> bytes:
        """``own`` exposition and every live sibling's, each sample labelled ``worker``."""
        texts = {self.name: own.decode()}
        now = time.time()
        for path in sorted(self.directory.glob(f"*{_SUFFIX}")):
            worker = path.name[: -len(_SUFFIX)]
            if worker == self.name:
                continue
            try:
                if now - path.stat().st_mtime > STALE_S:
                    continue
                texts[worker] = path.read_text()
            except OSError:  # gone meanwhile (a worker stopping): it has nothing to add
                continue
        return merge_expositions(texts)

    async def run(self, render: Callable[[], bytes]) -> None:
        """Publish ``render()`` every second until cancelled; then remove the file."""
        try:
            while True:
                try:
                    self.publish(render())
                except OSError as exc:  # a full disk: the others miss this one, say so once
                    log.warning("worker %s cannot publish its metrics: %s", self.name, exc)
                    with contextlib.suppress(OSError):  # still, it runs (`published_at`)
                        os.utime(self._path)
                await asyncio.sleep(PUBLISH_EVERY_S)
        finally:
            with contextlib.suppress(OSError):
                self._path.unlink()


def published_at(directory: Path, name: str) -> float | None:
    """When worker ``name`` last renewed its file in ``directory`` (``time.time()``'s
    clock), or None if it has none: the supervisor's sign that the worker's loop runs."""
    try:
        return (directory / f"{name}{_SUFFIX}").stat().st_mtime
    except OSError:
        return None


def merge_expositions(texts: dict[str, str]) -> bytes:
    """The Prometheus text expositions ``texts`` (by worker name) as one, every sample
    labelled ``worker``; a family's help and type come from the first worker that has it."""
    families: dict[str, Metric] = {}
    for worker, text in texts.items():
        try:
            parsed = list(text_string_to_metric_families(text))
        except ValueError:  # a file cut short by a crash: that worker is left out
            log.warning("worker %s left unreadable metrics", worker)
            continue
        for family in parsed:
            merged = families.get(family.name)
            if merged is None:
                merged = Metric(family.name, family.documentation, family.type, family.unit)
                families[family.name] = merged
            for sample in family.samples:
                labels = {**sample.labels, "worker": worker}
                merged.samples.append(sample._replace(labels=labels))
    return generate_latest(_Families(list(families.values())))


class _Families:
    """What `generate_latest` reads: anything with ``collect``."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)
