"""Reconciliation audit: a workspace's index against PostgreSQL, point by point (``memarc audit``).

Categories (each a list of card ids):

- ``missing``: a card with no point and no open operation (nothing would ever project it);
- ``stale``: a point whose revision or format is not the card's current one, with no open
  operation (recall already drops it; the card stays out of recall until re-projected);
- ``orphan``: a point with no card and no open deletion;
- ``misplaced``: a point whose payload names another workspace.

Cards with an open operation are counted as ``pending``: the worker will converge them. With
``repair``, upsert operations are queued for missing and stale cards and delete operations for
orphan and misplaced points, in one transaction under the workspace lock, then enqueued.
"""

from __future__ import annotations

from typing import Any

import msgspec

from shared import models
from shared.index.engine import IndexEngine
from shared.models import card_id_str
from shared.store import activity, outbox, workspaces
from shared.store.database import Database


class AuditReport(msgspec.Struct):
    """Result of an audit; ``queued`` lists the operation ids a repair created."""

    workspace: str
    cards: int
    points: int
    current: int
    pending: int
    missing: list[str]
    stale: list[str]
    orphan: list[str]
    misplaced: list[str]
    repaired: bool = False
    queued: list[int] = []


async def audit(db: Database, index: IndexEngine, workspace: str, *, repair: bool = False,
                actor: str = "audit") -> AuditReport:
    """Compare PostgreSQL and the index for ``workspace``; optionally queue the fixes.

    :raises IndexUnavailable: the index cannot be read. :raises DatabaseUnavailable.
    """
    # PostgreSQL first, then the index: the worker writes a point before it records the
    # operation done, so a card read here without an open operation has its point in the index
    # by the time the index is read. (Read the other way round, an operation completing between
    # the two reads made a current card look stale.)
    async with db.transaction(workspace, read_only=True) as conn:
        await workspaces.get(conn, workspace)
        rows = await outbox.card_projections(conn)
        open_deletes = await outbox.open_deletions(conn)
    points = await index.scroll_ids(workspace)
    fmt = models.PROJECTION_FORMAT
    cards = {r["id"]: r for r in rows}
    missing, stale, pending, current = [], [], 0, 0
    for cid, r in cards.items():
        point = points.get(cid)
        ok = (point is not None and point.get("workspace") == workspace
              and point.get("revision") == r["revision"] and point.get("format") == fmt)
        if r["has_open_op"]:
            pending += 1
        elif point is None:
            missing.append(cid)
        elif not ok:
            stale.append(cid)
        elif r["projected_revision"] == r["revision"] and r["projected_format"] == fmt:
            current += 1
        else:  # a good point but no recorded projection: re-project so it is recorded
            stale.append(cid)
    orphan = [pid for pid, p in points.items() if pid not in cards and pid not in open_deletes
              and p.get("workspace") == workspace]
    misplaced = [pid for pid, p in points.items() if p.get("workspace") != workspace
                 and pid not in open_deletes]
    report = AuditReport(
        workspace=workspace, cards=len(cards), points=len(points), current=current,
        pending=pending, missing=[card_id_str(i) for i in sorted(missing, key=str)],
        stale=[card_id_str(i) for i in sorted(stale, key=str)],
        orphan=[card_id_str(i) for i in sorted(orphan, key=str)],
        misplaced=[card_id_str(i) for i in sorted(misplaced, key=str)])
    if repair:
        queued: list[int] = []
        async with db.transaction(workspace, lock="exclusive") as conn:
            for cid in missing + stale:
                if cid in cards:
                    queued.append(await outbox.insert(conn, workspace, cid, "upsert",
                                                      cards[cid]["revision"]))
            for pid in orphan + misplaced:
                queued.append(await outbox.insert(conn, workspace, pid, "delete", None))
            await activity.record(conn, workspace, actor=actor, verb="audit-repair",
                                      outcome="ok", detail={"queued": len(queued)})
        report.repaired = True
        report.queued = queued
    return report


def audit_to_dict(report: AuditReport) -> dict[str, Any]:
    """JSON-able form of a report."""
    return msgspec.to_builtins(report)

