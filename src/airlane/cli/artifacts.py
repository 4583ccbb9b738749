"""``airlane artifacts``: pack, inspect, diff, serve, pull and verify model artifacts.

    airlane artifacts keygen release.pem                 # prints the public key to give pullers
    airlane artifacts pack model.safetensors --name tiny --version 2 --store store \\
        --quantize block32 --shard layer --sign-key release.pem
    airlane artifacts inspect store/tiny/2               # files, chunks, tensors, signature
    airlane artifacts diff store/tiny/1 store/tiny/2 --out 1-to-2.airdelta
    airlane artifacts serve store --port 8420            # the gateway, serving the store
    airlane artifacts pull http://127.0.0.1:8420 tiny --dest models --key ed25519:...
    airlane artifacts verify models/tiny/current --key ed25519:...
    airlane artifacts rollback models tiny

Every failure prints one line saying what was wrong and exits with status 1. The heavy modules
(numpy, hashes) load inside the commands, so ``airlane --help`` stays quick.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, NoReturn

import orjson
import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from airlane.artifacts.manifest import Manifest
    from airlane.artifacts.packer import Planner
    from airlane.artifacts.quant import QuantConfig, TensorReport

__all__ = ["artifacts_app"]

artifacts_app = typer.Typer(
    help="Model artifacts: pack (INT8, shards), sign, serve, pull with deltas, verify.",
    no_args_is_help=True,
)
out = Console()
err = Console(stderr=True)

_UNITS = {"": 1, "b": 1, "k": 1024, "kib": 1024, "m": 1024**2, "mib": 1024**2, "g": 1024**3}


def _fail(message: str) -> NoReturn:
    err.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(1)


@contextmanager
def _gateway_errors(url: str) -> Iterator[None]:
    """A gateway that does not answer at ``url`` becomes the line that says to start one, and
    a client error of ``--follow``'s announcement stream one line (not a traceback)."""
    import httpx

    from airlane.artifacts.errors import ArtifactError
    from airlane.cli.reach import unreachable
    from airlane.client.errors import ClientError, ConnectFailed

    try:
        yield
    except ConnectFailed as exc:
        _fail(unreachable(url, exc, "the URL argument"))
    except ClientError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
    except ArtifactError as exc:
        if isinstance(exc.__cause__, httpx.ConnectError):
            _fail(unreachable(url, exc.__cause__, "the URL argument"))
        raise


@contextmanager
def _errors() -> Iterator[None]:
    """Artifact errors (and unreadable files) become one line and exit status 1."""
    from airlane.artifacts.errors import ArtifactError

    try:
        yield
    except ArtifactError as exc:
        _fail(str(exc))
    except OSError as exc:
        _fail(f"{exc.filename or ''}: {exc.strerror or exc}")


def parse_size(text: str) -> int:
    """``64KiB``, ``8M``, ``1048576`` -> bytes."""
    raw = text.strip().lower()
    digits = raw.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = raw[len(digits) :]
    if not digits.isdigit() or unit not in _UNITS:
        raise typer.BadParameter(f"{text!r} is not a size (e.g. 65536, 64KiB, 8MiB)")
    return int(digits) * _UNITS[unit]


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


# -- keys -------------------------------------------------------------------------------------


@artifacts_app.command("keygen")
def keygen_command(
    path: Annotated[Path, typer.Argument(help="Where to write the Ed25519 private key (PEM).")],
) -> None:
    """Make an Ed25519 signing key; prints the public key that 'pull --key' takes."""
    from airlane.artifacts.signing import (
        generate_private_key,
        private_key_to_pem,
        public_key_to_text,
    )

    if path.exists():
        _fail(f"{path} exists; not overwriting a key")
    key = generate_private_key()
    path.touch(mode=0o600)
    path.write_bytes(private_key_to_pem(key))
    print(public_key_to_text(key.public_key()))


def _public_key(text: str | None) -> Any:
    if text is None:
        return None
    from airlane.artifacts.signing import load_public_key

    candidate = Path(text)
    return load_public_key(candidate if candidate.is_file() else text)


# -- pack -------------------------------------------------------------------------------------


@artifacts_app.command("pack")
def pack_command(
    sources: Annotated[list[Path], typer.Argument(help="Files: one .safetensors, or several.")],
    name: Annotated[str, typer.Option(help="Artifact name.")],
    version: Annotated[str, typer.Option(help="Version label (immutable once packed).")],
    store: Annotated[Path, typer.Option(help="The store directory.")] = Path("artifacts"),
    quantize: Annotated[
        str, typer.Option(help="none, per-channel, block32 or block64 (symmetric INT8).")
    ] = "none",
    keep_fp16: Annotated[
        list[str] | None,
        typer.Option(help="Tensor name patterns kept in FP16 (default: norms, embeddings)."),
    ] = None,
    shard: Annotated[str, typer.Option(help="none, layer, head-group or size.")] = "none",
    layers_per_shard: Annotated[int, typer.Option(help="Layers per shard (--shard layer).")] = 1,
    heads: Annotated[int, typer.Option(help="Attention heads (--shard head-group).")] = 0,
    kv_heads: Annotated[int, typer.Option(help="KV heads, if fewer (GQA).")] = 0,
    head_dim: Annotated[int, typer.Option(help="Dimension per head (--shard head-group).")] = 0,
    heads_per_group: Annotated[int, typer.Option(help="Heads per shard (--shard head-group).")] = 0,
    max_shard: Annotated[str, typer.Option(help="Largest shard (--shard size).")] = "512MiB",
    chunk_avg: Annotated[str, typer.Option(help="Average chunk size (min /4, max x4).")] = "64KiB",
    sign_key: Annotated[
        Path | None, typer.Option(help="Ed25519 private key (PEM) to sign the manifest.")
    ] = None,
) -> None:
    """Pack files into a new version in the store: quantize, shard, chunk, hash, sign."""
    with _errors():
        from airlane.artifacts.chunker import ChunkParams
        from airlane.artifacts.packer import pack
        from airlane.artifacts.signing import load_private_key

        avg = parse_size(chunk_avg)
        params = ChunkParams(min_size=avg // 4, avg_size=avg, max_size=avg * 4)
        quant = _quant_config(quantize, keep_fp16)
        plan = _shard_plan(
            sources, shard, layers_per_shard, heads, kv_heads, head_dim, heads_per_group, max_shard
        )
        key = load_private_key(sign_key) if sign_key is not None else None
        result = pack(
            sources,
            store,
            name=name,
            version=version,
            quant=quant,
            plan=plan,
            params=params,
            signing_key=key,
        )
        if result.quant_report:
            _print_quant(result.quant_report)
        _print_manifest(result.manifest, result.directory)


def _quant_config(choice: str, keep: list[str] | None) -> QuantConfig | None:
    from airlane.artifacts.quant import QuantConfig

    schemes = {
        "per-channel": QuantConfig(scheme="per_channel"),
        "block32": QuantConfig(scheme="block", block_size=32),
        "block64": QuantConfig(scheme="block", block_size=64),
    }
    if choice == "none":
        return None
    if choice not in schemes:
        _fail(f"--quantize {choice!r}: use none, per-channel, block32 or block64")
    return replace(schemes[choice], keep_fp16=tuple(keep)) if keep else schemes[choice]


def _shard_plan(
    sources: list[Path],
    choice: str,
    layers_per_shard: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    heads_per_group: int,
    max_shard: str,
) -> Planner | None:
    """A function making the plan for the header being split (after quantization, its
    scales are tensors too)."""
    from airlane.artifacts import plan as plans

    if choice == "none":
        return None
    if len(sources) != 1:
        _fail("--shard takes exactly one .safetensors source")
    if choice == "layer":
        return lambda header: plans.plan_by_layer(header, layers_per_shard=layers_per_shard)
    if choice == "head-group":
        if not (heads and head_dim and heads_per_group):
            _fail("--shard head-group needs --heads, --head-dim and --heads-per-group")
        return lambda header: plans.plan_by_head_group(
            header,
            num_heads=heads,
            head_dim=head_dim,
            heads_per_group=heads_per_group,
            num_kv_heads=kv_heads or None,
        )
    if choice == "size":
        max_bytes = parse_size(max_shard)
        return lambda header: plans.plan_by_size(header, max_bytes)
    _fail(f"--shard {choice!r}: use none, layer, head-group or size")


def _print_quant(report: tuple[TensorReport, ...]) -> None:
    table = Table(title="INT8 quantization", title_justify="left")
    for column in ("tensor", "as", "shape", "before", "after", "SQNR dB"):
        table.add_column(
            column, justify="right" if column in ("before", "after", "SQNR dB") else "left"
        )
    for row in report:
        sqnr = "exact" if row.sqnr_db == float("inf") else f"{row.sqnr_db:.1f}"
        table.add_row(
            row.name,
            row.action,
            "x".join(map(str, row.shape)) or "()",
            _human(row.bytes_before),
            _human(row.bytes_after),
            sqnr,
        )
    before = sum(r.bytes_before for r in report)
    after = sum(r.bytes_after for r in report)
    int8 = sorted(r.sqnr_db for r in report if r.action == "int8")
    table.add_section()
    summary = f"min {int8[0]:.1f} / median {int8[len(int8) // 2]:.1f}" if int8 else ""
    table.add_row(
        "total", "", "", _human(before), f"{_human(after)} ({after / max(before, 1):.0%})", summary
    )
    out.print(table)


def _print_manifest(manifest: Manifest, directory: Path | None = None) -> None:
    signed = "unsigned"
    if manifest.signature is not None:
        signed = f"signed by {manifest.signature.get('key_id', '?')}"
    where = f" in {directory}" if directory is not None else ""
    out.print(
        f"[bold]{manifest.name} {manifest.version}[/bold]{where}: {len(manifest.files)} files, "
        f"{_human(manifest.size)}, {manifest.chunk_count} chunks, {signed}\n"
        f"sha256 {manifest.sha256}",
        highlight=False,
    )
    table = Table(show_header=True)
    table.add_column("file")
    table.add_column("size", justify="right")
    table.add_column("chunks", justify="right")
    table.add_column("sha256")
    for entry in manifest.files:
        table.add_row(entry.path, _human(entry.size), str(len(entry.chunks)), entry.sha256[:16])
    out.print(table)


# -- inspect ----------------------------------------------------------------------------------


@artifacts_app.command("inspect")
def inspect_command(
    path: Annotated[
        Path,
        typer.Argument(
            help="A .safetensors file, a version dir, a manifest, a plan.json or an .airdelta file."
        ),
    ],
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")] = False,
) -> None:
    """Show what a file holds: tensors and quantization, a manifest, a plan or a delta."""
    with _errors():
        if path.suffix == ".safetensors":
            _inspect_tensors(path, as_json)
        elif path.suffix == ".airdelta":
            from airlane.artifacts.delta import read_delta_header

            base, target, entries = read_delta_header(path)
            info = {
                "base": base,
                "target": {"name": target.name, "version": target.version, "sha256": target.sha256},
                "chunks_carried": len(entries),
            }
            print(orjson.dumps(info, option=orjson.OPT_INDENT_2).decode())
        elif path.name == "plan.json":
            from airlane.artifacts.plan import ShardPlan

            plan = ShardPlan.from_json(orjson.loads(path.read_bytes()))
            if as_json:
                print(orjson.dumps(plan.to_json(), option=orjson.OPT_INDENT_2).decode())
            else:
                for row in plan.describe():
                    out.print("  ".join(str(cell) for cell in row), highlight=False)
        else:
            from airlane.artifacts.store import read_manifest

            manifest = read_manifest(path)
            if as_json:
                print(manifest.to_bytes().decode(), end="")
            else:
                _print_manifest(manifest)
                if manifest.metadata:
                    for key, value in sorted(manifest.metadata.items()):
                        out.print(f"metadata {key}: {value[:200]}", highlight=False)


def _inspect_tensors(path: Path, as_json: bool) -> None:
    from airlane.artifacts.tensorfile import read_header

    header = read_header(path)
    if as_json:
        body = {
            "tensors": {
                t.name: {"dtype": t.dtype, "shape": list(t.shape), "offsets": [t.start, t.end]}
                for t in header.tensors
            },
            "metadata": header.metadata,
        }
        print(orjson.dumps(body, option=orjson.OPT_INDENT_2).decode())
        return
    table = Table(
        title=f"{path.name}: {len(header.tensors)} tensors, {_human(header.file_size)}",
        title_justify="left",
    )
    for column in ("tensor", "dtype", "shape", "bytes"):
        table.add_column(column, justify="right" if column == "bytes" else "left")
    for info in header.tensors:
        table.add_row(
            info.name, info.dtype, "x".join(map(str, info.shape)) or "()", _human(info.nbytes)
        )
    out.print(table)
    for key, value in sorted(header.metadata.items()):
        out.print(f"metadata {key}: {value[:200]}", highlight=False)


# -- diff / apply -----------------------------------------------------------------------------


@artifacts_app.command("diff")
def diff_command(
    old: Annotated[Path, typer.Argument(help="The base version's directory.")],
    new: Annotated[Path, typer.Argument(help="The new version's directory.")],
    output: Annotated[
        Path | None, typer.Option("--out", help="Write the delta file here (.airdelta).")
    ] = None,
) -> None:
    """What changed between two versions: chunks shared and new, and the delta's size."""
    with _errors():
        from airlane.artifacts.delta import plan_delta, write_delta
        from airlane.artifacts.store import read_manifest

        base, target = read_manifest(old), read_manifest(new)
        if output is not None:
            stats = write_delta(base, old, target, new, output)
        else:
            _, stats = plan_delta(base, target)
        total = max(stats.target_bytes, 1)
        out.print(
            f"{base.name} {base.version} -> {target.name} {target.version}: "
            f"{stats.chunks_new} of {stats.chunks_total} chunks new; "
            f"{_human(stats.new_bytes)} of {_human(stats.target_bytes)} must travel "
            f"({stats.new_bytes / total:.1%}), {_human(stats.reused_bytes)} reused",
            highlight=False,
        )
        if output is not None:
            out.print(
                f"delta {output}: {_human(stats.encoded_bytes)} "
                f"({stats.encoded_bytes / total:.1%} of the full version)",
                highlight=False,
            )


@artifacts_app.command("apply")
def apply_command(
    delta: Annotated[Path, typer.Argument(help="An .airdelta file.")],
    base: Annotated[Path, typer.Argument(help="The base version's directory it was made from.")],
    output: Annotated[Path, typer.Argument(help="Where to write the new version.")],
) -> None:
    """Rebuild a version from its base and a delta; refuses any other base."""
    with _errors():
        from airlane.artifacts.delta import apply_delta
        from airlane.artifacts.store import read_manifest

        manifest = apply_delta(delta, read_manifest(base), base, output)
        _print_manifest(manifest, output)


# -- verify -----------------------------------------------------------------------------------


@artifacts_app.command("verify")
def verify_command(
    path: Annotated[Path, typer.Argument(help="A version directory (with manifest.json).")],
    key: Annotated[
        str | None,
        typer.Option(help="Public key (ed25519:... or a PEM file) that must have signed it."),
    ] = None,
) -> None:
    """Check every chunk, file and the whole artifact against the manifest (and signature)."""
    with _errors():
        from airlane.artifacts.verify import verify_directory

        report = verify_directory(path, public_key=_public_key(key))
        for line in report.lines():
            out.print(line, highlight=False)
        if not report.ok:
            raise typer.Exit(1)


# -- serve / pull / rollback ------------------------------------------------------------------


@artifacts_app.command("serve")
def serve_command(
    store: Annotated[Path, typer.Argument(help="The store directory to serve.")],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port; 0 picks a free one.")] = 8420,
    scan_interval: Annotated[
        float, typer.Option(help="Seconds between scans for new versions.")
    ] = 2.0,
) -> None:
    """Run the gateway serving STORE under /v1/artifacts (announcing new versions on the
    streams artifacts/<name>)."""
    from airlane.artifacts.config import ArtifactsConfig
    from airlane.cli.main import serve_or_fail
    from airlane.server import Listening, ServerConfig

    if not store.is_dir():
        _fail(f"{store} is not a directory")
    settings = replace(
        ServerConfig(host=host, port=port),
        artifacts=ArtifactsConfig(dir=str(store), scan_interval_s=scan_interval),
    )
    settings = replace(
        settings,
        airc=replace(settings.airc, enabled=False),
        grpc=replace(settings.grpc, enabled=False),
        rsocket=replace(settings.rsocket, enabled=False),
    )

    def ready(listening: Listening) -> None:
        print(f"airlane listening on {listening.http} (artifacts from {store})", flush=True)

    serve_or_fail(settings, ready, "airlane artifacts serve")


@artifacts_app.command("pull")
def pull_command(
    url: Annotated[
        str, typer.Argument(help="The gateway (http://host:port) or a store's base URL.")
    ],
    name: Annotated[str, typer.Argument(help="Artifact name.")],
    version: Annotated[str, typer.Option(help="Version to fetch.")] = "latest",
    dest: Annotated[Path, typer.Option(help="Install directory.")] = Path("models"),
    key: Annotated[
        str | None,
        typer.Option(help="Public key (ed25519:... or a PEM file) that must have signed it."),
    ] = None,
    parallel: Annotated[int, typer.Option(help="Concurrent range requests.")] = 4,
    range_size: Annotated[str, typer.Option(help="Largest range per request.")] = "8MiB",
    limit_rate: Annotated[
        str | None, typer.Option(help="Cap the download rate, per second (e.g. 2MiB).")
    ] = None,
    follow: Annotated[
        bool, typer.Option(help="Then keep pulling every version the gateway announces.")
    ] = False,
    quiet: Annotated[bool, typer.Option(help="No progress bar.")] = False,
    api_key: Annotated[
        str | None, typer.Option(envvar="AIRLANE_API_KEY", help="Bearer key for the gateway.")
    ] = None,
    transport: Annotated[
        Literal["http", "h3"],
        typer.Option(
            help="http (TCP) or h3 (HTTP/3 over QUIC, on the URL's port over UDP; for lossy links)."
        ),
    ] = "http",
    cafile: Annotated[
        str | None,
        typer.Option(
            help="With --transport h3: the CA that verifies the gateway's certificate "
            "(without it any is trusted; chunk hashes and --key still check the bytes)."
        ),
    ] = None,
) -> None:
    """Fetch a version: parallel chunk-aligned ranges, every chunk verified, resumable after a
    kill, reusing chunks already installed, committed atomically (the old one kept)."""
    from airlane.cli.main import run_async

    with _errors(), _gateway_errors(url):
        from airlane.artifacts.fetch import PullOptions

        options = PullOptions(
            parallel=parallel,
            range_bytes=parse_size(range_size),
            public_key=_public_key(key),
            headers={"authorization": f"Bearer {api_key}"} if api_key else {},
            max_bytes_per_s=parse_size(limit_rate) if limit_rate else None,
            transport=transport,
            cafile=cafile,
        )
        run_async(_pull_main(url, name, version, dest, options, follow, quiet, api_key))


async def _pull_main(
    url: str,
    name: str,
    version: str,
    dest: Path,
    options: Any,
    follow: bool,
    quiet: bool,
    api_key: str | None,
) -> None:
    import httpx

    from airlane.artifacts.fetch import pull
    from airlane.artifacts.service import ANNOUNCE_TYPE, announcement_stream

    root = url.rstrip("/")
    base = root + "/v1/artifacts" if httpx.URL(root).path in ("", "/") else root
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    async with httpx.AsyncClient(timeout=options.timeout_s, headers=headers) as client:

        async def one(wanted: str) -> None:
            with _progress(quiet) as progress:
                result = await pull(
                    base, name, dest, wanted, options=options, client=client, progress=progress
                )
            _print_pull(result)

        if not follow:
            await one(version)
            return
        from airlane.client import AirlaneClient

        async with AirlaneClient(root, api_key=api_key) as gateway:
            stream = announcement_stream(name)
            token = (await gateway.info(stream)).get("resume_token")
            await one(version)
            err.print(f"following {stream} for new versions (Ctrl-C to stop)", highlight=False)
            async for event in gateway.events(stream, resume=token):
                payload = event.data.get("payload") if event.kind == "message" else None
                if isinstance(payload, dict) and payload.get("type") == ANNOUNCE_TYPE:
                    await one(str(payload["version"]))


@contextmanager
def _progress(quiet: bool) -> Iterator[Any]:
    if quiet:
        yield None
        return
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task("pull", total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _print_pull(result: Any) -> None:
    manifest = result.manifest
    if result.up_to_date:
        out.print(
            f"{manifest.name} {manifest.version} is current; nothing to fetch", highlight=False
        )
        return
    rate = result.fetched_bytes / max(result.seconds, 1e-9) / 1e6
    parts = [
        f"{manifest.name} {manifest.version} installed in {result.directory}",
        f"fetched {_human(result.fetched_bytes)} ({rate:.1f} MB/s, {result.requests} requests)",
    ]
    if result.connections:
        plural = "s" if result.connections > 1 else ""
        parts.append(f"over HTTP/3 ({result.connections} QUIC connection{plural})")
    if result.reused_bytes:
        parts.append(f"reused {_human(result.reused_bytes)} from installed versions")
    if result.resumed_bytes:
        parts.append(f"resumed {_human(result.resumed_bytes)}")
    if result.refetched_chunks:
        parts.append(f"{result.refetched_chunks} corrupt chunks fetched again")
    if result.ranges_ignored:
        parts.append("the server ignored Range (whole-file answers)")
    if result.signed_by:
        parts.append(f"signature by {result.signed_by} verified")
    out.print("; ".join(parts), highlight=False)


@artifacts_app.command("rollback")
def rollback_command(
    dest: Annotated[Path, typer.Argument(help="Install directory.")],
    name: Annotated[str, typer.Argument(help="Artifact name.")],
) -> None:
    """Make the previous version current again (and the current one previous)."""
    with _errors():
        from airlane.artifacts.install import Installation

        version = Installation(dest, name).rollback()
        out.print(f"{name}: {version} is current", highlight=False)
