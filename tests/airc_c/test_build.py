"""The C library builds warning-free under both host compilers, takes nothing from libc but
memcpy and memset, and passes the differential corpus under AddressSanitizer and
UndefinedBehaviorSanitizer."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .binding import DEVICE_PROFILE, FUZZ_PROFILE, ROOT, SANITIZE, STRICT, build

LIBRARY_SOURCES = sorted((ROOT / "src").glob("*.c"))
REPO = Path(__file__).resolve().parents[2]


def compile_objects(cc: str, profile: dict[str, int], out: Path, *extra: str) -> list[Path]:
    """Each library source compiled to an object under ``out``."""
    if shutil.which(cc) is None:
        pytest.fail(f"{cc} is not installed: ./scripts/setup.sh --test installs it")
    defines = [f"-D{name}={value}" for name, value in profile.items()]
    objects = []
    for source in LIBRARY_SOURCES:
        target = out / f"{source.stem}.o"
        command = [cc, *STRICT, *extra, *defines, f"-I{ROOT / 'include'}", "-c", str(source)]
        result = subprocess.run(
            [*command, "-o", str(target)], capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stderr
        objects.append(target)
    return objects


@pytest.mark.parametrize("cc", ["gcc", "clang"])
@pytest.mark.parametrize("profile", ["device", "fuzz"])
def test_builds_with_every_warning_as_an_error(cc: str, profile: str, tmp_path: Path) -> None:
    limits = DEVICE_PROFILE if profile == "device" else FUZZ_PROFILE
    compile_objects(cc, limits, tmp_path, "-O2", "-ffreestanding")


def test_takes_nothing_from_libc_but_memcpy_and_memset(tmp_path: Path) -> None:
    objects = compile_objects("gcc", DEVICE_PROFILE, tmp_path, "-Os", "-ffreestanding")
    result = subprocess.run(
        ["nm", "-u", *map(str, objects)], capture_output=True, text=True, check=False
    )
    undefined = {line.split()[-1] for line in result.stdout.splitlines() if line.strip()[:1] == "U"}
    assert {name for name in undefined if not name.startswith("airc_")} <= {"memcpy", "memset"}


SANITIZED_RUN = """
import sys
from pathlib import Path
from tests.airc_c import differential
from tests.airc_c.binding import FUZZ_PROFILE, Library
from tests.airc_c.test_differential import corpus

library = Library(Path(sys.argv[1]))
for data, split in corpus(7, int(sys.argv[2])):
    differential.check_decoder(library, data, split, library.limits["rx_payload"])
    differential.check_connection(library, data, split)
print("clean")
"""


def test_the_corpus_runs_clean_under_address_and_undefined_behaviour_sanitizers(
    build_dir: Path,
) -> None:
    library = build(build_dir, FUZZ_PROFILE, sanitize=True, optimize="-O1")
    runtimes = []
    for name in ("libasan.so", "libubsan.so"):
        path = subprocess.run(
            ["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True
        ).stdout.strip()
        assert os.path.isabs(path), f"gcc has no {name}: install libasan8 and libubsan1"
        runtimes.append(path)
    env = {
        **os.environ,
        # The sanitizer runtimes must come first in a process that did not link them.
        "LD_PRELOAD": " ".join(runtimes),
        # CPython keeps objects until exit by design: leaks are not the library's.
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0:exitcode=86",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1:exitcode=87",
        "PYTHONPATH": str(REPO),
    }
    result = subprocess.run(
        [sys.executable, "-c", SANITIZED_RUN, str(library), "1500"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=300,
    )
    assert result.returncode == 0 and "clean" in result.stdout, result.stderr[-4000:]
    assert "runtime error" not in result.stderr, result.stderr[-4000:]


@pytest.mark.parametrize(
    ("body", "report"),
    [
        ("char *b = malloc(4); b[0] = 0; return b[argc + 3];", "heap-buffer-overflow"),
        ("int big = 2147483647 - 1 + argc; return (big + 1) & 1;", "signed integer overflow"),
    ],
)
def test_the_sanitizers_are_really_on(body: str, report: str, tmp_path: Path) -> None:
    """The same flags stop a program that reads past a buffer or overflows an int: the
    check above can fail."""
    source = tmp_path / "bad.c"
    source.write_text(
        f"#include <stdlib.h>\nint main(int argc, char **argv) {{ (void)argv; {body} }}\n"
    )
    program = tmp_path / "bad"
    subprocess.run(["gcc", *SANITIZE, str(source), "-o", str(program)], check=True)
    result = subprocess.run([str(program)], capture_output=True, text=True, check=False)
    assert result.returncode != 0 and report in result.stderr, result.stderr
