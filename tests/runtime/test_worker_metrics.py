"""`airlane.runtime.worker_metrics`: a worker's file is renewed every second while its loop
runs, even when its exposition cannot be written (the supervisor reads that as a sign of
life, `published_at`), and goes when the worker stops."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

from airlane.runtime.worker_metrics import WorkerMetrics, published_at


def test_a_running_worker_renews_its_file_even_when_it_cannot_write_it(tmp_path: Path) -> None:
    async def run() -> None:
        assert published_at(tmp_path, "w0") is None
        metrics = WorkerMetrics(tmp_path, "w0")
        metrics.publish(b"# nothing yet\n")
        os.utime(tmp_path / "w0.prom", (0, 0))  # as if written long ago
        (tmp_path / "w0.tmp").mkdir()  # its next writes fail (a full disk, say)
        task = asyncio.create_task(metrics.run(lambda: b"# more\n"))
        await asyncio.sleep(0.3)
        renewed = published_at(tmp_path, "w0")
        assert renewed is not None and time.time() - renewed < 5
        assert (tmp_path / "w0.prom").read_bytes() == b"# nothing yet\n"
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert published_at(tmp_path, "w0") is None  # a stopped worker's file goes

    asyncio.run(run())
