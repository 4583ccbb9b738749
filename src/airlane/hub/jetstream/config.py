"""Settings of the JetStream hub (``[hub]`` in the TOML file, ``--hub nats://...``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from airlane.hub.memory import MemoryHubConfig

__all__ = ["JetStreamHubConfig"]

_PREFIX = re.compile(r"[a-z][a-z0-9_]{0,31}")


@dataclass(frozen=True, slots=True)
class JetStreamHubConfig:
    """Where the shared streams live and how nodes watch each other."""

    servers: tuple[str, ...] = ("nats://127.0.0.1:4222",)
    """NATS server URLs (any node of a cluster; the client fails over between them)."""
    prefix: str = "airlane"
    """Subjects start with ``<prefix>.``; JetStream streams and buckets with ``<PREFIX>_``. Two
    deployments on one NATS account keep apart with different prefixes."""
    node_id: str | None = None
    """This gateway's name among the nodes (default: random per process)."""
    storage: str = "file"
    """JetStream storage, ``file`` (survives a broker restart) or ``memory``."""
    replicas: int = 1
    """JetStream replicas of the streams and buckets (up to the cluster's size, at most 5)."""
    history_ttl_s: float = 86_400.0
    """How long JetStream keeps a stream's events and metadata after they were written: the
    bound on history, whatever a stream's own retention says (a day)."""
    heartbeat_s: float = 1.0
    """How often a node says it is alive (and which streams it reads and produces)."""
    node_timeout_s: float = 3.0
    """A node silent this long is dead: streams it produced end with a ``producer_lost``
    error, and its readers no longer keep streams from being orphaned."""
    request_timeout_s: float = 2.0
    """Timeout of one JetStream request (publish acknowledgement, lookup)."""
    unavailable_after_s: float = 10.0
    """How long an append keeps retrying while JetStream does not answer (a broker restart,
    a leader election) before it fails with `HubUnavailable`."""
    layout: str = "node"
    """How events lie in JetStream: ``stream``, a subject per Airlane stream and a message
    per appended batch; or ``node``, a home log per gateway process into which it writes
    every stream it created, many streams' batches per message (`airlane.hub.jetstream.home`)."""
    linger_ms: float = 5.0
    """In the ``node`` layout, the least time between two publishes of the home log while
    appends keep coming at a light flow (up to 1,000 events per second): fewer, fuller
    broker messages, for at most that much latency. An append after a quiet moment goes out
    at once; 0: publish as soon as the last publish is acknowledged."""
    busy_linger_ms: float = 20.0
    """The same under a busy flow (5,000 events per second and more; in proportion between
    the two): where a message every ``linger_ms`` would cost a sizeable share of a core
    (`airlane.hub.jetstream.schedule`). Never less than ``linger_ms``; set it to
    ``linger_ms`` for one fixed wait."""
    compression: str = "zstd"
    """In the ``node`` layout, how home log messages are stored: ``zstd`` (level 1; LLM
    chunks are mostly repeated keys, about 7x smaller, and every byte costs the broker, the disk
    and each node that reads it) or ``none``. Nodes read either, whatever they write."""
    trim_every_s: float = 10.0
    """In the ``node`` layout, how often a process purges its home log below the oldest
    message still needed: by a stream it holds (from its creation entry, or from its stored
    snapshot's position) or by a live node that follows the log (its reported position). 0:
    never; ``history_ttl_s`` alone then bounds the log."""
    rewrite_after_mb: float = 64.0
    """In the ``node`` layout, how much of its home log (MB written since) a live stream may
    hold back before its retained events are written again at the log's head (and at least
    four times those events' size), so that the log behind it can be trimmed. 0: never."""
    mirror: str = "all"
    """In the ``node`` layout, which of other processes' streams a process holds: ``all``,
    every one from its creation on (a reader anywhere starts at once, and resumes from
    memory when the stream's node dies); or ``read``, only those read here, loaded from the
    broker when their first reader comes. ``airlane serve --workers`` runs ``read``: its
    workers hand a stream's readers to the worker producing it, so holding the others'
    streams would be work for nobody."""
    local: MemoryHubConfig = field(default_factory=MemoryHubConfig)
    """Limits and timers of the node's replicas (the in-memory part)."""

    def __post_init__(self) -> None:
        if not _PREFIX.fullmatch(self.prefix):
            raise ValueError(f"hub prefix {self.prefix!r}: use 1-32 of a-z 0-9 _, a letter first")
        if self.storage not in ("file", "memory"):
            raise ValueError(f"hub storage {self.storage!r}: use 'file' or 'memory'")
        if self.layout not in ("stream", "node"):
            raise ValueError(f"hub layout {self.layout!r}: use 'stream' or 'node'")
        if not 1 <= self.replicas <= 5:
            raise ValueError("hub replicas must be 1 to 5")
        if not 0 <= self.linger_ms <= 100:
            raise ValueError("hub linger_ms must be 0 to 100")
        if not 0 <= self.busy_linger_ms <= 100:
            raise ValueError("hub busy_linger_ms must be 0 to 100")
        if self.compression not in ("zstd", "none"):
            raise ValueError(f"hub compression {self.compression!r}: use 'zstd' or 'none'")
        if self.mirror not in ("all", "read"):
            raise ValueError(f"hub mirror {self.mirror!r}: use 'all' or 'read'")
        if self.trim_every_s < 0:
            raise ValueError("hub trim_every_s must be 0 (never) or more")
        if self.rewrite_after_mb < 0:
            raise ValueError("hub rewrite_after_mb must be 0 (never) or more")
        if self.node_timeout_s < 2 * self.heartbeat_s:
            raise ValueError("node_timeout_s must be at least twice heartbeat_s")
        if not self.servers:
            raise ValueError("at least one NATS server URL is needed")

    @property
    def events_stream(self) -> str:
        """The JetStream stream holding every Airlane stream's events."""
        return f"{self.prefix.upper()}_EVENTS"

    @property
    def log_stream(self) -> str:
        """The JetStream stream holding the home logs (the ``node`` layout)."""
        return f"{self.prefix.upper()}_LOG"

    @property
    def meta_bucket(self) -> str:
        """The key-value bucket of stream metadata."""
        return f"{self.prefix.upper()}_META"

    @property
    def snapshot_bucket(self) -> str:
        """The key-value bucket of folded histories."""
        return f"{self.prefix.upper()}_SNAPSHOTS"
