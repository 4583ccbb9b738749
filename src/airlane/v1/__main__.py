"""``python -m airlane.v1``: generate the contract's modules in this checkout if they are
missing or stale (importing the package does it; this says where they came from)."""

import sys

from airlane.v1.generate import PROTO_ROOT

print(f"airlane.v1 generated from {PROTO_ROOT}", file=sys.stderr)
