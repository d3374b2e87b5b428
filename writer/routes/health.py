"""The writer's health routes: liveness and readiness, open to every caller (no token)."""

from __future__ import annotations

from typing import Any

from litestar import get
from litestar.datastructures import State


@get("/healthz", summary="Liveness", include_in_schema=True, tags=["health"])
async def healthz() -> dict[str, str]:
    """Always ``{"status": "ok"}`` while the process serves HTTP."""
    return {"status": "ok"}


@get("/readyz", summary="Readiness", tags=["health"])
async def readyz(state: State) -> dict[str, Any]:
    """``{"status": "ready", "dependencies": {"database": "up", "queue": "up"}}`` when
    PostgreSQL answers with the expected schema and Redis (the projection queue) answers;
    ``"status": "degraded"`` with ``"queue": "down"`` while Redis is unreachable (saves still
    commit, their projection waits); 503 ``database_unavailable`` / ``schema_outdated`` when
    PostgreSQL is down or not migrated, ``pool_exhausted`` when no pooled connection came free
    within ``MEMARC_DB_POOL_TIMEOUT_SECONDS``."""
    await state.archive.db.check_schema()
    queue = "up" if await state.archive.queue.reachable() else "down"
    return {"status": "ready" if queue == "up" else "degraded",
            "dependencies": {"database": "up", "queue": queue}}
