"""How long the curation reports take on the bundled BIRD workspace (issue 35 part 3).

The 2,251 BIRD cards imported and projected by the real pipeline (``bench/_archive.py``), then,
through :class:`shared.archive.reports.Reports` (the path of ``GET …/memory/reports/…``):

- the conflicts report computed from nothing (every current card's stored ``key`` vector
  searched among the cards of its family in the workspace's index), :data:`ROUNDS` times on a
  fresh ``Reports`` each, and then its cached pages (the answer while nothing changed);
- the never-recalled, unhelpful and stale-dependencies reports, over :data:`RECORDS` recall
  records of 10 cards each (seeded as the database owner, spread over 60 days) and feedback on
  a tenth of them.

Printed: the seconds of each (median of the rounds), the cards compared and the pairs found by
kind, and the first pairs (family, kind, similarity, the two titles) to look at.

Run: ``.venv/bin/python bench/conflicts_report.py`` (a PostgreSQL superuser URL, see
``bench/_archive.py``; the import and projection take most of its time).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import build  # noqa: E402
from shared.archive.reports import Reports  # noqa: E402
from shared.cards_file import bundled_cards, read_cards  # noqa: E402
from shared.store.listing import ListQuery  # noqa: E402

ROUNDS = 3
RECORDS = 20_000


def _seed(url: str, workspace: str) -> None:
    """:data:`RECORDS` recall records of the workspace over 60 days, 10 random cards each, and a
    verdict on a card of every tenth."""
    rng = random.Random(35)
    with psycopg.connect(url) as conn:
        ids = [r[0] for r in conn.execute("SELECT id FROM memory.cards").fetchall()]
        with conn.cursor() as cur:
            records = []
            for i in range(RECORDS):
                rid, picked = uuid.uuid4(), rng.sample(ids, 10)
                records.append((rid, picked))
                cur.execute(
                    "INSERT INTO memory.recall_records (id, workspace_id, actor, mode, top, "
                    "query_digest, card_ids, scores, excluded, timings, created_at) VALUES "
                    "(%s, %s, 'bench', 'search', 10, %s, %s, %s, 0, '{}', "
                    "now() - make_interval(secs => %s))",
                    [rid, workspace, "sha256:" + "0" * 64, picked, [0.1] * 10,
                     rng.uniform(0, 60 * 86400)])
            for rid, picked in records[::10]:
                cur.execute("INSERT INTO memory.recall_feedback (workspace_id, recall_id, "
                            "card_id, actor, verdict, via) VALUES (%s, %s, %s, 'bench', %s, "
                            "'api')", [workspace, rid, picked[0],
                                       rng.choice(["helpful", "not_helpful", "wrong"])])
        conn.execute("ANALYZE memory.recall_records")


async def _timed(call) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = await call
    return time.perf_counter() - t0, out


async def main() -> None:
    bench = await build("conflicts-report", read_cards(bundled_cards()), workspace="bird")
    archive, principal = bench.archive, bench.principal
    try:
        cold = []
        for _ in range(ROUNDS):
            reports = Reports(archive.db, archive.index, archive.embedder)
            seconds, page = await _timed(reports.conflicts(principal, "bird", ListQuery()))
            cold.append(seconds)
        warm = [(await _timed(reports.conflicts(principal, "bird", ListQuery(page=p))))[0]
                for p in (1, 2, 3)]
        kinds: dict[str, int] = {}
        everything = await reports.conflicts(principal, "bird", ListQuery(per_page=100))
        for p in range(1, -(-everything.total // 100) + 1):
            for pair in (await reports.conflicts(principal, "bird",
                                                 ListQuery(page=p, per_page=100))).pairs:
                kinds[f"{pair.family} {pair.kind}"] = kinds.get(f"{pair.family} {pair.kind}", 0) + 1
        print(json.dumps({"report": "conflicts", "cards compared": page.compared,
                          "pairs": page.total, "by family and kind": kinds,
                          "computed s (median)": round(statistics.median(cold), 3),
                          "computed s (each)": [round(s, 3) for s in cold],
                          "cached page s (median)": round(statistics.median(warm), 4)}))
        for pair in page.pairs[:8]:
            print(json.dumps({"family": pair.family, "kind": pair.kind,
                              "similarity": pair.similarity, "a": pair.a.title[:70],
                              "b": pair.b.title[:70], "why": pair.why}))
        _seed(bench.db_url, "bird")
        for name, call in (
                ("never-recalled", lambda: archive.reports.never_recalled(
                    principal, "bird", ListQuery(), 30)),
                ("unhelpful", lambda: archive.reports.unhelpful(
                    principal, "bird", ListQuery(), 30)),
                ("stale-dependencies", lambda: archive.reports.stale_dependencies(
                    principal, "bird", ListQuery(), 30))):
            times, total = [], 0
            for _ in range(ROUNDS):
                seconds, result = await _timed(call())
                times.append(seconds)
                total = result.total
            print(json.dumps({"report": name, "recall records": RECORDS, "listed": total,
                              "s (median)": round(statistics.median(times), 3)}))
    finally:
        await bench.close()


if __name__ == "__main__":
    asyncio.run(main())
