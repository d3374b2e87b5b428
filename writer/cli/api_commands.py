"""Commands that are clients of the writer API: cards, recall, rebuilds and workflow sessions.

They call the API through :class:`~writer.cli.client.ApiClient` (``MEMARC_URL``, default
``http://127.0.0.1:8000``, and ``MEMARC_TOKEN``), so they work while ``memarc up`` holds the
embedded index. The workflow's calls (``search``, ``rules``, ``solved-search``, ``propose``) are
bound to the workflow's database and schema (DESIGN §5, :mod:`writer.cli.binding`), which fill the
physical context a filter or a dependency leaves out. A command that is one API call as parsed
(method, path, query parameters, a JSON body from ``--data``) is a row of :data:`API_CALLS`; the
others have a handler of their own.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import msgspec

from shared.models import ON_CONFLICT, SORTS, Filters
from writer.cli import seen_summaries
from writer.cli.binding import WORKFLOW_BINDING, bind_context, workflow_binding
from writer.cli.client import ApiClient, memory_path, session_path
from writer.cli.command import (Argument, CliError, add_arguments, add_command, arg,
                                read_json_file)


# ---- commands that are one API call ----

CARD_ID = arg("card_id", help="card id mem-<UUID>")
CARD_DATA = arg("--data", required=True, help="JSON file with the card ('-' = stdin)")
WAIT = arg("--wait", type=float, help="seconds (≤ 30) to wait for the projection")
SESSION = arg("--session", required=True, help="session id of the caller's workflow")

#: Fields of a card as `memarc show` prints it that an update does not send (set by the archive).
READ_ONLY_CARD_FIELDS = ("id", "workspace", "origin", "source", "created_at", "updated_at",
                         "index_status")


def _editable(document: Any, args: argparse.Namespace) -> Any:
    """The body of an update from a card file: `memarc show` output (``{"card": …}``) or a card
    is accepted as is, without its read-only fields; anything else is sent unchanged (the API
    names unknown fields)."""
    if (isinstance(document, dict) and isinstance(document.get("card"), dict)
            and "family" not in document):
        document = document["card"]
    if isinstance(document, dict):
        document = {k: v for k, v in document.items() if k not in READ_ONLY_CARD_FIELDS}
    return document


def _proposals(document: Any, args: argparse.Namespace) -> Any:
    """The body of ``propose``: ``{proposals: [...]}``, or a bare list wrapped in one; each
    dependency entry inside the workflow's binding (:func:`bind_context`)."""
    body = {"proposals": document} if isinstance(document, list) else document
    binding = workflow_binding(args)
    if isinstance(body, dict) and isinstance(body.get("proposals"), list):
        for i, proposal in enumerate(body["proposals"]):
            deps = proposal.get("dependencies") if isinstance(proposal, dict) else None
            if isinstance(deps, list):
                proposal["dependencies"] = [
                    bind_context(dep, binding, f"proposals[{i}].dependencies[{j}]",
                                 fill_schema=False) for j, dep in enumerate(deps)]
    return body


def _as_is(document: Any, args: argparse.Namespace) -> Any:
    """The body of a command that sends its ``--data`` file unchanged."""
    return document


@dataclass(frozen=True)
class ApiCall:
    """A command that is one call of the writer API; calling it with the parsed arguments sends
    the request and returns the decoded answer (errors: :meth:`ApiClient.call`)."""

    name: str
    help: str
    method: str
    #: Formatted with the parsed arguments, ``{memory}`` (the workspace's card routes) and
    #: ``{session}`` (the ``--session``'s routes, its id checked and quoted).
    path: str
    arguments: tuple[Argument, ...] = ()
    #: Parsed arguments sent as query parameters of the same name when they are not None.
    query: tuple[str, ...] = ()
    #: Makes the JSON body from the document of the ``--data`` file and the parsed arguments;
    #: None: no body.
    body: Callable[[Any, argparse.Namespace], Any] | None = None

    def __call__(self, args: argparse.Namespace) -> Any:
        api = ApiClient()
        fields = {**vars(args), "memory": memory_path(args.workspace)}
        if "session" in fields:
            fields["session"] = session_path(args.workspace, args.session)
        kw: dict[str, Any] = {}
        params = {name: getattr(args, name) for name in self.query
                  if getattr(args, name) is not None}
        if params:
            kw["params"] = params
        if self.body is not None:
            kw["json"] = self.body(read_json_file(args.data), args)
        return api.call(self.method, self.path.format_map(fields), **kw)

    def configure(self, subparsers: argparse._SubParsersAction) -> None:
        """Add this command to ``subparsers``."""
        add_arguments(add_command(subparsers, self.name, self.help, self, workspace=True),
                      *self.arguments)


#: The commands that are one API call, by name.
API_CALLS: dict[str, ApiCall] = {call.name: call for call in (
    ApiCall("show", "Show one card with its links and projection state.",
            "GET", "{memory}/{card_id}", (CARD_ID,)),
    ApiCall("retry", "Re-run a card's projection against its current state.",
            "POST", "{memory}/{card_id}/retry", (CARD_ID,)),
    ApiCall("create", "Create a card from a JSON file.",
            "POST", "{memory}", (CARD_DATA, WAIT), query=("wait",), body=_as_is),
    ApiCall("update", "Update a card from a JSON file (the file names the revision it edits).",
            "PUT", "{memory}/{card_id}", (CARD_ID, CARD_DATA, WAIT), query=("wait",),
            body=_editable),
    ApiCall("pending", "List incomplete index operations.",
            "GET", "{memory}/pending",
            (arg("--limit", type=int, default=100, help="at most this many (default 100)"),),
            query=("limit",)),
    ApiCall("eval-cases", "List a workspace's curated recall evaluation cases.",
            "GET", "{memory}/evaluation-cases"),
    ApiCall("eval-case-add", "Add a curated evaluation case from a JSON file "
            "({question, mode, expected: [card ids], filters?, match?, note?}).",
            "POST", "{memory}/evaluation-cases",
            (arg("--data", required=True, help="JSON file with the case ('-' = stdin)"),),
            body=_as_is),
    ApiCall("eval-case-update", "Replace a curated evaluation case's fields from a JSON file "
            "(the body of eval-case-add).",
            "PUT", "{memory}/evaluation-cases/{case_id}",
            (arg("case_id", help="case id (UUID)"),
             arg("--data", required=True, help="JSON file with the case ('-' = stdin)")),
            body=_as_is),
    ApiCall("eval-case-delete", "Delete a curated evaluation case.",
            "DELETE", "{memory}/evaluation-cases/{case_id}",
            (arg("case_id", help="case id (UUID)"),)),
    ApiCall("status", "Card counts per family and projection progress of a workspace.",
            "GET", "{memory}/status"),
    ApiCall("propose",
            "Store a workflow session's proposals (additions and updates) from a JSON file.",
            "POST", "{session}/proposals",
            (SESSION, arg("--data", required=True,
                          help="JSON file: {proposals: [...]} or a list ('-' = stdin)"),
             *WORKFLOW_BINDING),
            body=_proposals),
    ApiCall("sessions", "List the workflow sessions to review (open ones by default).",
            "GET", "/api/workspaces/{workspace}/sessions",
            (arg("--status", choices=("open", "reviewed", "all"), default="open",
                 help="open (default: not reviewed yet), reviewed or all"),
             arg("--limit", type=int, default=100, help="at most this many (default 100)")),
            query=("status", "limit")),
)}


# ---- commands with a handler of their own ----

#: The list API's query parameters (``GET …/memory``), the keys ``list --filters`` takes; the
#: repeatable ones take a string or a list of strings.
LIST_FILTERS = ("q", "family", "origin", "concepts", "database", "schema", "table", "column",
                "updated_after", "updated_before", "sort", "desc", "page", "per_page")
LIST_REPEATABLE = ("family", "origin", "concepts")


def parse_filters(text: str | None, allowed: tuple[str, ...], flag: str = "--filters") -> dict:
    """The JSON object ``text`` (None: empty), its keys among ``allowed``.

    :raises CliError: ``bad_input``, not JSON, not an object, or an unknown key (the error
        lists the allowed ones).
    """
    if text is None:
        return {}
    try:
        filters = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError({"error": f"{flag} is not JSON: {exc}", "code": "bad_input"}) from exc
    return check_filters(filters, allowed, flag)


def check_filters(filters: Any, allowed: tuple[str, ...], where: str) -> dict:
    """``filters`` when it is an object whose keys are among ``allowed``.

    :raises CliError: ``bad_input``, not an object or an unknown key (listing ``allowed``).
    """
    if not isinstance(filters, dict):
        raise CliError({"error": f"{where} must be a JSON object", "code": "bad_input",
                        "allowed": list(allowed)})
    unknown = sorted(k for k in filters if k not in allowed)
    if unknown:
        raise CliError({"error": f"{where}: unknown filter(s) {', '.join(unknown)}; allowed: "
                                 f"{', '.join(allowed)}", "code": "bad_input",
                        "allowed": list(allowed)})
    return filters


def list_params(filters: dict, where: str = "--filters") -> list[tuple[str, Any]]:
    """The query parameters of the list API for ``filters`` (keys of :data:`LIST_FILTERS`): a
    repeatable one's string or list of strings as repeated parameters, ``desc`` as true/false,
    the others as given (the API answers a wrong value with a 400 naming it).

    :raises CliError: ``bad_input``, a value that is not a string, number, boolean, or (for a
        repeatable filter) a list of strings.
    """
    params: list[tuple[str, Any]] = []
    for name, value in filters.items():
        values = value if name in LIST_REPEATABLE and isinstance(value, list) else [value]
        for v in values:
            if isinstance(v, bool):
                v = "true" if v else "false"
            elif not isinstance(v, (str, int, float)):
                also = " (or a list of them)" if name in LIST_REPEATABLE else ""
                raise CliError({"error": f"{where}: {name} must be a string, number or boolean"
                                         f"{also}, not {v!r}", "code": "bad_input"})
            params.append((name, v))
    return params


def list_command(args: argparse.Namespace) -> Any:
    """One page of cards: ``{cards, total, page, per_page}`` as the API answers it. The filters
    are the flags' and ``--filters``'s (a JSON object of :data:`LIST_FILTERS`).

    :raises CliError: ``bad_input``, ``--filters`` is not a JSON object of list filters, or
        names one a flag gives too.
    """
    filters = parse_filters(args.filters, LIST_FILTERS)
    flags = {name: getattr(args, name) for name in LIST_FILTERS  # each flag's dest is its filter
             if getattr(args, name) not in (None, [], False)}
    both = sorted(set(filters) & set(flags))
    if both:
        raise CliError({"error": f"{', '.join(both)} given both as a flag and in --filters",
                        "code": "bad_input"})
    merged = {"page": 1, "per_page": 20, **filters, **flags}
    return ApiClient().call("GET", memory_path(args.workspace), params=list_params(merged))


def configure_list_parser(subparsers: argparse._SubParsersAction) -> None:
    ls = add_command(subparsers, "list", "List cards of a workspace (paginated, filterable).",
                     list_command, workspace=True)
    ls.add_argument("--filters", help="JSON object of the list API's filters ("
                                      f"{', '.join(LIST_FILTERS)}), e.g. "
                                      '\'{"family": "sql_rule", "page": 1}\'')
    ls.add_argument("--q", help="text search, or a card id")
    ls.add_argument("--family", action="append", help="repeatable family filter")
    ls.add_argument("--origin", action="append", help="repeatable origin filter")
    ls.add_argument("--concepts", "--concept", dest="concepts", action="append",
                    help="repeatable; every one must be present (--concept: its old name)")
    for name in ("database", "schema", "table", "column"):
        ls.add_argument(f"--{name}", help=f"one dependency entry must carry this {name}")
    ls.add_argument("--updated-after", help="ISO date or timestamp (inclusive)")
    ls.add_argument("--updated-before", help="ISO date or timestamp (exclusive)")
    ls.add_argument("--sort", choices=SORTS,
                    help="order (default updated, newest first); ties by id")
    ls.add_argument("--desc", action="store_true", help="reverse the sort's default direction")
    ls.add_argument("--page", type=int, help="page number (default 1)")
    ls.add_argument("--per-page", type=int, help="cards per page, 1..100 (default 20)")


def schema_cleanup_command(args: argparse.Namespace) -> Any:
    """A schema-change run as the API answers it (``{run_id, status, phase, deleted, errors,
    index_pending, ...}``): ``--data`` records and runs it (one call), ``--data --record-only``
    only records it (before the catalog commits its change), ``--run ID`` runs a recorded one
    (or retries an open one); ``--wait S`` waits for the point deletions.

    :raises CliError: ``bad_input``, neither or both of ``--data`` and ``--run``, or
        ``--record-only`` without ``--data``.
    """
    if (args.data is None) == (args.run is None) or (args.record_only and args.data is None):
        raise CliError({"error": "give --data change.json (with --record-only to record it "
                                 "only) or --run RUN_ID", "code": "bad_input"})
    api = ApiClient()
    path = f"/api/workspaces/{args.workspace}/schema-changes"
    params = {"wait": args.wait} if args.wait is not None and not args.record_only else {}
    if args.run is not None:
        return api.call("POST", f"{path}/cleanup", json={"run_id": args.run}, params=params)
    body = read_json_file(args.data)
    if args.record_only:
        return api.call("POST", f"{path}/record", json=body)
    return api.call("POST", path, json=body, params=params)


def configure_schema_cleanup_parser(subparsers: argparse._SubParsersAction) -> None:
    sc = add_command(subparsers, "schema-cleanup",
                     "Delete the cards depending on removed tables/columns (a schema-change "
                     "run), in one call or two steps.", schema_cleanup_command, workspace=True)
    sc.add_argument("--data", help="JSON file: {run_id, database, schema, removed_tables, "
                                   "removed_columns} ('-' = stdin)")
    sc.add_argument("--record-only", action="store_true",
                    help="step 1: record the run and delete nothing yet")
    sc.add_argument("--run", help="step 2: run (or retry) the recorded run with this id")
    sc.add_argument("--wait", type=float,
                    help="seconds (≤ 30) to wait for the run's point deletions")


def delete_command(args: argparse.Namespace) -> Any:
    """``{deleted: card id, …}``.

    :raises CliError: ``confirmation_required`` without ``--yes``.
    """
    api = ApiClient()
    if not args.yes:
        raise CliError({"error": "delete removes the card and every link into or out of it; "
                                 "repeat with --yes", "code": "confirmation_required"})
    return api.call("DELETE", f"{memory_path(args.workspace)}/{args.card_id}")


def configure_delete_parser(subparsers: argparse._SubParsersAction) -> None:
    d = add_command(subparsers, "delete", "Delete a card (requires --yes).", delete_command,
                    workspace=True)
    add_arguments(d, CARD_ID, arg("--yes", action="store_true", help="confirm the deletion"))


def activity_command(args: argparse.Namespace) -> Any:
    """The activity records, newest first; empty filters are not sent."""
    api = ApiClient()
    params = {k: v for k, v in (("verb", args.verb), ("card_id", args.card),
                                ("outcome", args.outcome), ("limit", args.limit)) if v}
    return api.call("GET", f"{memory_path(args.workspace)}/activity", params=params)


def configure_activity_parser(subparsers: argparse._SubParsersAction) -> None:
    ac = add_command(subparsers, "activity",
                     "List the workspace's activity log (state changes and rejected attempts).",
                     activity_command, workspace=True)
    ac.add_argument("--verb", help="only this verb (create, update, delete, retry, import, ...)")
    ac.add_argument("--card", help="only this card id")
    ac.add_argument("--outcome", help="outcome prefix, e.g. rejected")
    ac.add_argument("--limit", type=int, default=50, help="at most this many (1..500)")


def audit_command(args: argparse.Namespace) -> Any:
    """The audit report (``GET …/audit``), or with ``--repair`` the queued fixes."""
    api = ApiClient()
    if args.repair:
        return api.call("POST", f"{memory_path(args.workspace)}/audit/repair")
    return api.call("GET", f"{memory_path(args.workspace)}/audit")


def configure_audit_parser(subparsers: argparse._SubParsersAction) -> None:
    au = add_command(subparsers, "audit",
                     "Compare the index with PostgreSQL point by point; --repair queues the fixes.",
                     audit_command, workspace=True)
    au.add_argument("--repair", action="store_true", help="queue operations that fix what it finds")


def follow(api: ApiClient, path: str, row: dict[str, Any], unit: str) -> dict[str, Any]:
    """Poll ``GET {path}/{row id}`` every second while the tracked job (a rebuild, an
    evaluation run) is queued or running, drawing a progress bar of ``done/total {unit}`` on a
    terminal (stderr); returns its last state."""
    import time

    tty = sys.stderr.isatty()
    while row["status"] in ("queued", "running"):
        time.sleep(1.0)
        row = api.call("GET", f"{path}/{row['id']}")
        if tty and row.get("total"):
            done, total = row["done"], row["total"]
            filled = int(30 * done / max(total, 1))
            sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{total} {unit}")
            sys.stderr.flush()
    if tty:
        sys.stderr.write("\n")
    return row


def index_command(args: argparse.Namespace) -> Any:
    """Start a rebuild and follow it: a progress bar on a terminal (stderr), the final rebuild row
    as the result; with ``--no-wait`` the queued row. ``--shadow --model PATH``: a shadow
    rebuild with the model folder ``PATH`` (absolute when it exists here, else relative to the
    writer's ``MEMARC_MODEL_ROOT``), switched in only when its evaluation is not worse
    (``--force``: whatever it says); ``--switch-back``: back to the previous index a shadow
    switch kept; ``--drop-previous``: drop it; ``--state``: the index and model recall serves.

    :raises CliError: ``rebuild_failed`` (status 3) with the rebuild row; ``shadow_declined``
        (status 4) when the shadow's evaluation regressed and it was not switched in.
    """
    api, ws = ApiClient(), args.workspace
    base = f"{memory_path(ws)}/index"
    if args.state:
        return api.call("GET", f"{base}/collections")
    if args.drop_previous:
        return api.call("DELETE", f"{base}/previous")
    if (args.model or args.model_name or args.force) and not args.shadow:
        raise CliError({"error": "--model, --model-name and --force go with --shadow",
                        "code": "bad_arguments"}, 2)
    if args.switch_back:
        row = api.call("POST", f"{base}/switch-back")
    elif args.shadow:
        if not (args.model or args.model_name):
            raise CliError({"error": "--shadow needs --model PATH (or --model-name ID)",
                            "code": "bad_arguments"}, 2)
        shadow: dict[str, Any] = {"force": args.force}
        if args.model:
            local = Path(args.model).expanduser()
            shadow["model_path"] = str(local.resolve()) if local.exists() else args.model
        if args.model_name:
            shadow["model"] = args.model_name
        row = api.call("POST", base, json={"shadow": shadow})
    else:
        row = api.call("POST", base)
    if args.no_wait:
        return row
    row = follow(api, base, row, "cards")
    if row["status"] == "failed":
        raise CliError({"error": row.get("error") or "rebuild failed", "code": "rebuild_failed",
                        "rebuild": row}, 3)
    if row["status"] == "declined":
        verdict = (row.get("summary") or {}).get("evaluation") or {}
        lost = "; ".join(f"{t['mode']} {t['source']} r@{t['k']}: lost {t['lost']}, gained "
                         f"{t['gained']}, p={t['p']:.3g}" for t in verdict.get("regressed", []))
        raise CliError({"error": "the shadow index evaluated worse than the serving one and was "
                        f"not switched in ({lost or verdict.get('error', 'see the runs')}); "
                        "--force switches anyway", "code": "shadow_declined", "rebuild": row}, 4)
    return row


def configure_index_parser(subparsers: argparse._SubParsersAction) -> None:
    ix = add_command(
        subparsers, "index",
        "Rebuild a workspace's index from its cards into a new collection, then switch; "
        "--shadow --model PATH builds with another model and switches only when its "
        "evaluation is not worse.",
        index_command, workspace=True)
    ix.add_argument("--no-wait", action="store_true", help="queue the rebuild and return")
    ix.add_argument("--shadow", action="store_true",
                    help="a shadow rebuild with another dense model (--model): evaluated "
                         "against the serving index first, the old one kept for a switch back")
    ix.add_argument("--model", metavar="PATH",
                    help="the shadow rebuild's model folder (under MEMARC_MODEL_ROOT)")
    ix.add_argument("--model-name", metavar="ID",
                    help="its fastembed model id (default: MEMARC_DENSE_MODEL)")
    ix.add_argument("--force", action="store_true",
                    help="switch the shadow index in whatever its evaluation says")
    ix.add_argument("--switch-back", action="store_true",
                    help="switch back to the previous index a shadow switch kept")
    ix.add_argument("--drop-previous", action="store_true",
                    help="drop the previous index (no switch back afterwards)")
    ix.add_argument("--state", action="store_true",
                    help="print the index and model recall serves, and the previous one")


def _figures_line(run: dict[str, Any]) -> str:
    """One line of a finished run's figures: ``mode/source r@1 r@3 r@5 (n)`` for each."""
    parts = [f"{f['mode']}/{f['source']} r@1 {f['r1']:.3f} r@3 {f['r3']:.3f} r@5 {f['r5']:.3f} "
             f"({f['cases']})" for f in run.get("figures", [])]
    return "; ".join(parts) or "no cases"


def eval_command(args: argparse.Namespace) -> Any:
    """Run a recall evaluation and follow it (a progress line on stderr: ``done/total cases``
    on a terminal, and the figures once finished), printing the finished run; ``--no-wait``:
    the queued run; ``--history``: the runs, newest first.

    :raises CliError: ``evaluation_failed`` (status 3) with the run; ``regression`` (status 4)
        with ``--fail-on-regression`` when the run regressed against the one before.
    """
    api, ws = ApiClient(), args.workspace
    path = f"{memory_path(ws)}/evaluations"
    if args.history:
        return api.call("GET", path, params={"limit": args.limit})
    run = api.call("POST", path, params={"wait": 0})
    if args.no_wait:
        return run
    run = follow(api, path, run, "cases")
    if run["status"] == "failed":
        raise CliError({"error": run.get("error") or "evaluation failed",
                        "code": "evaluation_failed", "run": run}, 3)
    sys.stderr.write(f"evaluation {run['id']} done in {run.get('seconds') or 0:.1f} s"
                     f"{': REGRESSION' if run.get('regression') else ''}: "
                     f"{_figures_line(run)}\n")
    if args.fail_on_regression and run.get("regression"):
        raise CliError({"error": "the evaluation regressed against the run before it",
                        "code": "regression", "run": run["id"],
                        "regressed": [t for t in run.get("tests") or [] if t.get("regression")]},
                       4)
    return _shown_misses(run, args.misses)


def _shown_misses(run: dict[str, Any], shown: int | None) -> dict[str, Any]:
    """``run`` with its first ``shown`` misses (None: all), and ``misses_total`` when cut: a
    BIRD run has hundreds, the worst and those ranked worse than before first."""
    misses = run.get("misses") or []
    if shown is None or len(misses) <= shown:
        return run
    return {**run, "misses": misses[:shown], "misses_total": len(misses)}


def configure_eval_parser(subparsers: argparse._SubParsersAction) -> None:
    ev = add_command(
        subparsers, "eval",
        "Run a recall evaluation of a workspace on its own cards (or list the runs).",
        eval_command, workspace=True)
    ev.add_argument("--no-wait", action="store_true", help="queue the run and return")
    ev.add_argument("--history", action="store_true",
                    help="list the runs, newest first, instead of running one")
    ev.add_argument("--limit", type=int, default=20, help="with --history: at most this many")
    ev.add_argument("--fail-on-regression", action="store_true",
                    help="exit 4 when the run regressed against the one before it")
    ev.add_argument("--misses", type=int, default=20, metavar="N",
                    help="print the run's first N misses (default 20; the ones ranked worse "
                         "than in the run before come first); `GET …/evaluations/{id}` has all")


def import_command(args: argparse.Namespace) -> Any:
    """The import result; the file is sent gzip-compressed (compressed here unless it is).

    :raises CliError: ``bad_input``, the file cannot be read.
    """
    api = ApiClient()
    path = Path(args.file)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CliError({"error": f"cannot read {path}: {exc}", "code": "bad_input"}) from exc
    if not raw[:2] == b"\x1f\x8b":
        raw = gzip.compress(raw)
    return api.call("POST", f"{memory_path(args.workspace)}/import", content=raw,
                    params={"on_conflict": args.on_conflict,
                            "mode": "restore" if args.restore else "import"},
                    headers={"Content-Type": "application/x-ndjson", "Content-Encoding": "gzip"})


def configure_import_parser(subparsers: argparse._SubParsersAction) -> None:
    im = add_command(subparsers, "import",
                     "Import a cards file (JSON Lines, optionally .gz) through the writer API; "
                     "idempotent by key.", import_command, workspace=True)
    im.add_argument("file", help="cards file: JSON Lines, optionally gzip-compressed")
    im.add_argument("--on-conflict", default="skip", choices=ON_CONFLICT,
                    help="a line whose key is already a card's: skip (default) or update")
    im.add_argument("--restore", action="store_true",
                    help="keep each line's origin and source as written (a file `memarc export` "
                         "wrote from this archive); without it a line claiming a review "
                         "(origin workflow, a session source) is refused")


def export_command(args: argparse.Namespace) -> Any:
    """Stream ``GET …/export`` into ``--output`` (gzip-compressed when its name ends in ``.gz``;
    written to a temporary file beside it and renamed when complete, so a failed export leaves
    no partial file) and return ``{exported, output}``; without ``--output``, onto stdout
    (returns None: nothing else is printed).

    :raises CliError: the API's problem (2/3), ``writer_unreachable`` (4), ``export_incomplete``
        (3) when the stream was cut short, ``bad_input`` when the output cannot be written.
    """
    import httpx

    api = ApiClient()
    params = [("family", f) for f in args.family or []]
    output = Path(args.output) if args.output else None
    partial = output.with_name(f".{output.name}.partial") if output else None
    lines = 0
    try:
        with api.stream("GET", f"{memory_path(args.workspace)}/export", params=params) as r:
            sink = _export_sink(partial)
            try:
                for chunk in r.iter_bytes():
                    lines += chunk.count(b"\n")
                    sink.write(chunk)
            finally:
                if sink is not sys.stdout.buffer:
                    sink.close()
                else:
                    sink.flush()
    except httpx.TransportError as exc:
        if partial is not None:
            partial.unlink(missing_ok=True)
        code, status = (("export_incomplete", 3) if isinstance(exc, httpx.RemoteProtocolError)
                        else ("writer_unreachable", 4))
        raise CliError({"error": f"export from {api.url} failed: {exc}", "code": code},
                       status) from exc
    except BaseException:
        if partial is not None:
            partial.unlink(missing_ok=True)
        raise
    if output is None:
        return None
    partial.replace(output)  # type: ignore[union-attr]
    return {"exported": lines, "output": str(output)}


def _export_sink(partial: Path | None) -> Any:
    """Where an export's bytes go: stdout, or the partial file (gzip when the output is .gz).

    :raises CliError: ``bad_input``, the file cannot be created.
    """
    if partial is None:
        return sys.stdout.buffer
    try:
        if partial.name.endswith(".gz.partial"):
            return gzip.open(partial, "wb")
        return partial.open("wb")
    except OSError as exc:
        raise CliError({"error": f"cannot write {partial}: {exc}", "code": "bad_input"}) from exc


def configure_export_parser(subparsers: argparse._SubParsersAction) -> None:
    ex = add_command(subparsers, "export",
                     "Export a workspace's cards as a cards file that `memarc import` reads.",
                     export_command, workspace=True)
    ex.add_argument("--family", action="append", help="only this family (repeatable)")
    ex.add_argument("--output", help="file to write (gzip when it ends in .gz); default stdout")


def search_command(args: argparse.Namespace, mode: str) -> Any:
    """Verified recall in ``mode`` (search, rules, solved): ``{results, excluded, expansion}``.
    The filters are bound to the workflow's database and schema (:func:`workflow_binding`,
    :func:`bind_context`); ``--session`` excludes the cards decided in that session.

    :raises CliError: ``bad_input``, ``--filters`` is not a JSON object of
        :data:`SEARCH_FILTERS`; ``outside_binding``.
    """
    body: dict[str, Any] = {"query": args.query, "top": args.top, "mode": mode}
    filters: Any = parse_filters(args.filters, SEARCH_FILTERS) if args.filters else None
    binding = workflow_binding(args)
    if binding[0] is not None:
        filters = bind_context({} if filters is None else filters, binding, "--filters",
                               fill_schema=True)
    if filters is not None:
        body["filters"] = filters
    if getattr(args, "family", None):
        body["family"] = args.family
    if args.exclude:
        body["exclude"] = args.exclude
    if args.session is not None:  # an empty one is sent, and refused: never recall outside it
        body["session"] = args.session
    if args.min_score is not None:
        body["min_score"] = args.min_score
    answer = ApiClient().call("POST", memory_path(args.workspace) + "/search", json=body)
    warn_not_indexed(answer, args.workspace)
    return answer


def warn_not_indexed(answer: Any, workspace: str) -> None:
    """A JSON warning on stderr when a recall's answer says some of the workspace's cards are not
    indexed yet (``not_indexed`` > 0): the answer cannot include them (stdout keeps the answer
    alone, so a script reading it is unaffected)."""
    waiting = answer.get("not_indexed", 0) if isinstance(answer, dict) else 0
    if waiting:
        print(json.dumps({"warning": f"{waiting} cards of workspace {workspace!r} are not "
                                     "indexed yet (their index update is pending or failed), so "
                                     "this answer cannot include them: `memarc pending`, with "
                                     "a memory.manage or memory.review token, lists them",
                      "not_indexed": waiting}), file=sys.stderr)


def min_score(text: str) -> float | str:
    """``--min-score``'s value: ``floor``, or a number (the API checks its range).

    :raises argparse.ArgumentTypeError: neither.
    """
    if text == "floor":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a number nor 'floor'") from None


#: The recall API's filter names (``filters`` of ``POST …/search``), the keys ``--filters`` takes.
SEARCH_FILTERS = tuple(f.name for f in msgspec.structs.fields(Filters))

#: The recall commands: name, help and the API's recall mode.
SEARCH_COMMANDS = (
    ("search", "Verified recall over domain memory (clarifications, rules, explained errors).",
     "search"),
    ("rules", "Verified recall over SQL rules and explained errors.", "rules"),
    ("solved-search", "Verified recall over solved questions (consultative exemplars).", "solved"),
)


def configure_search_parsers(subparsers: argparse._SubParsersAction) -> None:
    for name, help, mode in SEARCH_COMMANDS:
        sp = add_command(subparsers, name, help, functools.partial(search_command, mode=mode),
                         workspace=True)
        sp.add_argument("query", help="query text")
        sp.add_argument("--top", type=int, default=10, help="results, 1..100 (default 10)")
        sp.add_argument("--filters", help=f"JSON object of the recall API's filters "
                                          f"({', '.join(SEARCH_FILTERS)}), e.g. "
                                          '\'{"table": "orders", "scope": "Sales"}\'')
        sp.add_argument("--exclude", action="append", help="card id to leave out (repeatable)")
        sp.add_argument("--session", help="the workflow session: the cards decided in it "
                                          "(`memarc session decide`) are left out")
        sp.add_argument("--min-score", type=min_score, metavar="S|floor",
                        help="leave out results whose similarity is below S (-1..1), or below "
                             "the workspace's floor with 'floor' (an empty answer: no card "
                             "applies)")
        add_arguments(sp, *WORKFLOW_BINDING)
        if mode == "search":
            sp.add_argument("--family", action="append", help="narrow to these families")


# ---- summary and review-apply: a review carries the version of the summary seen (issue 36) ----

def summary_command(args: argparse.Namespace) -> Any:
    """The session's summary as the API answers it (``GET …/summary``, its ``version`` among
    its fields), remembered as the one this person saw (:mod:`writer.cli.seen_summaries`) for
    ``review-apply``."""
    api = ApiClient()
    summary = api.call("GET", f"{session_path(args.workspace, args.session)}/summary")
    if isinstance(summary, dict):
        seen_summaries.remember(api.url, args.workspace, args.session, summary)
    return summary


def configure_summary_parser(subparsers: argparse._SubParsersAction) -> None:
    s = add_command(subparsers, "summary", "Show a session's proposals as one reviewable "
                    "document (diffs, stale items, its version); review-apply reviews on it.",
                    summary_command, workspace=True)
    add_arguments(s, SESSION)


def _unchanged_since(api: ApiClient, path: str, seen: seen_summaries.Seen,
                     review_id: Any) -> None:
    """Nothing when the session's summary is still the one ``seen``, or when it holds the
    receipt of ``review_id`` already (a repeated delivery: the API answers that receipt).

    :raises CliError: ``summary_changed``, it changed since (proposals stored since, or shown
        then and decided or erased since), naming them; nothing is sent.
    """
    now = api.call("GET", f"{path}/summary")
    if now.get("version") == seen.version or any(
            r.get("review_id") == review_id for r in now.get("reviews") or ()):
        return
    still = seen_summaries.open_keys(now)
    new = [k for k in still if k not in seen.open]
    gone = [k for k in seen.open if k not in still]
    raise CliError({
        "error": f"the session's summary changed since `memarc summary` showed it (version "
                 f"{seen.version}, now {now.get('version')}): nothing was sent. Look at it "
                 f"again with `memarc summary`, then review; or, to review what you saw and "
                 f"leave the proposals stored since open, pass --version {seen.version}",
        "code": "summary_changed", "seen_version": seen.version,
        "version": now.get("version"), "stored_since": new, "no_longer_open": gone})


def review_command(args: argparse.Namespace) -> Any:
    """Apply the review in the ``--data`` file bound to the summary its reviewer saw: the
    version of ``--version``, else the file's ``version``, else the one ``memarc summary``
    last showed for this session (first checked against the summary now). Returns the receipt
    with ``reviewed_on: {version, from}`` (``from``: ``--version``, ``file``, ``memarc
    summary``, or ``none``: no version, so the API decides the proposals up to the newest one
    selected and leaves the later ones open).

    :raises CliError: ``bad_input``, the file is not a JSON object, or its version and
        ``--version`` differ; ``summary_changed``, the summary changed since ``memarc
        summary`` showed it (:func:`_unchanged_since`); the API's errors (a ``decline_all``
        with no version from anywhere: ``summary_version_required``, with a ``hint``).
    """
    api = ApiClient()
    path = session_path(args.workspace, args.session)
    body = read_json_file(args.data)
    if not isinstance(body, dict):
        raise CliError({"error": "the review file must be a JSON object {review_id, ...}",
                        "code": "bad_input"})
    in_file = body.get("version")
    if args.version and in_file and args.version != in_file:
        raise CliError({"error": f"--version {args.version!r} and the file's version "
                                 f"{in_file!r} differ: give one", "code": "bad_input"})
    version, source = ((args.version, "--version") if args.version
                       else (in_file, "file") if in_file else (None, "none"))
    if version is None:
        seen = seen_summaries.recall(api.url, args.workspace, args.session)
        if seen is not None:
            _unchanged_since(api, path, seen, body.get("review_id"))
            version, source = seen.version, "memarc summary"
    if version is not None:
        body["version"] = version
    try:
        receipt = api.call("POST", f"{path}/review", json=body)
    except CliError as exc:
        if exc.payload.get("code") == "summary_version_required":  # a decline_all
            exc.payload["hint"] = ("run `memarc summary` for this session first: review-apply "
                                   "then sends the version it showed (or pass --version)")
        raise
    if isinstance(receipt, dict):
        receipt["reviewed_on"] = {"version": version, "from": source}
    return receipt


def configure_review_parser(subparsers: argparse._SubParsersAction) -> None:
    r = add_command(subparsers, "review-apply",
                    "Apply a review of a session (idempotent by review_id) from a JSON file, "
                    "on the summary version `memarc summary` showed.", review_command,
                    workspace=True)
    add_arguments(r, SESSION,
                  arg("--data", required=True,
                      help="JSON file: {review_id, selected: [{key, edits?}]} or "
                           "{review_id, decline_all: true} ('-' = stdin)"),
                  arg("--version", help="the summary version the review was made on (default: "
                                        "the file's, else the one `memarc summary` showed)"))


def solved_index_command(args: argparse.Namespace) -> Any:
    """Re-queue the projection a session's review receipt records (``POST
    .../sessions/{s}/solved-index``); the session is the positional ``SESSION`` or ``--session``.

    :raises CliError: ``bad_input``, no session, or two different ones.
    """
    given = {s for s in (args.session_id, args.session) if s is not None}
    if len(given) != 1:
        raise CliError({"error": "name one session: memarc solved-index SESSION (or --session)",
                        "code": "bad_input"})
    path = f"{session_path(args.workspace, given.pop())}/solved-index"
    return ApiClient().call("POST", path)


def configure_solved_index_parser(subparsers: argparse._SubParsersAction) -> None:
    si = add_command(subparsers, "solved-index",
                     "Re-queue the projection recorded by a session's review receipt.",
                     solved_index_command, workspace=True)
    si.add_argument("session_id", nargs="?", metavar="SESSION",
                    help="session id of the reviewed workflow")
    si.add_argument("--session", help="the same, as a flag (the older form)")


def decide_command(args: argparse.Namespace) -> Any:
    """Record the decision on each card (``POST .../sessions/{s}/decisions``):
    ``{session_id, decisions, counts}``."""
    decision = "accepted" if args.accepted else "rejected"
    body = {"decisions": [{"card_id": c, "decision": decision} for c in args.card_ids]}
    return ApiClient().call("POST", f"{session_path(args.workspace, args.session)}/decisions",
                            json=body)


def decisions_command(args: argparse.Namespace) -> Any:
    """The cards decided in a session (``GET .../sessions/{s}/decisions``)."""
    return ApiClient().call("GET", f"{session_path(args.workspace, args.session)}/decisions")


def configure_session_parser(subparsers: argparse._SubParsersAction) -> None:
    se = add_command(subparsers, "session",
                     "Record or list the cards decided (accepted or rejected) in a workflow "
                     "session; recall with --session leaves them out.", None)
    ssub = se.add_subparsers(dest="session_command", required=True)
    de = ssub.add_parser("decide", help="Record the user's decision on cards of a session.")
    de.set_defaults(func=decide_command)
    de.add_argument("--workspace", required=True, help="workspace id")
    de.add_argument("session", help="session id of the caller's workflow")
    de.add_argument("card_ids", nargs="+", metavar="CARD", help="card id mem-<UUID>")
    which = de.add_mutually_exclusive_group(required=True)
    which.add_argument("--accepted", action="store_true", help="the user accepted the cards")
    which.add_argument("--rejected", action="store_true", help="the user rejected the cards")
    ls = ssub.add_parser("decisions", help="List the cards decided in a session.")
    ls.set_defaults(func=decisions_command)
    ls.add_argument("--workspace", required=True, help="workspace id")
    ls.add_argument("session", help="session id of the caller's workflow")


def feedback_command(args: argparse.Namespace) -> Any:
    """One verdict on cards a recall returned (``POST …/recalls/{recall_id}/feedback``):
    ``{recall_id, cards: [{card_id, verdict, change, …}]}``."""
    verdict = "helpful" if args.helpful else "not_helpful" if args.not_helpful else "wrong"
    body = {"cards": [{"card_id": c, "verdict": verdict,
                       **({"note": args.note} if args.note else {})} for c in args.card_ids]}
    return ApiClient().call(
        "POST", f"{memory_path(args.workspace)}/recalls/{quote(args.recall_id, safe='')}/feedback",
        json=body)


def recalls_command(args: argparse.Namespace) -> Any:
    """The recall records, newest first (``GET …/recalls``), or one with its results and
    their verdicts (``GET …/recalls/{recall_id}``)."""
    api = ApiClient()
    if args.recall_id:
        return api.call("GET", f"{memory_path(args.workspace)}/recalls/"
                               f"{quote(args.recall_id, safe='')}")
    params = {k: v for k, v in (("mode", args.mode), ("page", args.page),
                                ("per_page", args.per_page)) if v}
    return api.call("GET", f"{memory_path(args.workspace)}/recalls", params=params)


def _at_least_one(text: str) -> int:
    """A whole number of 1 or more (argparse refuses anything else with its usage error)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def configure_feedback_parsers(subparsers: argparse._SubParsersAction) -> None:
    fb = add_command(subparsers, "feedback",
                     "Say which cards of a recall helped, did not apply, or are wrong (its "
                     "recall_id, from the answer of search, rules or solved-search).",
                     feedback_command, workspace=True)
    fb.add_argument("recall_id", help="the recall_id of the recall's answer")
    fb.add_argument("card_ids", nargs="+", metavar="CARD",
                    help="card id mem-<UUID>, one the recall returned")
    which = fb.add_mutually_exclusive_group(required=True)
    which.add_argument("--helpful", action="store_true", help="the cards applied and were used")
    which.add_argument("--not-helpful", action="store_true",
                       help="the cards did not apply to the question")
    which.add_argument("--wrong", action="store_true",
                       help="the cards' content is wrong or out of date")
    fb.add_argument("--note", help="why, for the curators (at most 2,000 characters)")
    rc = add_command(subparsers, "recalls",
                     "List the workspace's recall records, newest first, or show one with its "
                     "results and the verdicts on each (memory.manage).", recalls_command,
                     workspace=True)
    rc.add_argument("recall_id", nargs="?", help="show this recall")
    rc.add_argument("--mode", choices=("search", "rules", "solved"), help="only this mode")
    rc.add_argument("--page", type=_at_least_one, help="page number (from 1)")
    rc.add_argument("--per-page", type=_at_least_one, help="records per page (1..100)")


#: The API commands, in the order of ``memarc --help``.
PARSERS = (
    configure_list_parser, API_CALLS["show"].configure, API_CALLS["retry"].configure,
    API_CALLS["create"].configure, API_CALLS["update"].configure, configure_delete_parser,
    API_CALLS["pending"].configure, API_CALLS["status"].configure, configure_activity_parser,
    configure_audit_parser, configure_index_parser, configure_eval_parser,
    API_CALLS["eval-cases"].configure, API_CALLS["eval-case-add"].configure,
    API_CALLS["eval-case-update"].configure, API_CALLS["eval-case-delete"].configure, configure_import_parser,
    configure_export_parser,
    configure_search_parsers, configure_feedback_parsers, API_CALLS["propose"].configure,
    API_CALLS["sessions"].configure,
    configure_summary_parser,
    configure_review_parser, configure_solved_index_parser,
    configure_session_parser, configure_schema_cleanup_parser,
)
