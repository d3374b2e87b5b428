"""Leases kept alive while their holder works: the projection job's outbox leases and the index
rebuild's lease are renewed every third of their length, so that a job slower than one lease
(a large batch on a busy machine, a long optimize step) is never taken for an abandoned one
and its work started again by a second worker. A job that hangs is still bounded: the worker's
job timeout cancels it, the renewals stop with it, and the lease then expires."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from shared.store.database import Connection, Database

log = logging.getLogger("memarc.lease")


async def renew_periodically(db: Database, workspace: str,
                             renew: Callable[[Connection], Awaitable[Any]],
                             lease_seconds: float, what: str) -> None:
    """``renew`` in a transaction of ``workspace`` every ``lease_seconds / 3`` (at least 50 ms)
    until cancelled. A failed renewal is logged and tried again next time (the job itself
    notices a lost database)."""
    while True:
        await asyncio.sleep(max(lease_seconds / 3, 0.05))
        try:
            async with db.transaction(workspace) as conn:
                await renew(conn)
        except Exception as exc:
            log.warning("could not renew the lease of %s: %s", what,
                        getattr(exc, "message", exc))


@contextlib.asynccontextmanager
async def kept(db: Database, workspace: str, renew: Callable[[Connection], Awaitable[Any]],
               lease_seconds: float, what: str) -> AsyncIterator[None]:
    """While the block runs, renew a lease (``renew(conn)``, in a transaction of ``workspace``)
    every third of ``lease_seconds``; the renewals stop when the block ends or is cancelled.
    ``what`` names the lease in the warning a failed renewal logs."""
    task = asyncio.create_task(renew_periodically(db, workspace, renew, lease_seconds, what))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
