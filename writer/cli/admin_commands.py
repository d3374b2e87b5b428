"""``memarc sign-in-link``: a one-time sign-in link to the administration pages (bootstrap:
migrator login, PostgreSQL directly, so it works next to a running writer and can be issued again
at any time without a restart); ``memarc explorer-sign-in-link``: the same for the explorer,
signed with the explorer's secret (:mod:`shared.archive.explorer_sign_in`)."""

from __future__ import annotations

import argparse
import os
from typing import Any

from shared.auth import PERMISSIONS
from writer.cli.command import CliError, add_command


def sign_in_link_command(args: argparse.Namespace) -> dict[str, Any]:
    """``{sign_in_link, workspace, permissions, token_id, expires_at}``: the link opens a session
    once, within ``--minutes`` (default 15), for a new token of the workspace (default permission
    ``memory.manage``; ``memarc token revoke TOKEN_ID`` ends the sessions opened with it).

    :raises CliError: ``bad_input``, ``--minutes`` outside 1..1440; ``no_database``.
    """
    from shared.archive.browser_sessions import create_sign_in_link
    from writer.cli.bootstrap_commands import _settings

    if not 1 <= args.minutes <= 1440:
        raise CliError({"error": "--minutes must be 1..1440", "code": "bad_input"})
    s = _settings()
    link = create_sign_in_link(s.migrator_database_url, s.db_schema, args.workspace,
                               args.permission or ["memory.manage"], minutes=args.minutes,
                               session_hours=s.admin_session_hours)
    base = (args.url or os.environ.get("MEMARC_URL") or "http://127.0.0.1:8000").rstrip("/")
    return {"sign_in_link": f"{base}/admin/sign-in/link?code={link['code']}",
            "workspace": link["workspace"], "permissions": link["permissions"],
            "token_id": link["token_id"], "expires_at": link["expires_at"]}


def configure_sign_in_link_parser(subparsers: argparse._SubParsersAction) -> None:
    sp = add_command(subparsers, "sign-in-link",
                     "Print a one-time sign-in link to the administration pages for a workspace "
                     "(bootstrap, talks to PostgreSQL directly).", sign_in_link_command,
                     workspace=True)
    sp.add_argument("--permission", action="append", choices=list(PERMISSIONS),
                    help="repeatable; default memory.manage")
    sp.add_argument("--minutes", type=int, default=15,
                    help="minutes the link stays valid (default 15; it works once)")
    sp.add_argument("--url", help="the writer's public URL (default MEMARC_URL, else "
                                  "http://127.0.0.1:8000)")


def _explorer_base(url: str | None, configured: str | None) -> str:
    """The explorer's base URL (scheme and host): ``--url``, else ``MEMARC_EXPLORER_URL``,
    else ``memarc up``'s ``http://127.0.0.1:8001``; a path such as ``/-/memory`` is dropped."""
    from urllib.parse import urlsplit

    parts = urlsplit(url or configured or "http://127.0.0.1:8001")
    return f"{parts.scheme or 'http'}://{parts.netloc or parts.path}".rstrip("/")


def explorer_sign_in_link_command(args: argparse.Namespace) -> dict[str, Any]:
    """``{explorer_sign_in, actor, expires_at}``: a link that signs a browser in to the running
    explorer once, within ``--minutes`` (default 15), as ``--actor`` (default ``root``, who sees
    every workspace). No restart, no database, no token revoked: it is signed with the
    explorer's secret (``DATASETTE_SECRET``, else ``MEMARC_DATA_DIR/explorer_secret``, which
    ``memarc up`` keeps).

    :raises CliError: ``bad_input``, ``--minutes`` outside 1..1440 or a blank actor;
        ``no_explorer_secret``, neither is there.
    """
    from datetime import datetime, timezone

    from shared.archive.explorer_sign_in import SIGN_IN_PATH, issue, signing_secret
    from shared.config import load_settings
    from shared.errors import InvalidInput

    s = load_settings()
    secret = signing_secret(s.data_dir, create=False)
    if secret is None:
        raise CliError({"error": f"no explorer secret: DATASETTE_SECRET is not set and "
                                 f"{s.data_dir}/explorer_secret does not exist (run this where "
                                 "`memarc up` runs, with its MEMARC_DATA_DIR, or give "
                                 "`memarc explorer` a DATASETTE_SECRET)",
                        "code": "no_explorer_secret"})
    try:
        ticket = issue(secret, args.actor, args.minutes)
    except InvalidInput as exc:
        raise CliError({"error": exc.message, "code": "bad_input"}) from None
    base = _explorer_base(args.url, s.explorer_url)
    return {"explorer_sign_in": f"{base}{SIGN_IN_PATH}?ticket={ticket['ticket']}",
            "actor": ticket["actor"],
            "expires_at": datetime.fromtimestamp(ticket["expires_at"], timezone.utc).isoformat()}


def configure_explorer_sign_in_link_parser(subparsers: argparse._SubParsersAction) -> None:
    sp = add_command(subparsers, "explorer-sign-in-link",
                     "Print a one-time sign-in link to the running explorer (no restart; API "
                     "tokens stay valid).", explorer_sign_in_link_command)
    sp.add_argument("--actor", default="root",
                    help="the explorer actor to sign in as (default root: every workspace)")
    sp.add_argument("--minutes", type=int, default=15,
                    help="minutes the link stays valid (default 15; it works once)")
    sp.add_argument("--url", help="the explorer's URL (default MEMARC_EXPLORER_URL, else "
                                  "http://127.0.0.1:8001)")


#: The administration commands, in the order of ``memarc --help``.
PARSERS = (configure_sign_in_link_parser, configure_explorer_sign_in_link_parser)
