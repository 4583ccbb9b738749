"""The one line every client command prints when nothing answers at the gateway's address."""

from __future__ import annotations

__all__ = ["unreachable"]


def unreachable(url: str, cause: object, address_option: str = "--url") -> str:
    """Why ``url`` could not be reached and what to do: the usual cause in a first hour is
    that no gateway is running there, or that it runs at another address."""
    return (
        f"cannot reach a gateway at {url} ({cause}); start one with `airlane serve`, "
        f"or give the address of a running one with {address_option}"
    )
