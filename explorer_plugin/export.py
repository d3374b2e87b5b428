"""The explorer's JSON and CSV answers: _shape, _dl, _stream, JSON cells, ISO 8601 timestamps,
and text cells that a spreadsheet cannot run as formulas.

Each CSV is a :class:`Table`: its header and how one row becomes cells.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import msgspec
from datasette import Response

from shared.errors import InvalidInput
from shared.models import Card

from .paging import Page


def iso_time(value: Any) -> str:
    """A timestamp as ISO 8601 in UTC, to the second (the archive's timestamps are UTC); another
    value as ``str``, None as ``""``."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc)
        return value.isoformat(timespec="seconds")
    return "" if value is None else str(value)


def json_response(payload: Any, status: int = 200) -> Response:
    """``payload`` encoded by msgspec (Structs, datetimes as ISO 8601), as ``application/json``."""
    return Response(msgspec.json.encode(payload), status=status,
                    content_type="application/json; charset=utf-8")


def list_json(request: Any, payload: dict[str, Any], key: str) -> Response:
    """A list's JSON: the whole ``payload``, or with Datasette's ``_shape=array`` only the list
    under ``key``.

    :raises InvalidInput: another ``_shape`` than ``objects`` (the default) or ``array``.
    """
    shape = (request.args.get("_shape") or "").strip()
    if shape == "array":
        return json_response(payload[key])
    if shape and shape != "objects":
        raise InvalidInput("_shape must be objects (the default) or array", field="_shape")
    return json_response(payload)


def workspace_json(request: Any, workspace: str, key: str, rows: list[Any], total: int,
                   page: int, per_page: int) -> Response:
    """A workspace list's JSON: ``{workspace, total, page, per_page, <key>: rows}`` (see
    :func:`list_json` for ``_shape``).

    :raises InvalidInput: a bad ``_shape``.
    """
    return list_json(request, {"workspace": workspace, "total": total, "page": page,
                               "per_page": per_page, key: rows}, key)


#: the first characters that make a spreadsheet read a cell as a formula (OWASP, "CSV Injection":
#: ``=``, ``+``, ``-``, ``@``, tab and carriage return)
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def neutralise(text: str) -> str:
    """``text`` made inert for a spreadsheet: prefixed with a single quote when it begins with
    one of :data:`FORMULA_STARTS`, unchanged otherwise.

    Source: OWASP, "CSV Injection" (prepend ``'`` to cells beginning with ``= + - @``, tab or
    carriage return; the csv writer quotes the cell where its content needs it). Numbers are
    written as numbers by :func:`csv_cell` and never pass through here, so ``-2`` as an integer
    stays ``-2`` while a title ``-2`` becomes ``'-2``.
    """
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def csv_cell(value: Any) -> Any:
    """A CSV cell: JSON for structured values (as Datasette shows JSON columns), ISO 8601 for
    timestamps, text through :func:`neutralise`, numbers and None as they are."""
    if isinstance(value, (dict, list, tuple)):
        return neutralise(json.dumps(value, ensure_ascii=False, default=str))
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, str):
        return neutralise(value)
    return value


@dataclass(frozen=True)
class Table:
    """A CSV export: its ``columns`` (the header) and ``row(item)``, one item's cells."""

    columns: tuple[str, ...]
    row: Callable[[Any], list[Any]]


def streams(request: Any) -> bool:
    """Whether a CSV asks for every matching row rather than one page (Datasette's ``_stream``)."""
    return bool(request.args.get("_stream"))


def csv_response(request: Any, filename: str, table: Table, items: Iterable[Any]) -> Response:
    """CSV as Datasette serves it (CRLF lines): shown in the browser as text, or downloaded as
    ``filename`` with ``_dl``."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\r\n")
    writer.writerow(table.columns)
    writer.writerows([csv_cell(v) for v in table.row(item)] for item in items)
    if request.args.get("_dl"):
        return Response(buf.getvalue(), content_type="text/csv; charset=utf-8",
                        headers={"content-disposition": f'attachment; filename="{filename}"'})
    return Response(buf.getvalue(), content_type="text/plain; charset=utf-8")


def workspace_list(request: Any, workspace: str, key: str, rows: list[dict[str, Any]], total: int,
                   page: Page, table: Table, name: str) -> Response | None:
    """The ``.json`` (:func:`workspace_json`) or ``.csv`` answer (file ``<workspace>-<name>.csv``)
    of one page of a workspace's log list, or None when the URL asks for HTML.

    :raises InvalidInput: a bad ``_shape``.
    """
    fmt = request.url_vars.get("format")
    if fmt == "json":
        return workspace_json(request, workspace, key, rows, total, page.number, page.size)
    if fmt == "csv":
        return csv_response(request, f"{workspace}-{name}.csv", table, rows)
    return None


def _workspace_row(row: dict[str, Any]) -> list[Any]:
    return [iso_time(row[c]) if c == "created_at" else row[c] for c in WORKSPACES.columns]


def _card_row(card: Card) -> list[Any]:
    return [card.id, card.family, card.title, card.scope or "", card.origin,
            "; ".join(card.concepts), "; ".join(d.qualified() for d in card.dependencies),
            card.revision, iso_time(card.updated_at), card.index_status]


def _operation_row(row: dict[str, Any]) -> list[Any]:
    out: list[Any] = []
    for column in OPERATIONS.columns:
        value = row.get(column)
        if column == "age_seconds" and value is not None:
            value = int(value)
        out.append(iso_time(value) if isinstance(value, datetime) else
                   ("" if value is None else value))
    return out


def _activity_row(row: dict[str, Any]) -> list[Any]:
    return [row.get(c) if c != "at" else iso_time(row["at"]) for c in ACTIVITY.columns]


#: ``/-/memory.csv``: the visible workspaces with their counts.
WORKSPACES = Table(("id", "language", "cards", "current", "open_operations", "created_at"),
                   _workspace_row)
#: ``/-/memory/<workspace>.csv``: cards; concepts and dependencies joined with ``"; "``.
CARDS = Table(("id", "family", "title", "scope", "origin", "concepts", "dependencies", "revision",
               "updated_at", "index_status"), _card_row)
#: ``/-/memory/<workspace>/-/pending.csv``: incomplete projection operations; age in whole seconds.
OPERATIONS = Table(("id", "card_id", "title", "op", "revision", "status", "attempts", "age_seconds",
                    "last_error", "created_at", "updated_at"), _operation_row)
#: ``/-/memory/<workspace>/-/activity.csv``: the activity log; ``detail`` as JSON.
ACTIVITY = Table(("id", "at", "actor", "verb", "card_id", "outcome", "detail"), _activity_row)
