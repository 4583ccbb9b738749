"""The JetStream hub: streams shared by gateway nodes through NATS JetStream."""

from __future__ import annotations

from typing import TYPE_CHECKING

from airlane.hub.jetstream.config import JetStreamHubConfig

if TYPE_CHECKING:
    from airlane.hub.jetstream.hub import JetStreamHub

__all__ = ["HomeLogHub", "JetStreamHub", "JetStreamHubConfig", "jetstream_hub"]


def jetstream_hub(config: JetStreamHubConfig) -> JetStreamHub:
    """The JetStream hub of ``config.layout``: `JetStreamHub` (``stream``) or `HomeLogHub`
    (``node``)."""
    if config.layout == "node":
        from airlane.hub.jetstream.home import HomeLogHub

        return HomeLogHub(config)
    from airlane.hub.jetstream.hub import JetStreamHub

    return JetStreamHub(config)


def __getattr__(name: str) -> object:
    # The hubs need the NATS client: imported when first asked for, so that configuring a
    # gateway (and `import airlane`) does not load it for the in-memory default.
    if name == "JetStreamHub":
        from airlane.hub.jetstream.hub import JetStreamHub

        return JetStreamHub
    if name == "HomeLogHub":
        from airlane.hub.jetstream.home import HomeLogHub

        return HomeLogHub
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
