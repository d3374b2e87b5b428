"""What a recall's record costs recall (issue 35 part 1: no more than 10 % of recall p50), side
by side in one run.

The 2,251 BIRD cards imported and projected by the real pipeline (``bench/_archive.py``, Qdrant
Edge). Recalls go through :meth:`shared.archive.cards.Archive.search`, the path of
``POST …/search``, one at a time: each BIRD question (the first :data:`QUESTIONS_USED`, ``search``
mode, top 10) is asked twice in a row, once with its record written (``record=True``, what every
caller gets) and once without (``record=False``), the order alternating from one question to
the next (ABBA), so that the machine's drift falls on both alike. :data:`WARM_UP` questions are
asked first and not counted. The whole sequence runs :data:`ROUNDS` times.

Printed: p50 and p95 of each side, with the number of recalls, the ratio with / without of p50
and p95 (the figure the issue asks for), the median of the paired differences, and the records
written and lost as ``/metrics`` counts them.

Run: ``.venv/bin/python bench/recall_record.py`` (a PostgreSQL superuser URL, see
``bench/_archive.py``; the import and projection take most of its time).
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
from shared.models import SearchRequest  # noqa: E402

QUESTIONS_USED = 200
WARM_UP = 20
ROUNDS = 3


async def main() -> None:
    bench = await build("recall-record", read_cards(bundled_cards()), workspace="bird")
    res = bench.resources
    archive = res.archive()
    principal = Principal(workspace="bird", permissions=frozenset({"memory.read"}),
                          actor="bench")
    questions = [q["question"][:2000] for q in json.loads(BIRD_QUESTIONS.read_text())]
    questions = questions[:QUESTIONS_USED]

    async def timed(query: str, record: bool) -> float:
        t0 = time.perf_counter()
        await archive.search(principal, "bird",
                             SearchRequest(query=query, top=10, mode="search"), record=record)
        return time.perf_counter() - t0

    try:
        for query in questions[:WARM_UP]:
            await timed(query, True)
            await timed(query, False)
        counted = res.metrics.registry.get_sample_value
        written_before = counted("memarc_recall_records_total")
        lost_before = counted("memarc_recall_records_lost_total")
        sides: dict[bool, list[float]] = {True: [], False: []}
        differences: list[float] = []
        for _ in range(ROUNDS):
            for i, query in enumerate(questions):
                order = (True, False) if i % 2 == 0 else (False, True)
                pair = {flag: await timed(query, flag) for flag in order}
                for flag, seconds in pair.items():
                    sides[flag].append(seconds)
                differences.append(pair[True] - pair[False])
        with_record, without = (latency_summary(sides[True], 3),
                                latency_summary(sides[False], 3))
        print(json.dumps({"side": "with the record", **with_record}))
        print(json.dumps({"side": "without the record", **without}))
        print(json.dumps({
            "p50 with/without": round(with_record["p50_ms"] / without["p50_ms"], 3),
            "p95 with/without": round(with_record["p95_ms"] / without["p95_ms"], 3),
            "median paired difference ms": round(statistics.median(differences) * 1000, 3),
            "records written": counted("memarc_recall_records_total") - written_before,
            "records lost": counted("memarc_recall_records_lost_total") - lost_before}))
    finally:
        await bench.close()


if __name__ == "__main__":
    asyncio.run(main())
