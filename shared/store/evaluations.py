"""Recall evaluation cases and runs (``eval_cases``, ``eval_runs``: migration 024).

Functions run on a connection from :meth:`shared.store.database.Database.transaction`; the
cross-workspace reads (:func:`states`, :func:`latest`) go through definer functions and run in a
transaction without a workspace.
"""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from shared.store.database import Q


async def solved_cards(conn: AsyncConnection, fmt: int) -> list[dict[str, Any]]:
    """Every solved question projected in format ``fmt``: ``{id, question, databases, targets,
    target_families}`` (the projected targets of its outgoing links, in target-id order)."""
    return await (await conn.execute(Q.evaluations_solved_cards, {"format": fmt})).fetchall()


async def title_cards(conn: AsyncConnection, fmt: int, limit: int) -> list[dict[str, Any]]:
    """A stable sample of at most ``limit`` cards other than solved questions projected in format
    ``fmt``: ``{id, family, title, same_title}`` (``same_title``: the projected ids of those
    families with this title, itself included)."""
    return await (await conn.execute(Q.evaluations_title_cards,
                                     {"format": fmt, "limit": limit})).fetchall()


async def projected(conn: AsyncConnection, ids: list[uuid.UUID], fmt: int) -> set[uuid.UUID]:
    """Which of ``ids`` are cards projected at their current revision in format ``fmt``."""
    rows = await (await conn.execute(Q.evaluations_projected, {"ids": ids, "format": fmt})).fetchall()
    return {r["id"] for r in rows}


async def cases(conn: AsyncConnection) -> list[dict[str, Any]]:
    """The workspace's curated cases, oldest first."""
    return await (await conn.execute(Q.evaluations_cases)).fetchall()


async def case_get(conn: AsyncConnection, case_id: uuid.UUID) -> dict[str, Any] | None:
    """One curated case, or None."""
    return await (await conn.execute(Q.evaluations_case_get, {"id": case_id})).fetchone()


def _case_params(values: dict[str, Any]) -> dict[str, Any]:
    return {**values, "filters": Jsonb(values["filters"])}


async def case_insert(conn: AsyncConnection, workspace: str, case_id: uuid.UUID, actor: str,
                      values: dict[str, Any]) -> dict[str, Any] | None:
    """Insert a curated case (or replace the one with this id in this workspace); returns its
    row, None when the id belongs to another workspace's case."""
    return await (await conn.execute(Q.evaluations_case_insert, {
        **_case_params(values), "id": case_id, "workspace": workspace, "actor": actor})).fetchone()


async def case_update(conn: AsyncConnection, case_id: uuid.UUID,
                      values: dict[str, Any]) -> dict[str, Any] | None:
    """Replace a curated case's fields; returns its row, None when there is no such case."""
    return await (await conn.execute(Q.evaluations_case_update,
                                     {**_case_params(values), "id": case_id})).fetchone()


async def case_delete(conn: AsyncConnection, case_id: uuid.UUID) -> bool:
    """Delete a curated case; False when there was none."""
    return (await (await conn.execute(Q.evaluations_case_delete, {"id": case_id})).fetchone()) is not None


async def run_insert(conn: AsyncConnection, run_id: uuid.UUID, workspace: str, trigger: str,
                     actor: str) -> dict[str, Any] | None:
    """Queue a run; None when one of this workspace is already queued or running (rolled back
    to a savepoint, so the transaction goes on)."""
    try:
        async with conn.transaction():
            return await (await conn.execute(Q.evaluations_run_insert, {
                "id": run_id, "workspace": workspace, "trigger": trigger,
                "actor": actor})).fetchone()
    except psycopg.errors.UniqueViolation:
        return None


async def run_claim(conn: AsyncConnection, run_id: uuid.UUID,
                    lease_seconds: float) -> dict[str, Any] | None:
    """Lease a queued run (or one whose lease expired); None when it is not claimable."""
    return await (await conn.execute(Q.evaluations_run_claim, {
        "id": run_id, "lease_seconds": lease_seconds})).fetchone()


async def run_progress(conn: AsyncConnection, run_id: uuid.UUID, done: int, total: int,
                       lease_seconds: float) -> None:
    """Record ``done`` of ``total`` cases and renew the run's lease."""
    await conn.execute(Q.evaluations_run_progress, {
        "id": run_id, "done": done, "total": total, "lease_seconds": lease_seconds})


async def run_finish(conn: AsyncConnection, run_id: uuid.UUID, *, status: str,
                     **fields: Any) -> None:
    """Close a run as ``done`` (with what it measured) or ``failed`` (with ``error``)."""
    params: dict[str, Any] = {k: None for k in (
        "done", "total", "fingerprint", "format", "profiles", "profile_digest", "figures",
        "misses", "outcomes", "compared_with", "regressions", "regression", "seconds", "error",
        "candidate")}
    params.update(fields)
    for key in ("profiles", "figures", "misses", "outcomes", "regressions"):
        if params[key] is not None:
            params[key] = Jsonb(params[key])
    await conn.execute(Q.evaluations_run_finish, {**params, "id": run_id, "status": status})


async def run_get(conn: AsyncConnection, run_id: uuid.UUID) -> dict[str, Any] | None:
    """One run with its figures and misses (not its per-case outcomes), or None."""
    return await (await conn.execute(Q.evaluations_run_get, {"id": run_id})).fetchone()


async def runs(conn: AsyncConnection, limit: int, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Runs newest first (without misses) and their total."""
    rows = await (await conn.execute(Q.evaluations_runs, {"limit": limit, "offset": offset})).fetchall()
    total = (await (await conn.execute(Q.evaluations_runs_count)).fetchone())["total"]
    return rows, total


async def run_outcomes(conn: AsyncConnection, run_id: uuid.UUID) -> dict[str, Any] | None:
    """One finished run with its per-case outcomes, or None."""
    return await (await conn.execute(Q.evaluations_run_outcomes, {"id": run_id})).fetchone()


async def previous_done(conn: AsyncConnection, run_id: uuid.UUID) -> dict[str, Any] | None:
    """The newest finished run other than ``run_id``, with its per-case outcomes, or None."""
    return await (await conn.execute(Q.evaluations_previous_done, {"id": run_id})).fetchone()


async def states(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every workspace's evaluation state (migration 024's ``evaluation_states``)."""
    return await (await conn.execute(Q.evaluations_states)).fetchall()


async def latest(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every workspace's latest finished figures and its count of regressions."""
    return await (await conn.execute(Q.evaluations_latest)).fetchall()


async def latest_done(conn: AsyncConnection) -> dict[str, Any] | None:
    """The workspace's newest finished run (``id, finished_at, figures, regression``), or None."""
    return await (await conn.execute(Q.evaluations_latest_done)).fetchone()


async def floors(conn: AsyncConnection, fmt: int) -> dict[str, Any] | None:
    """The newest finished run's ``{fingerprint, floors}`` in projection format ``fmt`` (not a
    shadow candidate's; ``floors`` as :func:`shared.recall.floor.choose` made them, None for
    a run made before floors), or None when the workspace has no such run."""
    return await (await conn.execute(Q.evaluations_floors, {"format": fmt})).fetchone()


async def run_release(conn: AsyncConnection, run_id: uuid.UUID) -> None:
    """Put a running run back in the queue (its worker stops before it ends)."""
    await conn.execute(Q.evaluations_run_release, {"id": run_id})


async def export_rows(conn: AsyncConnection) -> list[dict[str, Any]]:
    """The curated cases with their expected cards by key, oldest first (the cards file)."""
    return await (await conn.execute(Q.evaluations_export)).fetchall()


async def case_exists(conn: AsyncConnection, case_id: uuid.UUID) -> bool:
    """Whether ``case_id`` is a curated case of this workspace."""
    return (await (await conn.execute(Q.evaluations_case_exists, {"id": case_id})).fetchone()) is not None
