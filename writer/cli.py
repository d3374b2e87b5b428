"""``memarc``: the command line.

Card commands are clients of the writer API (``MEMARC_URL``, default ``http://127.0.0.1:8000``,
and ``MEMARC_TOKEN``), so they work while ``memarc up`` holds the embedded index. Only bootstrap
commands (``migrate``, ``workspace create``, ``token create|revoke``) talk to PostgreSQL directly
with the migrator credentials. Output is JSON on stdout; errors are JSON on stderr with a non-zero
exit status (2 for usage and client errors, 3 for server errors, 4 when the server is unreachable).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
from pathlib import Path
from typing import Any

#: Every command with its one-line help (tests check each has help text and a README entry).
COMMANDS: dict[str, str] = {
    "migrate": "Apply the numbered SQL migrations with the migrator credentials.",
    "workspace": "Create a workspace (bootstrap, talks to PostgreSQL directly).",
    "token": "Create or revoke an API token (bootstrap, talks to PostgreSQL directly).",
    "up": "Run writer + worker + explorer in one process over the embedded defaults.",
    "writer": "Run the writer API alone (needs MEMARC_QDRANT_URL).",
    "worker": "Run the projection worker alone (needs MEMARC_QDRANT_URL).",
    "explorer": "Run the Datasette explorer alone.",
    "list": "List cards of a workspace (paginated, filterable).",
    "show": "Show one card with its links and projection state.",
    "create": "Create a card from a JSON file.",
    "update": "Update a card from a JSON file (the file names the revision it edits).",
    "delete": "Delete a card (requires --yes).",
    "pending": "List incomplete index operations.",
    "retry": "Re-run a card's projection against its current state.",
    "search": "Verified recall over domain memory (clarifications, rules, explained errors).",
    "rules": "Verified recall over SQL rules and explained errors.",
    "solved-search": "Verified recall over solved questions (consultative exemplars).",
    "import": "Import a cards file (JSON Lines, optionally .gz) through the writer API.",
    "status": "Card counts per family and projection progress of a workspace.",
    "convert-bird": "Convert the BIRD / BIRD-CRITIC / sqlfluff datasets into a cards file.",
    "activity": "List the workspace's activity log (state changes and rejected attempts).",
    "audit": "Compare the index with PostgreSQL point by point; --repair queues the fixes.",
    "index": "Rebuild a workspace's index from its cards into a new collection, then switch.",
    "propose": "Store a workflow session's proposals (additions and updates) from a JSON file.",
    "summary": "Show a session's proposals as one reviewable document (diffs, stale items).",
    "review-apply": "Apply a review of a session (idempotent by review_id) from a JSON file.",
    "solved-index": "Re-queue the projection recorded by a session's review receipt.",
    "schema-cleanup": "Delete the cards depending on removed tables/columns (a schema-change run).",
}


class CliError(Exception):
    """An error to print as JSON on stderr with an exit status."""

    def __init__(self, payload: dict[str, Any], status: int = 2) -> None:
        super().__init__(payload.get("detail") or payload.get("error"))
        self.payload = payload
        self.status = status


def _emit(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")


def _read_json_file(path: str) -> Any:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
        return json.loads(text)
    except (OSError, json.JSONDecodeError) as exc:
        raise CliError({"error": f"cannot read JSON from {path}: {exc}", "code": "bad_input"}) from exc


#: Fields of a card as `memarc show` prints it that an update does not send (set by the archive).
READ_ONLY_CARD_FIELDS = ("id", "workspace", "origin", "source", "created_at", "updated_at",
                         "index_status")


def _editable(document: Any) -> Any:
    """The body of an update from a card file: `memarc show` output (``{"card": …}``) or a card
    is accepted as is, without its read-only fields; anything else is sent unchanged (the API
    names unknown fields)."""
    if isinstance(document, dict) and isinstance(document.get("card"), dict) and "family" not in document:
        document = document["card"]
    if isinstance(document, dict):
        document = {k: v for k, v in document.items() if k not in READ_ONLY_CARD_FIELDS}
    return document


class ApiClient:
    """Minimal client of the writer API for the card commands."""

    def __init__(self, url: str | None = None, token: str | None = None) -> None:
        self.url = (url or os.environ.get("MEMARC_URL") or "http://127.0.0.1:8000").rstrip("/")
        token = token or os.environ.get("MEMARC_TOKEN")
        if not token:
            raise CliError({"error": "set MEMARC_TOKEN (from `memarc token create`)",
                            "code": "no_token"})
        self.headers = {"Authorization": f"Bearer {token}"}

    def call(self, method: str, path: str, **kw: Any) -> Any:
        import httpx

        try:
            with httpx.Client(base_url=self.url, timeout=120, headers=self.headers) as http:
                r = http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise CliError({"error": f"cannot reach the writer at {self.url}: {exc}",
                            "code": "writer_unreachable"}, 4) from exc
        try:
            body = r.json()
        except ValueError:
            body = {"detail": r.text}
        if r.status_code >= 400:
            raise CliError(body if isinstance(body, dict) else {"detail": body},
                           3 if r.status_code >= 500 else 2)
        return body


def _mem(ws: str) -> str:
    return f"/api/workspaces/{ws}/memory"


def _settings():
    from shared.config import load_settings

    s = load_settings()
    if not s.migrator_database_url:
        raise CliError({"error": "set MEMARC_MIGRATOR_DATABASE_URL or MEMARC_DATABASE_URL",
                        "code": "no_database"})
    return s


def _search(args: argparse.Namespace, mode: str) -> Any:
    body: dict[str, Any] = {"query": args.query, "top": args.top, "mode": mode}
    if args.filters:
        try:
            body["filters"] = json.loads(args.filters)
        except json.JSONDecodeError as exc:
            raise CliError({"error": f"--filters is not JSON: {exc}", "code": "bad_input"}) from exc
    if getattr(args, "family", None):
        body["family"] = args.family
    if args.exclude:
        body["exclude"] = args.exclude
    return ApiClient().call("POST", _mem(args.workspace) + "/search", json=body)


def _rebuild(api: ApiClient, ws: str, no_wait: bool) -> Any:
    """Start a rebuild and follow it: a progress bar on a terminal, the final row as JSON."""
    import time

    row = api.call("POST", f"{_mem(ws)}/index")
    if no_wait:
        return row
    tty = sys.stderr.isatty()
    while row["status"] in ("queued", "running"):
        time.sleep(1.0)
        row = api.call("GET", f"{_mem(ws)}/index/{row['id']}")
        if tty and row.get("total"):
            done, total = row["done"], row["total"]
            filled = int(30 * done / max(total, 1))
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{total} cards")
            sys.stderr.flush()
    if tty:
        sys.stderr.write("\n")
    if row["status"] == "failed":
        raise CliError({"error": row.get("error") or "rebuild failed", "code": "rebuild_failed",
                        "rebuild": row}, 3)
    return row


def run(args: argparse.Namespace) -> Any:
    """Execute one parsed command; returns the JSON-able result."""
    cmd = args.command
    if cmd == "migrate":
        from shared.store.migrations import login_of, migrate

        s = _settings()
        applied = migrate(s.migrator_database_url, s.db_schema, login_of(s.database_url or ""))
        return {"applied": applied, "schema": s.db_schema}
    if cmd == "workspace":
        from shared.store.bootstrap import create_workspace

        s = _settings()
        return create_workspace(s.migrator_database_url, s.db_schema, args.workspace_id,
                                args.language)
    if cmd == "token":
        from shared.store import bootstrap as admin

        s = _settings()
        if args.token_command == "create":
            from datetime import datetime, timedelta, timezone

            if args.expires_in_days is not None and args.expires_in_days < 1:
                raise CliError({"error": "--expires-in-days must be at least 1",
                                "code": "bad_input"})

            expires = (datetime.now(timezone.utc) + timedelta(days=args.expires_in_days)
                       if args.expires_in_days else None)
            return admin.create_token(s.migrator_database_url, s.db_schema, args.workspace,
                                      args.permission or ["memory.read"], database=args.database,
                                      db_schema=args.schema, label=args.label, expires_at=expires)
        return admin.revoke_token(s.migrator_database_url, s.db_schema, args.token_id)
    if cmd == "up":
        from writer.runner import run_up

        run_up(args.host, args.port, args.explorer_port,
               args.workspace if args.demo else None,
               Path(args.cards) if args.cards else None)
        return None
    if cmd == "writer":
        from writer.runner import run_writer

        run_writer(args.host, args.port)
        return None
    if cmd == "worker":
        if args.check:
            import asyncio

            from shared.config import load_settings
            from shared.projection.jobs import check_worker_health

            settings = load_settings()
            if not settings.redis_url:
                raise SystemExit("memarc worker --check: MEMARC_REDIS_URL is not set")
            raise SystemExit(0 if asyncio.run(check_worker_health(settings.redis_url)) else 1)
        from writer.runner import run_worker

        run_worker()
        return None
    if cmd == "explorer":
        from writer.runner import run_explorer

        run_explorer(args.host, args.port, args.workspaces)
        return None
    if cmd == "convert-bird":
        from shared.bird import convert, write_cards

        cards = convert(Path(args.datasets))
        write_cards(cards, Path(args.out))
        from collections import Counter

        return {"written": len(cards), "out": args.out,
                "by_family": dict(sorted(Counter(c["family"] for c in cards).items()))}

    api = ApiClient() if cmd not in ("search", "rules", "solved-search") else None
    ws = args.workspace
    if cmd == "list":
        params: list[tuple[str, Any]] = [("page", args.page), ("per_page", args.per_page)]
        if args.q:
            params.append(("q", args.q))
        params += [("family", f) for f in args.family or []]
        params += [("origin", o) for o in args.origin or []]
        params += [("concepts", c) for c in args.concept or []]
        params += [(name, getattr(args, name)) for name in
                   ("database", "schema", "table", "column", "updated_after", "updated_before",
                    "sort") if getattr(args, name)]
        if args.desc:
            params.append(("desc", "true"))
        return api.call("GET", _mem(ws), params=params)
    if cmd == "show":
        return api.call("GET", f"{_mem(ws)}/{args.card_id}")
    if cmd == "create":
        return api.call("POST", _mem(ws), json=_read_json_file(args.data),
                        params={"wait": args.wait} if args.wait else None)
    if cmd == "update":
        return api.call("PUT", f"{_mem(ws)}/{args.card_id}", json=_editable(_read_json_file(args.data)),
                        params={"wait": args.wait} if args.wait else None)
    if cmd == "delete":
        if not args.yes:
            raise CliError({"error": "delete removes the card and every link into or out of it; "
                                     "repeat with --yes", "code": "confirmation_required"})
        return api.call("DELETE", f"{_mem(ws)}/{args.card_id}")
    if cmd == "pending":
        return api.call("GET", f"{_mem(ws)}/pending", params={"limit": args.limit})
    if cmd == "retry":
        return api.call("POST", f"{_mem(ws)}/{args.card_id}/retry")
    if cmd == "status":
        return api.call("GET", f"{_mem(ws)}/status")
    if cmd == "activity":
        params = {k: v for k, v in (("verb", args.verb), ("card_id", args.card),
                                    ("outcome", args.outcome), ("limit", args.limit)) if v}
        return api.call("GET", f"{_mem(ws)}/activity", params=params)
    if cmd == "audit":
        if args.repair:
            return api.call("POST", f"{_mem(ws)}/audit/repair")
        return api.call("GET", f"{_mem(ws)}/audit")
    if cmd == "index":
        return _rebuild(api, ws, args.no_wait)
    if cmd == "import":
        path = Path(args.file)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise CliError({"error": f"cannot read {path}: {exc}", "code": "bad_input"}) from exc
        if not raw[:2] == b"\x1f\x8b":
            raw = gzip.compress(raw)
        return api.call("POST", f"{_mem(ws)}/import", content=raw,
                        headers={"Content-Type": "application/x-ndjson",
                                 "Content-Encoding": "gzip"})
    if cmd == "search":
        return _search(args, "search")
    if cmd == "rules":
        return _search(args, "rules")
    if cmd == "solved-search":
        return _search(args, "solved")
    if cmd in ("propose", "summary", "review-apply", "solved-index"):
        from urllib.parse import quote

        if "/" in args.session:
            raise CliError({"error": "a session id cannot contain '/'", "code": "bad_input"})
        session = f"/api/workspaces/{ws}/sessions/{quote(args.session, safe='')}"
        if cmd == "propose":
            data = _read_json_file(args.data)
            return api.call("POST", f"{session}/proposals",
                            json={"proposals": data} if isinstance(data, list) else data)
        if cmd == "summary":
            return api.call("GET", f"{session}/summary")
        if cmd == "review-apply":
            return api.call("POST", f"{session}/review", json=_read_json_file(args.data))
        return api.call("POST", f"{session}/solved-index")
    if cmd == "schema-cleanup":
        return api.call("POST", f"/api/workspaces/{ws}/schema-changes",
                        json=_read_json_file(args.data))
    raise CliError({"error": f"unknown command {cmd}"})


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (every command carries help text)."""
    p = argparse.ArgumentParser(prog="memarc", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=COMMANDS[name], description=COMMANDS[name])

    add("migrate")
    w = add("workspace")
    wsub = w.add_subparsers(dest="workspace_command", required=True)
    wc = wsub.add_parser("create", help="Create a workspace.")
    wc.add_argument("workspace_id", help="workspace id: a-z, 0-9, '_' and '-'")
    wc.add_argument("--language", choices=["en", "it"], default="en",
                    help="language of BM25 stemming (default en)")
    t = add("token")
    tsub = t.add_subparsers(dest="token_command", required=True)
    tc = tsub.add_parser("create", help="Create a token; printed once as JSON {token, ...}.")
    tc.add_argument("--workspace", required=True, help="workspace the token is bound to")
    tc.add_argument("--permission", action="append",
                    choices=["memory.read", "memory.manage", "memory.review", "memory.schema"],
                    help="repeatable; default memory.read")
    tc.add_argument("--database", help="bind recall to this database")
    tc.add_argument("--schema", help="bind recall to this schema (needs --database)")
    tc.add_argument("--label", help="free text to recognise the token by")
    tc.add_argument("--expires-in-days", type=int, help="expire after this many days")
    tr = tsub.add_parser("revoke", help="Revoke a token by its id.")
    tr.add_argument("token_id", help="the token's id (not the secret)")

    up = add("up")
    up.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    up.add_argument("--port", type=int, default=8000, help="writer port (default 8000)")
    up.add_argument("--explorer-port", type=int, default=8001, help="explorer port (default 8001)")
    up.add_argument("--demo", action="store_true",
                    help="create the demo workspace, import the BIRD cards if it is empty, "
                         "print a memory.manage token")
    up.add_argument("--workspace", default="bird", help="demo workspace (default bird)")
    up.add_argument("--cards", help="cards file for --demo (default: the bundled BIRD cards)")
    for name, default in (("writer", 8000), ("explorer", 8001)):
        sp = add(name)
        sp.add_argument("--host", default="127.0.0.1", help="bind address")
        sp.add_argument("--port", type=int, default=default, help=f"port (default {default})")
        if name == "explorer":
            sp.add_argument("--workspaces", help='JSON map of actor id -> workspaces, e.g. '
                                                 '\'{"alice": ["bird"]}\' (root sees all)')
    wk = add("worker")
    wk.add_argument("--check", action="store_true",
                    help="health check: exit 0 if this host's worker recorded a heartbeat in the "
                         "last 31 s, else 1 (for container health checks)")

    def card_cmd(name: str) -> argparse.ArgumentParser:
        sp = add(name)
        sp.add_argument("--workspace", required=True, help="workspace id")
        return sp

    ls = card_cmd("list")
    ls.add_argument("--q", help="text search, or a card id")
    ls.add_argument("--family", action="append", help="repeatable family filter")
    ls.add_argument("--origin", action="append", help="repeatable origin filter")
    ls.add_argument("--concept", action="append", help="repeatable; every one must be present")
    for name in ("database", "schema", "table", "column"):
        ls.add_argument(f"--{name}", help=f"one dependency entry must carry this {name}")
    ls.add_argument("--updated-after", help="ISO date or timestamp (inclusive)")
    ls.add_argument("--updated-before", help="ISO date or timestamp (exclusive)")
    ls.add_argument("--sort", choices=["updated", "created", "title", "family"],
                    help="order (default updated, newest first); ties by id")
    ls.add_argument("--desc", action="store_true", help="reverse the sort's default direction")
    ls.add_argument("--page", type=int, default=1, help="page number (default 1)")
    ls.add_argument("--per-page", type=int, default=20, help="cards per page, 1..100")
    for name in ("show", "retry"):
        card_cmd(name).add_argument("card_id", help="card id mem-<UUID>")
    for name in ("create", "update"):
        sp = card_cmd(name)
        if name == "update":
            sp.add_argument("card_id", help="card id mem-<UUID>")
        sp.add_argument("--data", required=True, help="JSON file with the card ('-' = stdin)")
        sp.add_argument("--wait", type=float, help="seconds (≤ 30) to wait for the projection")
    d = card_cmd("delete")
    d.add_argument("card_id", help="card id mem-<UUID>")
    d.add_argument("--yes", action="store_true", help="confirm the deletion")
    pe = card_cmd("pending")
    pe.add_argument("--limit", type=int, default=100, help="at most this many (default 100)")
    card_cmd("status")
    ac = card_cmd("activity")
    ac.add_argument("--verb", help="only this verb (create, update, delete, retry, import, ...)")
    ac.add_argument("--card", help="only this card id")
    ac.add_argument("--outcome", help="outcome prefix, e.g. rejected")
    ac.add_argument("--limit", type=int, default=50, help="at most this many (1..500)")
    au = card_cmd("audit")
    au.add_argument("--repair", action="store_true", help="queue operations that fix what it finds")
    ix = card_cmd("index")
    ix.add_argument("--no-wait", action="store_true", help="queue the rebuild and return")
    im = card_cmd("import")
    im.add_argument("file", help="cards file: JSON Lines, optionally gzip-compressed")
    for name in ("search", "rules", "solved-search"):
        sp = card_cmd(name)
        sp.add_argument("query", help="query text")
        sp.add_argument("--top", type=int, default=10, help="results, 1..100 (default 10)")
        sp.add_argument("--filters", help='JSON filters, e.g. \'{"database": "financial"}\'')
        sp.add_argument("--exclude", action="append", help="card id already decided (repeatable)")
        if name == "search":
            sp.add_argument("--family", action="append", help="narrow to these families")
    for name in ("propose", "summary", "review-apply", "solved-index"):
        sp = card_cmd(name)
        sp.add_argument("--session", required=True, help="session id of the caller's workflow")
        if name == "propose":
            sp.add_argument("--data", required=True,
                            help="JSON file: {proposals: [...]} or a list ('-' = stdin)")
        if name == "review-apply":
            sp.add_argument("--data", required=True,
                            help="JSON file: {review_id, selected: [{key, edits?}]} or "
                                 "{review_id, decline_all: true} ('-' = stdin)")
    sc = card_cmd("schema-cleanup")
    sc.add_argument("--data", required=True,
                    help="JSON file: {run_id, database, schema, removed_tables, removed_columns} "
                         "('-' = stdin)")
    cb = add("convert-bird")
    cb.add_argument("--datasets", default="../shared/datasets", help="datasets folder")
    cb.add_argument("--out", default="shared/data/bird_cards.jsonl.gz", help="output file")
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``memarc`` console script."""
    import logging
    import warnings

    # pgserver asks platformdirs for a runtime dir; without XDG_RUNTIME_DIR (root) it warns
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    logging.basicConfig(level=os.environ.get("MEMARC_LOG_LEVEL", "INFO"),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("arq").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("pgserver").setLevel(logging.WARNING)
    args = build_parser().parse_args(argv)
    import psycopg

    from shared.errors import ArchiveError
    from writer.runner import UsageError

    try:
        result = run(args)
    except CliError as exc:
        sys.stderr.write(json.dumps(exc.payload, ensure_ascii=False) + "\n")
        return exc.status
    except UsageError as exc:
        sys.stderr.write(json.dumps({"error": str(exc), "code": exc.code}) + "\n")
        return 2
    except ArchiveError as exc:
        sys.stderr.write(json.dumps({"error": exc.message, "code": exc.code, **exc.extra},
                                    default=str) + "\n")
        return 2 if exc.status < 500 else 3
    except (OSError, psycopg.OperationalError) as exc:  # bootstrap commands: server unreachable
        sys.stderr.write(json.dumps({"error": f"{type(exc).__name__}: {exc}",
                                     "code": "unavailable"}) + "\n")
        return 4
    except KeyboardInterrupt:
        return 130
    if result is not None:
        _emit(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
