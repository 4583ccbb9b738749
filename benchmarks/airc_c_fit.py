"""Does AIRC fit a Cortex-M4? Size, stack, RAM and parse time of the C library
(clients/c/airc), against the seed white paper's budget: at most 3.2 KB of RAM including a
double buffer and the queue awaiting acknowledgement, and a worst-case parse of at most 8.7 us
on a Cortex-M4 at 180 MHz.

- **Flash and static data**: each source built with Debian's ``arm-none-eabi-gcc``
  (``-mcpu=cortex-m4 -mthumb -Os``, one section per function), ``.text``/``.data``/``.bss`` per
  function from the symbol table.
- **Stack**: ``-fstack-usage`` per function and ``-fcallgraph-info`` for who calls whom; the
  worst-case depth of each public entry point is the heaviest path (the event callback, the
  caller's code, not counted).
- **RAM**: ``sizeof(airc_conn)`` as the ARM compiler lays it out (read from a probe object's
  symbol size), which holds the receive buffer, the reassembly buffers and the send windows
  (the ack queue), plus the caller's output buffer of one frame: the seed's double buffer.
- **Parse time**: ``clients/c/airc/bench/m4_parse.c`` runs bare-metal under QEMU's
  ``mps2-an386`` (a Cortex-M4) with one instruction per translation block and an execution
  trace; the instructions between two marker calls are counted, per case. QEMU does not model
  cycles, so cycles are estimated from the trace with the Cortex-M4's documented costs
  (``CYCLE_MODEL``) and converted at 180 MHz, next to the instruction count itself (1 cycle each,
  the floor).
- **Host**: ns per frame for the C library (``bench/host_parse.c``, ``-O2``) and the Python codec
  on the same frames, same run.

The device profile is airc_config.h's defaults (one data stream beside signalling, 512-byte
receive frames and messages, 128-byte send frames, a window of 4).

    .venv/bin/python benchmarks/airc_c_fit.py                 # a markdown report
    .venv/bin/python benchmarks/airc_c_fit.py --json fit.json
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "clients" / "c" / "airc"
SOURCES = sorted((ROOT / "src").glob("*.c"))
ARM = ["-std=c99", "-mcpu=cortex-m4", "-mthumb", "-Os", "-ffreestanding", f"-I{ROOT / 'include'}"]
CLOCK_HZ = 180_000_000
SEED_RAM = 3.2 * 1024
SEED_PARSE_US = 8.7
RX_PAYLOAD = int(
    re.search(r"#define AIRC_RX_PAYLOAD (\d+)", (ROOT / "include" / "airc_config.h").read_text())[1]
)
"""airc_config.h's AIRC_RX_PAYLOAD: the largest case's payload."""
CASES = {
    1: "decoder, empty frame",
    2: "decoder, largest frame",
    3: "connection, empty message",
    4: "connection, largest one-frame message",
    5: "worst: largest frame, split over two reads, ends a fragmented message",
}

EDGE = r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"'
TRACE = r"\[[0-9a-f]+/([0-9a-f]+)/[^\]]+\] (\S*)"  # QEMU's "-d exec" line: its pc, its symbol
CYCLE_MODEL = (
    "1 cycle per instruction, +1 per load (LDR: 2 cycles), +N for LDM/STM/PUSH/POP of N "
    "registers, +2 per taken branch (pipeline refill); zero-wait-state memory"
)


def tool(name: str) -> str:
    """The path of a required tool, or exit saying how to get it."""
    path = shutil.which(name)
    if path is None:
        sys.exit(f"{name} not found: apt-get install gcc-arm-none-eabi qemu-system-arm")
    return path


def run(*command: str, **kwargs: Any) -> str:
    return subprocess.run(command, check=True, capture_output=True, text=True, **kwargs).stdout


def sizes(work: Path) -> dict[str, Any]:
    """Flash and static RAM per function and in total; stack per function and per entry."""
    objects = []
    for source in SOURCES:
        target = work / f"{source.stem}.o"
        run(
            tool("arm-none-eabi-gcc"), *ARM, "-ffunction-sections", "-fdata-sections",
            "-fstack-usage", "-fcallgraph-info=su", "-c", str(source), "-o", str(target),
            cwd=work,
        )  # fmt: skip
        objects.append(target)
    functions: dict[str, dict[str, int]] = {}
    for line in run(tool("arm-none-eabi-nm"), "-S", "--size-sort", *map(str, objects)).split("\n"):
        parts = line.split()
        if len(parts) == 4 and not parts[3].endswith(".o:"):
            section = {"t": "text", "r": "text", "d": "data", "b": "bss"}.get(parts[2].lower())
            if section:
                functions.setdefault(parts[3], {})[section] = int(parts[1], 16)
    totals = {"text": 0, "data": 0, "bss": 0}
    for line in run(tool("arm-none-eabi-size"), *map(str, objects)).splitlines()[1:]:
        text, data, bss, *_ = line.split()
        totals["text"] += int(text)
        totals["data"] += int(data)
        totals["bss"] += int(bss)
    return {"functions": functions, "totals": totals, "stack": stack(work)}


def stack(work: Path) -> dict[str, Any]:
    """Stack bytes per function, and the worst-case depth from each public function."""
    own: dict[str, int] = {}
    calls: dict[str, set[str]] = {}
    for graph in work.glob("*.ci"):
        text = graph.read_text()
        for title, label in re.findall(r'node: \{ title: "([^"]+)" label: "([^"]+)"', text):
            name = title.rsplit(":", 1)[-1]
            found = re.search(r"\\n(\d+) bytes", label)
            if found:
                own[name] = int(found.group(1))
        for source, target in re.findall(EDGE, text):
            calls.setdefault(source.rsplit(":", 1)[-1], set()).add(target.rsplit(":", 1)[-1])

    def depth(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name in seen:
            raise ValueError(f"recursion through {name}: no static bound")
        below = [depth(callee, seen | {name}) for callee in calls.get(name, ()) if callee in own]
        return own.get(name, 0) + max(below, default=0)

    public = sorted(name for name in own if name.startswith("airc_"))
    return {"own": own, "worst": {name: depth(name) for name in public}}


def ram(work: Path) -> dict[str, int]:
    """What the connection and the caller's output buffer take, as the ARM compiler lays
    them out."""
    probe = work / "probe.c"
    probe.write_text(
        '#include "airc.h"\n'
        "airc_conn probe_conn;\nairc_decoder probe_decoder;\n"
        "airc_send_stream probe_send;\nairc_recv_stream probe_recv;\n"
        "uint8_t probe_out[AIRC_HEADER_SIZE + AIRC_TX_PAYLOAD];\n"
    )
    objects = work / "probe.o"
    run(tool("arm-none-eabi-gcc"), *ARM, "-fno-common", "-c", str(probe), "-o", str(objects))
    found = {}
    for line in run(tool("arm-none-eabi-nm"), "-S", str(objects)).splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3].startswith("probe_"):
            found[parts[3].removeprefix("probe_")] = int(parts[1], 16)
    return found


def parse_time(work: Path) -> dict[str, Any]:
    """Instructions (and estimated cycles) per case, counted in QEMU's execution trace."""
    elf = work / "m4_parse.elf"
    run(
        tool("arm-none-eabi-gcc"), *ARM, "-Wall", "-Wextra", "-Werror", "-nostdlib",
        "-T", str(ROOT / "bench" / "m4.ld"), str(ROOT / "bench" / "m4_parse.c"),
        *map(str, SOURCES), "-o", str(elf), "-lgcc",
    )  # fmt: skip
    trace = work / "trace.log"
    result = subprocess.run(
        [
            tool("qemu-system-arm"), "-M", "mps2-an386", "-nographic", "-semihosting-config",
            "enable=on,target=native", "-kernel", str(elf), "-singlestep", "-d", "exec,nochain",
            "-D", str(trace),
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"the M4 program failed its own checks (exit {result.returncode})")
    costs = instruction_costs(elf)
    pcs = [(int(pc, 16), symbol) for pc, symbol in re.findall(TRACE, trace.read_text())]
    cases: dict[str, Any] = {}
    start: int | None = None
    for i, (_, symbol) in enumerate(pcs):
        if symbol == "airc_mark_start" and (i == 0 or pcs[i - 1][1] != "airc_mark_start"):
            start = i
        elif symbol == "airc_mark_end" and start is not None:
            inside = [pc for pc, name in pcs[start:i] if name != "airc_mark_start"]
            cycles = 0
            for j, pc in enumerate(inside):
                size, cost, branch = costs.get(pc, (2, 1, False))
                following = inside[j + 1] if j + 1 < len(inside) else None
                taken = branch and following is not None and following != pc + size
                cycles += cost + (2 if taken else 0)
            case = CASES[len(cases) + 1]
            cases[case] = {
                "instructions": len(inside),
                "cycles_estimated": cycles,
                "us_at_180mhz_floor": round(len(inside) / CLOCK_HZ * 1e6, 2),
                "us_at_180mhz_estimated": round(cycles / CLOCK_HZ * 1e6, 2),
            }
            start = None
    return cases


def instruction_costs(elf: Path) -> dict[int, tuple[int, int, bool]]:
    """Address -> (size in bytes, cycles before any branch penalty, is a branch)."""
    costs = {}
    for line in run(tool("arm-none-eabi-objdump"), "-d", str(elf)).splitlines():
        found = re.match(r"\s+([0-9a-f]+):\s+((?:[0-9a-f]{4} ?)+)\s+(\S+)\s*(.*)", line)
        if not found:
            continue
        address, encoding, mnemonic, operands = found.groups()
        size = 2 * len(encoding.split())
        op = mnemonic.split(".")[0]
        cost = 1
        if op.startswith(("ldr", "ldrex")) and not op.startswith("ldm"):
            cost = 2
        elif op.startswith(("push", "pop", "ldm", "stm")):
            cost = 1 + operands.count(",") + 1
        branch = (
            (op.startswith(("b", "cb", "tb")) and not op.startswith(("bic", "bfi", "bfc")))
            or (op.startswith("pop") and "pc" in operands)
            or (op.startswith(("ldr", "mov")) and operands.startswith("pc"))
        )
        costs[int(address, 16)] = (size, cost, branch)
    return costs


def host(work: Path) -> dict[str, Any]:
    """ns per frame: the C library and the Python codec, same frames, same run."""
    program = work / "host_parse"
    run(
        "gcc", "-std=c99", "-O2", f"-I{ROOT / 'include'}", str(ROOT / "bench" / "host_parse.c"),
        *map(str, SOURCES), "-o", str(program),
    )  # fmt: skip
    c = {name: float(ns) for name, ns in (line.split() for line in run(str(program)).splitlines())}
    return {"c_ns": c, "python_ns": python_parse()}


def python_parse() -> dict[str, float]:
    sys.path.insert(0, str(REPO / "src"))
    from airlane.wire.airc.config import AircConfig
    from airlane.wire.airc.connection import AircConnection
    from airlane.wire.airc.frame import EOM_BIT, Frame, FrameDecoder, encode_frame

    payload = bytes((i * 7) & 0xFF for i in range(RX_PAYLOAD))
    frame = encode_frame(Frame(1, 1, 0, payload, EOM_BIT))
    rounds = 20_000
    started = time.perf_counter()
    for _ in range(rounds):
        FrameDecoder(RX_PAYLOAD).decode(frame)
    decoder = (time.perf_counter() - started) / rounds * 1e9
    frames = [encode_frame(Frame(1, seq, 0, payload, EOM_BIT)) for seq in range(1, rounds + 1)]
    config = AircConfig(max_receive_payload=RX_PAYLOAD, max_message_size=RX_PAYLOAD)
    connection = AircConnection(config, now=0.0)
    started = time.perf_counter()
    for data in frames:
        connection.receive_data(data, 0.0)
    return {"decoder": decoder, "connection": (time.perf_counter() - started) / rounds * 1e9}


def largest_payload(parse: dict[str, Any]) -> dict[str, int]:
    """The largest one-frame message whose parse stays within the seed's 8.7 us at 180 MHz,
    by the instruction floor and by the cycle estimate: the connection's cost is a fixed
    part plus a part per payload byte (nearly all of it the CRC)."""
    empty, full = parse[CASES[3]], parse[CASES[4]]
    budget = SEED_PARSE_US * CLOCK_HZ / 1e6
    out = {}
    for key, name in (("instructions", "floor"), ("cycles_estimated", "estimated")):
        per_byte = (full[key] - empty[key]) / RX_PAYLOAD
        out[name] = max(0, int((budget - empty[key]) / per_byte))
    return out


def report(results: dict[str, Any]) -> str:
    ram_, totals = results["ram"], results["sizes"]["totals"]
    total_ram = ram_["conn"] + ram_["out"]
    worst_stack = results["sizes"]["stack"]["worst"]["airc_receive"]
    lines = [
        "| | measured | seed |",
        "|---|---:|---:|",
        f"| flash (.text, whole library) | {totals['text']} B | |",
        f"| static .data / .bss | {totals['data']} B / {totals['bss']} B | |",
        f"| RAM: `airc_conn` + one output frame | {ram_['conn']} + {ram_['out']} = "
        f"{total_ram} B | 3,277 B (3.2 KB) |",
        f"| worst stack (`airc_receive`) | {worst_stack} B | |",
    ]
    for case, numbers in results["parse"].items():
        lines.append(
            f"| M4 parse, {case} | {numbers['instructions']} instructions, "
            f"{numbers['us_at_180mhz_floor']}-{numbers['us_at_180mhz_estimated']} us | 8.7 us |"
        )
    within = results["within_seed_parse"]
    lines.append(
        f"| largest one-frame message parsed within 8.7 us | {within['estimated']}-"
        f"{within['floor']} B payload | |"
    )
    host_ = results["host"]
    for name in ("decoder", "connection"):
        lines.append(
            f"| host ns/frame, {name}: C / Python | {host_['c_ns'][name]:.0f} / "
            f"{host_['python_ns'][name]:.0f} | |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write every number here too")
    parser.add_argument("--no-host", action="store_true", help="skip the host timings")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        results: dict[str, Any] = {
            "profile": "airc_config.h defaults",
            "cycle_model": CYCLE_MODEL,
            "sizes": sizes(work),
            "ram": ram(work),
            "parse": parse_time(work),
        }
        results["host"] = {} if args.no_host else host(work)
    results["fits"] = {
        "ram": results["ram"]["conn"] + results["ram"]["out"] <= SEED_RAM,
        "parse": all(
            case["us_at_180mhz_estimated"] <= SEED_PARSE_US for case in results["parse"].values()
        ),
    }
    results["within_seed_parse"] = largest_payload(results["parse"])
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    if results["host"]:
        print(report(results))
    else:
        print(json.dumps({k: results[k] for k in ("ram", "parse", "fits")}, indent=2))


if __name__ == "__main__":
    main()
