"""Pending index updates: the workspace's incomplete projection operations (upserts and
deletions) with attempts and the last error, a Retry per card (a deleted card's retry completes
its point deletion) and a retry of all, each saying what it did. Retry reads the archive's
current state: it never restores an earlier edit or a deleted card."""

from __future__ import annotations

from datetime import datetime

from typing import Annotated, Any

import msgspec

from litestar import Request, Response, get, post
from litestar.di import NamedDependency, Provide
from litestar.params import FromPath, FromQuery, Parameter

from shared.archive.cards import Archive
from shared.errors import NotFound
from writer.routes.admin.pages import Person, Urls, provide_archive, provide_person, render, see_other
from writer.routes.params import WorkspaceId

DEPS = {"person": Provide(provide_person), "archive": Provide(provide_archive)}
Text = Annotated[str | None, Parameter(max_length=200)]
#: most operations one page (and one retry of all) covers
LIMIT = 500


_SEVERITY = {"failed": 3, "running": 2, "pending": 1}


def by_card(operations: list[Any]) -> list[dict[str, Any]]:
    """One row per card (a Retry acts on all of a card's operations), oldest first: its
    operations' count, the worst status, most attempts, the last error, the oldest age, and
    whether one of them removes the card's point."""
    rows: dict[str, dict[str, Any]] = {}
    for op in msgspec.to_builtins(operations, builtin_types=(datetime,)):
        row = rows.setdefault(op["card_id"], {**op, "count": 0, "op": "upsert"})
        row["count"] += 1
        if op["op"] == "delete":
            row["op"] = "delete"
        if _SEVERITY.get(op["status"], 0) > _SEVERITY.get(row["status"], 0):
            row["status"] = op["status"]
        row["attempts"] = max(row["attempts"], op["attempts"])
        row["last_error"] = op["last_error"] or row["last_error"]
        row["age_seconds"] = max(row["age_seconds"], op["age_seconds"])
    return list(rows.values())


@get("/workspaces/{workspace_id:str}/pending", dependencies=DEPS)
async def pending_page(person: NamedDependency[Person], archive: NamedDependency[Archive],
                       workspace_id: FromPath[WorkspaceId], retried: FromQuery[Text] = None,
                       queued: FromQuery[Annotated[int | None, Parameter(ge=0)]] = None,
                       queue_down: FromQuery[Annotated[int | None, Parameter(ge=0)]] = None,
                       gone: FromQuery[Annotated[int | None, Parameter(ge=0)]] = None
                       ) -> Response:
    """The incomplete operations, oldest first, with the outcome of the last retry; a
    ``memory.review`` person sees them without Retry buttons (retrying needs
    ``memory.manage``), anyone else gets the read-only page."""
    if not person.principal.allows("memory.manage") and \
            not person.principal.allows("memory.review"):
        return render("read_only.html", person)
    page = await archive.pending(person.principal, workspace_id, LIMIT, 0)
    queue = "up" if await archive.queue.reachable(timeout=1.0) else "down"
    return render("pending.html", person, operations=by_card(page.operations), total=page.total,
                  queue=queue, retried=retried, queued=queued, queue_down=queue_down, gone=gone)


@post("/workspaces/{workspace_id:str}/pending/retry", dependencies=DEPS, opt={"activity": None})
async def retry_one(request: Request, person: NamedDependency[Person],
                    archive: NamedDependency[Archive], workspace_id: FromPath[WorkspaceId]
                    ) -> Response:
    """Retry one card's operations (``card_id`` in the form)."""
    card_id = str((await request.form()).get("card_id") or "")[:60]
    result = await archive.retry(person.principal, workspace_id, card_id)
    return see_other(Urls(workspace_id).pending(
        retried=result.card_id, queued=int(result.enqueued), queue_down=int(not result.enqueued)))


@post("/workspaces/{workspace_id:str}/pending/retry-all", dependencies=DEPS,
      opt={"activity": None})
async def retry_all(person: NamedDependency[Person], archive: NamedDependency[Archive],
                    workspace_id: FromPath[WorkspaceId]) -> Response:
    """Retry every card with an incomplete operation (each a retry of its own, recorded in the
    activity log like one from the API).

    :raises Forbidden: no ``memory.manage`` (a reviewer may list, not retry), even with
        nothing to retry."""
    person.principal.require(workspace_id, "memory.manage")
    page = await archive.pending(person.principal, workspace_id, LIMIT, 0)
    queued = down = gone = 0
    for card_id in dict.fromkeys(op.card_id for op in page.operations):
        try:
            result = await archive.retry(person.principal, workspace_id, card_id)
        except NotFound:  # completed meanwhile
            gone += 1
            continue
        queued += result.enqueued
        down += not result.enqueued
    return see_other(Urls(workspace_id).pending(retried="all", queued=queued, queue_down=down,
                                                gone=gone))


HANDLERS = [pending_page, retry_one, retry_all]
