"""Token sources: where a stream's events come from (DESIGN.md section 2).

- `airlane.backends.base`: the contract (`Backend`, `GenerationRequest`, `LoadTestSpec`,
  `BackendError`).
- `airlane.backends.synthetic`: deterministic text with realistic timing, and the benchmark
  workload.
- `airlane.backends.openai`: any OpenAI-compatible ``/chat/completions`` server upstream;
  `airlane.backends.openai_chunks` translates its stream (sans-I/O), and
  `airlane.backends.upstream_http` is the lean HTTP/1.1 client it uses (with
  `~.http11`, `~.upstream_connection`, `~.upstream_config` and `~.upstream_errors`).
"""

from airlane.backends.base import Backend, BackendError, GenerationRequest, LoadTestSpec
from airlane.backends.openai import OpenAIUpstreamBackend
from airlane.backends.synthetic import SyntheticBackend, SyntheticConfig

__all__ = [
    "Backend",
    "BackendError",
    "GenerationRequest",
    "LoadTestSpec",
    "OpenAIUpstreamBackend",
    "SyntheticBackend",
    "SyntheticConfig",
]
