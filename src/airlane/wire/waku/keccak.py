"""Keccak-256 (the original Keccak padding, as Ethereum and ENRs use it: not SHA3-256, whose
padding differs), which `hashlib` does not have. Pure Python: ENRs are hashed once per record.
"""

from __future__ import annotations

__all__ = ["keccak256"]

_ROUNDS = (
    0x0000000000000001, 0x0000000000008082, 0x800000000000808A, 0x8000000080008000,
    0x000000000000808B, 0x0000000080000001, 0x8000000080008081, 0x8000000000008009,
    0x000000000000008A, 0x0000000000000088, 0x0000000080008009, 0x000000008000000A,
    0x000000008000808B, 0x800000000000008B, 0x8000000000008089, 0x8000000000008003,
    0x8000000000008002, 0x8000000000000080, 0x000000000000800A, 0x800000008000000A,
    0x8000000080008081, 0x8000000000008080, 0x0000000080000001, 0x8000000080008008,
)  # fmt: skip
# Rotation offsets r[x][y] of the rho step.
_ROTATIONS = (
    (0, 36, 3, 41, 18),
    (1, 44, 10, 45, 2),
    (62, 6, 43, 15, 61),
    (28, 55, 25, 21, 56),
    (27, 20, 39, 8, 14),
)
_MASK = (1 << 64) - 1
_RATE = 136  # bytes absorbed per permutation for a 256-bit output


def _rotate(lane: int, bits: int) -> int:
    return ((lane << bits) | (lane >> (64 - bits))) & _MASK if bits else lane


def _permute(state: list[int]) -> list[int]:
    """Keccak-f[1600]; lanes indexed ``x + 5 * y``."""
    for constant in _ROUNDS:
        columns = [
            state[x] ^ state[x + 5] ^ state[x + 10] ^ state[x + 15] ^ state[x + 20]
            for x in range(5)
        ]
        mixed = [columns[(x - 1) % 5] ^ _rotate(columns[(x + 1) % 5], 1) for x in range(5)]
        state = [lane ^ mixed[index % 5] for index, lane in enumerate(state)]
        moved = [0] * 25
        for x in range(5):
            for y in range(5):
                moved[y + 5 * ((2 * x + 3 * y) % 5)] = _rotate(state[x + 5 * y], _ROTATIONS[x][y])
        state = [
            moved[i] ^ (~moved[row + (i + 1) % 5] & moved[row + (i + 2) % 5])
            for i, row in ((i, i - i % 5) for i in range(25))
        ]
        state[0] ^= constant
    return state


def keccak256(data: bytes) -> bytes:
    """The 32-byte Keccak-256 digest of ``data``."""
    padded = bytearray(data)
    padded.append(0x01)
    padded.extend(b"\0" * (-len(padded) % _RATE))
    padded[-1] |= 0x80
    state = [0] * 25
    for start in range(0, len(padded), _RATE):
        block = padded[start : start + _RATE]
        for index in range(_RATE // 8):
            state[index] ^= int.from_bytes(block[index * 8 : index * 8 + 8], "little")
        state = _permute(state)
    return b"".join(lane.to_bytes(8, "little") for lane in state[:4])
