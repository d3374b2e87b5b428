"""The projection worker (arq): the projection and rebuild jobs and the periodic outbox sweep.

Jobs carry ids only and re-read state; any failure is recorded on the operation (never relies on
an ordinary exception to retry: arq would fail the job for good). A cron sweep re-enqueues
operations that are pending, or running with an expired lease, so a lost job (Redis restart,
killed worker) is picked up again. The sweep also drops the index collection of each workspace
removed by ``memarc workspace delete`` (:func:`drop_removed_collections`): that command runs in
another process, with the migrator login, and cannot open an embedded index that ``memarc up``
holds. Once an hour it purges the administration's ended browser sessions and used sign-in
links (:func:`purge_admin_sessions`); at every sweep it deletes the recall records past their
retention (:func:`purge_recall_records`, in bounded batches), and queues the recall evaluations
that are due and offers again those whose job was lost (:func:`schedule_evaluations`).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from arq import Worker, cron

from shared.projection import recovery
from shared.projection.project import BATCH_SIZE, project_operations
from shared.evaluation import schedule
from shared.evaluation.run import execute as execute_evaluation
from shared.evaluation.run import gate as evaluation_gate
from shared.evaluation.run import profiles_digest
from shared.projection.queue import (EVALUATE_JOB, PROJECT_JOB, QUEUE_NAME, REBUILD_JOB,
                                     OutageLog, evaluation_job_id, is_queue_error, job_id,
                                     rebuild_job_id, redis_settings)
from shared.recall.profiles import MODE_PROFILES
from shared.projection.rebuild import rebuild_index
from shared.errors import ArchiveError, DatabaseUnavailable
from shared.resources import Resources
from shared.store import (activity, admin_sessions, evaluations, outbox, rebuilds,
                          recall_records, workspaces)

log = logging.getLogger(__name__)

SWEEP_BATCH = 1000
#: seconds between two purges of ended administration sessions (the first at the worker's start)
PURGE_EVERY_SECONDS = 3600.0
#: hours an ended session's row, and a used or expired sign-in link's, is kept before the purge
#: (meanwhile a browser still holding such a cookie is told why it is signed out)
PURGE_GRACE_HOURS = 24.0
#: recall records deleted per transaction of their purge, and the most batches one sweep runs
#: (a larger backlog, after MEMARC_RECALL_RETENTION_DAYS was lowered, goes on at the next sweep)
RECALL_PURGE_BATCH = 1000
RECALL_PURGE_BATCHES = 10


def _database_down(ctx: dict[str, Any], exc: DatabaseUnavailable) -> None:
    """Log PostgreSQL's absence once per outage through the worker's :class:`OutageLog` (built
    with the worker: arq copies ctx per job, shallowly, so every job shares it); the sweep runs
    every second, so a traceback per run would flood the log."""
    ctx["database_outage"].failed("%s; projection and the sweep wait for it (open operations "
                                 "stay open)", exc.message)


def _database_up(ctx: dict[str, Any]) -> None:
    ctx["database_outage"].succeeded()


async def project_operation(ctx: dict[str, Any], workspace: str, op_id: int) -> dict[str, Any]:
    """arq job: complete projection operation ``op_id`` of ``workspace`` (and a batch of others).

    Returns the :class:`~shared.projection.project.ProjectionReport` as a dict, or
    ``{"error": "database_unavailable"}`` when PostgreSQL cannot be reached (logged once per
    outage; the operation stays open and the sweep offers it again).
    """
    res: Resources = ctx["resources"]
    assert res.index is not None and res.embedder is not None
    s = res.settings
    try:
        report = await project_operations(res.db, res.index, res.embedder, workspace, op_id,
                                          lease_seconds=s.lease_seconds,
                                          max_attempts=s.max_attempts, privacy=res.privacy)
    except DatabaseUnavailable as exc:
        _database_down(ctx, exc)
        return {"error": "database_unavailable"}
    _database_up(ctx)
    if report.errors:  # a wait for a rebuild (nothing leased) is said at each sweep: not a warning
        (log.warning if report.leased else log.debug)(
            "projection in %s left %d operation(s) pending: %s", workspace, report.failed,
            report.errors[0])
    return report.__dict__


async def rebuild_index_job(ctx: dict[str, Any], workspace: str, rebuild_id: str) -> dict[str, Any] | None:
    """arq job: run a tracked index rebuild (see :mod:`shared.projection.rebuild`)."""
    res: Resources = ctx["resources"]
    assert res.index is not None and res.embedder is not None
    index, embedder = res.index, res.embedder

    async def gate(candidate: str, model: Any) -> dict[str, Any]:
        return await evaluation_gate(res.db, index, embedder, workspace, candidate, model,
                                     actor="shadow rebuild", privacy=res.privacy)

    row = await rebuild_index(res.db, res.index, res.embedder, workspace, uuid.UUID(rebuild_id),
                              lease_seconds=max(300, res.settings.lease_seconds),
                              privacy=res.privacy, gate=gate)
    return {"status": row["status"], "error": row["error"]} if row else None


async def evaluate_job(ctx: dict[str, Any], workspace: str, run_id: str) -> dict[str, Any] | None:
    """arq job: run a queued recall evaluation (:func:`shared.evaluation.run.execute`);
    returns its status and error, or None when it was not claimable."""
    res: Resources = ctx["resources"]
    assert res.index is not None and res.embedder is not None
    row = await execute_evaluation(res.db, res.index, res.embedder, workspace,
                                   uuid.UUID(run_id), privacy=res.privacy)
    if row is not None and row["regression"]:
        log.warning("recall evaluation %s of %s: regression (%s)", run_id, workspace,
                    "; ".join(f"{t['mode']} {t['source']} r@{t['k']}" for t in
                              row["regressions"] if t["regression"]))
    return {"status": row["status"], "error": row["error"]} if row else None


async def schedule_evaluations(ctx: dict[str, Any]) -> list[tuple[str, str]]:
    """Every :data:`shared.evaluation.schedule.CHECK_SECONDS`: offer again each evaluation run
    whose job was lost (queued, or running under an expired lease), and queue a run in each
    workspace where one is due (:func:`shared.evaluation.schedule.due`); returns the
    ``(workspace, trigger)`` of the runs queued.

    :raises DatabaseUnavailable: PostgreSQL cannot be reached.
    """
    res: Resources = ctx["resources"]
    state = ctx["evaluation_check"]
    now = asyncio.get_running_loop().time()
    if res.index is None or res.embedder is None or now < state["next"]:
        return []
    state["next"] = now + schedule.CHECK_SECONDS
    async with res.db.transaction(None) as conn:
        rows = await evaluations.states(conn)
    digest = profiles_digest(MODE_PROFILES)
    queued: list[tuple[str, str]] = []
    for row in rows:
        ws = row["workspace_id"]
        if row["open_run"] is not None:
            await res.queue.enqueue_evaluation(ws, row["open_run"], row["open_run_expired_lease"])
            continue
        try:
            fingerprint = res.embedder.fingerprint(row["language"], (
                (row["dense_model"], row["dense_model_path"]) if row["dense_model"] else None))
        except ArchiveError as exc:
            log.debug("no evaluation of %s: %s", ws, exc.message)
            continue
        trigger = schedule.due(row, fingerprint=fingerprint, profile_digest=digest,
                               now=datetime.now(timezone.utc),
                               every_hours=res.settings.eval_every_hours)
        if trigger is None:
            continue
        run_id = uuid.uuid4()
        async with res.db.transaction(ws, lock="exclusive") as conn:
            inserted = await evaluations.run_insert(conn, run_id, ws, trigger, "worker")
            if inserted is None:
                continue
            await activity.record(conn, ws, actor="worker", verb="evaluate", outcome="queued",
                                  detail={"run": str(run_id), "trigger": trigger})
        await res.queue.enqueue_evaluation(ws, run_id)
        queued.append((ws, trigger))
        log.info("recall evaluation of %s queued (%s)", ws, trigger)
    return queued


async def sweep(ctx: dict[str, Any]) -> int:
    """arq cron job: re-enqueue open operations (pending, or leased with an expired lease).

    Returns how many job ids were offered to the queue (duplicates of queued jobs are no-ops);
    0 while PostgreSQL cannot be reached (logged once per outage), and 0 when Redis goes away
    while the sweep offers jobs (the worker's poll loop logs that outage once and reconnects;
    the operations stay open in PostgreSQL for the next sweep), never a job failure with a
    traceback per sweep.
    """
    try:
        return await _sweep(ctx)
    except DatabaseUnavailable as exc:
        _database_down(ctx, exc)
        return 0
    except Exception as exc:
        if not is_queue_error(exc):
            raise
        log.debug("sweep cut short: the projection queue is unreachable (%s)", exc)
        return 0


async def drop_removed_collections(res: Resources) -> int:
    """Drop the index collection of every removed workspace whose removal still says
    ``index_status: pending``, and record each outcome on the removal (done, or still pending
    with the error: the next sweep tries again). Returns how many were dropped.

    :raises DatabaseUnavailable: PostgreSQL cannot be reached.
    """
    if res.index is None:
        return 0
    async with res.db.transaction(None) as conn:
        removals = await workspaces.removals_pending(conn)
    dropped = 0
    for removal in removals:
        error = None
        try:
            await res.index.drop(removal["workspace"])
        except ArchiveError as exc:
            error = f"{exc.code}: {exc.message}"
        except Exception as exc:  # an engine bug must not stop the sweep: record it
            log.exception("dropping the collection of removed workspace %s failed",
                          removal["workspace"])
            error = f"{type(exc).__name__}: {exc}"
        async with res.db.transaction(None) as conn:
            await workspaces.removal_index_result(conn, removal["id"], error)
        if error is None:
            dropped += 1
            log.info("dropped the index collection of removed workspace %s",
                     removal["workspace"])
    return dropped


#: how often the sweep checks every workspace's index collection against the recorded one
#: (:func:`shared.projection.recovery.verify_all`; also at the worker's first sweep)
INDEX_CHECK_SECONDS = 10.0


async def check_collections(ctx: dict[str, Any]) -> dict[str, str]:
    """Every :data:`INDEX_CHECK_SECONDS` (and at the first sweep): find the workspaces whose
    index collection was lost and queue their rebuild (:mod:`shared.projection.recovery`);
    returns ``{workspace: state}`` of those not ``ok``/``fresh`` (empty when not due).

    :raises DatabaseUnavailable: PostgreSQL cannot be reached.
    """
    res: Resources = ctx["resources"]
    due = ctx["index_check"]
    now = asyncio.get_running_loop().time()
    if res.index is None or now < due["next"]:
        return {}
    found = await recovery.verify_all(res.db, res.index)
    due["next"] = now + INDEX_CHECK_SECONDS
    for workspace, state in found.items():
        if state != recovery.ADOPT:
            log.warning("index collection of workspace %s: %s", workspace, state)
    return found


async def purge_admin_sessions(ctx: dict[str, Any]) -> tuple[int, int] | None:
    """Delete, in every workspace, the administration's browser sessions that ended (signed
    out, past their expiry, or their token revoked or expired) and the one-time sign-in links used
    or expired, more than :data:`PURGE_GRACE_HOURS` ago, when :data:`PURGE_EVERY_SECONDS` have
    passed since the last purge of this worker (``ctx["session_purge"]``, a dict built with the
    worker, so every job shares it); returns ``(sessions, links)`` deleted, or None when it was
    not due.

    :raises DatabaseUnavailable: PostgreSQL cannot be reached (the next sweep tries again).
    """
    state = ctx["session_purge"]
    now = time.monotonic()
    if now < state.get("due", 0.0):
        return None
    async with ctx["resources"].db.transaction(None) as conn:
        purged = await admin_sessions.purge_ended(conn, PURGE_GRACE_HOURS * 3600)
    state["due"] = now + PURGE_EVERY_SECONDS
    if any(purged):
        log.info("purged %d ended administration session(s) and %d used or expired sign-in "
                 "link(s)", *purged)
    return purged


async def purge_recall_records(res: Resources) -> int:
    """Delete, in every workspace, the recall records older than
    ``MEMARC_RECALL_RETENTION_DAYS`` (migration 026), oldest first, :data:`RECALL_PURGE_BATCH`
    per short transaction, until a batch comes back short or :data:`RECALL_PURGE_BATCHES` have
    run; returns how many were deleted.

    :raises DatabaseUnavailable: PostgreSQL cannot be reached (the next sweep tries again).
    """
    purged = 0
    for _ in range(RECALL_PURGE_BATCHES):
        async with res.db.transaction(None) as conn:
            deleted = await recall_records.purge(conn, res.settings.recall_retention_days,
                                                 RECALL_PURGE_BATCH)
        purged += deleted
        if deleted < RECALL_PURGE_BATCH:
            break
    if purged:
        log.info("purged %d recall record(s) older than %d days", purged,
                 res.settings.recall_retention_days)
    return purged


async def _sweep(ctx: dict[str, Any]) -> int:
    res: Resources = ctx["resources"]
    redis = ctx["redis"]
    offered = 0
    await check_collections(ctx)  # before the rebuilds are listed: a lost one's is offered now
    async with res.db.transaction(None) as conn:
        workspaces_open = await outbox.workspaces_with_open_operations(conn)
        open_rebuilds = await rebuilds.open_rebuilds(conn)
    _database_up(ctx)
    await drop_removed_collections(res)
    await purge_admin_sessions(ctx)
    await purge_recall_records(res)
    await schedule_evaluations(ctx)
    for row in open_rebuilds:
        await redis.enqueue_job(REBUILD_JOB, row["workspace_id"], str(row["rebuild_id"]),
                                _job_id=rebuild_job_id(row["rebuild_id"], row["expired_lease"]))
        offered += 1
    for ws in workspaces_open:
        async with res.db.transaction(ws) as conn:
            claimable = await outbox.open_for_sweep(conn, ws, SWEEP_BATCH)
        # one job per batch: each job leases up to BATCH_SIZE open operations of the workspace;
        # an attempt's own job id, so a job that died with its worker does not block the offer
        for op_id, attempts in claimable[::BATCH_SIZE]:
            await redis.enqueue_job(PROJECT_JOB, ws, op_id, _job_id=job_id(op_id, attempts))
            offered += 1
    return offered


async def stop_worker(worker: Worker, grace_seconds: float = 15.0) -> None:
    """Stop an arq worker gracefully: pick no new job, let running jobs finish (at most
    ``grace_seconds``; a job cut short keeps its lease and is reclaimed after it expires), close.

    The poll loop is not cancelled but ends by itself at its next turn (as a burst worker with no
    job left to start, arq's own exit), and every job has ended before the Redis pool is closed;
    the pool is closed however arq's close ends. Cancelling the loop, as arq's close does, can
    interrupt a Redis pipeline while it gives its connection back, and a connection left out of
    the pool is then closed by the garbage collector only, as a ``ResourceWarning`` in whatever
    runs at that moment (issue 14).
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_seconds
    worker.allow_pick_jobs = False
    main = worker.main_task
    if main is not None and not main.done():
        worker.burst, worker.max_burst_jobs = True, 0  # the loop returns once its jobs are done
        await asyncio.wait([main], timeout=grace_seconds)
        if not main.done():  # a job outlived the grace: cut it short with the loop
            main.cancel()
            await asyncio.wait([main], timeout=grace_seconds)
    running = [t for t in worker.tasks.values() if not t.done()]
    if running:
        _, late = await asyncio.wait(running, timeout=max(0.0, deadline - loop.time()))
        for t in late:
            t.cancel()
        if late:
            await asyncio.wait(late, timeout=grace_seconds)
    try:
        await worker.close()  # gathers the jobs, removes the heartbeat, closes the pool
    except asyncio.CancelledError:
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            raise  # we are being cancelled ourselves
    except Exception as exc:
        if not is_queue_error(exc):
            raise
        log.warning("worker stopped while Redis is unreachable (heartbeat not removed): %s", exc)
    finally:
        if worker.pool is not None:  # arq's close stopped early (a job cut short, Redis gone)
            await worker.pool.aclose(close_connection_pool=True)


#: the worker's reconnection backoff after a lost queue connection: first and longest wait
RECONNECT_FIRST_SECONDS, RECONNECT_MAX_SECONDS = 0.5, 5.0


async def supervise_worker(worker: Worker) -> None:
    """Run an arq worker until it is stopped (:func:`stop_worker`), reconnecting by itself with
    backoff when Redis is lost (issue 14).

    arq's poll loop raises on the first Redis error, which would end the worker (and, in
    ``memarc up``, every server with it). Here a lost queue connection is logged once per
    outage (a warning when it is lost, an info line when it is back) and the loop is started
    again, on the same pool, after ``RECONNECT_FIRST_SECONDS``, doubling up to
    ``RECONNECT_MAX_SECONDS``; jobs running at that moment end first.
    Operations whose jobs were lost stay open in PostgreSQL; the sweep (run again at
    reconnection) re-enqueues them. Any other error ends the worker.
    """
    delay = RECONNECT_FIRST_SECONDS
    lost = False
    startup = worker.on_startup

    async def on_startup(ctx: dict[str, Any]) -> None:
        nonlocal lost, delay
        if lost:
            log.info("projection queue connection is back; the worker resumes")
            lost, delay = False, RECONNECT_FIRST_SECONDS
        if startup is not None:
            await startup(ctx)

    worker.on_startup = on_startup
    while True:
        try:
            await worker.async_run()
            return
        except Exception as exc:
            if not is_queue_error(exc) or not worker.allow_pick_jobs:
                raise
            if not lost:
                log.warning("projection queue connection lost (%s); the worker reconnects with "
                            "backoff, open operations wait in PostgreSQL", exc)
                lost = True
        # the pool stays: redis-py replaces its broken connections on the next command. Jobs
        # running now end first (their results cannot be recorded in Redis; their operations
        # stay open in PostgreSQL) and are reaped here, so that their errors do not surface as a
        # second outage once Redis is back
        running = [t for t in worker.tasks.values() if not t.done()]
        if running:
            await asyncio.wait(running, timeout=worker.job_timeout_s + 10)
        for key, t in list(worker.tasks.items()):
            if t.done():
                del worker.tasks[key]
                if not t.cancelled():
                    t.exception()  # retrieved: a job that could not finish in Redis
        await asyncio.sleep(delay)
        delay = min(2 * delay, RECONNECT_MAX_SECONDS)
        if not worker.allow_pick_jobs:  # stopped while waiting
            return


HEALTH_SECONDS = 30


def health_check_key() -> str:
    """Redis key of this host's worker heartbeat (one per container/host, so a replica's health
    check sees its own worker, not any replica's)."""
    import socket

    return f"{QUEUE_NAME}:health-check:{socket.gethostname()}"


async def check_worker_health(redis_url: str) -> bool:
    """True when a worker on this host recorded its heartbeat within ``HEALTH_SECONDS`` + 1 s
    (arq's health-check key, written every ``HEALTH_SECONDS`` by the worker's poll loop).

    :raises redis.exceptions.ConnectionError: Redis cannot be reached.
    """
    from arq.worker import async_check_health

    return await async_check_health(redis_settings(redis_url), health_check_key(), QUEUE_NAME) == 0


def build_worker(resources: Resources, *, burst: bool = False, max_jobs: int | None = None,
                 handle_signals: bool = False, poll_delay: float = 0.2) -> Worker:
    """An arq worker over ``resources`` (projection jobs + the periodic sweep).

    ``burst=True`` drains the queue and returns (tests, one-shot runs).
    """
    s = resources.settings
    if not s.redis_url:
        raise ValueError("MEMARC_REDIS_URL is not set")
    step = max(1, int(s.sweep_seconds))
    seconds = set(range(0, 60, step)) if 60 % step == 0 else {0}
    from arq.worker import func

    functions = [func(project_operation, name=PROJECT_JOB, keep_result=0, max_tries=1),
                 func(rebuild_index_job, name=REBUILD_JOB, keep_result=0, max_tries=1,
                      timeout=6 * 3600),
                 func(evaluate_job, name=EVALUATE_JOB, keep_result=0, max_tries=1,
                      timeout=3600)]
    return Worker(
        functions=functions,
        cron_jobs=[cron(sweep, second=seconds, run_at_startup=True, timeout=60,  # type: ignore[arg-type]
                        keep_result=0)],
        redis_settings=redis_settings(s.redis_url),
        queue_name=QUEUE_NAME,
        ctx={"resources": resources,
             "database_outage": OutageLog(log, "PostgreSQL is back; projection resumes"),
             "index_check": {"next": 0.0}, "session_purge": {},
             "evaluation_check": {"next": 0.0}},
        burst=burst,
        max_jobs=max_jobs or s.worker_jobs,
        handle_signals=handle_signals,
        poll_delay=poll_delay,
        keep_result=0,
        job_timeout=s.job_timeout_seconds,
        max_tries=1,
        health_check_interval=HEALTH_SECONDS,
        health_check_key=health_check_key(),
    )

