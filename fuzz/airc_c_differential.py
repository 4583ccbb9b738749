"""Fuzz target: the C AIRC library (clients/c/airc) against the Python codec.

Every input goes to both decoders (whole and split at an input-derived point) and, read as
frame fields with valid CRCs, to both connections (tests/airc_c/differential.py): the same
frames, errors, events, counters, frames to send and timers, or the run stops with the input.

With atheris (``pip install -e '.[fuzz]'``) it is coverage-guided over the Python side; without
it, ``--seconds N`` runs a seeded random corpus for N seconds. Either way the library is built
with the sanitizers when ``AIRC_SANITIZE=1`` (then run under ``LD_PRELOAD`` of libasan and
libubsan, as tests/airc_c/test_build.py does):

    .venv/bin/python fuzz/airc_c_differential.py --seconds 600
    .venv/bin/python fuzz/airc_c_differential.py -max_total_time=600 corpus/airc-c
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

try:
    import atheris
except ImportError:  # the random mode needs nothing more
    atheris = None

from tests.airc_c import differential
from tests.airc_c.binding import FUZZ_PROFILE, Library, build
from tests.airc_c.test_differential import corpus

BUILD = Path(__file__).resolve().parents[1] / "build" / "airc-c"
LIBRARY = Library(build(BUILD, FUZZ_PROFILE, sanitize=os.environ.get("AIRC_SANITIZE") == "1"))


def TestOneInput(data: bytes) -> None:  # the name atheris and libFuzzer expect
    """The differential check on ``data``, raw and structured."""
    split = int.from_bytes(data[:2], "big") % (len(data) + 1) if data else 0
    differential.check_decoder(LIBRARY, data, split, LIBRARY.limits["rx_payload"])
    framed = differential.structured(data)
    differential.check_decoder(LIBRARY, framed, len(framed) // 3, 0)
    differential.check_connection(LIBRARY, framed, split % (len(framed) + 1))


def random_run(seconds: float) -> None:
    """Seeded random batches until ``seconds`` pass; prints the seed of a failing batch."""
    deadline = time.monotonic() + seconds
    cases, seed = 0, random.randrange(1 << 30)
    while time.monotonic() < deadline:
        seed += 1
        for data, split in corpus(seed, 200):
            try:
                differential.check_decoder(LIBRARY, data, split, LIBRARY.limits["rx_payload"])
                differential.check_connection(LIBRARY, data, split)
            except AssertionError:
                print(f"mismatch in corpus({seed}, 200): input {data.hex()} split {split}")
                raise
        cases += 200
    print(f"{cases} inputs, no mismatch")


def main() -> None:
    """``--seconds N`` for the random mode; anything else goes to libFuzzer."""
    if len(sys.argv) == 3 and sys.argv[1] == "--seconds":
        random_run(float(sys.argv[2]))
        return
    if atheris is None:
        sys.exit("atheris is not installed: pip install -e '.[fuzz]', or use --seconds N")
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
