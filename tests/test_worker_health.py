"""The worker's container health check (`memarc worker --check`): arq's heartbeat key, per host."""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys

from shared.worker import build_worker, check_worker_health, stop_worker


def _check_cli(redis_url: str) -> int:
    env = {**os.environ, "MEMARC_REDIS_URL": redis_url}
    return subprocess.run([sys.executable, "-m", "writer.cli", "worker", "--check"], env=env,
                          capture_output=True, timeout=60).returncode


async def test_health_check_follows_a_running_worker(make_env, redis_url):
    async with make_env() as env:
        assert not await check_worker_health(redis_url)
        assert await asyncio.to_thread(_check_cli, redis_url) == 1
        worker = build_worker(env.resources, poll_delay=0.05)
        task = asyncio.create_task(worker.async_run())
        try:
            for _ in range(100):
                if await check_worker_health(redis_url):
                    break
                await asyncio.sleep(0.05)
            assert await check_worker_health(redis_url)
            assert await asyncio.to_thread(_check_cli, redis_url) == 0
        finally:
            await stop_worker(worker)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        # a worker that stops removes its heartbeat (arq's close); a killed one's expires after
        # HEALTH_SECONDS + 1
        assert not await check_worker_health(redis_url)
        assert await asyncio.to_thread(_check_cli, redis_url) == 1


async def _noop(ctx, i: int) -> None:
    await asyncio.sleep(0.001 * (i % 3))


async def test_stopping_a_busy_worker_leaves_no_redis_connection_open(redis_url):
    """Issue 14: a worker stopped while it polls and runs jobs leaves no connection of its Redis
    pool unclosed (the garbage collector would report it, as an unraisable ResourceWarning, in
    whatever test runs then). arq's own close cancels the poll loop mid-pipeline; stop_worker
    lets it end by itself. Each round stops a worker at another moment of its work."""
    from arq import create_pool
    from arq.worker import Worker, func

    from shared.projection.queue import redis_settings

    settings = redis_settings(redis_url)
    queue = await create_pool(settings, default_queue_name="memarc:test-stop")
    try:
        for round_ in range(12):
            for i in range(100):
                await queue.enqueue_job("noop", i, _queue_name="memarc:test-stop")
            worker = Worker(functions=[func(_noop, name="noop")], redis_settings=settings,
                            queue_name="memarc:test-stop", poll_delay=0.001, max_jobs=4,
                            handle_signals=False, keep_result=0)
            task = asyncio.create_task(worker.async_run())
            await asyncio.sleep(0.02 * round_)
            await stop_worker(worker)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            assert worker.pool is None
            del worker, task
            gc.collect()  # an unclosed connection or pipeline is reported here, in this test
            await queue.delete("memarc:test-stop")
    finally:
        await queue.aclose()
