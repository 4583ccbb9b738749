"""Token sources: where a stream's events come from (ARCHITECTURE.md).

- `airlane.backends.base`: the contract (`Backend`, `GenerationRequest`, `LoadTestSpec`,
  `BackendError`; `Feed` and `FeedingBackend` for streams pushed rather than pulled;
  `AdmittingBackend` for a backend with a bounded queue of its own).
- `airlane.backends.synthetic`: deterministic text with realistic timing, and the benchmark
  workload; `airlane.backends.pacing` (the shared pacer) and `airlane.backends.paced` (paced
  streams, pulled or fed) time it.
- `airlane.backends.openai`: any OpenAI-compatible ``/chat/completions`` server upstream;
  `airlane.backends.openai_chunks` translates its stream (sans-I/O), and
  `airlane.backends.upstream_http` is the lean HTTP/1.1 client it uses (with
  `~.http11`, `~.upstream_connection`, `~.upstream_config` and `~.upstream_errors`).
- `airlane.backends.local`: a model from a local directory, generating in this process
  (``--model-dir``; the ``local`` extra, imported only when a model is loaded).
"""

from airlane.backends.base import (
    AdmittingBackend,
    Backend,
    BackendError,
    Feed,
    FeedingBackend,
    GenerationRequest,
    LoadTestSpec,
)
from airlane.backends.openai import OpenAIUpstreamBackend
from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig

__all__ = [
    "AdmittingBackend",
    "Backend",
    "BackendError",
    "Feed",
    "FeedingBackend",
    "GenerationRequest",
    "LoadTestSpec",
    "OpenAIUpstreamBackend",
    "SyntheticBackend",
    "SyntheticConfig",
]
