"""The writer's health routes: liveness and readiness, open to every caller (no token)."""

from __future__ import annotations

from litestar import get
from litestar.datastructures import State

from shared.archive.responses import Readiness


@get("/healthz", summary="Liveness", include_in_schema=True, tags=["health"])
async def healthz() -> dict[str, str]:
    """Always ``{"status": "ok"}`` while the process serves HTTP."""
    return {"status": "ok"}


@get("/readyz", summary="Readiness", tags=["health"])
async def readyz(state: State) -> Readiness:
    """``{"status": "ready", "dependencies": {"database": "up", "queue": "up"}}`` when
    PostgreSQL answers with the expected schema and Redis (the projection queue) answers;
    ``"status": "degraded"`` with ``"queue": "down"`` while Redis is unreachable (saves still
    commit, their projection waits); 503 ``database_unavailable`` / ``schema_outdated`` when
    PostgreSQL is down or not migrated, ``pool_exhausted`` when no pooled connection came free
    within ``MEMARC_DB_POOL_TIMEOUT_SECONDS``."""
    return await state.archive.readiness()
