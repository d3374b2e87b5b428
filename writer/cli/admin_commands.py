"""Administration from the command line.

- ``memarc sign-in-link``: a one-time sign-in link to the administration pages (bootstrap:
  migrator login, PostgreSQL directly, so it works next to a running writer and can be issued
  again at any time without a restart).
- ``memarc admin --workspace W -c REQUEST.json``: one administrative operation described by a
  *protected request*, the JSON document an administrative back end passes with its trusted
  principal (:data:`ADMIN_OPERATIONS`, :func:`admin_command`). The principal is an API token of
  the workspace inside the document (or ``MEMARC_TOKEN``), and the operation is a call of the
  writer API, so the writer checks that token's permissions, serializes the workspace's writes
  and records the activity exactly as for any other client: the document cannot grant more than
  its token holds, and no migrator credentials, session or warehouse binding are involved.
- ``memarc explorer-sign-in-link``: the same for the explorer, signed with the explorer's secret
  (:mod:`shared.archive.explorer_sign_in`).
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from shared.auth import PERMISSIONS
from writer.cli.command import CliError, add_command
from writer.cli.runtime import read_token_file, runtime_value


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
    base = (args.url or runtime_value("url", "MEMARC_URL") or "http://127.0.0.1:8000").rstrip("/")
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
    sp.add_argument("--url", help="the writer's public URL (default the -c file's url, else "
                                  "MEMARC_URL, else http://127.0.0.1:8000)")


@dataclass(frozen=True)
class AdminOperation:
    """One operation of a protected request: the writer API call it makes (``path`` after the
    workspace's card routes, with ``{card_id}``), and the request keys it needs and allows."""

    method: str
    path: str
    needs: tuple[str, ...] = ()
    allows: tuple[str, ...] = ()


#: The operations a protected request can ask for (the ``memory.manage`` surface, DESIGN §8).
ADMIN_OPERATIONS: dict[str, AdminOperation] = {
    "list": AdminOperation("GET", "", allows=("filters",)),
    "show": AdminOperation("GET", "/{card_id}", needs=("card_id",)),
    "create": AdminOperation("POST", "", needs=("data",), allows=("wait",)),
    "update": AdminOperation("PUT", "/{card_id}", needs=("card_id", "data"), allows=("wait",)),
    "delete": AdminOperation("DELETE", "/{card_id}", needs=("card_id",)),
    "retry": AdminOperation("POST", "/{card_id}/retry", needs=("card_id",)),
    "pending": AdminOperation("GET", "/pending", allows=("limit",)),
    "index": AdminOperation("POST", "/index"),
    "status": AdminOperation("GET", "/status"),
    "activity": AdminOperation("GET", "/activity", allows=("filters",)),
}

#: The keys every protected request may carry besides its operation's. No ``url``: the writer is
#: ``MEMARC_URL``, the back end's own configuration, so a document cannot send a token (its own,
#: or ``MEMARC_TOKEN``) to another host.
ADMIN_COMMON_KEYS = ("operation", "principal")

#: The filters of ``activity`` (the activity API's query parameters).
ACTIVITY_FILTERS = ("verb", "card_id", "outcome", "limit")


def admin_error(path: str, problem: str, **extra: Any) -> CliError:
    """The error of a protected request that cannot be run (``bad_request_document``, 2)."""
    return CliError({"error": f"protected request {path}: {problem}",
                     "code": "bad_request_document", **extra})


def read_request(path: str) -> tuple[str, AdminOperation, dict[str, Any]]:
    """The operation name, its :class:`AdminOperation` and the document of the protected request
    in the JSON file ``path``.

    :raises CliError: ``bad_request_document``, the file is not a JSON object, names no or an
        unknown operation (the error lists them), lacks a key the operation needs or has one it
        does not allow (the error lists the allowed ones).
    """
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise admin_error(path, f"cannot be read as JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise admin_error(path, "must be a JSON object")
    name = document.get("operation")
    if name not in ADMIN_OPERATIONS:
        raise admin_error(path, f"operation must be one of {', '.join(ADMIN_OPERATIONS)}, not "
                                f"{name!r}", allowed=list(ADMIN_OPERATIONS))
    op = ADMIN_OPERATIONS[name]
    allowed = (*ADMIN_COMMON_KEYS, *op.needs, *op.allows)
    unknown = sorted(k for k in document if k not in allowed)
    missing = [k for k in op.needs if document.get(k) is None]
    if unknown or missing:
        raise admin_error(path, f"{name} needs {', '.join(op.needs) or 'nothing more'} and "
                                f"allows {', '.join(allowed)}; unknown: {', '.join(unknown)}; "
                                f"missing: {', '.join(missing)}", allowed=list(allowed))
    return name, op, document


def request_token(path: str, document: dict[str, Any]) -> str | None:
    """The token of the request's ``principal`` (``{"token": T}`` or ``{"token_file": F}``,
    relative to the request's folder); None: the document names none (``MEMARC_TOKEN`` then).

    :raises CliError: ``bad_request_document``, a principal of another shape, or a token file
        that cannot be read or is empty.
    """
    principal = document.get("principal")
    if principal is None:
        return None
    if not (isinstance(principal, dict) and len(principal) == 1
            and set(principal) <= {"token", "token_file"}
            and isinstance(next(iter(principal.values())), str)):
        raise admin_error(path, 'principal must be {"token": "..."} or {"token_file": "..."}')
    if "token" in principal:
        return principal["token"]
    try:
        return read_token_file(path, principal["token_file"])
    except CliError as exc:
        raise admin_error(path, exc.payload["error"].split(": ", 1)[1]) from exc


def admin_call_kwargs(name: str, document: dict[str, Any], path: str) -> dict[str, Any]:
    """The query parameters and JSON body of the request's operation.

    :raises CliError: ``bad_input``, filters that are not an object of the operation's.
    """
    from writer.cli.api_commands import LIST_FILTERS, _editable, check_filters, list_params

    kw: dict[str, Any] = {}
    if "filters" in document:
        allowed = LIST_FILTERS if name == "list" else ACTIVITY_FILTERS
        kw["params"] = list_params(check_filters(document["filters"], allowed,
                                                 f"{path}: filters"), f"{path}: filters")
    for key in ("wait", "limit"):
        if document.get(key) is not None:
            kw["params"] = [(key, document[key])]
    if "data" in document:
        kw["json"] = _editable(document["data"], None) if name == "update" else document["data"]
    return kw


def admin_command(args: argparse.Namespace) -> Any:
    """Run the protected request ``-c`` for ``--workspace`` as the writer API answers it (an
    ``index`` is queued, not followed: the queued rebuild row).

    :raises CliError: ``bad_request_document`` (:func:`read_request`, :func:`request_token`),
        ``bad_input`` (filters), the API's problem (2/3; a token of another workspace: 403 or
        404 as for any client), ``writer_unreachable`` (4).
    """
    from writer.cli.client import ApiClient, memory_path

    name, op, document = read_request(args.request)
    card_id = document.get("card_id")
    if card_id is not None and (not isinstance(card_id, str) or "/" in card_id):
        raise admin_error(args.request, f"card_id must be a card id, not {card_id!r}")
    api = ApiClient(token=request_token(args.request, document))
    route = memory_path(args.workspace) + op.path.format(card_id=quote(card_id or "", safe=""))
    return api.call(op.method, route, **admin_call_kwargs(name, document, args.request))


def configure_admin_parser(subparsers: argparse._SubParsersAction) -> None:
    sp = add_command(subparsers, "admin",
                     "Run one administrative operation from a protected request (a JSON "
                     "document with its operation and its principal's token).", admin_command)
    sp.add_argument("--workspace", required=True, help="workspace id")
    sp.add_argument("-c", "--request", "--config", dest="request", required=True,
                    metavar="REQUEST_JSON",
                    help="the protected request: {operation: "
                         f"{'|'.join(ADMIN_OPERATIONS)}, principal?: {{token|token_file}}, "
                         "card_id?, data?, filters?, wait?, limit?}; the writer is "
                         "MEMARC_URL")


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
PARSERS = (configure_sign_in_link_parser, configure_explorer_sign_in_link_parser,
           configure_admin_parser)
