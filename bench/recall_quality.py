"""Recall quality through the code path of ``POST /search`` (verification and link expansion
included): the product's retrieval profile of each mode next to the peer configurations, on
Spider-Syn and on the BIRD cards, with the tuning / report split. Run:
``.venv/bin/python bench/recall_quality.py [--part spider,bird-b,bird-a] [--spider-queries N]
[--spider-half REPORT|TUNE|both] [--json]`` (``make bench``);
needs a PostgreSQL superuser URL (see ``bench/_archive.py``) and ``../shared/datasets``.

Every archive is imported and projected by the product (outbox, worker projection, Qdrant
Edge). The peers are what pointing plain Qdrant hybrid search at the same cards gives: a second
index of the same points built from the card's text as format 2 indexed it (one dense vector and
one BM25 vector of ``projected_text``, no key text, no linked questions), searched through the
same verified recall with the peer's fusion: ``dense only``, ``BM25 only``, ``RRF k=60`` (equal
weights; the old default) and ``DBSF`` (equal weights; Qdrant's other built-in fusion).

Parts and splits (weights were chosen on TUNE, never on REPORT; ``shared/recall/profiles.py``):

- ``spider``: Spider-Syn train as solved questions: one card per (db_id, normalised SQL) from the
  group's first original question (title and question, the SQL, concept and dependencies from the
  SQL's tables); queried with each row's synonym rewording (``syn``, human-written) and with the
  group's other original wordings (``orig``), all 140 databases in one workspace, per-database
  filter (``db``) and workspace-wide (``ws``). Split: the sorted db_ids, even index TUNE, odd
  index REPORT.
- ``bird-b``: the 66 hand rewordings of BIRD questions (``bench/fixtures``), solved mode, and the
  original wordings, on the 2,251 bundled BIRD cards.
- ``bird-a``: clause recall, leave-one-out in two folds: fold X's archive holds every
  clarification, rule and explained error and the solved questions of fold X (solved cards in
  file order, even / odd position); each question of the other fold is asked for each
  clarification or rule it links to. So a question never finds its clause through its own solved
  card (that would be leakage: the clause's projection holds the questions that link to it).
  ``shared`` = clauses linked by two or more questions (the issue's shared-clause check),
  ``all`` = every pair; ``search`` and (for sql_rule clauses) ``rules`` mode, workspace-wide and
  with the question's database as filter. BIRD databases: sorted, even index TUNE, odd REPORT.

Reported per row: r@1, r@5 and MRR@10 of the wanted card (top 10).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import re
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench._archive import ROOT, BenchArchive, build  # noqa: E402
from shared.cards_file import bundled_cards, read_cards  # noqa: E402
from shared.config import load_settings  # noqa: E402
from shared.index.edge import QdrantEdgeEngine  # noqa: E402
from shared.index.engine import BM25, DENSE, PointIn, VectorLayout  # noqa: E402
from shared.models import Dependency, Filters, ImportCard, SearchRequest, Source  # noqa: E402
from shared.projection.documents import projected_document, projected_text  # noqa: E402
from shared.recall.fusion import FusionProfile  # noqa: E402
from shared.recall.verified import recall  # noqa: E402
from shared.store import cards as card_store  # noqa: E402
from tools.bird_cards import clean_text, make_title  # noqa: E402

DATASETS = ROOT.parent / "shared" / "datasets"
SPIDER = DATASETS / "spider_syn_train" / "train_spider.json.gz"
PRODUCT = "product"
PEERS: dict[str, FusionProfile] = {
    "dense only": FusionProfile(method="rrf", weights={DENSE: 1.0}),
    "BM25 only": FusionProfile(method="rrf", weights={BM25: 1.0}),
    "RRF k=60": FusionProfile(method="rrf", weights={DENSE: 1.0, BM25: 1.0}),
    "DBSF": FusionProfile(method="dbsf", weights={DENSE: 1.0, BM25: 1.0}),
}
TABLE_RE = re.compile(r"\b(?:from|join)\s+([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)


def metrics(ranks: list[int | None]) -> dict[str, float]:
    n = len(ranks) or 1
    return {"n": len(ranks), "r@1": sum(1 for r in ranks if r == 1) / n,
            "r@5": sum(1 for r in ranks if r and r <= 5) / n,
            "mrr": sum(1 / r for r in ranks if r) / n}


class QueryCache:
    """Per-query memo of the embedder's query embedding and the index's per-branch hits: every
    configuration asked for one query embeds the same text and searches the same branches with
    the same filter, and both are deterministic, so they are computed once per query (the
    rankings are those of uncached calls). :meth:`clear` between queries bounds the memory."""

    def __init__(self, embedder: Any):
        self._embedder, self._memo = embedder, {}

    def clear(self) -> None:
        self._memo.clear()

    async def embed_query(self, text: str, language: str, model: Any = None) -> Any:
        key = ("embed", text, language, model)
        if key not in self._memo:
            self._memo[key] = await self._embedder.embed_query(text, language, model)
        return self._memo[key]

    def index(self, engine: Any) -> Any:
        """``engine`` with :meth:`hybrid_query` answered from this cache branch by branch."""
        return _CachedIndex(engine, self._memo)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._embedder, name)


class _CachedIndex:
    def __init__(self, engine: Any, memo: dict):
        self._engine, self._memo = engine, memo

    async def hybrid_query(self, workspace: str, dense: list[float], sparse: Any, flt: Any,
                           limit: int, *, dense_names: tuple[str, ...] = (DENSE,),
                           sparse_names: tuple[str, ...] = (BM25,),
                           collection: str | None = None) -> dict[str, list]:
        base = (id(self._engine), workspace, tuple(dense), tuple(sparse.indices),
                tuple(sparse.values), msgspec.json.encode(flt), limit, collection)
        need_d = tuple(n for n in dense_names if (base, "d", n) not in self._memo)
        need_s = tuple(n for n in sparse_names if (base, "s", n) not in self._memo)
        if need_d or need_s:
            got = await self._engine.hybrid_query(workspace, dense, sparse, flt, limit,
                                                  dense_names=need_d, sparse_names=need_s,
                                                  collection=collection)
            for n in need_d:
                self._memo[(base, "d", n)] = got.get(n, [])
            for n in need_s:
                self._memo[(base, "s", n)] = got.get(n, [])
        out = {n: self._memo[(base, "d", n)] for n in dense_names}
        out.update({n: self._memo[(base, "s", n)] for n in sparse_names})
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


class PeerIndex:
    """The peer engine as recall sees it: searches go to the peer's collection, while the
    collection check (migration 022: recall answers only from the collection PostgreSQL
    records for the workspace) names the product's collection once the peer's own exists with
    the peer's layout. The peer index holds the same cards at the same revisions, which
    verification still checks against PostgreSQL."""

    def __init__(self, peer: QdrantEdgeEngine, product: Any):
        self._peer, self._product = peer, product

    async def check_collection(self, workspace: str, layout: VectorLayout,
                               collection: str | None = None) -> str | None:
        if await self._peer.check_collection(workspace, layout) is None:
            return None
        return await self._product.physical_collection(workspace)

    async def hybrid_query(self, *args: Any, collection: str | None = None, **kwargs: Any) -> Any:
        """The peer's own collection of the workspace (recall names the product's)."""
        return await self._peer.hybrid_query(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._peer, name)


class Compared:
    """One archive with its product index and its peer index (format 2's text)."""

    def __init__(self, bench: BenchArchive, peer: QdrantEdgeEngine, peer_layout: VectorLayout):
        self.bench, self.peer, self.peer_layout = bench, peer, peer_layout

    async def ranks(self, query: str, mode: str, wanted: str, database: str | None = None
                    ) -> dict[str, int | None]:
        """Rank of ``wanted`` (top 10) under the product and each peer."""
        res = self.bench.resources
        req = SearchRequest(query=query, top=10, mode=mode,  # type: ignore[arg-type]
                            filters=Filters(database=database) if database else None)
        out: dict[str, int | None] = {}
        cache = QueryCache(res.embedder)
        got = await recall(res.db, res.index, cache, self.bench.principal,
                           self.bench.workspace, req)
        out[PRODUCT] = _rank(got, wanted)
        peer = cache.index(self.peer)
        for name, profile in PEERS.items():
            got = await recall(res.db, peer, cache, self.bench.principal,
                               self.bench.workspace, req, profile=profile,
                               layout=self.peer_layout)
            out[name] = _rank(got, wanted)
        return out

    async def close(self) -> None:
        await self.peer.close()
        await self.bench.close()


def _rank(response: Any, wanted: str) -> int | None:
    ids = [r.card.id for r in response.results]
    return ids.index(wanted) + 1 if wanted in ids else None


async def compared(name: str, cards: list[ImportCard]) -> tuple[Compared, dict[str, str]]:
    """Import and project ``cards`` (the product), build the peer index of the same cards;
    returns the pair and the card id of each import key."""
    t0 = time.perf_counter()
    bench = await build(name, cards)
    res = bench.resources
    async with res.db.transaction(bench.workspace, read_only=True) as conn:
        stored = await card_store.get_many(conn, list(await card_store.revisions(conn)))
    by_key = {c.source.record: c.id for c in stored.values() if c.source and c.source.record}
    peer = QdrantEdgeEngine(load_settings({}, data_dir=tempfile.mkdtemp(prefix="memarc-peer-"),
                                          collection_prefix=f"peer_{name}_"))
    base = res.embedder.layout("en")
    layout = VectorLayout(dense=(DENSE,), sparse=(BM25,), dimension=base.dimension,
                          dense_model=base.dense_model, fingerprint=base.fingerprint)
    await peer.ensure_collection(bench.workspace, layout)
    cards_list = list(stored.values())
    for start in range(0, len(cards_list), 256):
        batch = cards_list[start:start + 256]
        texts = [projected_text(c) for c in batch]
        dense, sparse = await res.embedder.embed_texts(texts, texts, "en")
        await peer.upsert(bench.workspace, [
            PointIn(id=uuid.UUID(c.id[4:]), dense={DENSE: d}, sparse={BM25: s},
                    payload=projected_document(c)[1])
            for c, d, s in zip(batch, dense, sparse)])
    print(f"  {name}: {len(cards)} cards, product projection {bench.seconds_to_project:.0f} s, "
          f"all set up in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return Compared(bench, PeerIndex(peer, res.index), layout), by_key


def _with_record(card: ImportCard, record: str) -> ImportCard:
    """The card with ``source.record`` set to ``record`` (how the bench finds it again)."""
    return msgspec.structs.replace(card, source=Source(dataset="bench", record=record))


# ---- Spider-Syn ------------------------------------------------------------------------

def spider_cards() -> tuple[list[ImportCard], list[dict[str, str]], set[str]]:
    """The Spider-Syn cards, the queries ``{text, kind, record, db}`` and the REPORT db_ids."""
    rows = json.loads(gzip.decompress(SPIDER.read_bytes()))
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        groups[(r["db_id"], " ".join(r["query"].strip().rstrip(";").lower().split()))].append(r)
    cards, queries = [], []
    for gi, ((db, _), group) in enumerate(groups.items()):
        question, sql = clean_text(group[0]["SpiderQuestion"]), clean_text(group[0]["query"])
        tables: list[str] = []
        for t in TABLE_RE.findall(sql):
            if t.lower() not in [x.lower() for x in tables]:
                tables.append(t)
        deps = [Dependency(db, "public", t) for t in tables] or [Dependency(db)]
        record = f"spider-{gi}"
        cards.append(_with_record(ImportCard(
            key=record, family="solved_question", title=make_title(question),
            content={"question": question, "sql": sql}, concepts=[db], dependencies=deps),
            record))
        seen = {" ".join(question.lower().split())}
        for kind, texts in (("syn", [r["SpiderSynQuestion"] for r in group]),
                            ("orig", [r["SpiderQuestion"] for r in group[1:]])):
            for text in texts:
                text = clean_text(text)
                if " ".join(text.lower().split()) in seen:
                    continue
                seen.add(" ".join(text.lower().split()))
                queries.append({"text": text, "kind": kind, "record": record, "db": db})
    dbs = sorted({q["db"] for q in queries} | {c.concepts[0] for c in cards})
    return cards, queries, set(dbs[1::2])


async def part_spider(rows: list[dict], limit: int | None, halves: str = "both") -> None:
    """``limit``: an evenly spread sample of about that many queries over both halves (the same
    sample whatever ``halves`` is); ``halves``: ``REPORT``, ``TUNE`` or ``both``: which of the
    sampled queries are asked (the others are skipped, so ``REPORT`` rows equal a ``both`` run's
    and take about half its time)."""
    cards, queries, report_dbs = spider_cards()
    pair, by_key = await compared("quality_spider", cards)
    try:
        per: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        chosen = queries if limit is None else queries[::max(1, len(queries) // limit)]
        for q in chosen:
            half = "REPORT" if q["db"] in report_dbs else "TUNE"
            if halves != "both" and half != halves:
                continue
            for scope, database in (("db", q["db"]), ("ws", None)):
                got = await pair.ranks(q["text"], "solved", by_key[q["record"]], database)
                for config, r in got.items():
                    per[f"spider {half} {q['kind']} {scope}"][config].append(r)
        _collect(rows, per)
    finally:
        await pair.close()


# ---- BIRD ------------------------------------------------------------------------------

def bird_cards() -> list[ImportCard]:
    """The bundled BIRD cards, each with its key as ``source.record``."""
    return [_with_record(c, c.key) for c in read_cards(bundled_cards())]


BIRD_DBS = ["california_schools", "card_games", "codebase_community", "debit_card_specializing",
            "european_football_2", "financial", "formula_1", "student_club", "superhero",
            "thrombosis_prediction", "toxicology"]
BIRD_REPORT = set(sorted(BIRD_DBS)[1::2])


def _database_of(card: ImportCard) -> str | None:
    return min((d.database for d in card.dependencies), default=None)


async def part_bird_b(rows: list[dict]) -> None:
    cards = bird_cards()
    by_record = {c.key: c for c in cards}
    pair, by_key = await compared("quality_bird", cards)
    try:
        per: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
        for line in (ROOT / "bench/fixtures/reworded_questions.jsonl").read_text().splitlines():
            item = json.loads(line)
            card = by_record[f"q-{item['question_id']}"]  # the converter's key of a question
            wanted = by_key[card.key]
            for wording in ("reworded", "original"):
                for scope, database in (("ws", None), ("db", _database_of(card))):
                    got = await pair.ranks(item[wording], "solved", wanted, database)
                    for config, r in got.items():
                        per[f"bird-b {wording} {scope}"][config].append(r)
        _collect(rows, per)
    finally:
        await pair.close()


def bird_folds(cards: list[ImportCard]) -> Iterator[tuple[int, list[ImportCard], list[tuple]]]:
    """``bird-a``'s two folds (module docstring): ``(fold, archive, asked)`` with ``archive``
    every card but the other fold's solved questions and ``asked`` those questions as
    ``(solved card, its database, "TUNE" | "REPORT")``."""
    solved = [c for c in cards if c.family == "solved_question"]
    for fold in (0, 1):
        kept = {s.key for i, s in enumerate(solved) if i % 2 == fold}
        # links go from solved questions to clauses, which every fold's archive keeps
        archive = [c for c in cards if c.family != "solved_question" or c.key in kept]
        asked = [(s, _database_of(s), "REPORT" if _database_of(s) in BIRD_REPORT else "TUNE")
                 for s in solved if s.key not in kept]
        yield fold, archive, asked


async def part_bird_a(rows: list[dict]) -> None:
    cards = bird_cards()
    by_key = {c.key: c for c in cards}
    users: dict[str, list[str]] = defaultdict(list)
    for s in cards:
        for link in s.links if s.family == "solved_question" else ():
            users[link.target].append(s.key)
    per: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for fold, archive, asked in bird_folds(cards):
        pair, ids = await compared(f"quality_bird_fold{fold}", archive)
        try:
            for s, db, half in asked:
                for link in s.links:
                    clause = by_key[link.target]
                    # every pair counts in "all" (the clause is in every fold's archive, whether
                    # or not a kept question links to it); "shared": clauses linked by two or
                    # more BIRD questions, as the shared-clause check
                    kinds = ["all"] + (["shared"] if len(users[clause.key]) >= 2 else [])
                    modes = ["search"] + (["rules"] if clause.family == "sql_rule" else [])
                    for mode in modes:
                        for scope, database in (("ws", None), ("db", db)):
                            got = await pair.ranks(s.content["question"], mode, ids[clause.key],
                                                   database)
                            for kind in kinds:
                                for config, r in got.items():
                                    per[f"bird-a {half} {kind} {mode} {scope}"][config].append(r)
        finally:
            await pair.close()
    _collect(rows, per)


def _collect(rows: list[dict], per: dict[str, dict[str, list]]) -> None:
    for check, configs in sorted(per.items()):
        for config, ranks in configs.items():
            rows.append({"check": check, "config": config, **metrics(ranks)})


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", default="spider,bird-b,bird-a",
                    help="comma-separated parts: spider, bird-b, bird-a")
    ap.add_argument("--spider-queries", type=int, default=None,
                    help="an evenly spread sample of the Spider-Syn queries (default: all)")
    ap.add_argument("--spider-half", choices=["REPORT", "TUNE", "both"], default="both",
                    help="which Spider-Syn half to query (default: both; the sample is drawn "
                         "over both halves either way)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args(argv)
    rows: list[dict] = []
    t0 = time.perf_counter()
    parts = set(args.part.split(","))
    if "spider" in parts:
        await part_spider(rows, args.spider_queries, args.spider_half)
    if "bird-b" in parts:
        await part_bird_b(rows)
    if "bird-a" in parts:
        await part_bird_a(rows)
    if args.json:
        print(json.dumps({"seconds": round(time.perf_counter() - t0), "rows": rows}, indent=1))
        return
    configs = [PRODUCT, *PEERS]
    print(f"{'check':34} {'n':>5}  " + "  ".join(f"{c:>19}" for c in configs))
    print(f"{'':34} {'':>5}  " + "  ".join(f"{'r@1 / r@5 / MRR':>19}" for _ in configs))
    table: dict[str, dict[str, dict]] = defaultdict(dict)
    for row in rows:
        table[row["check"]][row["config"]] = row
    for check in table:
        n = next(iter(table[check].values()))["n"]
        cells = [table[check].get(c) for c in configs]
        print(f"{check:34} {n:>5}  " + "  ".join(
            f"{c['r@1']:.3f} {c['r@5']:.3f} {c['mrr']:.3f}" if c else " " * 19 for c in cells))
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    asyncio.run(main())
