"""The zero-copy handoff between processes: on the CPU wherever PyTorch is installed, on CUDA
where a GPU is present (the GPU numbers are recorded in docs/artifacts.md)."""

from __future__ import annotations

import pytest

from airlane.artifacts.gpu_handoff import cuda_available, measure_handoff

torch = pytest.importorskip("torch", reason="PyTorch is an optional extra (airlane[gpu])")


def test_both_paths_deliver_the_same_gradient_on_the_cpu():
    report = measure_handoff(device="cpu", numel=200_000, repeats=2)
    assert len(report.shared_ms) == len(report.copy_ms) == 2
    body = report.to_json()
    assert body["megabytes"] == pytest.approx(0.8)
    assert body["speedup"] > 0


@pytest.mark.skipif(not cuda_available(), reason="no CUDA device here")
def test_cuda_ipc_handoff_of_a_resnet50_gradient():
    report = measure_handoff(device="cuda", repeats=5)
    assert report.shared_median_ms < report.copy_median_ms


def test_a_missing_device_is_a_clear_error():
    if cuda_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        measure_handoff(device="cuda", numel=10, repeats=1)
