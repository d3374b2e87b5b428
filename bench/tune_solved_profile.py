"""Candidate fusion profiles for ``solved`` mode on Spider-Syn train, TUNE databases only (the
sorted db_ids at even positions, as in ``bench/recall_quality.py``; REPORT is never queried
here). The archive (all 140 databases, product projection, plus the peer index of format 2's
text) is built once; each candidate is then run through the same verified recall as
``POST /search`` on an evenly spread sample of the TUNE queries, with the question's database as
filter (``db``) and workspace-wide (``ws``). Run:
``MEMARC_BENCH_PREFIX=<name>_ .venv/bin/python bench/tune_solved_profile.py [--queries 600]``
(21 candidates of ``--round 1`` on 600 queries: about 25 minutes on a busy two-core machine,
of which about 8 build the archive). Each query's embedding and per-branch index hits are
computed once and shared by the candidates (``bench.recall_quality.QueryCache``).
Columns: r@1 / r@5 / MRR@10 per (kind, scope); kind ``syn`` = human synonym rewording, ``orig``
= the group's other original wordings. Choose on ``syn db`` r@1, then ``syn ws`` r@1, then MRR.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.recall_quality import QueryCache, _rank, compared, metrics, spider_cards  # noqa: E402
from shared.index.engine import BM25, DENSE, KEY, KEY_BM25  # noqa: E402
from shared.models import Filters, SearchRequest  # noqa: E402
from shared.recall.fusion import FusionProfile  # noqa: E402
from shared.recall.profiles import MODE_PROFILES  # noqa: E402
from shared.recall.verified import recall  # noqa: E402

PEER = "peer "  # a candidate whose name starts so searches the peer index (format 2's text)


def P(m: str, k: float, d: float, b: float, kb: float, *, rrf_k: float = 60,
      clip: bool = False) -> FusionProfile:
    """A profile over (key, dense, bm25, key_bm25); a zero weight drops the branch. ``own`` and
    ``own_bm25`` hold the same texts as ``dense`` and ``bm25`` for solved cards: not varied."""
    w = {KEY: k, DENSE: d, BM25: b, KEY_BM25: kb}
    return FusionProfile(method=m, weights={n: x for n, x in w.items() if x}, k=rrf_k,
                         clip=clip)


#: round 1: the current profile, the peers (on the peer index), and moves around the current
#: profile along each branch, with RRF and clipped DBSF forms
ROUND_1 = {
 "current dbsf 1/1/.75/0": MODE_PROFILES["solved"],
 "peer dbsf (dense, bm25)": FusionProfile(method="dbsf", weights={DENSE: 1.0, BM25: 1.0}),
 "peer rrf (dense, bm25)": FusionProfile(method="rrf", weights={DENSE: 1.0, BM25: 1.0}),
 "dbsf 1/1/1/0": P("dbsf", 1, 1, 1, 0),
 "dbsf 1/1/.5/0": P("dbsf", 1, 1, .5, 0),
 "dbsf 1.5/1/.75/0": P("dbsf", 1.5, 1, .75, 0),
 "dbsf 2/1/.75/0": P("dbsf", 2, 1, .75, 0),
 "dbsf 1/.5/.75/0": P("dbsf", 1, .5, .75, 0),
 "dbsf 1/0/.75/0": P("dbsf", 1, 0, .75, 0),
 "dbsf 1/1/.75/.25": P("dbsf", 1, 1, .75, .25),
 "dbsf 1/1/.75/.5": P("dbsf", 1, 1, .75, .5),
 "dbsf 1/1/0/.75": P("dbsf", 1, 1, 0, .75),
 "dbsf 1/1/.5/.5": P("dbsf", 1, 1, .5, .5),
 "dbsf 1.5/1/.75/.5": P("dbsf", 1.5, 1, .75, .5),
 "dbsf 1/0/0/1": P("dbsf", 1, 0, 0, 1),
 "dbsf 1/0/0/0 (key)": P("dbsf", 1, 0, 0, 0),
 "dbsf clip 1/1/.75/0": P("dbsf", 1, 1, .75, 0, clip=True),
 "rrf 1/1/.75/0": P("rrf", 1, 1, .75, 0),
 "rrf 1/1/1/1": P("rrf", 1, 1, 1, 1),
 "rrf 2/1/1/0": P("rrf", 2, 1, 1, 0),
 "rrf k=10 2/1/1/0": P("rrf", 2, 1, 1, 0, rrf_k=10),
}
#: round 2: filled in around round 1's best on TUNE (see bench/README.md)
ROUND_2: dict[str, FusionProfile] = {
 "current dbsf 1/1/.75/0": MODE_PROFILES["solved"],
 "peer dbsf (dense, bm25)": FusionProfile(method="dbsf", weights={DENSE: 1.0, BM25: 1.0}),
}
ROUNDS = {"1": ROUND_1, "2": ROUND_2}


async def main(cands: dict[str, FusionProfile], limit: int) -> None:
    t0 = time.perf_counter()
    cards, queries, report_dbs = spider_cards()
    tune = [q for q in queries if q["db"] not in report_dbs]
    chosen = ([tune[i * len(tune) // limit] for i in range(limit)]
              if 0 < limit < len(tune) else tune)
    print(f"{len(cards)} cards; {len(tune)} TUNE queries, {len(chosen)} sampled "
          f"(syn {sum(q['kind'] == 'syn' for q in chosen)}, "
          f"orig {sum(q['kind'] == 'orig' for q in chosen)})", flush=True)
    pair, by_key = await compared("tune_solved", cards)
    print(f"archive built in {time.perf_counter() - t0:.0f} s", flush=True)
    res = pair.bench.resources
    cache = QueryCache(res.embedder)
    index, peer = cache.index(res.index), cache.index(pair.peer)
    per: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    t1 = time.perf_counter()
    try:
        for i, q in enumerate(chosen):
            wanted = by_key[q["record"]]
            cache.clear()
            for scope, database in (("db", q["db"]), ("ws", None)):
                req = SearchRequest(query=q["text"], top=10, mode="solved",
                                    filters=Filters(database=database) if database else None)
                for name, prof in cands.items():
                    if name.startswith(PEER):
                        got = await recall(res.db, peer, cache, pair.bench.principal,
                                           pair.bench.workspace, req, profile=prof,
                                           layout=pair.peer_layout)
                    else:
                        got = await recall(res.db, index, cache, pair.bench.principal,
                                           pair.bench.workspace, req, profile=prof)
                    per[(q["kind"], scope)][name].append(_rank(got, wanted))
                if i < 5:  # the cache changes no ranking: the product's profile uncached
                    plain = await recall(res.db, res.index, res.embedder, pair.bench.principal,
                                         pair.bench.workspace, req)
                    cached = await recall(res.db, index, cache, pair.bench.principal,
                                          pair.bench.workspace, req)
                    assert ([r.card.id for r in plain.results]
                            == [r.card.id for r in cached.results]), "cache changed a ranking"
            if (i + 1) % 100 == 0:
                print(f"  {i + 1}/{len(chosen)} queries, {time.perf_counter() - t1:.0f} s",
                      file=sys.stderr, flush=True)
    finally:
        await pair.close()
    cols = [("syn", "db"), ("syn", "ws"), ("orig", "db"), ("orig", "ws")]
    print(f"{'candidate (key/dense/bm25/key_bm25)':28} | " + " | ".join(
        f"{k} {s} n={len(per[(k, s)][next(iter(cands))])} r@1 r@5 MRR" for k, s in cols))
    for name in cands:
        cells = []
        for col in cols:
            m = metrics(per[col][name])
            cells.append(f"{m['r@1']:.3f} {m['r@5']:.3f} {m['mrr']:.3f}".ljust(len(col[0]) + 21))
        print(f"{name:28} | " + " | ".join(cells), flush=True)
    print(f"({time.perf_counter() - t0:.0f} s; queries {time.perf_counter() - t1:.0f} s)")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--round", choices=sorted(ROUNDS), default="1",
                    help="which round of candidates (default: the first)")
    ap.add_argument("--queries", type=int, default=600,
                    help="an evenly spread sample of this many TUNE queries (0: all)")
    a = ap.parse_args()
    asyncio.run(main(ROUNDS[a.round], a.queries))
