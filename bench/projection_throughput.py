"""Projection throughput and queue lag of the real pipeline (import, arq worker, embedding).

Run: ``.venv/bin/python bench/projection_throughput.py`` (needs PostgreSQL, see ``bench/_archive.py``, and Redis: ``MEMARC_BENCH_REDIS_URL``, else
``MEMARC_TEST_REDIS_URL``, else ``redis://127.0.0.1:6379``; database 8 is flushed).

1. Throughput: the BIRD cards imported with no worker running, then one arq worker (the real
   job path: lease, read, embed, upsert with wait, record) drains them; cards/s compared with
   embedding the same projected texts alone, in the same process, (a) with the archive's
   embedding call (length-sorted batches of 16 dealt out to ``MEMARC_EMBED_THREADS`` sessions
   of one onnxruntime thread each), (b) with one fastembed session of that many intra-op
   threads in batches of 16 in card order and (c) as before the pool: that session on
   length-sorted batches of 16. Target: pipeline / bare embedding (a) >= 0.8. (fastembed's
   default batch of 256 pads every text of a batch to the longest one: on these texts it held
   over 20 GB and ran for minutes, so it is not measured.)
2. Queue lag under a steady write load: card updates at a fixed rate while the worker runs;
   lag = projected_at - updated_at per write, from PostgreSQL.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import msgspec
import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import build  # noqa: E402
from shared.cards_file import bundled_cards, read_cards  # noqa: E402
from shared.models import CardWrite  # noqa: E402
from shared.worker import build_worker, stop_worker  # noqa: E402
from shared.index.engine import ARCHIVE_DENSE, ARCHIVE_SPARSE  # noqa: E402
from shared.projection.documents import projected_document  # noqa: E402
from shared.projection.queue import ProjectionQueue  # noqa: E402
from shared.store import cards as card_rows  # noqa: E402
from shared.store import listing, outbox  # noqa: E402


def redis_url() -> str:
    base = (os.environ.get("MEMARC_BENCH_REDIS_URL") or os.environ.get("MEMARC_TEST_REDIS_URL")
            or "redis://127.0.0.1:6379").rstrip("/")
    return base + "/8"


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=4.0, help="updates per second for the lag test")
    ap.add_argument("--seconds", type=float, default=30.0, help="length of the lag test")
    args = ap.parse_args(argv)
    import redis

    url = redis_url()
    redis.Redis.from_url(url).flushdb()
    cards = read_cards(bundled_cards())
    bench = await build("throughput", cards[:0])  # empty archive; cards imported below
    res = bench.resources
    res.settings = msgspec.structs.replace(res.settings, redis_url=url)
    res.queue = ProjectionQueue(url)
    bench.archive.queue = res.queue

    # 1. pipeline throughput
    await bench.archive.transfer.import_cards(bench.principal, bench.workspace, cards)
    worker = build_worker(res, burst=True, poll_delay=0.05)
    t0 = time.perf_counter()
    await worker.main()
    await worker.close()
    pipeline_s = time.perf_counter() - t0
    async with res.db.transaction(bench.workspace, read_only=True) as conn:
        counts = await outbox.projection_counts(conn)
        all_cards = await listing.list_cards(conn, listing.ListQuery(per_page=100))
    assert counts["current"] == len(cards), counts
    async with res.db.transaction(bench.workspace, read_only=True) as conn:
        cur = await conn.execute("SELECT id FROM cards ORDER BY id")
        ids = [r["id"] for r in await cur.fetchall()]
        full = await card_rows.get_many(conn, ids)
        linked = await card_rows.linked_questions(conn, ids)
    # the same texts the pipeline embeds: each card's dense and key texts (dense model), its
    # text and key text (BM25), each distinct text once per batch of 256 cards as a job does
    docs = [projected_document(full[i], linked_questions=linked.get(i))[0] for i in ids]
    dense_batches = [sorted({d[v] for d in docs[k:k + 256] for v in ARCHIVE_DENSE})
                     for k in range(0, len(docs), 256)]
    sparse_batches = [sorted({d[v] for d in docs[k:k + 256] for v in ARCHIVE_SPARSE})
                      for k in range(0, len(docs), 256)]
    texts = [t for batch in dense_batches for t in batch]
    t0 = time.perf_counter()
    dense_only_s = 0.0
    for dense_texts, sparse_texts in zip(dense_batches, sparse_batches):
        t1 = time.perf_counter()
        res.embedder.embed_dense_sync(dense_texts)
        dense_only_s += time.perf_counter() - t1
        res.embedder.embed_sparse_sync(sparse_texts, "en")
    ours_s = time.perf_counter() - t0
    # (b) and (c): one fastembed session with MEMARC_EMBED_THREADS intra-op threads (the
    # embedder's query session)
    one = res.embedder._load_dense("en")
    sparse = res.embedder._load_sparse("en")
    t0 = time.perf_counter()  # (b) fastembed with a small batch, texts in card order (no sorting)
    list(one.embed(texts, batch_size=16))
    list(sparse.embed([t for batch in sparse_batches for t in batch], batch_size=16))
    default_s = time.perf_counter() - t0
    t0 = time.perf_counter()  # (c) that session on the archive's sorted batches of 16
    for dense_texts in dense_batches:
        list(one.embed(sorted(dense_texts, key=len), batch_size=16))
    one_s = time.perf_counter() - t0 + (ours_s - dense_only_s)  # + the same BM25 time as (a)
    n = len(ids)

    # 2. queue lag under a steady update load
    print(f"throughput phase done in {pipeline_s:.1f} s", file=sys.stderr, flush=True)
    worker = build_worker(res, poll_delay=0.05)
    task = asyncio.create_task(worker.async_run())
    targets = all_cards[0][:50]
    writes = 0
    t_end = time.monotonic() + args.seconds
    interval = 1.0 / args.rate
    while time.monotonic() < t_end:
        card = targets[writes % len(targets)]
        async with res.db.transaction(bench.workspace, read_only=True) as conn:
            current = await card_rows.get(conn, uuid.UUID(card.id[4:]))
        body = CardWrite(family=current.family, title=current.title,
                         content={**current.content}, revision=current.revision)
        body.content[next(iter(body.content))] += f" (edit {writes})"
        await bench.archive.update_card(bench.principal, bench.workspace, card.id, body)
        writes += 1
        await asyncio.sleep(interval)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        async with res.db.transaction(bench.workspace, read_only=True) as conn:
            _, open_ops = await outbox.pending(conn, 1, 0)
        if open_ops == 0:
            break
        await asyncio.sleep(0.2)
    await stop_worker(worker)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    with psycopg.connect(bench.db_url) as conn:
        lags = [r[0] for r in conn.execute(
            "SELECT extract(epoch FROM o.completed_at - o.created_at) FROM memory.projection_ops o "
            "WHERE o.status = 'done' AND o.id > (SELECT max(id) - %s FROM memory.projection_ops)",
            [writes])]
    await bench.close()

    print(f"cards: {n}; dense texts embedded: {len(texts)}; BM25 texts: "
          f"{sum(len(b) for b in sparse_batches)}")
    print(f"pipeline (arq worker, lease + read + embed + upsert + record): {pipeline_s:.1f} s, "
          f"{n / pipeline_s:.1f} cards/s")
    print(f"bare embedding, archive batching (sorted, 16/batch):          {ours_s:.1f} s, "
          f"{n / ours_s:.1f} cards/s  -> pipeline/bare = {ours_s / pipeline_s:.2f}")
    print(f"bare embedding, fastembed batch 16, card order:                {default_s:.1f} s, "
          f"{n / default_s:.1f} cards/s  -> pipeline/bare = {default_s / pipeline_s:.2f}")
    print(f"bare embedding, one session of {res.settings.embed_threads} threads, sorted, 16/batch:   "
          f"{one_s:.1f} s, {n / one_s:.1f} cards/s  -> pipeline/bare = {one_s / pipeline_s:.2f}; "
          f"sessions / one session = {one_s / ours_s:.2f}x faster")
    lags.sort()
    print(f"queue lag at {args.rate:g} updates/s for {args.seconds:g} s ({len(lags)} writes): "
          f"p50 {statistics.median(lags) * 1000:.0f} ms, p95 {lags[int(0.95 * (len(lags) - 1))] * 1000:.0f} ms, "
          f"max {lags[-1] * 1000:.0f} ms")


if __name__ == "__main__":
    asyncio.run(main())
