"""What an evaluation run costs other users' recalls (issue 34, "Keep": no more than the same
number of ordinary recalls would), side by side in one run.

The 2,251 BIRD cards imported and projected by the real pipeline (``bench/_archive.py``, Qdrant
Edge). A probe (one recall at a time: the BIRD questions in ``search`` mode, top 10, in a loop)
measures recall latency in three phases of the same process:

1. ``idle``: the probe alone, for :data:`IDLE_SECONDS`;
2. ``evaluation``: while one evaluation run of the workspace executes
   (:func:`shared.evaluation.run.execute`, the worker's code, two recalls at a time);
3. ``ordinary``: while the same number of ordinary recalls as that run made (its ``recalls``)
   run two at a time through :func:`shared.recall.verified.recall`, the run's own questions and
   modes in its order, without the leave-one-out.

Printed: each phase's probe p50/p95 and count, and the load's wall time; the ratio
``evaluation / ordinary`` of the probe's p50 and p95 is the figure the issue asks for.

Run: ``.venv/bin/python bench/evaluation_load.py`` (a PostgreSQL superuser URL, see
``bench/_archive.py``; about 6 minutes on 2 cores).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import BIRD_QUESTIONS, build, latency_summary  # noqa: E402
from shared.auth import Principal  # noqa: E402
from shared.cards_file import bundled_cards, read_cards  # noqa: E402
from shared.evaluation.cases import gather  # noqa: E402
from shared.evaluation.run import CONCURRENCY, FIRST_TOP, execute  # noqa: E402
from shared.models import SearchRequest  # noqa: E402
from shared.recall.verified import recall  # noqa: E402
from shared.store import evaluations  # noqa: E402

IDLE_SECONDS = 30.0


async def main() -> None:
    bench = await build("evaluation-load", read_cards(bundled_cards()), workspace="bird")
    res = bench.resources
    principal = Principal(workspace="bird", permissions=frozenset({"memory.read"}), actor="bench")
    questions = [q["question"] for q in json.loads(BIRD_QUESTIONS.read_text())][:200]

    async def one(query: str, mode: str = "search", filters=None) -> None:
        await recall(res.db, res.index, res.embedder, principal, "bird",
                     SearchRequest(query=query[:2000], top=FIRST_TOP, mode=mode, filters=filters),
                     privacy=res.privacy)

    async def probe(stop: asyncio.Event, out: list[float]) -> None:
        i = 0
        while not stop.is_set():
            t0 = time.perf_counter()
            await one(questions[i % len(questions)])
            out.append(time.perf_counter() - t0)
            i += 1

    async def phase(load) -> tuple[list[float], float]:
        stop, out = asyncio.Event(), []
        task = asyncio.create_task(probe(stop, out))
        t0 = time.perf_counter()
        await load()
        wall = time.perf_counter() - t0
        stop.set()
        await task
        return out, wall

    try:
        report = {}
        got, _ = await phase(lambda: asyncio.sleep(IDLE_SECONDS))
        report["idle"] = latency_summary(got)

        run_id = uuid.uuid4()
        async with res.db.transaction("bird") as conn:
            await evaluations.run_insert(conn, run_id, "bird", "manual", "bench")
        row: dict = {}

        async def evaluate() -> None:
            row.update(await execute(res.db, res.index, res.embedder, "bird", run_id,
                                     privacy=res.privacy))

        got, wall = await phase(evaluate)
        recalls = row["figures"]["recalls"]
        report["evaluation"] = {**latency_summary(got), "load_seconds": round(wall, 1),
                                "load_recalls": recalls}

        async with res.db.transaction("bird") as conn:
            cases, _ = await gather(conn)
        asks = [(c.question, c.mode, c.filters) for c in cases]
        asks = (asks * (recalls // max(1, len(asks)) + 1))[:recalls]

        async def ordinary() -> None:
            for at in range(0, len(asks), CONCURRENCY):
                await asyncio.gather(*(one(q, m, f) for q, m, f in asks[at:at + CONCURRENCY]))

        got, wall = await phase(ordinary)
        report["ordinary"] = {**latency_summary(got), "load_seconds": round(wall, 1),
                              "load_recalls": len(asks)}
        for name, figures in report.items():
            print(json.dumps({"phase": name, **figures}))
        e, o = report["evaluation"], report["ordinary"]
        print(json.dumps({"probe p50 evaluation/ordinary": round(e["p50_ms"] / o["p50_ms"], 3),
                          "probe p95 evaluation/ordinary": round(e["p95_ms"] / o["p95_ms"], 3),
                          "load seconds evaluation/ordinary":
                              round(e["load_seconds"] / o["load_seconds"], 3)}))
    finally:
        await bench.close()


if __name__ == "__main__":
    asyncio.run(main())
