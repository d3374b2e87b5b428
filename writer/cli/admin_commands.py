"""``memarc sign-in-link``: a one-time sign-in link to the administration pages (bootstrap:
migrator login, PostgreSQL directly, so it works next to a running writer and can be issued again
at any time without a restart)."""

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


#: The administration commands, in the order of ``memarc --help``.
PARSERS = (configure_sign_in_link_parser,)
