"""Latency of a full verified recall at ~2k and ~20k cards, with the share spent in embedding,
the index, verification, link expansion and card fetch, and the ratio to a bare hybrid query of
the same engine. Run: ``.venv/bin/python bench/recall_latency.py`` (needs a PostgreSQL superuser
URL, see ``bench/_archive.py``).

The 2k archive is the BIRD cards file, imported and projected by the real pipeline. The 20k
archive adds 8 copies of every card (new ids, same text and the original's vectors, written to
PostgreSQL and the index by this script, with their projections recorded): latency does not
depend on which text a vector came from, and re-embedding 18,000 long texts would take ~10 minutes
here. Queries: the 66 hand-written rewordings (``solved``) and 66 BIRD questions (``search``).

``--engine local|edge|both`` (default both) picks the embedded index engine (qdrant-client's local
mode, Qdrant Edge) and prints one table per engine; with ``MEMARC_QDRANT_URL`` set the server is
measured once instead.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench._archive as _archive  # noqa: E402
from bench._archive import ROOT, BenchArchive, build  # noqa: E402
from shared.config import load_settings  # noqa: E402
from shared.index_edge import QdrantEdgeEngine  # noqa: E402
from shared import repository  # noqa: E402
from shared.db import Q  # noqa: E402
from shared.index import PointIn  # noqa: E402
from shared.embedding import SparseVector  # noqa: E402
from shared.models import ImportCard, SearchRequest  # noqa: E402
from shared.recall import RecallTimings, build_filter, recall, seed_count  # noqa: E402
from shared.repository import PROJECTION_FORMAT  # noqa: E402
from writer.runner import bundled_cards, read_cards  # noqa: E402


async def add_copies(bench: BenchArchive, cards: list[ImportCard], copies: int) -> int:
    """Add ``copies`` copies of every card, reusing the originals' vectors (see module doc)."""
    res = bench.resources
    name = res.index.collection(bench.workspace)

    def fetch(client):
        out, offset = {}, None
        while True:
            points, offset = client.scroll(name, limit=1000, offset=offset, with_payload=True,
                                           with_vectors=True)
            for p in points:
                out[uuid.UUID(str(p.id))] = p
            if offset is None:
                return out

    def fetch_edge():
        import qdrant_edge as qe

        shard = res.index._shard(res.index._resolve(name))
        out, offset = {}, None
        while True:
            records, offset = shard.scroll(qe.ScrollRequest(offset=offset, limit=1000,
                                                            with_payload=True, with_vector=True))
            for r in records:
                out[uuid.UUID(str(r.id))] = r
            if offset is None:
                return out

    if isinstance(res.index, QdrantEdgeEngine):
        originals = await res.index._call(fetch_edge)
    else:
        originals = await res.index._call(fetch)
    async with res.db.transaction(bench.workspace) as conn:
        full = await repository.get_cards(conn, list(originals))
    added = 0
    for i in range(1, copies + 1):
        points: list[PointIn] = []
        async with res.db.transaction(bench.workspace, lock="exclusive") as conn:
            for oid, point in originals.items():
                card = full[oid]
                body = ImportCard(key=f"{card.id}~{i}", family=card.family, title=card.title,
                                  content=card.content, scope=card.scope, concepts=card.concepts,
                                  dependencies=card.dependencies)
                new_id, revision = await repository.insert_card(conn, bench.workspace, body,
                                                                origin="import")
                await conn.execute(Q.projection_record, {"card_id": new_id, "revision": revision,
                                                         "format": PROJECTION_FORMAT})
                sparse = point.vector["bm25"]
                points.append(PointIn(id=new_id, dense=list(point.vector["dense"]),
                                      sparse=SparseVector(list(sparse.indices), list(sparse.values)),
                                      payload={**point.payload, "revision": revision}))
        for start in range(0, len(points), 512):
            await res.index.upsert(bench.workspace, points[start:start + 512])
        added += len(points)
    return added


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def measure(bench: BenchArchive, queries: list[tuple[str, str]], repeat: int) -> dict:
    res = bench.resources
    totals, bare, parts = [], [], {"embed": [], "index": [], "verify": [], "expand": [], "fetch": []}
    for query, mode in queries[:5]:  # warm-up
        await recall(res.db, res.index, res.embedder, bench.principal, bench.workspace,
                     SearchRequest(query=query, mode=mode))
    for _ in range(repeat):
        for query, mode in queries:
            req = SearchRequest(query=query, mode=mode, top=10)
            t = RecallTimings()
            t0 = time.perf_counter()
            await recall(res.db, res.index, res.embedder, bench.principal, bench.workspace, req,
                         timings=t)
            totals.append(time.perf_counter() - t0)
            for k in parts:
                parts[k].append(getattr(t, k))
            # the bare engine query: same vectors, same filter, same limit, no verification
            dense, sparse = await res.embedder.embed_query(query, "en")
            flt = build_filter(bench.principal, req)
            t0 = time.perf_counter()
            await res.index.hybrid_query(bench.workspace, dense, sparse, flt, seed_count(10))
            bare.append(time.perf_counter() - t0)
    total_mean = statistics.mean(totals)
    return {
        "queries": len(totals),
        "full_p50_ms": pct(totals, 0.5) * 1000, "full_p95_ms": pct(totals, 0.95) * 1000,
        "bare_p50_ms": pct(bare, 0.5) * 1000, "bare_p95_ms": pct(bare, 0.95) * 1000,
        "share": {k: statistics.mean(v) / total_mean for k, v in parts.items()},
        "verify_plus_expand_over_bare": (statistics.mean(parts["verify"]) +
                                         statistics.mean(parts["expand"])) / statistics.mean(bare),
        "full_over_bare_p50": pct(totals, 0.5) / pct(bare, 0.5),
    }


@contextlib.contextmanager
def engine_choice(engine: str):
    """Make ``bench._archive.build`` open ``engine`` (it builds its settings itself)."""
    original = _archive.load_settings
    _archive.load_settings = functools.partial(load_settings, index_engine=engine)
    try:
        yield
    finally:
        _archive.load_settings = original


def print_table(engine: str, results: dict, queries: int) -> None:
    print(f"engine: {engine}; queries per size: {queries}")
    print(f"{'size':>5} {'cards':>6} {'full p50':>9} {'full p95':>9} {'bare p50':>9} {'bare p95':>9} "
          f"{'full/bare':>9} {'(verify+expand)/bare':>21}  shares: embed index verify expand fetch")
    for label, r in results.items():
        s = r["share"]
        print(f"{label:>5} {r['cards']:>6} {r['full_p50_ms']:>8.1f}ms {r['full_p95_ms']:>8.1f}ms "
              f"{r['bare_p50_ms']:>8.1f}ms {r['bare_p95_ms']:>8.1f}ms {r['full_over_bare_p50']:>9.2f} "
              f"{r['verify_plus_expand_over_bare']:>21.3f}  {s['embed']:.2f} {s['index']:.2f} "
              f"{s['verify']:.2f} {s['expand']:.2f} {s['fetch']:.2f}")


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=8, help="extra copies for the large archive")
    ap.add_argument("--repeat", type=int, default=1, help="passes over the query set")
    ap.add_argument("--engine", choices=("local", "edge", "both"), default="both",
                    help="embedded index engine(s) to measure (ignored with MEMARC_QDRANT_URL)")
    args = ap.parse_args(argv)
    cards = read_cards(bundled_cards())
    reworded = [json.loads(x) for x in (ROOT / "bench/fixtures/reworded_questions.jsonl").read_text().splitlines()]
    queries = [(r["reworded"], "solved") for r in reworded] + [(r["original"], "search") for r in reworded]
    engines = ["local", "edge"] if args.engine == "both" else [args.engine]
    if _archive.model_env().get("MEMARC_QDRANT_URL"):
        engines = ["server"]
    for engine in engines:
        results = {}
        for label, copies in (("2k", 0), ("20k", args.copies)):
            with engine_choice("local" if engine == "server" else engine):
                bench = await build(f"latency{label}", cards)
            n = len(cards)
            if copies:
                n += await add_copies(bench, cards, copies)
            results[label] = {"cards": n, **await measure(bench, queries, args.repeat)}
            await bench.close()
        name = {"server": "qdrant server", "local": "qdrant-client local mode",
                "edge": "Qdrant Edge"}[engine]
        print_table(name, results, len(queries) * args.repeat)
        print(flush=True)


if __name__ == "__main__":
    asyncio.run(main())
