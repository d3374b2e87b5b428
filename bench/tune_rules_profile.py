"""Candidate fusion profiles for ``rules`` (default) or ``search`` mode on BIRD clause recall
(a), leave-one-out folds as in ``bench/recall_quality.py``: r@1 / r@5 / MRR@10 of every candidate
on the TUNE and the REPORT databases (choose on TUNE; REPORT is printed to report the choice, not
to make it). Each fold's archive is built once and every candidate runs on it. Run:
``.venv/bin/python bench/tune_rules_profile.py --round 1|2`` (``rules``; round 1: 22 profiles,
about 15 minutes on a busy machine; round 2: 12 profiles around round 1's best), or
``.venv/bin/python bench/tune_rules_profile.py --mode search`` (16 profiles on every clause
pair, clarifications, rules and explained errors, database filter only).
Columns (rules): T/R = TUNE/REPORT, db/ws = database filter or workspace-wide, al/sh = all pairs
or clauses linked by two or more questions. Search: TUNE all, TUNE shared, REPORT all, REPORT
shared, each r@1 / r@5 / MRR, database filter."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench._archive import build  # noqa: E402
from bench.recall_quality import BIRD_REPORT, _database_of, _rank, bird_cards, metrics  # noqa: E402
from shared.index.engine import BM25, DENSE, KEY, KEY_BM25, OWN, OWN_BM25  # noqa: E402
from shared.models import Filters, SearchRequest  # noqa: E402
from shared.recall.fusion import FusionProfile  # noqa: E402
from shared.recall.verified import recall  # noqa: E402
from shared.store import cards as card_store  # noqa: E402


def P(m: str, k: float, d: float, b: float, kb: float, o: float = 0.0, ob: float = 0.0
      ) -> FusionProfile:
    """A profile over (key, dense, bm25, key_bm25, own, own_bm25); a zero weight drops the
    branch."""
    w = {KEY: k, DENSE: d, BM25: b, KEY_BM25: kb, OWN: o, OWN_BM25: ob}
    return FusionProfile(method=m, weights={n: x for n, x in w.items() if x})


#: the candidates of projection format 4 (own-text vectors); format 3's two rounds over the first
#: four branches are summarised in bench/README.md. ``own`` + ``own_bm25`` at (1, 1) is the
#: peers' DBSF / RRF (format 2's text), measured in the same run.
ROUND_1 = {
 "f3 current 1/4/4/4/0/0": P("dbsf", 1, 4, 4, 4),
 "peer dbsf 0/0/0/0/1/1": P("dbsf", 0, 0, 0, 0, 1, 1),
 "peer rrf 0/0/0/0/1/1": P("rrf", 0, 0, 0, 0, 1, 1),
 "dbsf 1/0/0/1/1/1": P("dbsf", 1, 0, 0, 1, 1, 1),
 "rrf 1/0/0/1/1/1": P("rrf", 1, 0, 0, 1, 1, 1),
 "dbsf .5/0/0/.5/1/1": P("dbsf", .5, 0, 0, .5, 1, 1),
 "dbsf 1/0/0/1/2/2": P("dbsf", 1, 0, 0, 1, 2, 2),
 "dbsf 2/0/0/2/1/1": P("dbsf", 2, 0, 0, 2, 1, 1),
 "dbsf 1/0/0/0/1/1": P("dbsf", 1, 0, 0, 0, 1, 1),
 "dbsf 0/0/0/1/1/1": P("dbsf", 0, 0, 0, 1, 1, 1),
 "dbsf .5/0/0/0/1/1": P("dbsf", .5, 0, 0, 0, 1, 1),
 "dbsf 1/.5/.5/1/1/1": P("dbsf", 1, .5, .5, 1, 1, 1),
 "dbsf .5/.5/.5/.5/1/1": P("dbsf", .5, .5, .5, .5, 1, 1),
 "dbsf 0/.5/.5/0/1/1": P("dbsf", 0, .5, .5, 0, 1, 1),
 "dbsf 0/.25/.25/0/1/1": P("dbsf", 0, .25, .25, 0, 1, 1),
 "dbsf 1/1/1/1/1/1": P("dbsf", 1, 1, 1, 1, 1, 1),
 "dbsf 0/0/0/0/1/2": P("dbsf", 0, 0, 0, 0, 1, 2),
 "dbsf 0/0/0/0/2/1": P("dbsf", 0, 0, 0, 0, 2, 1),
 "dbsf .5/0/0/.5/1/2": P("dbsf", .5, 0, 0, .5, 1, 2),
 "dbsf .5/0/0/.5/2/1": P("dbsf", .5, 0, 0, .5, 2, 1),
 "rrf .5/0/0/.5/1/1": P("rrf", .5, 0, 0, .5, 1, 1),
 "dbsf .25/0/0/.25/1/1": P("dbsf", .25, 0, 0, .25, 1, 1),
}
#: the second round, around round 1's best on TUNE (.5/0/0/.5/2/1), with the peers again
ROUND_2 = {
 "peer dbsf 0/0/0/0/1/1": P("dbsf", 0, 0, 0, 0, 1, 1),
 "peer rrf 0/0/0/0/1/1": P("rrf", 0, 0, 0, 0, 1, 1),
 "dbsf .5/0/0/.5/2/1": P("dbsf", .5, 0, 0, .5, 2, 1),
 "dbsf .5/.25/.25/.5/2/1": P("dbsf", .5, .25, .25, .5, 2, 1),
 "dbsf .5/0/.25/.5/2/1": P("dbsf", .5, 0, .25, .5, 2, 1),
 "dbsf .5/0/0/.5/3/1": P("dbsf", .5, 0, 0, .5, 3, 1),
 "dbsf .25/0/0/.25/2/1": P("dbsf", .25, 0, 0, .25, 2, 1),
 "dbsf .5/0/0/.5/2/1.5": P("dbsf", .5, 0, 0, .5, 2, 1.5),
 "dbsf .5/0/0/.5/2/.5": P("dbsf", .5, 0, 0, .5, 2, .5),
 "dbsf .5/0/0/0/2/1": P("dbsf", .5, 0, 0, 0, 2, 1),
 "dbsf 0/0/0/.5/2/1": P("dbsf", 0, 0, 0, .5, 2, 1),
 "dbsf 1/0/0/.5/2/1": P("dbsf", 1, 0, 0, .5, 2, 1),
}
ROUNDS = {"1": ROUND_1, "2": ROUND_2}

#: ``search`` mode (projection format 4), one round: the current profile (chosen on format 3,
#: before ``own`` / ``own_bm25`` existed), the peers on format 2's text (``own`` + ``own_bm25``:
#: dense only, BM25 only, DBSF and RRF at (1, 1)) and candidates that mix the expanded ``dense``
#: (which finds the shared clauses through their linked questions) with the own-text vectors
#: (which find the other clauses), with and without the BM25 branches.
SEARCH = {
 "current dbsf 1/4/4/4/0/0": P("dbsf", 1, 4, 4, 4),
 "peer dense 0/0/0/0/1/0": P("rrf", 0, 0, 0, 0, 1, 0),
 "peer bm25 0/0/0/0/0/1": P("rrf", 0, 0, 0, 0, 0, 1),
 "peer dbsf 0/0/0/0/1/1": P("dbsf", 0, 0, 0, 0, 1, 1),
 "peer rrf 0/0/0/0/1/1": P("rrf", 0, 0, 0, 0, 1, 1),
 "dbsf 1/4/0/4/0/0": P("dbsf", 1, 4, 0, 4),
 "dbsf 1/4/4/4/2/2": P("dbsf", 1, 4, 4, 4, 2, 2),
 "dbsf 1/4/2/4/0/2": P("dbsf", 1, 4, 2, 4, 0, 2),
 "dbsf 1/4/0/4/0/4": P("dbsf", 1, 4, 0, 4, 0, 4),
 "dbsf 1/4/0/4/2/4": P("dbsf", 1, 4, 0, 4, 2, 4),
 "dbsf 0/2/0/0/1/1": P("dbsf", 0, 2, 0, 0, 1, 1),
 "dbsf 0/1/0/0/1/1": P("dbsf", 0, 1, 0, 0, 1, 1),
 "dbsf 0/2/0/1/1/1": P("dbsf", 0, 2, 0, 1, 1, 1),
 "dbsf 0/3/1/1/1/1": P("dbsf", 0, 3, 1, 1, 1, 1),
 "dbsf 0/4/2/2/1/1": P("dbsf", 0, 4, 2, 2, 1, 1),
 "rrf 0/2/0/0/1/1": P("rrf", 0, 2, 0, 0, 1, 1),
}


def _cached(embed_query):
    """``embed_query`` remembering each (text, language): every candidate asks the same query,
    so it is embedded once per fold (the same vectors; the bench measures ranks, not time)."""
    memo: dict = {}

    async def cached(text: str, language: str):
        if (text, language) not in memo:
            memo[(text, language)] = await embed_query(text, language)
        return memo[(text, language)]
    return cached


async def main(cands: dict[str, FusionProfile], mode: str = "rules") -> None:
    cards = bird_cards(); by_key = {c.key: c for c in cards}
    solved = [c for c in cards if c.family == "solved_question"]
    per = defaultdict(lambda: defaultdict(list))
    users = defaultdict(list)
    for x in solved:
        for link in x.links:
            users[link.target].append(x.key)
    # rules: sql_rule pairs, workspace-wide and with the database filter; search: every clause
    # pair, database filter only (the workflow's filter; halves the run)
    scopes = ("ws", "db") if mode == "rules" else ("db",)
    t_all = time.perf_counter()
    for fold in (0, 1):
        kept = {s.key for i, s in enumerate(solved) if i % 2 == fold}
        archive = [c for c in cards if c.family != "solved_question" or c.key in kept]
        t0 = time.perf_counter()
        bench = await build(f"tune_{mode}_fold{fold}", archive)
        res = bench.resources
        res.embedder.embed_query = _cached(res.embedder.embed_query)  # type: ignore[method-assign]
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
                    if mode == "rules" and clause.family != "sql_rule": continue
                    for scope in scopes:
                        database = db if scope == "db" else None
                        req = SearchRequest(query=s.content["question"], top=10, mode=mode,
                                            filters=Filters(database=database) if database else None)
                        for name, prof in cands.items():
                            got = await recall(res.db, res.index, res.embedder, bench.principal, bench.workspace, req, profile=prof)
                            r = _rank(got, ids[clause.key])
                            per[(half, scope, "all")][name].append(r)
                            if len(users[clause.key]) >= 2:
                                per[(half, scope, "shared")][name].append(r)
        finally:
            await bench.close()
        print(f"fold {fold} done at {time.perf_counter()-t_all:.0f}s", flush=True)
    columns = ([(h, sc, k) for h in ("TUNE", "REPORT") for sc, k in
                (("db", "all"), ("ws", "all"), ("db", "shared"))] if mode == "rules" else
               [(h, "db", k) for h in ("TUNE", "REPORT") for k in ("all", "shared")])
    for name in cands:
        row = [name.ljust(24)]
        for half, scope, kind in columns:
            m = metrics(per[(half, scope, kind)][name])
            row.append(f"{half[:1]}{scope}{kind[:2]} n={m['n']} {m['r@1']:.3f} {m['r@5']:.3f} {m['mrr']:.3f}")
        print(" | ".join(row), flush=True)
    print(f"({time.perf_counter()-t_all:.0f} s)", flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("rules", "search"), default="rules",
                    help="which mode's profile to tune (default: rules)")
    ap.add_argument("--round", choices=sorted(ROUNDS), default="2",
                    help="rules mode: which round of candidates (default: the second)")
    args = ap.parse_args()
    asyncio.run(main(SEARCH if args.mode == "search" else ROUNDS[args.round], args.mode))
