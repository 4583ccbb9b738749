"""Handing a tensor to another process without a host copy (CUDA IPC), and measuring it.

On one GPU, two processes can share device memory: the producer exports a CUDA IPC handle for
the tensor's allocation (``cudaIpcGetMemHandle``), the consumer opens it
(``cudaIpcOpenMemHandle``) and reads the same memory; no byte crosses PCIe. PyTorch does this
when a CUDA tensor is put on a ``torch.multiprocessing`` queue. The alternative every framework
falls back to is the host round trip: device -> host memory, into shared memory, host -> the
consumer's device.

`measure_handoff` times both for one tensor (by default a ResNet-50-sized gradient, 25.6 M
float32 = 102 MB): the producer hands over its gradient, the consumer adds it into its own
accumulator on its device, synchronizes and answers with a checksum (which the producer
checks, so a fast wrong path cannot win). The gradient buffer is reused between steps, as a
training loop reuses its gradient buffers, so steady-state IPC handoffs reuse the opened handle;
the first handoff (opening the handle) is reported on its own.

Rules PyTorch imposes, kept here: processes are *spawned* (CUDA cannot be forked); the
producer keeps the tensor alive until the consumer says it is done with it.

Without CUDA, ``device="cpu"`` measures the same two paths in host memory (torch's shared
memory vs pickled bytes), which is how the tests exercise this module on any machine. PyTorch
is an optional extra (``pip install 'airlane[gpu]'``).
"""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["RESNET50_PARAMETERS", "HandoffReport", "cuda_available", "measure_handoff"]

RESNET50_PARAMETERS = 25_557_032
"""Trainable parameters of torchvision's ResNet-50: its gradient is this many float32."""


def cuda_available() -> bool:
    """Whether PyTorch is installed and sees a CUDA device."""
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


@dataclass(frozen=True, slots=True)
class HandoffReport:
    """Milliseconds per handoff, for each path."""

    device: str
    numel: int
    repeats: int
    shared_ms: list[float] = field(default_factory=list)
    """Zero-copy path (CUDA IPC handle; shared memory on the CPU), steady state."""
    copy_ms: list[float] = field(default_factory=list)
    """Host round trip (device -> host -> shared memory -> device; pickled bytes on the CPU)."""
    shared_first_ms: float = 0.0
    """The first zero-copy handoff, which opens the handle."""
    copy_first_ms: float = 0.0
    device_name: str = ""

    @property
    def shared_median_ms(self) -> float:
        """Median of the zero-copy handoffs."""
        return statistics.median(self.shared_ms)

    @property
    def copy_median_ms(self) -> float:
        """Median of the host round trips."""
        return statistics.median(self.copy_ms)

    def to_json(self) -> dict[str, Any]:
        """Everything, with the medians and the speed-up."""
        body = asdict(self)
        body["shared_median_ms"] = self.shared_median_ms
        body["copy_median_ms"] = self.copy_median_ms
        body["speedup"] = self.copy_median_ms / max(self.shared_median_ms, 1e-9)
        body["megabytes"] = self.numel * 4 / 1e6
        return body


def measure_handoff(
    *, device: str = "cuda", numel: int = RESNET50_PARAMETERS, repeats: int = 20
) -> HandoffReport:
    """Time ``repeats`` handoffs of a ``numel`` float32 tensor over each path (plus one first,
    cold handoff each). Raises RuntimeError when PyTorch or the device is missing."""
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        raise RuntimeError("PyTorch is not installed: pip install 'airlane[gpu]'") from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise RuntimeError("no CUDA device is visible to PyTorch")
    if repeats < 1 or numel < 1:
        raise ValueError("repeats and numel must be at least 1")
    context = mp.get_context("spawn")
    results: dict[str, list[float]] = {}
    for mode in ("shared", "copy"):
        inbox, outbox = context.Queue(maxsize=1), context.Queue(maxsize=1)
        consumer = context.Process(target=_consume, args=(inbox, outbox, mode, device, numel))
        consumer.start()
        try:
            if outbox.get(timeout=120) != "ready":
                raise RuntimeError("the consumer process did not start")
            results[mode] = _produce(torch, inbox, outbox, mode, device, numel, repeats + 1)
        finally:
            inbox.put(None)
            consumer.join(30)
            if consumer.is_alive():
                consumer.kill()
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    return HandoffReport(
        device=device,
        numel=numel,
        repeats=repeats,
        shared_ms=results["shared"][1:],
        copy_ms=results["copy"][1:],
        shared_first_ms=results["shared"][0],
        copy_first_ms=results["copy"][0],
        device_name=name,
    )


def _sync(torch: Any, device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize(device)


def _produce(
    torch: Any, inbox: Any, outbox: Any, mode: str, device: str, numel: int, steps: int
) -> list[float]:
    """The producer's side: one gradient buffer, refilled each step, handed over each step."""
    gradient = torch.empty(numel, dtype=torch.float32, device=device)
    if mode == "shared" and device == "cpu":
        gradient.share_memory_()
    times = []
    for step in range(steps):
        gradient.fill_(float(step + 1))
        _sync(torch, device)
        started = time.perf_counter()
        if mode == "shared":
            inbox.put(gradient)  # a CUDA IPC handle (or a shared-memory handle), not bytes
        elif device == "cpu":
            inbox.put(gradient.numpy().tobytes())  # pickled: the bytes themselves travel
        else:
            inbox.put(gradient.cpu())  # device -> host; the queue moves it to shared memory
        checksum = outbox.get(timeout=120)
        times.append((time.perf_counter() - started) * 1000)
        expected = float(step + 1) * numel
        if abs(checksum - expected) > 1e-3 * expected:
            raise RuntimeError(f"{mode} handoff delivered wrong data: {checksum} != {expected}")
    return times


def _consume(inbox: Any, outbox: Any, mode: str, device: str, numel: int) -> None:
    """The consumer's side (a spawned process): add each gradient into an accumulator on its
    device, synchronize, answer with the gradient's sum."""
    import torch

    accumulator = torch.zeros(
        numel, dtype=torch.float64 if device == "cpu" else torch.float32, device=device
    )
    outbox.put("ready")
    while (item := inbox.get()) is not None:
        if isinstance(item, bytes):
            with warnings.catch_warnings():  # read-only bytes, and we only read them
                warnings.simplefilter("ignore", UserWarning)
                gradient = torch.frombuffer(item, dtype=torch.float32)
        else:
            gradient = item.to(device, non_blocking=False)  # no-op when it is already there
        accumulator.zero_()
        accumulator.add_(gradient)
        checksum = float(accumulator.sum().item())
        _sync(torch, device)
        del gradient, item  # release the producer's memory before saying we are done
        outbox.put(checksum)
