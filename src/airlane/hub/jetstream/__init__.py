"""The JetStream hub: streams shared by gateway nodes through NATS JetStream."""

from airlane.hub.jetstream.config import JetStreamHubConfig
from airlane.hub.jetstream.hub import JetStreamHub

__all__ = ["JetStreamHub", "JetStreamHubConfig"]
