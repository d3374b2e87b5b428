"""``/healthz`` and recall latency while long cards are projected, next to an idle archive
(issue 25, case 2).

One process composes the writer (uvicorn on loopback) and the projection in one event loop, as
``memarc up`` does (the worker's job is :func:`~shared.projection.project.project_operations`,
run here directly: no Redis needed). A client thread asks ``GET /healthz`` and a recall
(``POST .../memory/search``, top 10) in turn, first on the idle archive, then while ``--cards``
long cards (~120,000 characters each) are projected, then idle again. The machine is shared, so
absolute times mean little: the figures are the ratios busy / idle of the same run.

``--on-loop`` builds the documents on the event loop, as the code did before
:mod:`shared.projection.offload` (the "before" figures, in the same run when both are asked:
``--mode both``, the default).

Run: ``.venv/bin/python bench/loop_latency.py [--cards 30] [--idle-seconds 10] [--mode both]``
(PostgreSQL as in ``bench/_archive.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bench._archive import admin_url, build  # noqa: E402
from shared.models import ImportCard  # noqa: E402
from shared.projection import offload  # noqa: E402
from shared.projection.project import project_operations  # noqa: E402
from shared.store.bootstrap import create_token  # noqa: E402
from test_loop_latency import long_card  # noqa: E402
from writer.app import create_app  # noqa: E402

QUERIES = ("orders shipped late by region", "how is the invoice total computed",
           "elder users age over 65", "returned orders with null status")


def short_cards(n: int) -> list[ImportCard]:
    """``n`` short rules for recall to find."""
    return [ImportCard(key=f"short-{i}", family="sql_rule", title=f"Rule {i} on orders",
                       content={"rule": f"Rule {i}: {QUERIES[i % len(QUERIES)]} uses the "
                                        f"orders table, column c{i}."}) for i in range(n)]


def long_cards(n: int, offset: int) -> list[ImportCard]:
    """``n`` explained errors of ~120,000 characters (as the test's)."""
    out = []
    for i in range(offset, offset + n):
        body = long_card(i)
        out.append(ImportCard(key=f"long-{i}", family=body["family"], title=body["title"],
                              content=body["content"]))
    return out


class Sampler:
    """A client thread asking /healthz and a recall in turn until stopped."""

    def __init__(self, url: str, token: str, workspace: str) -> None:
        self.url, self.workspace = url, workspace
        self.headers = {"Authorization": f"Bearer {token}"}
        self.samples: dict[str, list[float]] = {"healthz": [], "recall": []}
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=300) as client:
            i = 0
            while not self.stop.is_set():
                self._timed(client, "healthz", "GET", "/healthz")
                self._timed(client, "recall", "POST",
                            f"/api/workspaces/{self.workspace}/memory/search",
                            json={"query": QUERIES[i % len(QUERIES)], "top": 10})
                i += 1
                time.sleep(0.05)

    def _timed(self, client: httpx.Client, name: str, method: str, path: str, **kw: Any) -> None:
        started = time.perf_counter()
        response = client.request(method, self.url + path, headers=self.headers, **kw)
        self.samples[name].append(time.perf_counter() - started)
        response.raise_for_status()


def summary(values: list[float]) -> dict[str, float]:
    """p50, p95 and max (seconds) of ``values``."""
    s = sorted(values)
    return {"n": len(s), "p50": s[len(s) // 2], "p95": s[min(len(s) - 1, int(len(s) * 0.95))],
            "max": s[-1]}


async def sample(url: str, token: str, workspace: str, work: Any) -> dict[str, list[float]]:
    """Latencies sampled while ``work`` (an awaitable) runs."""
    sampler = Sampler(url, token, workspace)
    thread = threading.Thread(target=sampler.run)
    thread.start()
    try:
        await work
    finally:
        sampler.stop.set()
        await asyncio.to_thread(thread.join)
    return sampler.samples


async def project_all(resources: Any, workspace: str) -> float:
    """Project every pending operation, as the worker's jobs do; returns seconds taken."""
    started = time.perf_counter()
    while (await project_operations(resources.db, resources.index, resources.embedder,
                                    workspace, None)).leased:
        pass
    return time.perf_counter() - started


async def measure(bench: Any, url: str, token: str, cards: int, idle: float, offset: int
                  ) -> dict[str, Any]:
    """Idle, busy (``cards`` long cards projected), idle again: latencies and ratios."""
    ws = bench.workspace
    before = await sample(url, token, ws, asyncio.sleep(idle))
    await bench.archive.transfer.import_cards(bench.principal, ws, long_cards(cards, offset))
    task = asyncio.ensure_future(project_all(bench.resources, ws))
    busy = await sample(url, token, ws, task)
    after = await sample(url, token, ws, asyncio.sleep(idle))
    out: dict[str, Any] = {"projection_seconds": task.result()}
    for name in ("healthz", "recall"):
        quiet, loaded = summary(before[name] + after[name]), summary(busy[name])
        out[name] = {"idle": quiet, "busy": loaded,
                     "ratio": {k: loaded[k] / quiet[k] for k in ("p50", "p95", "max")}}
    return out


async def on_loop_documents(cards: list[Any], privacy: Any, linked: Any = None) -> list[Any]:
    """The old way: the documents built on the event loop."""
    return offload.documents_sync(cards, privacy, linked or {})


def report(mode: str, figures: dict[str, Any]) -> None:
    print(f"\n{mode}: projection of the long cards took {figures['projection_seconds']:.1f} s")
    print(f"{'':8} {'':5} {'n':>5} {'p50 ms':>9} {'p95 ms':>9} {'max ms':>9}")
    for name in ("healthz", "recall"):
        for phase in ("idle", "busy"):
            f = figures[name][phase]
            print(f"{name:8} {phase:5} {f['n']:5d} {f['p50'] * 1e3:9.1f} {f['p95'] * 1e3:9.1f} "
                  f"{f['max'] * 1e3:9.1f}")
        r = figures[name]["ratio"]
        print(f"{name:8} {'ratio':5} {'':5} {r['p50']:9.1f} {r['p95']:9.1f} {r['max']:9.1f}")


async def main() -> None:
    import uvicorn

    from helpers import free_port

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cards", type=int, default=30)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--mode", choices=("offloaded", "on-loop", "both"), default="both")
    args = parser.parse_args()
    logging.getLogger("httpx").setLevel(logging.WARNING)
    bench = await build("loop_latency", short_cards(40))
    token = create_token(bench.db_url, "memory", bench.workspace, ["memory.read"])["token"]
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(bench.resources.settings, bench.resources),
                                           host="127.0.0.1", port=port, log_level="warning"))
    serving = asyncio.ensure_future(server.serve())
    while not server.started:
        await asyncio.sleep(0.02)
    url = f"http://127.0.0.1:{port}"
    modes = ("on-loop", "offloaded") if args.mode == "both" else (args.mode,)
    try:
        for n, mode in enumerate(modes):
            original = offload.documents
            if mode == "on-loop":
                offload.documents = on_loop_documents  # type: ignore[assignment]
            try:
                figures = await measure(bench, url, token, args.cards, args.idle_seconds,
                                        n * args.cards)
            finally:
                offload.documents = original  # type: ignore[assignment]
            report(mode, figures)
    finally:
        server.should_exit = True
        await serving
        await bench.close()
        print(f"\n(cpus: {os.cpu_count()}, database: {admin_url().rsplit('@', 1)[-1]})")


if __name__ == "__main__":
    asyncio.run(main())
