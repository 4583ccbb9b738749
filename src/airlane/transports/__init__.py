"""Transports: one package per wire, each a thin asyncio adapter over the gateway."""

__all__: list[str] = []
