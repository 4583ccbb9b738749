"""Rooms: shared `LWWMap` state kept in a hub stream and served to clients (`room`).

Not pure, unlike the CRDTs beside it in `airlane.sync`: a room follows its hub stream with a
subscription and appends what clients send. The gateway serves rooms
(`airlane.gateway.Gateway.rooms`); transports reach them only through it.
"""

from airlane.sync.rooms.room import Room, RoomConfig, RoomError, Rooms

__all__ = ["Room", "RoomConfig", "RoomError", "Rooms"]
