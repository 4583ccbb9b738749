"""Token sources: where a stream's events come from (DESIGN.md section 2).

- `airlane.backends.base`: the contract (`Backend`, `GenerationRequest`, `LoadTestSpec`,
  `BackendError`).
- `airlane.backends.synthetic`: deterministic text with realistic timing, and the benchmark
  workload.
- `airlane.backends.openai`: any OpenAI-compatible ``/chat/completions`` server upstream.
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
