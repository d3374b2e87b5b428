"""The worker's container health check (`memarc worker --check`): arq's heartbeat key, per host."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from shared.projection.jobs import build_worker, check_worker_health, stop_worker


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
