"""Candidate fusion profiles for ``rules`` mode on BIRD clause recall (a), leave-one-out folds as
in ``bench/recall_quality.py``: r@1 / r@5 / MRR@10 of every candidate on the TUNE and the REPORT
databases (choose on TUNE; REPORT is printed to report the choice, not to make it). Run:
``.venv/bin/python bench/tune_rules_profile.py`` (about 5 minutes: two archives, 15 profiles).
Columns: T/R = TUNE/REPORT, db/ws = database filter or workspace-wide, al/sh = all pairs or
clauses linked by two or more questions."""

from __future__ import annotations

import asyncio
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._archive import build  # noqa: E402
from bench.recall_quality import BIRD_REPORT, _database_of, _rank, bird_cards, metrics  # noqa: E402
from shared.index.engine import BM25, DENSE, KEY, KEY_BM25  # noqa: E402
from shared.models import Filters, SearchRequest  # noqa: E402
from shared.recall.fusion import FusionProfile  # noqa: E402
from shared.recall.verified import recall  # noqa: E402
from shared.store import cards as card_store  # noqa: E402


def P(m: str, k: float, d: float, b: float, kb: float) -> FusionProfile:
    """A profile over (key, dense, bm25, key_bm25)."""
    return FusionProfile(method=m, weights={KEY: k, DENSE: d, BM25: b, KEY_BM25: kb})


#: the second round of candidates (the first round, with key weight 0 and RRF variants, is
#: summarised in bench/README.md)
CANDS = {
 "current dbsf 1/4/4/4": P("dbsf",1,4,4,4), "dbsf 1/1/1/1": P("dbsf",1,1,1,1),
 "dbsf 1/0/0/1": P("dbsf",1,0,0,1), "rrf 1/0/0/1": P("rrf",1,0,0,1),
 "dbsf 2/1/1/2": P("dbsf",2,1,1,2), "dbsf 4/1/1/4": P("dbsf",4,1,1,4), "rrf 2/1/1/2": P("rrf",2,1,1,2),
 "dbsf 1/.5/.5/1": P("dbsf",1,.5,.5,1), "dbsf 1/0/1/1": P("dbsf",1,0,1,1), "dbsf 1/1/0/1": P("dbsf",1,1,0,1),
 "dbsf 1/0/0/0": P("dbsf",1,0,0,0), "dbsf 0/0/0/1": P("dbsf",0,0,0,1), "dbsf 2/1/1/1": P("dbsf",2,1,1,1),
 "dbsf 1/1/1/2": P("dbsf",1,1,1,2), "rrf 2/1/1/1": P("rrf",2,1,1,1),
}



async def main() -> None:
    cards = bird_cards(); by_key = {c.key: c for c in cards}
    solved = [c for c in cards if c.family == "solved_question"]
    per = defaultdict(lambda: defaultdict(list))
    users = defaultdict(list)
    for x in solved:
        for link in x.links:
            users[link.target].append(x.key)
    for fold in (0, 1):
        kept = {s.key for i, s in enumerate(solved) if i % 2 == fold}
        archive = [c for c in cards if c.family != "solved_question" or c.key in kept]
        t0 = time.perf_counter()
        bench = await build(f"tune_rules_fold{fold}", archive)
        res = bench.resources
        async with res.db.transaction(bench.workspace, read_only=True) as conn:
            stored = await card_store.get_many(conn, list(await card_store.revisions(conn)))
        ids = {c.source.record: c.id for c in stored.values() if c.source and c.source.record}
        print(f"fold {fold} built in {time.perf_counter()-t0:.0f}s", flush=True)
        try:
            for s in solved:
                if s.key in kept: continue
                db = _database_of(s); half = "REPORT" if db in BIRD_REPORT else "TUNE"
                for link in s.links:
                    clause = by_key[link.target]
                    if clause.family != "sql_rule": continue
                    for scope, database in (("ws", None), ("db", db)):
                        req = SearchRequest(query=s.content["question"], top=10, mode="rules",
                                            filters=Filters(database=database) if database else None)
                        for name, prof in CANDS.items():
                            got = await recall(res.db, res.index, res.embedder, bench.principal, bench.workspace, req, profile=prof)
                            r = _rank(got, ids[clause.key])
                            per[(half, scope, "all")][name].append(r)
                            if len(users[clause.key]) >= 2:
                                per[(half, scope, "shared")][name].append(r)
        finally:
            await bench.close()
    for name in CANDS:
        row = [name.ljust(22)]
        for half in ("TUNE", "REPORT"):
            for scope, kind in (("db", "all"), ("ws", "all"), ("db", "shared")):
                m = metrics(per[(half, scope, kind)][name])
                row.append(f"{half[:1]}{scope}{kind[:2]} n={m['n']} {m['r@1']:.3f} {m['r@5']:.3f} {m['mrr']:.3f}")
        print(" | ".join(row), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
