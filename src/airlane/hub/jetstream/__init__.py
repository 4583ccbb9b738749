"""The JetStream hub: streams shared by gateway nodes through NATS JetStream."""

from airlane.hub.jetstream.config import JetStreamHubConfig

__all__ = ["JetStreamHub", "JetStreamHubConfig"]


def __getattr__(name: str) -> object:
    # The hub needs the NATS client: imported when first asked for, so that configuring a
    # gateway (and `import airlane`) does not load it for the in-memory default.
    if name == "JetStreamHub":
        from airlane.hub.jetstream.hub import JetStreamHub

        return JetStreamHub
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
