"""``airlane certs``: a development CA and SPIFFE workload certificates, for trying mutual TLS
(docs/security.md). Production certificates come from SPIRE, a mesh or your own PKI."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["certs_app"]

certs_app = typer.Typer(
    help="Development certificates for mutual TLS with SPIFFE IDs.", no_args_is_help=True
)


@certs_app.command("ca")
def ca_command(
    out: Annotated[Path, typer.Option(help="Folder for ca.pem and ca.key.")] = Path("certs"),
    trust_domain: Annotated[
        str, typer.Option(help="The trust domain the CA signs for.")
    ] = "airlane.test",
    days: Annotated[int, typer.Option(help="Days the CA is valid.")] = 365,
) -> None:
    """Make a CA (ca.pem, ca.key) for one SPIFFE trust domain."""
    from airlane.security.certs import make_ca

    try:
        files = make_ca(out, trust_domain, days=days)
    except (ValueError, OSError) as exc:
        typer.echo(f"airlane certs ca: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {files.cert} and {files.key}")


@certs_app.command("issue")
def issue_command(
    spiffe_id: Annotated[str, typer.Argument(help="spiffe://<trust-domain>/<path>")],
    ca: Annotated[Path, typer.Option(help="Folder holding ca.pem and ca.key.")] = Path("certs"),
    out: Annotated[Path, typer.Option(help="Folder for <name>.pem and <name>.key.")] = Path(
        "certs"
    ),
    name: Annotated[
        str | None, typer.Option(help="File name stem (default: the ID's last segment).")
    ] = None,
    days: Annotated[int, typer.Option(help="Days the certificate is valid.")] = 30,
) -> None:
    """Issue a workload certificate for a SPIFFE ID, signed by the CA (also valid for
    localhost, so one file can serve a listener)."""
    from airlane.security.certs import issue_certificate

    try:
        files = issue_certificate(ca, spiffe_id, out, name=name, days=days)
    except (ValueError, OSError) as exc:
        typer.echo(f"airlane certs issue: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {files.cert} and {files.key} for {spiffe_id}")
