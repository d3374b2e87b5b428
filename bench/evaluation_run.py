"""A recall evaluation of the bundled BIRD workspace (issue 34): its time and figures, and the
Edge filter change it needed, measured side by side in one run.

1. The 2,251 BIRD cards imported and projected by the real pipeline (``bench/_archive.py``,
   Qdrant Edge), then one evaluation run (:func:`shared.evaluation.run.execute`, the worker's
   code): seconds, recalls, the stage times and the figures per mode and source; then the same
   cases with the peers' fusion in every mode (``dense only``, ``BM25 only``, ``RRF k=60`` of
   the two, as ``recall_quality.py`` names them), in the same run on the same index.
2. The database filter of Qdrant Edge before and after this change (the nested condition with
   ``IsEmpty("deps")``; the flat ``deps[].database`` match with ``IsEmpty("deps[].database")``):
   the median of a 4-branch filtered hybrid query over the BIRD questions with their database,
   both forms on the same queries, alternating, with the ratio, and a check that both return the
   same hits in the same order.

Run: ``.venv/bin/python bench/evaluation_run.py`` (a PostgreSQL superuser URL, see
``bench/_archive.py``; about 5 minutes on 2 cores).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import ROOT, build  # noqa: E402
from shared.cards_file import bundled_cards, read_cards  # noqa: E402
from shared.evaluation.run import execute  # noqa: E402
from shared.index import edge  # noqa: E402
from shared.index.engine import BM25, DENSE, IndexFilter  # noqa: E402
from shared.recall.fusion import FusionProfile  # noqa: E402
from shared.store import evaluations  # noqa: E402

PEERS = {"dense only": FusionProfile(method="rrf", weights={DENSE: 1.0}),
         "BM25 only": FusionProfile(method="rrf", weights={BM25: 1.0}),
         "RRF k=60": FusionProfile(method="rrf", weights={DENSE: 1.0, BM25: 1.0})}
QUESTIONS = ROOT.parent / "shared" / "datasets" / "bird_minidev" / "mini_dev_postgresql.json"


def _old_edge_filter(flt: IndexFilter):  # the form before this change, for the comparison
    import qdrant_edge as qe

    must = []
    if flt.families:
        must.append(qe.FieldCondition(key="family", match=qe.MatchAny(list(flt.families))))
    levels = [(n, v) for n, v in zip(("database", "schema", "table", "column"), flt.physical)
              if v is not None]
    if levels:
        entry = qe.Filter(must=[qe.Filter(should=[qe.FieldCondition(key=n, match=qe.MatchValue(v)),
                                                  qe.IsNullCondition(n)]) for n, v in levels])
        must.append(qe.Filter(should=[qe.IsEmptyCondition("deps"), qe.NestedCondition("deps", entry)]))
    return qe.Filter(must=must or None)


async def main() -> None:
    bench = await build("evaluation", read_cards(bundled_cards()), workspace="bird")
    res = bench.resources
    try:
        run_id = uuid.uuid4()
        async with res.db.transaction("bird") as conn:
            await evaluations.run_insert(conn, run_id, "bird", "manual", "bench")
        started = time.perf_counter()
        row = await execute(res.db, res.index, res.embedder, "bird", run_id, privacy=res.privacy)
        seconds = time.perf_counter() - started
        summary = row["figures"]
        print(json.dumps({"evaluation_seconds": round(seconds, 1), "cases": row["total"],
                          "recalls": summary["recalls"], "stage_seconds": summary["stage_seconds"],
                          "misses": len(row["misses"] or [])}))
        table = {"production": summary["figures"]}
        for name, peer in PEERS.items():
            peer_run = uuid.uuid4()
            async with res.db.transaction("bird") as conn:
                await evaluations.run_insert(conn, peer_run, "bird", "manual", "bench")
            got = await execute(res.db, res.index, res.embedder, "bird", peer_run,
                                profiles={m: peer for m in ("solved", "search", "rules")},
                                privacy=res.privacy)
            table[name] = got["figures"]["figures"]
        print("| mode | source | cases | configuration | r@1 | r@3 | r@5 | MRR |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for i, f in enumerate(summary["figures"]):
            for name, figs in table.items():
                g = figs[i]
                print(f"| {f['mode']} | {f['source']} | {f['cases']} | {name} | {g['r1']:.3f} "
                      f"| {g['r3']:.3f} | {g['r5']:.3f} | {g['mrr']:.3f} |")

        questions = json.loads(QUESTIONS.read_text())[:100]
        new_filter = edge._edge_filter
        times: dict[str, list[float]] = {"before": [], "after": []}
        same = 0
        families = ("domain_clarification", "sql_rule", "explained_error")
        for q in questions:
            dense, sparse = await res.embedder.embed_query(q["question"], "en")
            flt = IndexFilter(families=families, physical=(q["db_id"], None, None, None))
            got = {}
            for name, form in (("before", _old_edge_filter), ("after", new_filter)):
                edge._edge_filter = form
                t0 = time.perf_counter()
                hits = await res.index.hybrid_query("bird", dense, sparse, flt, 30,
                                                    dense_names=("dense", "key"),
                                                    sparse_names=("bm25", "key_bm25"))
                times[name].append(time.perf_counter() - t0)
                got[name] = {b: [h.id for h in v] for b, v in hits.items()}
            edge._edge_filter = new_filter
            same += got["before"] == got["after"]
        before, after = (statistics.median(times[k]) * 1000 for k in ("before", "after"))
        print(json.dumps({"filtered_query_ms_before": round(before, 2),
                          "filtered_query_ms_after": round(after, 2),
                          "ratio_after_to_before": round(after / before, 3),
                          "identical_rankings": f"{same}/{len(questions)}"}))
    finally:
        await bench.close()


if __name__ == "__main__":
    asyncio.run(main())
