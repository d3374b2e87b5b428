"""The similarity floor (issue 34, item 6) on the bundled BIRD workspace: what it costs in recall
and what it marks, chosen on one half of the cases and measured on the other.

1. The 2,251 BIRD cards imported and projected by the real pipeline (``bench/_archive.py``,
   Qdrant Edge); the workspace's derived cases (:func:`shared.evaluation.cases.gather`, with
   their leave-one-out) recalled once each (top 10) through :func:`shared.recall.verified.recall`.
2. The cases split in two by a hash of their key: the floor of each mode is chosen on the
   ``tune`` half with :func:`shared.recall.floor.choose` (the run's rule), and measured on
   the ``held`` half: the share of its expected cards in the top 5 that lie below the floor
   (the cost), r@1 / r@5 with and without ``min_score`` = the floor (results below it left
   out, the ranks of the others moved up), and the share of the other top-5 cards it marks.
3. Questions no BIRD card answers: 300 Spider-Syn training questions (seed 34) from databases
   whose subject is not one of BIRD's (:data:`NEAR_BIRD` are left out), recalled in every mode
   without filters: the share whose first result is below the floor, and whose five first all
   are (an empty answer with ``min_score: "floor"``).
4. The similarity look-up's cost: recalls of the BIRD questions with and without it, alternating.

Run: ``.venv/bin/python bench/score_floor.py`` (a PostgreSQL superuser URL, see
``bench/_archive.py``; about 5 minutes on 2 cores).
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import ROOT, build  # noqa: E402
from shared.auth import Principal  # noqa: E402
from shared.cards_file import bundled_cards, read_cards  # noqa: E402
from shared.evaluation.cases import gather  # noqa: E402
from shared.evaluation.figures import case_rank  # noqa: E402
from shared.recall.floor import TOP_RESULTS, choose  # noqa: E402
from shared.models import SearchRequest, card_id_str  # noqa: E402
from shared.recall.verified import recall  # noqa: E402

SPIDER = ROOT.parent / "shared" / "datasets" / "spider_syn_train" / "train_spider.json.gz"
#: Spider databases whose subject one of BIRD's mini-dev databases shares
NEAR_BIRD = {"formula_1", "soccer_1", "soccer_2", "school_finance", "loan_1", "small_bank_1",
             "customers_card_transactions", "student_1", "college_1", "college_2", "college_3",
             "club_1", "medicine_enzyme_interaction", "hospital_1", "protein_institute"}
MODES = ("solved", "search", "rules")


def half(key: str) -> str:
    return "tune" if hashlib.sha256(key.encode()).digest()[0] % 2 == 0 else "held"


def rank_above(results: list[dict[str, Any]], case: Any, limit: float | None) -> int | None:
    kept = [r["id"] for r in results if limit is None or r["sim"] is None or r["sim"] >= limit]
    return case_rank(case, kept)


async def main() -> None:
    bench = await build("floor", read_cards(bundled_cards()), workspace="bird")
    res = bench.resources
    principal = Principal(workspace="bird", permissions=frozenset({"memory.read"}), actor="bench")

    async def ask(query: str, mode: str, filters: Any = None, stand_in: Any = None,
                  top: int = 10) -> list[dict[str, Any]]:
        got = await recall(res.db, res.index, res.embedder, principal, "bird",
                           SearchRequest(query=query[:2000], top=top, mode=mode, filters=filters),
                           privacy=res.privacy, stand_in=stand_in)
        return [{"id": r.card.id, "sim": r.similarity} for r in got.results]

    try:
        async with res.db.transaction("bird") as conn:
            cases, _ = await gather(conn)
        started = time.perf_counter()
        rows = []
        for case in cases:
            rows.append((case, await ask(case.question, case.mode, case.filters, case.stand_in)))
        print(json.dumps({"cases": len(cases), "recall_seconds": round(time.perf_counter() - started, 1)}))
        floors: dict[str, float | None] = {}
        report: dict[str, Any] = {}
        for mode in MODES:
            samples: dict[str, dict[str, list[float]]] = {"tune": {"e": [], "o": []},
                                                           "held": {"e": [], "o": []}}
            for case, results in rows:
                if case.mode != mode:
                    continue
                expected = {card_id_str(e) for e in case.expected}
                for r in results[:TOP_RESULTS]:
                    if r["sim"] is not None:
                        samples[half(case.key)]["e" if r["id"] in expected else "o"].append(r["sim"])
            chosen = choose(samples["tune"]["e"], samples["tune"]["o"])
            floors[mode] = floor = chosen["floor"]
            held = [(c, r) for c, r in rows if c.mode == mode and half(c.key) == "held"]
            he, ho = samples["held"]["e"], samples["held"]["o"]

            def at(k: int, limit: float | None) -> float:
                hits = sum(1 for c, r in held if (x := rank_above(r, c, limit)) is not None and x <= k)
                return round(hits / max(1, len(held)), 4)

            report[mode] = {
                "floor (tune half)": floor, "tune expected": chosen["expected"],
                "held cases": len(held), "held expected in top 5": len(he),
                "held expected below floor": round(sum(1 for s in he if floor is not None and s < floor) / max(1, len(he)), 4),
                "held others below floor": round(sum(1 for s in ho if floor is not None and s < floor) / max(1, len(ho)), 4),
                "held expected sim p10/p50": [round(statistics.quantiles(he, n=10)[0], 3), round(statistics.median(he), 3)] if len(he) > 10 else None,
                "held others sim p50/p90": [round(statistics.median(ho), 3), round(statistics.quantiles(ho, n=10)[-1], 3)] if len(ho) > 10 else None,
                "held r@1 / r@5": [at(1, None), at(5, None)],
                "held r@1 / r@5 with min_score=floor": [at(1, floor), at(5, floor)],
            }
        # questions that no BIRD card answers
        spider = [q for q in json.load(gzip.open(SPIDER)) if q["db_id"] not in NEAR_BIRD]
        picked = random.Random(34).sample(spider, 300)
        for mode in MODES:
            floor = floors[mode]
            first_below = all_below = 0
            firsts = []
            for q in picked:
                results = await ask(q["SpiderSynQuestion"], mode, top=TOP_RESULTS)
                sims = [r["sim"] for r in results if r["sim"] is not None]
                if sims:
                    firsts.append(sims[0])
                if floor is not None and sims and sims[0] < floor:
                    first_below += 1
                if floor is not None and all(s < floor for s in sims):
                    all_below += 1
            report[mode]["unanswerable: first below floor"] = round(first_below / len(picked), 4)
            report[mode]["unanswerable: all 5 below floor"] = round(all_below / len(picked), 4)
            report[mode]["unanswerable first sim p50/p90"] = [round(statistics.median(firsts), 3), round(statistics.quantiles(firsts, n=10)[-1], 3)]
        for mode, figures in report.items():
            print(json.dumps({"mode": mode, **figures}))
        # the look-up's cost: the same recalls with and without it, alternating
        questions = [c.question for c, _ in rows if c.mode == "search"][:200]
        real = res.index.dense_scores
        times: dict[str, list[float]] = {"with": [], "without": []}

        async def nothing(*args: Any, **kwargs: Any) -> dict:
            return {}

        for i, q in enumerate(questions):
            for label in (("with", "without") if i % 2 == 0 else ("without", "with")):
                res.index.dense_scores = real if label == "with" else nothing  # type: ignore[method-assign]
                t0 = time.perf_counter()
                await ask(q, "search")
                times[label].append(time.perf_counter() - t0)
        res.index.dense_scores = real  # type: ignore[method-assign]
        p50 = {k: statistics.median(v) * 1000 for k, v in times.items()}
        print(json.dumps({"recall p50 ms with look-up": round(p50["with"], 2),
                          "without": round(p50["without"], 2),
                          "ratio": round(p50["with"] / p50["without"], 3), "recalls": len(questions)}))
    finally:
        await bench.close()


if __name__ == "__main__":
    asyncio.run(main())
