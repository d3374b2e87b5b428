"""Bootstrap commands ``migrate``, ``workspace create|delete``, ``token create|revoke``: migrator
login."""

from __future__ import annotations

import argparse
import logging
import os
from typing import Any

from shared.auth import PERMISSIONS
from shared.models import LANGUAGES
from writer.cli.command import CliError, add_command


def _settings():
    """The settings, with the migrator login these commands need.

    :raises CliError: ``no_database``, neither MEMARC_MIGRATOR_DATABASE_URL nor
        MEMARC_DATABASE_URL is set.
    """
    from shared.config import load_settings

    s = load_settings()
    if not s.migrator_database_url:
        raise CliError({"error": "set MEMARC_MIGRATOR_DATABASE_URL or MEMARC_DATABASE_URL "
                                 "(or MEMARC_DATABASE_HOST)",
                        "code": "no_database"})
    return s


#: why ``migrate`` refuses to run as the runtime login (issue 25, case 8)
SAME_LOGIN_REFUSAL = (
    "migrate would run as the runtime login {login!r} (MEMARC_MIGRATOR_DATABASE_URL is unset or "
    "names the same login as MEMARC_DATABASE_URL): that login would own the archive's tables, "
    "so row-level security would no longer bind the writer and the worker. Set "
    "MEMARC_MIGRATOR_DATABASE_URL (and MEMARC_MIGRATOR_PASSWORD_FILE) to a login that may create "
    "the schema, or pass --allow-runtime-login to accept the risk (a throwaway database)")


def migrate_command(args: argparse.Namespace) -> dict[str, Any]:
    """``{applied: [file names], schema}``, and ``notices`` (``"<migration>: <message>"``) when a
    migration raised any; the login of MEMARC_DATABASE_URL joins the runtime and reader roles.

    :raises CliError: ``no_database``; ``migrator_missing``, the migrator login is the runtime
        login (unset MEMARC_MIGRATOR_DATABASE_URL, or the same user) and
        ``--allow-runtime-login`` was not given: nothing is applied.
    """
    from shared.store.migrations import login_of, migrate

    s = _settings()
    runtime = login_of(s.database_url or "")
    if runtime is not None and login_of(s.migrator_database_url) == runtime \
            and not getattr(args, "allow_runtime_login", False):
        raise CliError({"error": SAME_LOGIN_REFUSAL.format(login=runtime),
                        "code": "migrator_missing"})
    notices: list[str] = []
    applied = migrate(s.migrator_database_url, s.db_schema, login_of(s.database_url or ""),
                      notices=notices)
    return {"applied": applied, "schema": s.db_schema, **({"notices": notices} if notices else {})}


def configure_migrate_parser(subparsers: argparse._SubParsersAction) -> None:
    mg = add_command(subparsers, "migrate",
                     "Apply the numbered SQL migrations with the migrator credentials.",
                     migrate_command)
    mg.add_argument("--allow-runtime-login", action="store_true",
                    help="migrate even when the migrator login is the runtime login (it then "
                         "owns the tables and row-level security no longer binds it)")


def create_workspace_command(args: argparse.Namespace) -> Any:
    """``{id, language, created_at, created}`` (``created`` false: it existed, same language)."""
    from shared.store.bootstrap import create_workspace

    s = _settings()
    return create_workspace(s.migrator_database_url, s.db_schema, args.workspace_id,
                            args.language)


def operator() -> str:
    """Who runs this command, as a removal records it: ``<OS user>@<host>``."""
    import getpass
    import socket

    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = f"uid {os.getuid()}"
    return f"{user}@{socket.gethostname()}"


def delete_workspace_command(args: argparse.Namespace) -> Any:
    """``{removal_id, workspace, removed_by, removed_at, deleted_rows: {table: n},
    index_status}``: every row of the workspace and its tokens are gone; its index collection
    is dropped by the worker (``index_status`` ``pending`` until then; ``--wait S`` waits for
    it, at most 300 s).

    :raises CliError: ``confirmation_required`` without ``--yes`` or a ``--confirm`` that
        repeats the workspace id.
    """
    import time

    from shared.store.bootstrap import delete_workspace, removal

    if not args.yes and args.confirm != args.workspace_id:
        raise CliError({"error": f"deleting workspace {args.workspace_id!r} removes all its cards, "
                                 "tokens and index: repeat its id with --confirm "
                                 f"{args.workspace_id} (or pass --yes)",
                        "code": "confirmation_required"})
    if not 0 <= (args.wait or 0) <= 300:
        raise CliError({"error": "--wait must be 0..300 seconds", "code": "bad_input"})
    s = _settings()
    result = delete_workspace(s.migrator_database_url, s.db_schema, args.workspace_id,
                              args.by or operator())
    logging.getLogger("memarc.bootstrap").warning(
        "workspace %s removed by %s (removal %s): %s rows; its index collection is dropped by "
        "the worker", result["workspace"], result["removed_by"], result["removal_id"],
        sum(result["deleted_rows"].values()))
    deadline = time.monotonic() + (args.wait or 0)
    while result["index_status"] == "pending" and time.monotonic() < deadline:
        time.sleep(0.5)
        row = removal(s.migrator_database_url, s.db_schema, result["removal_id"])
        result["index_status"] = row["index_status"]
        if row["index_error"]:
            result["index_error"] = row["index_error"]
    return result


def configure_workspace_parser(subparsers: argparse._SubParsersAction) -> None:
    w = add_command(subparsers, "workspace",
                    "Create or delete a workspace (bootstrap, talks to PostgreSQL directly).",
                    None)
    wsub = w.add_subparsers(dest="workspace_command", required=True)
    wc = wsub.add_parser("create", help="Create a workspace.")
    wc.set_defaults(func=create_workspace_command)
    wc.add_argument("workspace_id", help="workspace id: a-z, 0-9, '_' and '-'")
    wc.add_argument("--language", choices=LANGUAGES, default="en",
                    help="language of BM25 stemming (default en)")
    wd = wsub.add_parser("delete", help="Delete a workspace: its cards, every row it owns, its "
                                        "tokens and (through the worker) its index collection.")
    wd.set_defaults(func=delete_workspace_command)
    wd.add_argument("workspace_id", help="workspace id")
    wd.add_argument("--confirm", metavar="WORKSPACE",
                    help="the workspace id again, to confirm")
    wd.add_argument("--yes", action="store_true", help="confirm without repeating the id")
    wd.add_argument("--by", help="who removes it, as recorded (default <OS user>@<host>)")
    wd.add_argument("--wait", type=float, default=0,
                    help="seconds (≤ 300) to wait for the worker to drop the index collection")


def create_token_command(args: argparse.Namespace) -> Any:
    """``{token, id, workspace, permissions, database, schema}``: the secret is printed once (only
    its digest is stored); default permission ``memory.read``. A token holding both
    ``memory.propose`` and ``memory.review`` is created, with a ``warning`` in the output.

    :raises CliError: ``bad_input``, ``--expires-in-days`` below 1.
    """
    from datetime import datetime, timedelta, timezone

    from shared.store.bootstrap import create_token

    s = _settings()
    if args.expires_in_days is not None and args.expires_in_days < 1:
        raise CliError({"error": "--expires-in-days must be at least 1", "code": "bad_input"})
    expires = (datetime.now(timezone.utc) + timedelta(days=args.expires_in_days)
               if args.expires_in_days else None)
    return create_token(s.migrator_database_url, s.db_schema, args.workspace,
                        args.permission or ["memory.read"], database=args.database,
                        db_schema=args.schema, label=args.label, expires_at=expires)


def revoke_token_command(args: argparse.Namespace) -> Any:
    """``{revoked: token id, workspace}``."""
    from shared.store.bootstrap import revoke_token

    s = _settings()
    return revoke_token(s.migrator_database_url, s.db_schema, args.token_id)


def configure_token_parser(subparsers: argparse._SubParsersAction) -> None:
    t = add_command(subparsers, "token",
                    "Create or revoke an API token (bootstrap, talks to PostgreSQL directly).",
                    None)
    tsub = t.add_subparsers(dest="token_command", required=True)
    tc = tsub.add_parser("create", help="Create a token; printed once as JSON {token, ...}.")
    tc.set_defaults(func=create_token_command)
    tc.add_argument("--workspace", required=True, help="workspace the token is bound to")
    tc.add_argument("--permission", action="append",
                    choices=list(PERMISSIONS),
                    help="repeatable; default memory.read. memory.propose (an agent's proposals)"
                         " and memory.review (applying them) belong on separate tokens: one"
                         " holding both is created with a warning")
    tc.add_argument("--database", help="bind recall to this database")
    tc.add_argument("--schema", help="bind recall to this schema (needs --database)")
    tc.add_argument("--label", help="free text to recognise the token by")
    tc.add_argument("--expires-in-days", type=int, help="expire after this many days")
    tr = tsub.add_parser("revoke", help="Revoke a token by its id.")
    tr.set_defaults(func=revoke_token_command)
    tr.add_argument("token_id", help="the token's id (not the secret)")


#: The bootstrap commands, in the order of ``memarc --help``.
PARSERS = (configure_migrate_parser, configure_workspace_parser, configure_token_parser)
