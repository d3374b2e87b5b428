"""Latency of a full verified recall at ~2k, ~20k and ~100k cards, and where it is spent.

The shares spent in embedding, the index, verification, link expansion and card fetch, and the ratio to a bare hybrid
query of the same engine. Run: ``.venv/bin/python bench/recall_latency.py`` (needs a PostgreSQL
superuser URL, see ``bench/_archive.py``).

The 2k archive is the BIRD cards file, imported and projected by the real pipeline. The larger
archives add copies of every card (8 for 20k, 44 for 100k: new ids, the same rows, dependencies
and links, recorded as projected, with the originals' vectors; see ``add_copies``): latency does
not depend on which text a vector came from, and re-embedding 100,000 long texts would take about
an hour here. Each engine builds one archive and grows it, so sizes are measured in one run.
Queries: the 66 hand-written rewordings (``solved``) and 66 BIRD questions (``search``), top 10.

``--engine local|edge|both`` (default both) picks the embedded index engine (qdrant-client's local
mode, Qdrant Edge) and prints one table per engine; above 20k cards local mode is measured on
a spread subset of 16 queries (``--local-large-queries``): it filters in Python, seconds per
query. With ``MEMARC_QDRANT_URL`` set the server is measured once instead.
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

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench._archive as _archive  # noqa: E402
from bench._archive import ROOT, BenchArchive, build  # noqa: E402
from shared.cards_file import bundled_cards, read_cards  # noqa: E402
from shared.config import load_settings  # noqa: E402
from shared.index.edge import QdrantEdgeEngine  # noqa: E402
from shared.index.engine import SparseVector  # noqa: E402
from shared.index.engine import PointIn  # noqa: E402
from shared.models import SearchRequest  # noqa: E402
from shared.recall.eligibility import build_filter  # noqa: E402
from shared.recall.fusion import FusionProfile  # noqa: E402
from shared.recall.profiles import profile_for  # noqa: E402
from shared.recall.verified import RecallTimings, recall, seed_count  # noqa: E402

#: format 2's recall: two branches (dense, BM25 of the card's text), equal-weight RRF k = 60
FORMAT_2_PROFILE = FusionProfile(method="rrf", weights={"dense": 1.0, "bm25": 1.0})
from shared.models import PROJECTION_FORMAT  # noqa: E402

COPY_SQL = """
INSERT INTO memory.cards (workspace_id, id, family, title, scope, origin, source, concepts,
                          content, revision)
SELECT c.workspace_id, m.new_id, c.family, c.title, c.scope, 'import', c.source, c.concepts,
       c.content, c.revision
FROM unnest(%(old)s::uuid[], %(new)s::uuid[]) AS m(old_id, new_id) JOIN memory.cards c ON c.id = m.old_id;
INSERT INTO memory.card_dependencies (workspace_id, card_id, ordinal, database_name, schema_name,
                                      table_name, column_name)
SELECT d.workspace_id, m.new_id, d.ordinal, d.database_name, d.schema_name, d.table_name, d.column_name
FROM unnest(%(old)s::uuid[], %(new)s::uuid[]) AS m(old_id, new_id)
JOIN memory.card_dependencies d ON d.card_id = m.old_id;
INSERT INTO memory.card_links (workspace_id, source_id, target_id, meaning)
SELECT l.workspace_id, ms.new_id, mt.new_id, l.meaning
FROM memory.card_links l
JOIN unnest(%(old)s::uuid[], %(new)s::uuid[]) AS ms(old_id, new_id) ON ms.old_id = l.source_id
JOIN unnest(%(old)s::uuid[], %(new)s::uuid[]) AS mt(old_id, new_id) ON mt.old_id = l.target_id;
INSERT INTO memory.projections (workspace_id, card_id, revision, format)
SELECT c.workspace_id, m.new_id, c.revision, %(format)s
FROM unnest(%(old)s::uuid[], %(new)s::uuid[]) AS m(old_id, new_id) JOIN memory.cards c ON c.id = m.old_id;
"""


async def original_points(bench: BenchArchive) -> dict[uuid.UUID, PointIn]:
    """The projected points of the imported cards, vectors and payload included."""
    res = bench.resources
    name = res.index.collection(bench.workspace)

    def fetch_local(client):
        out, offset = {}, None
        while True:
            points, offset = client.scroll(name, limit=1000, offset=offset, with_payload=True,
                                           with_vectors=True)
            for p in points:
                out[uuid.UUID(str(p.id))] = (p.vector, p.payload)
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
                out[uuid.UUID(str(r.id))] = (r.vector, r.payload)
            if offset is None:
                return out

    raw = await res.index._call(fetch_edge if isinstance(res.index, QdrantEdgeEngine) else fetch_local)
    points = {}
    for pid, (vector, payload) in raw.items():
        dense = {k: list(v) for k, v in vector.items() if not hasattr(v, "indices")}
        sparse = {k: SparseVector(list(v.indices), list(v.values))
                  for k, v in vector.items() if hasattr(v, "indices")}
        points[pid] = PointIn(id=pid, dense=dense, sparse=sparse, payload=dict(payload))
    return points


async def add_copies(bench: BenchArchive, originals: dict[uuid.UUID, PointIn], copies: int) -> int:
    """Add ``copies`` copies of every original card (see the module doc): new ids, the same rows,
    dependencies and links (between copies of the same generation), recorded as projected, and
    points with the originals' vectors. Rows are copied in bulk SQL (as the database owner)
    because inserting 100k cards one by one through the API path takes ~10 minutes here."""
    old = list(originals)
    added = 0
    with psycopg.connect(bench.db_url) as conn:
        for _ in range(copies):
            new = [uuid.uuid4() for _ in old]
            with conn.transaction():
                for statement in COPY_SQL.split(";")[:-1]:
                    conn.execute(statement, {"old": old, "new": new, "format": PROJECTION_FORMAT})
            points = [PointIn(id=n, dense=originals[o].dense, sparse=originals[o].sparse,
                              payload=originals[o].payload) for o, n in zip(old, new)]
            for start in range(0, len(points), 1024):
                await bench.resources.index.upsert(bench.workspace, points[start:start + 1024])
            added += len(points)
        conn.execute("ANALYZE")
    return added


SIZES = {"2k": 0, "20k": 8, "100k": 44}  # extra copies of the 2,251 BIRD cards


async def optimize_edge(bench: BenchArchive) -> dict:
    """Build the HNSW graph of the workspace's Edge shard the way a large ``memarc index`` does
    (``QdrantEdgeEngine.optimize_collection``: a child process), while a Python thread of this
    process counts loop iterations: how long it takes and how much this process could still run
    meanwhile (1.0 = unaffected; ``shard.optimize()`` in-process measured 0.0004). Nothing else
    uses the shard during the bench, as the rebuild guarantees for its private shard."""
    import threading

    index = bench.resources.index
    physical = index._resolve(index.collection(bench.workspace))
    counter, stop = [0], threading.Event()

    def spin() -> None:
        while not stop.is_set():
            counter[0] += 1

    def run_spinner(seconds: float) -> int:
        counter[0] = 0
        stop.clear()
        t = threading.Thread(target=spin)
        t.start()
        time.sleep(seconds)
        stop.set()
        t.join()
        return counter[0]

    idle_rate = await asyncio.to_thread(run_spinner, 1.0)
    counter[0] = 0
    stop.clear()
    spinner = threading.Thread(target=spin)
    spinner.start()
    t0 = time.perf_counter()
    changed = await index.optimize_collection(physical)
    seconds = time.perf_counter() - t0
    stop.set()
    spinner.join()
    return {"optimize_seconds": round(seconds, 1), "optimized": changed,
            "python_thread_progress_during_optimize": round(counter[0] / (idle_rate * seconds), 3)}


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


async def measure(bench: BenchArchive, queries: list[tuple[str, str]], repeat: int) -> dict:
    """The mode's profile against format 2's two-branch profile, query by query in one loop
    (so the machine's load affects both alike), and the bare engine query of the mode's
    branches."""
    res = bench.resources
    totals, bare, parts = [], [], {"embed": [], "index": [], "verify": [], "expand": [], "fetch": []}
    format_2: list[float] = []
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
            t0 = time.perf_counter()
            await recall(res.db, res.index, res.embedder, bench.principal, bench.workspace, req,
                         profile=FORMAT_2_PROFILE)
            format_2.append(time.perf_counter() - t0)
            for k in parts:
                parts[k].append(getattr(t, k))
            # the bare engine query: same vectors, same filter, same limit, no verification
            dense, sparse = await res.embedder.embed_query(query, "en")
            flt = build_filter(bench.principal, req)
            t0 = time.perf_counter()
            branches = profile_for(mode).branches()
            await res.index.hybrid_query(
                bench.workspace, dense, sparse, flt, seed_count(10),
                dense_names=tuple(b for b in branches if b in ("dense", "key")),
                sparse_names=tuple(b for b in branches if b in ("bm25", "key_bm25")))
            bare.append(time.perf_counter() - t0)
    total_mean = statistics.mean(totals)
    return {
        "queries": len(totals),
        "full_p50_ms": pct(totals, 0.5) * 1000, "full_p95_ms": pct(totals, 0.95) * 1000,
        "bare_p50_ms": pct(bare, 0.5) * 1000, "bare_p95_ms": pct(bare, 0.95) * 1000,
        "format_2_p50_ms": pct(format_2, 0.5) * 1000, "format_2_p95_ms": pct(format_2, 0.95) * 1000,
        "over_format_2_p95": pct(totals, 0.95) / pct(format_2, 0.95),
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


def print_table(engine: str, results: dict) -> None:
    print(f"engine: {engine}")
    print(f"{'size':>5} {'cards':>6} {'queries':>7} {'full p50':>9} {'full p95':>9} "
          f"{'fmt-2 p50':>9} {'fmt-2 p95':>9} {'p95/fmt-2':>9} {'bare p50':>9} {'bare p95':>9} "
          f"{'full/bare':>9} {'(verify+expand)/bare':>21}  shares: embed index verify expand fetch")
    for label, r in results.items():
        s = r["share"]
        print(f"{label:>5} {r['cards']:>6} {r['queries']:>7} {r['full_p50_ms']:>8.1f}ms {r['full_p95_ms']:>8.1f}ms "
              f"{r['format_2_p50_ms']:>8.1f}ms {r['format_2_p95_ms']:>8.1f}ms {r['over_format_2_p95']:>9.2f} "
              f"{r['bare_p50_ms']:>8.1f}ms {r['bare_p95_ms']:>8.1f}ms {r['full_over_bare_p50']:>9.2f} "
              f"{r['verify_plus_expand_over_bare']:>21.3f}  {s['embed']:.2f} {s['index']:.2f} "
              f"{s['verify']:.2f} {s['expand']:.2f} {s['fetch']:.2f}")


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2k,20k,100k",
                    help="comma-separated sizes: 2k (the BIRD cards), 20k (+8 copies), 100k (+44)")
    ap.add_argument("--local-large-queries", type=int, default=16,
                    help="queries measured on qdrant-client local mode above 20k cards (it filters "
                         "in Python: seconds per query at 100k)")
    ap.add_argument("--repeat", type=int, default=1, help="passes over the query set")
    ap.add_argument("--hnsw", action="store_true",
                    help="Edge only: after the largest size, build HNSW as a large rebuild does "
                         "(child process), report its time and whether this process could run "
                         "meanwhile, measure again")
    ap.add_argument("--engine", choices=("local", "edge", "both"), default="both",
                    help="embedded index engine(s) to measure (ignored with MEMARC_QDRANT_URL)")
    args = ap.parse_args(argv)
    cards = read_cards(bundled_cards())
    reworded = [json.loads(x) for x in (ROOT / "bench/fixtures/reworded_questions.jsonl").read_text().splitlines()]
    queries = [(r["reworded"], "solved") for r in reworded] + [(r["original"], "search") for r in reworded]
    engines = ["local", "edge"] if args.engine == "both" else [args.engine]
    if _archive.model_env().get("MEMARC_QDRANT_URL"):
        engines = ["server"]
    sizes = [(label, SIZES[label]) for label in args.sizes.split(",")]
    for engine in engines:
        results = {}
        with engine_choice("local" if engine == "server" else engine):
            bench = await build(f"latency_{engine}", cards)
        try:
            originals = await original_points(bench)
            n, done = len(cards), 0
            for label, copies in sizes:
                if copies > done:
                    n += await add_copies(bench, originals, copies - done)
                    done = copies
                subset = queries
                if engine == "local" and copies > SIZES["20k"]:
                    subset = queries[::max(1, len(queries) // args.local_large_queries)]
                results[label] = {"cards": n, **await measure(bench, subset, args.repeat)}
                print(f"  {engine} {label}: {results[label]['cards']} cards measured", flush=True)
            if args.hnsw and engine == "edge":
                label = sizes[-1][0] + "+hnsw"
                print("  " + json.dumps(await optimize_edge(bench)), flush=True)
                results[label] = {"cards": n, **await measure(bench, queries, args.repeat)}
        finally:
            await bench.close()
        name = {"server": "qdrant server", "local": "qdrant-client local mode",
                "edge": "Qdrant Edge"}[engine]
        print_table(name, results)
        print(flush=True)


if __name__ == "__main__":
    asyncio.run(main())
