"""The projection queue: arq jobs on Redis, enqueued after commit (DESIGN §3).

A job carries ids only (workspace id, operation id); its arq job id is ``memarc:op:<id>``, so a
duplicate enqueue (the sweep re-sending a still-queued operation) is a no-op. Redis being down
never fails a committed write: :meth:`ProjectionQueue.enqueue` reports False and the operation
stays pending in PostgreSQL until the sweep re-enqueues it.
"""

from __future__ import annotations

from datetime import datetime

import asyncio
import logging

from arq import ArqRedis, create_pool
from arq.connections import RedisSettings

log = logging.getLogger(__name__)

PROJECT_JOB = "project_operation"
REBUILD_JOB = "rebuild_index"
EVALUATE_JOB = "evaluate_recall"
QUEUE_NAME = "memarc:projection"
#: seconds an enqueue after commit may take before the queue counts as unavailable: a Redis
#: that accepts connections but does not answer (stopped, swapping, a dead peer behind a proxy)
#: would otherwise hold the committed write's answer until the OS gives up on the socket (about
#: ten minutes); arq has a connect timeout only
ENQUEUE_TIMEOUT_SECONDS = 3.0


def job_id(op_id: int, attempt: int = 0) -> str:
    """arq job id of a projection operation's ``attempt`` (0: never leased; n: leased n times).

    An attempt has an id of its own because a job that dies with its worker (SIGKILL, power
    loss) leaves its arq job and in-progress keys in Redis, and arq keeps the in-progress key for
    the longest function timeout plus 10 s (six hours here, the rebuild job's timeout): offering
    the same id again would be a no-op for that long. Re-offers of one attempt (the sweep every
    few seconds) still share an id, so they stay no-ops while it is queued.
    """
    return f"memarc:op:{op_id}" if attempt == 0 else f"memarc:op:{op_id}:try{attempt}"


def rebuild_job_id(rebuild_id: object, expired_lease: datetime | None = None) -> str:
    """arq job id of a tracked index rebuild; ``expired_lease`` (the lease a dead run left) gives
    a restart an id of its own, for the reason :func:`job_id` gives."""
    if expired_lease is None:
        return f"memarc:rebuild:{rebuild_id}"
    return f"memarc:rebuild:{rebuild_id}:{int(expired_lease.timestamp() * 1000)}"


def evaluation_job_id(run_id: object, expired_lease: datetime | None = None) -> str:
    """arq job id of a recall evaluation run (a restart after an expired lease: an id of its
    own, as :func:`rebuild_job_id`)."""
    if expired_lease is None:
        return f"memarc:evaluate:{run_id}"
    return f"memarc:evaluate:{run_id}:{int(expired_lease.timestamp() * 1000)}"


def redis_settings(url: str) -> RedisSettings:
    """arq settings for a ``redis://``, ``rediss://`` or ``unix://`` URL; fail fast, no retries."""
    settings = RedisSettings.from_dsn(url)
    settings.conn_timeout = 2
    settings.conn_retries = 0
    return settings


def is_queue_error(exc: BaseException) -> bool:
    """True for the errors of an unreachable or failing Redis (connection refused or lost, a
    timeout, a server still loading): the queue is unavailable, not the request wrong."""
    import redis.exceptions

    return isinstance(exc, (OSError, ConnectionError, TimeoutError, asyncio.TimeoutError,
                            redis.exceptions.RedisError))


class OutageLog:
    """Logs a dependency's outage once: a warning when the first call fails, debug lines while
    it lasts, and ``back`` (info) at the first success after it, so that an outage is not one
    warning per save, job or sweep. One instance per dependency and process."""

    def __init__(self, logger: logging.Logger, back: str) -> None:
        self.logger, self.back = logger, back
        self.down = False

    def failed(self, message: str, *args: object) -> None:
        """Record a failed call: a warning if it starts an outage, else a debug line."""
        if self.down:
            self.logger.debug(message, *args)
        else:
            self.down = True
            self.logger.warning(message, *args)

    def succeeded(self) -> None:
        """Record a successful call: ``back`` if it ends an outage."""
        if self.down:
            self.down = False
            self.logger.info(self.back)


class ProjectionQueue:
    """Lazily connected arq pool; survives Redis outages (reconnects on the next call)."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self._pool: ArqRedis | None = None
        self._lock = asyncio.Lock()
        self._outage = OutageLog(log, "projection queue reachable again")

    async def _get(self) -> ArqRedis:
        if self.url is None:
            raise ConnectionError("no Redis configured")
        async with self._lock:
            if self._pool is None:
                self._pool = await create_pool(redis_settings(self.url),
                                               default_queue_name=QUEUE_NAME)
            return self._pool

    async def enqueue(self, workspace: str, op_ids: list[int]) -> bool:
        """Enqueue a job per operation; True if Redis took them all, False if it is unavailable
        (unreachable, failing, or not answering within :data:`ENQUEUE_TIMEOUT_SECONDS`)."""
        if not op_ids:
            return True
        return await self._send(
            [(PROJECT_JOB, (workspace, op_id), job_id(op_id)) for op_id in op_ids],
            "projection queue unavailable (%d job(s) not enqueued; their operations stay "
            "pending until the sweep; logged once until the queue answers again): %s",
            len(op_ids))

    async def enqueue_rebuild(self, workspace: str, rebuild_id: object) -> bool:
        """Enqueue a tracked rebuild; False if Redis is unavailable (the sweep retries)."""
        return await self._send(
            [(REBUILD_JOB, (workspace, str(rebuild_id)), rebuild_job_id(rebuild_id))],
            "projection queue unavailable; rebuild %s stays queued (logged once until the "
            "queue answers again): %s", rebuild_id)

    async def enqueue_evaluation(self, workspace: str, run_id: object,
                                 expired_lease: datetime | None = None) -> bool:
        """Enqueue a recall evaluation run; False if Redis is unavailable (the sweep retries)."""
        return await self._send(
            [(EVALUATE_JOB, (workspace, str(run_id)), evaluation_job_id(run_id, expired_lease))],
            "projection queue unavailable; evaluation %s stays queued (logged once until the "
            "queue answers again): %s", run_id)

    async def _send(self, jobs: list[tuple[str, tuple[object, ...], str]], failure: str,
                    *args: object) -> bool:
        """Enqueue ``(function, arguments, job id)`` jobs within :data:`ENQUEUE_TIMEOUT_SECONDS`
        in all; True when Redis took them, False (the outage logged with ``failure % (*args,
        error)``, the pool used dropped) when the queue is unavailable."""
        used: list[ArqRedis] = []

        async def send() -> None:
            used.append(pool := await self._get())
            for function, arguments, job in jobs:
                await pool.enqueue_job(function, *arguments, _job_id=job)

        try:
            await asyncio.wait_for(send(), ENQUEUE_TIMEOUT_SECONDS)
            self._outage.succeeded()
            return True
        except Exception as exc:  # redis.exceptions.* (ConnectionError, BusyLoading, ...) too
            if not is_queue_error(exc):
                raise
            self._outage.failed(failure, *args, exc)
            if used:  # else no pool was made: nothing to drop
                await self._reset(used[0])
            return False

    async def reachable(self, timeout: float = 2.0) -> bool:
        """True when Redis answers a ping within ``timeout`` seconds (readiness and status say
        whether the queue is up); False when it is unreachable or not configured."""
        try:
            pool = await asyncio.wait_for(self._get(), timeout)
            await asyncio.wait_for(pool.ping(), timeout)
            return True
        except Exception as exc:
            if is_queue_error(exc):
                await self._reset()
                return False
            raise

    async def _reset(self, failed: ArqRedis | None = None) -> None:
        """Drop the pool (closing it) so that the next call reconnects; with ``failed``, only
        if that is still the current pool (another caller may have made a fresh one since)."""
        if failed is not None and self._pool is not failed:
            return
        pool, self._pool = self._pool, None
        if pool is not None:
            try:  # bounded: a Redis that does not answer must not hold up the caller here
                await asyncio.wait_for(pool.aclose(close_connection_pool=True), 1.0)
            except Exception:  # closing a broken connection may fail again; it is gone anyway
                pass

    async def close(self) -> None:
        """Close the pool."""
        await self._reset()
