"""The typer application and the ``airlane serve`` command."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from typer.core import TyperOption

from airlane import __version__
from airlane.cli.artifacts import artifacts_app
from airlane.cli.bench import bench_command
from airlane.cli.certs import certs_app
from airlane.cli.demo import demo_command
from airlane.cli.logs import logs_app, schemas_app
from airlane.cli.policy import policy_app
from airlane.cli.rules import rules_app
from airlane.cli.shaping import shaping_app
from airlane.cli.stream import stream_command
from airlane.server.address import DEFAULT_HOST, DEFAULT_PORT

if TYPE_CHECKING:
    from airlane.server import Listening, ServerConfig, StartupError

__all__ = ["app", "main"]

START_FAILED = 2
"""``airlane serve``'s exit status when it cannot start (a taken port, a bad setting)."""
_LOG_LEVELS = ("debug", "info", "warning", "error")
# What changes each listener's address, for the line that says it cannot bind.
_LISTENER_FLAGS = {
    "HTTP": "pick another port with --port (or another address with --host)",
    "AIRC": "pick another port with --airc-port, or turn it off with --airc-port -1",
    "gRPC": "pick another port with --grpc-port, or turn it off with --grpc-port -1",
    "HTTP/3": "pick another UDP port with --http3-port, or turn it off with --http3-port -1",
    "RSocket": "pick another port with --rsocket-port, or turn it off with --rsocket-port -1",
}

app = typer.Typer(
    name="airlane",
    help="Airlane: resumable LLM token streams and event logs, one process or many nodes.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console(stderr=True)

# typer 0.29 prints a flag's type, "<bool>", beside every flag in --help (--help itself
# included): noise, since a flag takes no value. Flags show no type here.
_display_type = TyperOption.display_type_rich


def _flag_without_type(self: TyperOption, ctx: Any) -> str | None:
    return None if self.is_flag else _display_type(self, ctx)


TyperOption.display_type_rich = _flag_without_type  # type: ignore[method-assign]


def _print_version(value: bool) -> None:
    if value:
        print(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Airlane: resumable LLM token streams and event logs, one process or many nodes."""


def run_async(coro: object) -> None:
    """Run a coroutine on uvloop when available (it is on Linux and macOS)."""
    try:
        import uvloop

        uvloop.run(coro)  # type: ignore[arg-type]
    except ImportError:  # pragma: no cover - Windows
        import asyncio

        asyncio.run(coro)  # type: ignore[arg-type]


@app.command("serve")
def serve_command(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = DEFAULT_HOST,
    port: Annotated[int, typer.Option(help="Port; 0 picks a free one.")] = DEFAULT_PORT,
    upstream: Annotated[
        str | None, typer.Option(help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
    ] = None,
    upstream_key: Annotated[
        str | None, typer.Option(envvar="AIRLANE_UPSTREAM_KEY", help="Bearer key for upstream.")
    ] = None,
    model: Annotated[str | None, typer.Option(help="Model name to force upstream.")] = None,
    model_dir: Annotated[
        Path | None,
        typer.Option(
            help="Serve the causal language model in this directory (needs the 'local' "
            "extra; docs/backends.md)."
        ),
    ] = None,
    api_key: Annotated[
        list[str] | None,
        typer.Option(
            help="Require this client API key (repeatable); NAME=KEY names its principal, "
            "NAME@TENANT=KEY its tenant too (a bare NAME is a tenant of its own)."
        ),
    ] = None,
    airc_port: Annotated[
        int | None,
        typer.Option(help="AIRC/TCP port (default: the HTTP port + 1; -1 turns it off)."),
    ] = None,
    grpc_port: Annotated[
        int | None,
        typer.Option(help="gRPC port (default: the HTTP port + 2; -1 turns it off)."),
    ] = None,
    http3_port: Annotated[
        int | None,
        typer.Option(help="HTTP/3 UDP port (default: the HTTP port's number; -1 turns it off)."),
    ] = None,
    rsocket_port: Annotated[
        int | None,
        typer.Option(help="RSocket/TCP port (default: the HTTP port + 3; -1 turns it off)."),
    ] = None,
    waku_port: Annotated[
        int | None,
        typer.Option(
            help="Serve a Waku node for js-waku on this WebSocket port (0: any free port; "
            "-1: off, the default unless [waku] enabled)."
        ),
    ] = None,
    hub: Annotated[
        str | None,
        typer.Option(help="'memory' (default) or NATS JetStream URLs shared by every node."),
    ] = None,
    mqtt: Annotated[
        list[str] | None,
        typer.Option(
            help="Bridge to this MQTT broker (mqtt://[user:pass@]host:port or mqtts://...); "
            "repeat for several. Topics airlane/logs/<log> go into the log <log>."
        ),
    ] = None,
    node_id: Annotated[
        str | None, typer.Option(help="This node's name among the JetStream hub's nodes.")
    ] = None,
    artifacts: Annotated[
        Path | None,
        typer.Option(help="Serve this artifact store under /v1/artifacts and announce versions."),
    ] = None,
    tls_cert: Annotated[
        Path | None, typer.Option(help="Speak TLS on every listener with this certificate (PEM).")
    ] = None,
    tls_key: Annotated[Path | None, typer.Option(help="The certificate's private key.")] = None,
    tls_client_ca: Annotated[
        Path | None,
        typer.Option(help="Require client certificates that chain to this CA bundle (mTLS)."),
    ] = None,
    trust_domain: Annotated[
        list[str] | None,
        typer.Option(help="Accept client SPIFFE IDs from this trust domain only (repeatable)."),
    ] = None,
    jwks: Annotated[
        str | None,
        typer.Option(help="Accept bearer JWTs signed by this JWKS (a file, or an https:// URL)."),
    ] = None,
    jwt_audience: Annotated[
        str | None, typer.Option(help="The audience (aud) JWTs must be for.")
    ] = None,
    jwt_issuer: Annotated[
        str | None, typer.Option(help="The issuer (iss) JWTs must be from.")
    ] = None,
    policy: Annotated[
        Path | None,
        typer.Option(
            help="Allow only what this RBAC policy file's rules allow (re-read when it changes)."
        ),
    ] = None,
    audit_log: Annotated[
        Path | None,
        typer.Option(help="Write a JSON line for every refusal and admin action to this file."),
    ] = None,
    trusted_proxy: Annotated[
        list[str] | None,
        typer.Option(
            help="Believe x-forwarded-client-cert from this address or network (repeatable)."
        ),
    ] = None,
    config: Annotated[Path | None, typer.Option(help="TOML configuration file.")] = None,
    log_level: Annotated[str, typer.Option(help="debug, info, warning or error.")] = "info",
    workers: Annotated[
        str,
        typer.Option(
            help="Processes sharing the ports, one per core with 'auto'; they share streams "
            "through --hub (default: a nats-server started for them)."
        ),
    ] = "1",
) -> None:
    """Run the gateway (in-memory hub unless --hub names NATS; synthetic backend unless
    --upstream or --model-dir is given)."""
    # Here, not at the top: the other commands do not load the server.
    from airlane.server import ServerConfig, load_config
    from airlane.server.workers import worker_count

    if log_level.lower() not in _LOG_LEVELS:
        start_failed(f"--log-level must be one of {', '.join(_LOG_LEVELS)}, not {log_level!r}")
    try:
        settings = load_config(config) if config else ServerConfig()
    except (ValueError, OSError) as exc:
        start_failed(str(exc))
    keys = dict(settings.api_keys)
    for item in api_key or []:
        name, sep, key = item.partition("=")
        keys[key if sep else name] = name if sep else f"key-{len(keys) + 1}"
    settings = replace(
        settings,
        host=host,
        port=port,
        upstream=upstream or settings.upstream,
        upstream_api_key=upstream_key or settings.upstream_api_key,
        model=model or settings.model,
        local=replace(settings.local, model_dir=str(model_dir))
        if model_dir is not None
        else settings.local,
        api_keys=keys,
        log_level=log_level,
    )
    tls = settings.tls
    if tls_cert is not None or tls_key is not None or tls_client_ca is not None or trust_domain:
        tls = replace(
            tls,
            cert_file=str(tls_cert) if tls_cert else tls.cert_file,
            key_file=str(tls_key) if tls_key else tls.key_file,
            client_ca_file=str(tls_client_ca) if tls_client_ca else tls.client_ca_file,
            trust_domains=tuple(trust_domain) if trust_domain else tls.trust_domains,
        )
        settings = replace(settings, tls=tls)
    if jwks is not None or jwt_audience is not None or jwt_issuer is not None:
        url = jwks is not None and jwks.startswith(("https://", "http://"))
        settings = replace(
            settings,
            jwt=replace(
                settings.jwt,
                # --jwks replaces both of the file's: it names one source.
                jwks_url=(jwks if url else None) if jwks is not None else settings.jwt.jwks_url,
                jwks_file=(None if url else jwks) if jwks is not None else settings.jwt.jwks_file,
                audience=jwt_audience or settings.jwt.audience,
                issuer=jwt_issuer or settings.jwt.issuer,
            ),
        )
    if policy is not None:
        settings = replace(settings, policy=replace(settings.policy, file=str(policy)))
    if audit_log is not None:
        settings = replace(settings, audit=replace(settings.audit, path=str(audit_log)))
    if trusted_proxy:
        settings = replace(settings, trusted_proxies=tuple(trusted_proxy))
    if hub is not None:
        settings = replace(settings, hub=hub)
    if mqtt:
        settings = _with_bridges(settings, mqtt)
    if node_id is not None:
        settings = replace(settings, jetstream=replace(settings.jetstream, node_id=node_id))
    if artifacts is not None:
        settings = replace(settings, artifacts=replace(settings.artifacts, dir=str(artifacts)))
    settings = _with_ports(settings, airc_port, grpc_port, http3_port, rsocket_port)
    if waku_port is not None:
        waku = replace(settings.waku, enabled=waku_port >= 0, port=max(waku_port, 0))
        settings = replace(settings, waku=waku)
    logging.basicConfig(level=log_level.upper(), format="%(levelname)s %(name)s: %(message)s")

    try:
        count = worker_count(workers)
    except ValueError as exc:
        start_failed(str(exc))
    if count > 1:
        serve_workers(settings, count)
        return

    def ready(listening: Listening) -> None:
        print(ready_line(settings, listening), flush=True)

    serve_or_fail(settings, ready)


def ready_line(settings: ServerConfig, listening: Listening, workers: int = 1) -> str:
    """The line ``airlane serve`` prints on stdout once it serves (scripts and tests read the
    addresses from it)."""
    backend = f"upstream {settings.upstream}" if settings.upstream else "synthetic backend"
    if settings.local.model_dir is not None:
        backend = f"local model {settings.local.model_dir}"
    if settings.hub != "memory":
        backend += f", hub {settings.hub}"
    if workers > 1:
        backend += f", {workers} workers"
    airc = f", AIRC on {listening.airc}" if listening.airc else ""
    grpc = f", gRPC on {listening.grpc}" if listening.grpc else ""
    h3 = f", HTTP/3 on {listening.http3}" if listening.http3 else ""
    rs = f", RSocket on {listening.rsocket}" if listening.rsocket else ""
    waku = f", Waku on {listening.waku}" if listening.waku else ""
    return f"airlane listening on {listening.http} ({backend}){airc}{grpc}{h3}{rs}{waku}"


def serve_workers(settings: ServerConfig, count: int) -> NoReturn:
    """``airlane serve --workers N`` (`airlane.server.workers`): exits with its status."""
    from airlane.server.run import ListenerError
    from airlane.server.workers import WorkersError, run_workers

    def ready(shared: ServerConfig, listening: Listening) -> None:
        print(ready_line(shared, listening, count), flush=True)

    try:
        import uvloop

        code = uvloop.run(run_workers(settings, count, ready))
    except ListenerError as exc:
        start_failed(startup_message(exc))
    except WorkersError as exc:
        start_failed(str(exc))
    raise typer.Exit(code)


def _with_bridges(settings: ServerConfig, urls: list[str]) -> ServerConfig:
    """``settings`` with a bridge (default routes) to each broker URL given on the command
    line; a bad URL ends the command with the reason."""
    from airlane.transports.mqtt import MqttBridgeConfig

    taken = {bridge.name for bridge in settings.mqtt}
    bridges = list(settings.mqtt)
    for index, url in enumerate(urls, start=1):
        name = "mqtt" if len(urls) == 1 and not taken else f"mqtt{len(taken) + index}"
        try:
            bridges.append(MqttBridgeConfig(url, name=name))
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--mqtt") from None
    return replace(settings, mqtt=tuple(bridges))


def _with_ports(
    settings: ServerConfig,
    airc_port: int | None,
    grpc_port: int | None,
    http3_port: int | None,
    rsocket_port: int | None,
) -> ServerConfig:
    """``settings`` with the listener ports given on the command line (-1: that one off)."""
    if airc_port is not None:
        airc = replace(settings.airc, enabled=airc_port >= 0, port=max(airc_port, 0))
        settings = replace(settings, airc=airc)
    if grpc_port is not None:
        grpc = replace(settings.grpc, enabled=grpc_port >= 0, port=max(grpc_port, 0))
        settings = replace(settings, grpc=grpc)
    if http3_port is not None:
        http3 = replace(settings.http3, enabled=http3_port >= 0, port=max(http3_port, 0))
        settings = replace(settings, http3=http3)
    if rsocket_port is not None:
        rsocket = replace(settings.rsocket, enabled=rsocket_port >= 0, port=max(rsocket_port, 0))
        settings = replace(settings, rsocket=rsocket)
    return settings


def serve_or_fail(
    settings: ServerConfig, ready: Callable[[Listening], None], command: str = "airlane serve"
) -> None:
    """Run the gateway; what keeps it from starting ends the command with one line on stderr
    (`start_failed`)."""
    from airlane.server.run import StartupError, serve

    try:
        run_async(serve(settings, on_ready=ready))
    except StartupError as exc:
        start_failed(startup_message(exc), command)


def startup_message(exc: StartupError) -> str:
    """``exc``'s line, completed, for a listener that cannot bind, with the flag that changes
    its address or turns it off."""
    from airlane.server.run import ListenerError

    if isinstance(exc, ListenerError) and exc.listener in _LISTENER_FLAGS:
        return f"{exc}; {_LISTENER_FLAGS[exc.listener]}"
    return str(exc)


def start_failed(message: str, command: str = "airlane serve") -> NoReturn:
    """End ``command`` with ``message`` as one line on stderr and exit status 2 (no
    traceback: these are the user's to fix, and the line says how)."""
    line = " ".join(message.split())  # one line, whatever the message held
    print(f"{command}: {line}", file=sys.stderr, flush=True)
    raise typer.Exit(START_FAILED)


app.command("demo")(demo_command)
app.command("stream")(stream_command)
app.command("bench")(bench_command)
app.add_typer(logs_app, name="logs")
app.add_typer(schemas_app, name="schemas")
app.add_typer(rules_app, name="rules")
app.add_typer(artifacts_app, name="artifacts")
app.add_typer(certs_app, name="certs")
app.add_typer(policy_app, name="policy")
app.add_typer(shaping_app, name="shaping")


@app.command("version")
def version_command() -> None:
    """Print the version."""
    print(__version__)


def main() -> None:
    """Console-script entry point."""
    app()
