"""What the query adapter (issue 42, ``shared/recall/adapter.py``) costs a recall: the bundled
BIRD workspace imported and projected, one adapter trained on all its solved questions (as
``bench/query_adapter.py`` trains a fold's), then the BIRD mini-dev questions recalled in
``search`` mode (top 10, their database as filter) through :func:`shared.recall.verified.recall`,
each twice in alternating order, with and without the adapter; the p50 and p95 of each and the
median of the paired ratios, measured side by side in one run.

Run: ``.venv/bin/python bench/adapter_latency.py`` (about 5 minutes on 2 cores).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import BIRD_QUESTIONS, build, latency_summary  # noqa: E402
from shared.auth import Principal  # noqa: E402
from shared.cards_file import bundled_cards, read_cards  # noqa: E402
from bench.query_adapter import training_material  # noqa: E402
from shared.models import Filters, SearchRequest  # noqa: E402
from shared.recall.adapter import train  # noqa: E402
from shared.recall.verified import recall  # noqa: E402

QUESTIONS = 200


async def main() -> None:
    bench = await build("adapter_latency", read_cards(bundled_cards()), workspace="bird")
    res = bench.resources
    try:
        _, cards, _, links, solved, vectors = await training_material(res)
        keys = [i for i, k in enumerate(solved) if links[k]]
        vectors = vectors[keys]
        adapter = train(vectors, [links[solved[i]] for i in keys], cards)
        principal = Principal(workspace="bird", permissions=frozenset({"memory.read"}),
                              actor="bench")
        asked = json.loads(BIRD_QUESTIONS.read_text())[:QUESTIONS]
        times: dict[str, list[float]] = {"without": [], "with": []}
        ratios = []
        for i, q in enumerate(asked):
            req = SearchRequest(query=q["question"], top=10, mode="search",
                                filters=Filters(database=q["db_id"]))
            order = ("without", "with") if i % 2 == 0 else ("with", "without")
            got = {}
            for name in order:
                t0 = time.perf_counter()
                await recall(res.db, res.index, res.embedder, principal, "bird", req,
                             adapter=adapter if name == "with" else None)
                got[name] = time.perf_counter() - t0
                times[name].append(got[name])
            ratios.append(got["with"] / got["without"])
        print(json.dumps({"adapter_steps": adapter.steps, "training_pairs": adapter.pairs,
                          "without": latency_summary(times["without"]),
                          "with": latency_summary(times["with"]),
                          "p50_ratio_with_to_without": round(
                              statistics.median(times["with"]) / statistics.median(times["without"]), 3),
                          "median_paired_ratio": round(statistics.median(ratios), 3)}))
    finally:
        await bench.close()


if __name__ == "__main__":
    asyncio.run(main())
