"""Shared state: CRDTs and logical clocks (pure; issue 8).

Nothing in this package (outside ``airlane.sync.yjs``, the Yjs rooms served over the hub) does
I/O or reads a clock: time is passed in as ``now_ms``.

- `hlc`: hybrid logical clock stamps, the order every CRDT here uses;
- `lww` / `ops`: last-writer-wins set, register and map, their operations as data, delta sync
  and tombstone GC;
- `vclock`: version vectors and vector clocks, with retirement; `dag`: happened-before checks
  of executed task graphs;
- `lamport`: Lamport clocks and the session snapshot pipeline;
- `semantic`: semantic merge of concurrent text edits with a pluggable arbiter;
- `errors`: the exception tree.
"""

from airlane.sync.dag import ValidationReport, Violation, validate_task_graph
from airlane.sync.errors import (
    ClockDriftError,
    LocalSyncError,
    MalformedError,
    RemoteSyncError,
    SyncError,
    TaskGraphError,
)
from airlane.sync.hlc import HybridClock, Stamp
from airlane.sync.lamport import (
    LamportClock,
    PipelineState,
    Snapshot,
    SnapshotPipeline,
    SnapshotReceiver,
    Trigger,
)
from airlane.sync.lww import LWWElementSet, LWWMap, LWWRegister
from airlane.sync.ops import Action, Bias, Delta, JSONValue, Op
from airlane.sync.semantic import (
    Arbiter,
    ArbitrationRequest,
    Edit,
    LWWArbiter,
    ModelArbiter,
    SemanticMap,
    normalized_text_hash,
)
from airlane.sync.vclock import Causality, VersionVector, stable_point

__all__ = [
    "Action",
    "Arbiter",
    "ArbitrationRequest",
    "Bias",
    "Causality",
    "ClockDriftError",
    "Delta",
    "Edit",
    "HybridClock",
    "JSONValue",
    "LWWArbiter",
    "LWWElementSet",
    "LWWMap",
    "LWWRegister",
    "LamportClock",
    "LocalSyncError",
    "MalformedError",
    "ModelArbiter",
    "Op",
    "PipelineState",
    "RemoteSyncError",
    "SemanticMap",
    "Snapshot",
    "SnapshotPipeline",
    "SnapshotReceiver",
    "Stamp",
    "SyncError",
    "TaskGraphError",
    "Trigger",
    "ValidationReport",
    "VersionVector",
    "Violation",
    "normalized_text_hash",
    "stable_point",
    "validate_task_graph",
]
