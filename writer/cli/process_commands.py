"""The process commands ``up``, ``writer``, ``worker``, ``explorer``, ``mcp`` (see
:mod:`writer.serving`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from writer.cli.command import CliError, add_command


def up_command(args: argparse.Namespace) -> None:
    """Serve until stopped.

    :raises CliError: ``already_running`` or ``port_in_use`` (nothing was started).
    """
    from writer.serving import UsageError, run_up

    try:
        run_up(args.host, args.port, args.explorer_port, args.workspace if args.demo else None,
               Path(args.cards) if args.cards else None)
    except UsageError as exc:
        raise CliError({"error": str(exc), "code": exc.code}) from exc


def configure_up_parser(subparsers: argparse._SubParsersAction) -> None:
    up = add_command(subparsers, "up",
                     "Run writer + worker + explorer in one process over the embedded defaults.",
                     up_command)
    up.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    up.add_argument("--port", type=int, default=8000, help="writer port (default 8000)")
    up.add_argument("--explorer-port", type=int, default=8001, help="explorer port (default 8001)")
    up.add_argument("--demo", action="store_true",
                    help="create the demo workspace, import the BIRD cards it lacks (by key), "
                         "print its three tokens (assistant, administrator, reviewer; the same "
                         "at every start on one data dir while none is revoked) and, once the "
                         "cards are indexed, a ready block")
    up.add_argument("--workspace", default="bird", help="demo workspace (default bird)")
    up.add_argument("--cards", help="cards file for --demo (default: the bundled BIRD cards)")


def _add_server(subparsers: argparse._SubParsersAction, name: str, help: str, handler,
                port: int) -> argparse.ArgumentParser:
    """A command that serves HTTP on ``--host`` and ``--port`` (default ``port``)."""
    parser = add_command(subparsers, name, help, handler)
    parser.add_argument("--host", default="127.0.0.1", help="bind address")
    parser.add_argument("--port", type=int, default=port, help=f"port (default {port})")
    return parser


def writer_command(args: argparse.Namespace) -> None:
    """Serve the writer API until stopped (exit 2 without MEMARC_QDRANT_URL)."""
    from writer.serving import run_writer

    run_writer(args.host, args.port)


def configure_writer_parser(subparsers: argparse._SubParsersAction) -> None:
    _add_server(subparsers, "writer", "Run the writer API alone (needs MEMARC_QDRANT_URL).",
                writer_command, 8000)


def explorer_command(args: argparse.Namespace) -> None:
    """Serve the explorer until stopped."""
    from writer.serving import run_explorer

    run_explorer(args.host, args.port, args.workspaces)


def configure_explorer_parser(subparsers: argparse._SubParsersAction) -> None:
    sp = _add_server(subparsers, "explorer", "Run the Datasette explorer alone.",
                     explorer_command, 8001)
    sp.add_argument("--workspaces", help='JSON map of actor id -> workspaces, e.g. '
                                         '\'{"alice": ["bird"]}\' (root sees all)')


def worker_command(args: argparse.Namespace) -> None:
    """Run the projection worker until stopped (exit 2 without MEMARC_QDRANT_URL); with
    ``--check``, exit 0 if this host's worker sent its heartbeat in the last 31 s, else 1."""
    if args.check:
        import asyncio

        from shared.config import load_settings
        from shared.worker import check_worker_health

        settings = load_settings()
        if not settings.redis_url:
            raise SystemExit("memarc worker --check: MEMARC_REDIS_URL is not set")
        raise SystemExit(0 if asyncio.run(check_worker_health(settings.redis_url)) else 1)
    from writer.serving import run_worker

    run_worker()


def configure_worker_parser(subparsers: argparse._SubParsersAction) -> None:
    wk = add_command(subparsers, "worker",
                     "Run the projection worker alone (needs MEMARC_QDRANT_URL).", worker_command)
    wk.add_argument("--check", action="store_true",
                    help="health check: exit 0 if this host's worker recorded a heartbeat in the "
                         "last 31 s, else 1 (for container health checks)")


def mcp_command(args: argparse.Namespace) -> None:
    """Serve MCP over stdio until stdin closes, as the holder of ``MEMARC_TOKEN``.

    :raises CliError: ``token_missing``, ``database_url_missing`` or ``already_running``
        (nothing was started).
    """
    from writer.serving import UsageError, run_mcp

    try:
        run_mcp()
    except UsageError as exc:
        raise CliError({"error": str(exc), "code": exc.code}) from exc


def configure_mcp_parser(subparsers: argparse._SubParsersAction) -> None:
    add_command(subparsers, "mcp",
                "Run the MCP server over stdio for MEMARC_TOKEN's workspace (the writer's "
                "settings; the writer serves it over HTTP at /mcp).", mcp_command)


#: The process commands, in the order of ``memarc --help``.
PARSERS = (configure_up_parser, configure_writer_parser, configure_explorer_parser,
           configure_worker_parser, configure_mcp_parser)
