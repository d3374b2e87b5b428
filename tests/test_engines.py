"""The two embedded index engines (DESIGN §4, §11) behave alike and rank alike.

qdrant-client's local mode and Qdrant Edge answer the same behaviours, and the same cards and
queries give the same branch rankings.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import msgspec
import pytest

from shared.config import load_settings
from shared.errors import IndexIncompatible
from shared.index.edge import QdrantEdgeEngine
from shared.index.engine import ARCHIVE_DENSE, ARCHIVE_SPARSE, IndexFilter, PointIn, VectorLayout
from shared.index.qdrant import QdrantClientEngine
from shared.resources import open_index
from shared.models import PROJECTION_FORMAT

BASE = "/api/workspaces/acme/memory"


def _rule(title: str, text: str, **kw) -> dict:
    return {"family": "sql_rule", "title": title, "content": {"rule": text}, **kw}



async def _seed(env, cards: dict) -> tuple[dict, dict]:
    env.workspace("acme")
    h = env.token("acme")
    ids = {}
    for key, body in cards.items():
        r = await env.client.post(BASE, json=body, headers=h)
        assert r.status_code == 201, r.text
        ids[r.json()["card"]["id"]] = key
    await env.drain()
    return h, ids


async def _search(env, h, query, **kw) -> dict:
    r = await env.client.post(f"{BASE}/search", headers=h,
                              json={"query": query, "mode": "rules", "top": 50, **kw})
    assert r.status_code == 200, r.text
    return r.json()


def _engine_name(env) -> str:
    return "edge" if isinstance(env.resources.index, QdrantEdgeEngine) else "local"


@pytest.mark.both_engines
async def test_delete_removes_the_point(make_env, index_engine):
    async with make_env() as env:
        assert _engine_name(env) == index_engine  # the both_engines parameter picks the engine
        env.workspace("acme")
        h = env.token("acme")
        cards = [(await env.client.post(BASE, headers=h, json=_rule(
            f"Rule {i} about invoices", f"Invoices are issued on day {i + 1}."))).json()["card"]
            for i in range(2)]
        await env.drain()
        ids = [uuid.UUID(c["id"][4:]) for c in cards]
        assert set(await env.resources.index.scroll_ids("acme")) == set(ids)
        r = await env.client.delete(f"{BASE}/{cards[0]['id']}", headers=h)
        assert r.status_code == 200
        await env.drain()
        assert set(await env.resources.index.scroll_ids("acme")) == {ids[1]}
        body = await _search(env, h, "when are invoices issued")
        assert [x["card"]["id"] for x in body["results"]] == [cards[1]["id"]]
        # a missing id and a missing collection are ignored
        await env.resources.index.delete("acme", [uuid.uuid4()])
        await env.resources.index.delete("nowhere", [ids[1]])


@pytest.mark.both_engines
# qdrant-client's local mode leaves its lock file to the garbage collector after close()
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_persisted_index_survives_close_and_reopen(make_env, index_engine):
    async with make_env() as env:
        h, ids = await _seed(env, {"a": _rule("Invoices", "Invoices are issued monthly."),
                                   "b": _rule("Refunds", "Refunds are negative revenue rows.")})
        before = await _search(env, h, "when are invoices issued")
        index = env.resources.index
        await index.close()
        other = open_index(env.settings)  # a new engine over the same files
        try:
            points = await other.scroll_ids("acme")
            assert {f"mem-{p}" for p in points} == set(ids)
        finally:
            await other.close()
        # the app's engine reopens its files on the next call
        after = await _search(env, h, "when are invoices issued")
        assert [x["card"]["id"] for x in after["results"]] == \
            [x["card"]["id"] for x in before["results"]]
        assert after["excluded"] == 0


@pytest.mark.both_engines
async def test_model_or_dimension_mismatch_is_incompatible(make_env, index_engine):
    async with make_env() as env:
        index = env.resources.index
        layout = VectorLayout(dense=("dense", "key"), sparse=("bm25",), dimension=384,
                              dense_model="model-a", fingerprint="sha256:a")
        await index.ensure_collection("acme", layout)
        assert await index.check_collection("acme", layout)
        assert not await index.check_collection("other", layout)
        with pytest.raises(IndexIncompatible, match="dense model"):
            await index.check_collection("acme", msgspec.structs.replace(layout, dense_model="model-b"))
        with pytest.raises(IndexIncompatible, match="fingerprint"):
            await index.check_collection("acme", msgspec.structs.replace(layout,
                                                                         fingerprint="sha256:b"))
        with pytest.raises(IndexIncompatible):
            await index.check_collection("acme", msgspec.structs.replace(layout, dimension=768))
        with pytest.raises(IndexIncompatible):
            await index.check_collection("acme", msgspec.structs.replace(
                layout, sparse=("bm25", "key_bm25")))
        with pytest.raises(IndexIncompatible):
            await index.ensure_collection("acme", msgspec.structs.replace(layout, dimension=768))


CONGRUENCE_CARDS = [
    ("sql_rule", None, [], [], "Invoices are issued on the first day of the month."),
    ("sql_rule", "Sales", ["revenue"], [], "Revenue is booked when the order ships."),
    ("sql_rule", "Sales", ["revenue", "finance"], [], "Refunds are negative revenue rows."),
    ("sql_rule", None, [], [{"database": "db1", "schema": "s", "table": "orders", "column": None}],
     "Orders table: one row per order line, status shipped or open."),
    ("sql_rule", None, [], [{"database": "db1", "schema": None, "table": None, "column": None}],
     "In db1 amounts are stored in cents."),
    ("sql_rule", None, [], [{"database": "db2", "schema": "s", "table": None, "column": None}],
     "In db2 amounts are stored in euros."),
    ("domain_clarification", None, ["finance"], [], "Fiscal weeks start on Monday."),
    ("domain_clarification", "Logistics", [], [], "Shipping cost is charged per parcel."),
    ("sql_rule", None, [], [], "Customers are identified by their email address."),
    ("sql_rule", None, [], [], "Revenue recognition follows the shipping date of the order."),
    ("sql_rule", None, [], [], "Orders are cancelled after 30 days without payment."),
    ("sql_rule", None, [], [], "Revenue revenue revenue: the monthly revenue report."),
]
CONGRUENCE_QUERIES = [
    ("when is revenue booked", IndexFilter()),
    ("amounts stored in cents", IndexFilter(physical=("db1", "s", "orders", None))),
    ("revenue", IndexFilter(families=("sql_rule",), concepts=("revenue",))),
    ("shipping order payment", IndexFilter(scope="Sales")),
    ("orders", IndexFilter(physical=("db2", None, None, None))),
    ("fiscal week monday", IndexFilter(families=("domain_clarification", "sql_rule"))),
    ("unrelated words zebra", IndexFilter()),
]


def _assert_same_ranking(a, b, limit: int, label: str) -> None:
    """Same ids in the same order; two ids may swap only where they tie (scores within 1e-6)."""
    assert len(a) == len(b), (label, a, b)
    score_a = {h.id: h.score for h in a}
    score_b = {h.id: h.score for h in b}
    if len(a) < limit:  # everything that matched was returned
        assert set(score_a) == set(score_b), label
    for i, (ha, hb) in enumerate(zip(a, b)):
        assert abs(ha.score - hb.score) <= 1e-4, (label, i, ha.score, hb.score)
        assert (ha.revision, ha.format) == (hb.revision, hb.format), label
        if ha.id != hb.id:
            assert abs(ha.score - hb.score) <= 1e-6, (label, i, ha, hb)
            if hb.id in score_a:
                assert abs(score_a[hb.id] - ha.score) <= 1e-6, (label, i)


async def test_both_engines_give_identical_rankings(embedder, tmp_path: Path):
    texts = [c[4] for c in CONGRUENCE_CARDS]
    dense, sparse = await embedder.embed_documents(texts, "en")
    keys = await embedder.embed_texts([t.split(":")[0] for t in texts],
                                      [t.split(":")[0] for t in texts], "en")
    # format 4's own-text vectors: another text of each card (its first four words)
    owns = await embedder.embed_texts([" ".join(t.split()[:4]) for t in texts],
                                      [" ".join(t.split()[:4]) for t in texts], "en")
    points = [
        PointIn(id=uuid.UUID(int=i + 1), dense={"dense": d, "key": keys[0][i], "own": owns[0][i]},
                sparse={"bm25": s, "key_bm25": keys[1][i], "own_bm25": owns[1][i]}, payload={
            "workspace": "acme", "family": fam, "scope": scope, "concepts": concepts,
            "deps": deps, "revision": 1, "format": PROJECTION_FORMAT})
        for i, ((fam, scope, concepts, deps, _), d, s) in enumerate(zip(CONGRUENCE_CARDS, dense, sparse))
    ]
    engines = {
        "local": QdrantClientEngine(load_settings({}, data_dir=str(tmp_path / "local"))),
        "edge": QdrantEdgeEngine(load_settings({}, data_dir=str(tmp_path / "edge"))),
    }
    try:
        for engine in engines.values():
            await engine.ensure_collection("acme", embedder.layout("en"))
            await engine.upsert("acme", points)
            await engine.delete("acme", [uuid.UUID(int=len(points))])  # the last one goes
        for query, flt in CONGRUENCE_QUERIES:
            qd, qs = await embedder.embed_query(query, "en")
            for exclude in ((), (uuid.UUID(int=2),)):
                f = IndexFilter(families=flt.families, scope=flt.scope, concepts=flt.concepts,
                                physical=flt.physical, exclude=exclude)
                for limit in (50, 3):
                    got = {name: await e.hybrid_query(
                               "acme", qd, qs, f, limit, dense_names=ARCHIVE_DENSE,
                               sparse_names=ARCHIVE_SPARSE) for name, e in engines.items()}
                    for branch in (*ARCHIVE_DENSE, *ARCHIVE_SPARSE):
                        _assert_same_ranking(got["local"][branch], got["edge"][branch], limit,
                                             f"{branch} {query!r} {f} limit={limit}")
            # the look-up by id gives each point's score of the unfiltered dense ranking, on
            # both engines; a deleted or unknown id is absent
            ranked = await engines["local"].hybrid_query("acme", qd, qs, IndexFilter(), 50,
                                                         dense_names=ARCHIVE_DENSE,
                                                         sparse_names=())
            ids = [uuid.UUID(int=1), uuid.UUID(int=3), uuid.UUID(int=len(points)),
                   uuid.UUID(int=999)]
            for name, e in engines.items():
                scores = await e.dense_scores("acme", qd, ids, ARCHIVE_DENSE)
                assert set(scores) == set(ARCHIVE_DENSE), name
                for branch in ARCHIVE_DENSE:
                    want = {h.id: h.score for h in ranked[branch] if h.id in ids}
                    assert set(scores[branch]) == set(want) == set(ids[:2]), (name, branch)
                    for cid, score in want.items():
                        assert abs(scores[branch][cid] - score) <= 1e-4, (name, branch, cid)
    finally:
        for engine in engines.values():
            await engine.close()


async def test_edge_outage_keeps_work_pending_then_converges(make_env):
    """Edge's counterpart of test_faults' outage: another holder of the shard's WAL lock (as a
    second process on the same data dir would be) makes every call IndexUnavailable."""
    async with make_env(engine="edge") as env:
        env.workspace("acme")
        h = env.token("acme")
        card = (await env.client.post(BASE, headers=h, json=_rule(
            "Bookings", "Bookings are counted by order date."))).json()["card"]
        await env.drain()
        await env.resources.index.close()
        holder = QdrantEdgeEngine(env.settings)
        try:
            assert uuid.UUID(card["id"][4:]) in await holder.scroll_ids("acme")  # holds the lock
            r = await env.client.put(f"{BASE}/{card['id']}", headers=h, json=_rule(
                "Bookings", "Bookings are counted by ship_date from 2027 on.", revision=1))
            assert r.status_code == 200 and r.json()["index_status"] == "pending"
            await env.drain()
            ops = (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"]
            assert len(ops) == 1 and ops[0]["status"] == "pending" and "WAL" in ops[0]["last_error"]
            r = await env.client.post(f"{BASE}/search", headers=h, json={"query": "bookings"})
            assert r.status_code == 503 and r.json()["code"] == "index_unavailable"
        finally:
            await holder.close()
        await env.drain()
        assert (await env.client.get(f"{BASE}/pending", headers=h)).json()["total"] == 0
        r = await env.client.post(f"{BASE}/search", headers=h, json={
            "query": "bookings counted by ship date", "mode": "rules"})
        assert r.json()["results"][0]["card"]["revision"] == 2
