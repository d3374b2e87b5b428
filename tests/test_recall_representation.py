"""Projection formats 3 and 4 (issue 13): the key vectors, the questions of linking solved cards
in a clarification's projection (kept consistent through the outbox in the same transaction), the
model fingerprint that makes a collection built with other model files incompatible, and format
4's own-text vectors (the card without its linked questions, searched by ``rules`` mode;
migration 014 re-queues every card)."""

from __future__ import annotations

import json
import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path

import msgspec
import psycopg
import pytest

from shared import models
from shared.config import load_settings
from shared.index.embedding import Embedder
from shared.index.engine import (ARCHIVE_DENSE, ARCHIVE_SPARSE, BM25, DENSE, KEY, KEY_BM25, OWN,
                                 OWN_BM25)
from shared.models import Card, Dependency
from shared.projection.documents import (content_text, projected_document, projected_text,
                                         vector_texts)
from shared.store.migrations import migrate
from helpers import model_env, skip_or_fail

BASE = "/api/workspaces/acme/memory"

ELDER_CLAUSE = {"family": "domain_clarification", "title": "Age > 65",
                "content": {"definition": "Age > 65"},
                "dependencies": [{"database": "clinic", "schema": "public", "table": "patient",
                                  "column": "age"}]}
OTHER_CLAUSES = [
    {"family": "domain_clarification", "title": "Active means status = 'A'",
     "content": {"definition": "An active account has status = 'A'."}},
    {"family": "domain_clarification", "title": "Female patients",
     "content": {"definition": "SEX = 'F' means a female patient."}},
]


def _solved(question: str, links: list[str], sql: str = "SELECT count(*) FROM patient") -> dict:
    return {"family": "solved_question", "title": question,
            "content": {"question": question, "sql": sql},
            "links": [{"target": t, "meaning": "uses"} for t in links]}


async def _create(env, h, body) -> dict:
    r = await env.client.post(BASE, headers=h, json=body)
    assert r.status_code == 201, r.text
    return r.json()["card"]


def _open_upserts(env, card_id: str) -> int:
    return env.scalar("SELECT count(*) FROM memory.projection_ops WHERE card_id = %s "
                      "AND op = 'upsert' AND status = 'pending'", card_id[4:])


async def _bm25_rank(env, h, query: str, card_id: str) -> int | None:
    r = await env.client.post(f"{BASE}/search", headers=h, json={"query": query, "mode": "search"})
    assert r.status_code == 200, r.text
    ranks = {x["card"]["id"]: x["retrieval"].get("bm25_rank") for x in r.json()["results"]}
    return ranks.get(card_id)


@pytest.mark.both_engines
async def test_a_clarification_is_found_through_the_questions_that_used_it(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        clause = await _create(env, h, ELDER_CLAUSE)
        for other in OTHER_CLAUSES:
            await _create(env, h, other)
        await env.drain()
        # nothing in the clause's own words says "elderly"
        assert await _bm25_rank(env, h, "elderly", clause["id"]) is None
        solved = await _create(env, h, _solved("How many elderly patients are there?",
                                               [clause["id"]]))
        # the link queued the clause's re-projection in the create's own transaction
        assert _open_upserts(env, clause["id"]) == 1
        await env.drain()
        assert await _bm25_rank(env, h, "elderly", clause["id"]) == 1
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "elderly patients", "mode": "search"})
        assert r.json()["results"][0]["card"]["id"] == clause["id"]
        assert solved["id"] not in {x["card"]["id"] for x in r.json()["results"]}  # mode families

        # a new question text re-queues the clause, and the old words stop finding it
        shown = (await env.client.get(f"{BASE}/{solved['id']}", headers=h)).json()["card"]
        body = {k: shown[k] for k in ("family", "title", "content", "links", "revision")}
        body["content"] = {**body["content"], "question": "How many senior patients are there?"}
        r = await env.client.put(f"{BASE}/{solved['id']}", headers=h, json=body)
        assert r.status_code == 200, r.text
        assert _open_upserts(env, clause["id"]) == 1
        await env.drain()
        assert await _bm25_rank(env, h, "elderly", clause["id"]) is None
        assert await _bm25_rank(env, h, "senior", clause["id"]) == 1

        # deleting the solved card removes its question from the clause's projection
        assert (await env.client.delete(f"{BASE}/{solved['id']}", headers=h)).status_code == 200
        assert _open_upserts(env, clause["id"]) == 1
        await env.drain()
        assert await _bm25_rank(env, h, "senior", clause["id"]) is None
        audit = (await env.client.get(f"{BASE}/audit", headers=h)).json()
        assert (audit["stale"], audit["missing"], audit["orphan"]) == ([], [], [])


async def test_an_import_projects_each_linked_clause_once(make_env):
    """The import's links queue their targets through the trigger; the import's own upserts do
    not add a second operation for those cards."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        lines = [{"key": "c1", **ELDER_CLAUSE},
                 {"key": "s1", **_solved("How many elderly patients?", ["c1"])},
                 {"key": "s2", **_solved("Count the old patients", ["c1"])}]
        r = await env.client.post(f"{BASE}/import", headers=h,
                                  content="\n".join(json.dumps(x) for x in lines))
        assert r.status_code == 201, r.text
        assert env.scalar("SELECT count(*) FROM memory.projection_ops") == 3
        await env.drain()
        ids = {x["card"]["title"]: x["card"]["id"] for x in (await env.client.post(
            f"{BASE}/search", headers=h, json={"query": "old patients", "mode": "search"})
        ).json()["results"]}
        assert list(ids) == ["Age > 65"]


async def test_a_solved_question_is_found_by_its_question(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        card = await _create(env, h, _solved("How many patients are older than 65?", [],
                                             "SELECT count(*) FROM patient WHERE age > 65"))
        await _create(env, h, _solved("List the patients admitted in 2023", [],
                                      "SELECT * FROM admission WHERE year = 2023"))
        await env.drain()
        r = await env.client.post(f"{BASE}/search", headers=h, json={
            "query": "count the patients who are over 65 years old", "mode": "solved"})
        top = r.json()["results"][0]
        assert top["card"]["id"] == card["id"]
        assert top["retrieval"]["key_rank"] == 1  # the stored question's own vector found it
        assert top["retrieval"]["dense_rank"] is not None


async def test_other_model_files_make_the_collection_incompatible_until_rebuilt(make_env,
                                                                              tmp_path: Path):
    """The collection records a fingerprint of the model files it was built with: swapping the
    files keeps writes pending and makes recall 503 ``index_incompatible`` until `index`."""
    models = model_env()
    if "MEMARC_DENSE_MODEL_PATH" not in models:
        skip_or_fail("needs a local copy of the dense model (MEMARC_DENSE_MODEL_PATH)")
    dense_path = Path(models["MEMARC_DENSE_MODEL_PATH"])
    copy = tmp_path / "model"
    shutil.copytree(dense_path, copy)
    for f in copy.iterdir():
        f.chmod(0o644)

    def use_model(env, folder: Path) -> None:
        """This process (worker and API) embeds with the model in ``folder`` from now on."""
        e = Embedder(load_settings({**models, "MEMARC_DENSE_MODEL_PATH": str(folder)}))
        e.load(("en",))
        env.resources.embedder = e
        env.app.state.archive = env.resources.archive()

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        use_model(env, copy)
        card = await _create(env, h, ELDER_CLAUSE)
        await env.drain()
        assert (await env.client.post(f"{BASE}/search", headers=h, json={
            "query": "age over 65"})).status_code == 200
        # other files in the model folder (a changed tokenizer configuration, as another
        # checkpoint of the same dimension would be): another fingerprint
        config = copy / "tokenizer_config.json"
        config.write_text(config.read_text() + "\n", encoding="utf-8")
        use_model(env, copy)
        r = await env.client.post(f"{BASE}/search", headers=h, json={"query": "age over 65"})
        assert r.status_code == 503 and r.json()["code"] == "index_incompatible", r.text
        assert "fingerprint" in r.json()["detail"]
        second = await _create(env, h, OTHER_CLAUSES[0])
        assert second is not None
        await env.drain()
        pending = (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"]
        assert [o["card_id"] for o in pending] == [second["id"]]
        assert "fingerprint" in pending[0]["last_error"]
        # the rebuild makes a collection with the new fingerprint
        r = await env.client.post(f"{BASE}/index", headers=h)
        assert r.status_code == 202, r.text
        await env.drain()
        assert (await env.client.get(f"{BASE}/index/{r.json()['id']}", headers=h)).json()[
            "status"] == "done"
        await env.client.post(f"{BASE}/{second['id']}/retry", headers=h)
        await env.drain()
        r = await env.client.post(f"{BASE}/search", headers=h, json={"query": "age over 65"})
        assert r.status_code == 200 and r.json()["results"][0]["card"]["id"] == card["id"]
        assert (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"] == []


async def test_an_italian_workspace_can_have_a_dense_model_of_its_own(make_env, tmp_path: Path):
    """``MEMARC_DENSE_MODEL_IT`` / ``_IT_PATH`` pick the dense model of ``it`` workspaces (a
    multilingual one, in a deployment that can fetch it); each collection records the fingerprint
    of the model it was built with. Here the "other" model is a copy of the offline one with one
    file changed: another fingerprint, the same vectors."""
    models = model_env()
    if "MEMARC_DENSE_MODEL_PATH" not in models:
        skip_or_fail("needs a local copy of the dense model (MEMARC_DENSE_MODEL_PATH)")
    copy = tmp_path / "model-it"
    shutil.copytree(models["MEMARC_DENSE_MODEL_PATH"], copy)
    for f in copy.iterdir():
        f.chmod(0o644)
    (copy / "config.json").write_text((copy / "config.json").read_text() + "\n", encoding="utf-8")
    # fastembed knows a model by its id (a multilingual one would be named here); offline the
    # same architecture under another folder stands in for it
    model_id = "sentence-transformers/all-MiniLM-L6-v2"
    settings = load_settings({**models, "MEMARC_DENSE_MODEL_IT": model_id,
                              "MEMARC_DENSE_MODEL_IT_PATH": str(copy)})
    assert settings.dense_model_for("it") == (model_id, str(copy))
    assert settings.dense_model_for("en") == (settings.dense_model, settings.dense_model_path)
    e = Embedder(settings)
    e.load(("en", "it"))
    en, it = e.layout("en"), e.layout("it")
    assert en.fingerprint != it.fingerprint
    async with make_env() as env:
        env.resources.embedder = e
        env.app.state.archive = env.resources.archive()
        env.workspace("acme")
        env.workspace("ditta", language="it")
        h, hi = env.token("acme"), env.token("ditta")
        await _create(env, h, ELDER_CLAUSE)
        r = await env.client.post("/api/workspaces/ditta/memory", headers=hi, json={
            "family": "domain_clarification", "title": "Anziani",
            "content": {"definition": "Un paziente anziano ha età > 65."}})
        assert r.status_code == 201, r.text
        await env.drain()
        for ws, hh, query, layout in (("acme", h, "age over 65", en),
                                      ("ditta", hi, "pazienti anziani", it)):
            r = await env.client.post(f"/api/workspaces/{ws}/memory/search", headers=hh,
                                      json={"query": query})
            assert r.status_code == 200 and len(r.json()["results"]) == 1, r.text
            assert await env.resources.index.check_collection(ws, layout)
        with pytest.raises(Exception, match="fingerprint"):
            await env.resources.index.check_collection("ditta", en)


# ---- projection format 4: the card's own text as two more named vectors (migration 014) ----

RULE = {"family": "sql_rule", "title": "Elderly patients",
        "content": {"rule": "An elderly patient is one with age > 65: filter patient.age > 65."},
        "dependencies": [{"database": "clinic", "schema": "public", "table": "patient",
                          "column": "age"}]}


def _card(**fields) -> Card:
    now = datetime.now(timezone.utc)
    base = dict(id=f"mem-{uuid.uuid4()}", workspace="acme", family="sql_rule", title="t",
                scope=None, origin="manual", source=None, concepts=[], dependencies=[], links=[],
                content={"rule": "r"}, revision=1, created_at=now, updated_at=now)
    return Card(**{**base, **fields})


def test_format_4_own_vectors_hold_the_card_without_its_linked_questions():
    """``own`` / ``own_bm25`` are the card's own text; ``dense`` / ``bm25`` add the questions of
    the linking solved cards; without linked questions both pairs are the same text (embedded
    once by the projection, which embeds distinct texts)."""
    assert set(ARCHIVE_DENSE) == {DENSE, KEY, OWN} and set(ARCHIVE_SPARSE) == {BM25, KEY_BM25,
                                                                             OWN_BM25}
    rule = _card(title=RULE["title"], content=RULE["content"], scope="reporting",
                 dependencies=[Dependency("clinic", "public", "patient", "age")])
    texts = vector_texts(rule, ["How many senior patients are there?"])
    assert set(texts) == {*ARCHIVE_DENSE, *ARCHIVE_SPARSE}
    own = projected_text(rule)
    assert texts[OWN] == texts[OWN_BM25] == own
    assert "senior" not in own and "Elderly patients" in own and "reporting" in own
    assert "clinic.public.patient.age" in own
    assert texts[DENSE] == texts[BM25] == own + "\nHow many senior patients are there?"
    assert texts[KEY] == texts[KEY_BM25] == RULE["content"]["rule"]
    alone = vector_texts(rule, [])
    assert alone[OWN] == alone[DENSE] and alone[OWN_BM25] == alone[BM25]
    solved = _card(family="solved_question", title="How many patients?",
                   content={"question": "How many patients?", "sql": "SELECT count(*) FROM p"})
    texts = vector_texts(solved, ["ignored"])
    assert texts[OWN] == texts[DENSE] == content_text(solved)
    assert texts[OWN_BM25] == texts[BM25] == projected_text(solved)
    _, pl = projected_document(rule)
    assert pl["format"] == models.PROJECTION_FORMAT == 4


async def test_rules_mode_searches_the_rules_own_text(make_env):
    """A rule linked by solved questions on other subjects: ``search`` finds it through their
    words (document expansion), ``rules`` mode ranks it by its own text (its profile searches
    ``own`` and ``own_bm25``, not the expanded ``dense`` / ``bm25``)."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        rule = await _create(env, h, RULE)
        await _create(env, h, {"family": "sql_rule", "title": "Admissions per year",
                               "content": {"rule": "Count admissions by admission.year."}})
        await _create(env, h, _solved("Which wards had flu outbreaks in winter?", [rule["id"]]))
        await env.drain()
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "flu outbreaks in winter", "mode": "search"})
        found = {x["card"]["id"]: x["retrieval"] for x in r.json()["results"]}
        assert found[rule["id"]].get("bm25_rank") == 1  # the linked question's words
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "patients older than 65", "mode": "rules"})
        assert r.status_code == 200, r.text
        top = r.json()["results"][0]
        assert top["card"]["id"] == rule["id"]
        branches = {k for k, v in top["retrieval"].items() if k.endswith("_rank") and v}
        assert {"own_rank", "own_bm25_rank"} <= branches
        assert not branches & {"dense_rank", "bm25_rank"}  # rules mode: the own text only
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "flu outbreaks in winter", "mode": "rules"})
        ranks = {x["card"]["id"]: x["retrieval"] for x in r.json()["results"]}
        assert ranks.get(rule["id"], {}).get("own_bm25_rank") is None  # not its own words


async def test_migration_014_requeues_every_card_and_recall_drops_format_3_points(
        make_env, monkeypatch):
    """Points projected as format 3 (the payload's and the record's format), the database taken
    back to before 014: the migration queues an upsert of every card, recall excludes the old
    points until the worker re-projects them as format 4 with all six vectors."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        rule = await _create(env, h, RULE)
        solved = await _create(env, h, _solved("How many elderly patients?", [rule["id"]]))
        with monkeypatch.context() as m:
            m.setattr(models, "PROJECTION_FORMAT", 3)
            await env.drain()
        points = await env.resources.index.scroll_ids("acme")
        assert {p["format"] for p in points.values()} == {3} and len(points) == 2
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            conn.execute("DELETE FROM memory.schema_migrations WHERE version = 14")
            conn.execute("DELETE FROM memory.projection_formats WHERE format = 4")
        assert migrate(env.migrator_url, "memory") == ["014_own_text_vectors"]
        ops = env.scalar("SELECT array_agg(card_id::text ORDER BY card_id) FROM "
                         "memory.projection_ops WHERE op = 'upsert' AND status = 'pending'")
        assert ops == sorted([rule["id"][4:], solved["id"][4:]])
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "elderly patients", "mode": "rules"})
        assert r.json()["results"] == [] and r.json()["excluded"] == 1
        await env.drain()
        points = await env.resources.index.scroll_ids("acme")
        assert {p["format"] for p in points.values()} == {4}
        for card in (rule, solved):
            shown = (await env.client.get(f"{BASE}/{card['id']}", headers=h)).json()["card"]
            assert shown["index_status"] == "current"
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "elderly patients", "mode": "rules"})
        assert [x["card"]["id"] for x in r.json()["results"]] == [rule["id"]]
        assert r.json()["results"][0]["retrieval"].get("own_bm25_rank") == 1


@pytest.mark.both_engines
async def test_a_format_3_collection_is_incompatible_until_rebuilt_with_six_vectors(make_env):
    """A collection with format 3's four vectors: recall is 503 ``index_incompatible`` and
    writes stay pending until ``index`` rebuilds it with the own-text vectors."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        rule = await _create(env, h, RULE)
        await env.drain()
        index, current = env.resources.index, env.resources.embedder.layout("en")
        old = msgspec.structs.replace(current, dense=(DENSE, KEY), sparse=(BM25, KEY_BM25))
        await index.switch_collection("acme", await index.create_rebuild_collection("acme", old))
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "elderly patients", "mode": "rules"})
        assert r.status_code == 503 and r.json()["code"] == "index_incompatible", r.text
        assert "vectors" in r.json()["detail"]
        r = await env.client.post(f"{BASE}/index", headers=h)
        assert r.status_code == 202, r.text
        await env.drain()
        assert (await env.client.get(f"{BASE}/index/{r.json()['id']}", headers=h)).json()[
            "status"] == "done"
        assert await index.check_collection("acme", current)
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "elderly patients", "mode": "rules"})
        assert r.status_code == 200 and r.json()["results"][0]["card"]["id"] == rule["id"]


def test_the_session_pool_embeds_documents_as_one_session_does(embedder: Embedder):
    """``MEMARC_EMBED_THREADS`` single-threaded sessions embed documents at once, batches dealt
    out in turn: every text gets the vector one fastembed session gives it, in the caller's
    order, whatever the lengths and however many batches each session takes."""
    assert len(embedder._dense_pool("en")) == embedder.settings.embed_threads == 2
    words = "patients admitted after the first visit with a diagnosis of".split()
    texts = [" ".join(words[: 1 + (i * 7) % len(words)]) + f" case {i}" for i in range(53)]
    texts[5] = texts[40]  # a repeated text gets the same vector twice
    got = embedder.embed_dense_sync(texts, "en")
    # the reference: the query session (another session of the same model), one text a batch
    want = [v.tolist() for v in embedder._load_dense("en").embed(texts, batch_size=1)]
    assert len(got) == len(texts)
    for g, w in zip(got, want):
        assert len(g) == len(w) == 384
        assert max(abs(a - b) for a, b in zip(g, w)) < 1e-4
    assert max(abs(a - b) for a, b in zip(got[5], got[40])) < 1e-4
    assert embedder.embed_dense_sync([], "en") == []


async def test_a_session_without_the_archive_search_path_can_link_cards(make_env):
    """Migration 016: the requeue triggers of 006 carry the archive schema's search_path, so a
    session that has not set it (psql, a bulk load as the owner) can insert a link, change a
    linking solved card's question and delete the link; each queues the linked rule's
    re-projection."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        rule = await _create(env, h, RULE)
        solved = await _create(env, h, _solved("How many elderly patients?", []))
        await env.drain()
        rule_id, solved_id = uuid.UUID(rule["id"][4:]), uuid.UUID(solved["id"][4:])
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            assert conn.execute("SHOW search_path").fetchone()[0] != "memory"

            def queued_then_done() -> int:
                """The rule's pending upserts; then marked done, so the next trigger's shows."""
                n = conn.execute("SELECT count(*) FROM memory.projection_ops WHERE card_id = %s "
                                 "AND op = 'upsert' AND status = 'pending'", [rule_id]).fetchone()[0]
                conn.execute("UPDATE memory.projection_ops SET status = 'done' WHERE card_id = %s "
                             "AND status = 'pending'", [rule_id])
                return n

            assert queued_then_done() == 0
            # each of 006's three triggers, from a session without the archive's search_path
            conn.execute("INSERT INTO memory.card_links (workspace_id, source_id, target_id, "
                         "meaning) VALUES ('acme', %s, %s, 'uses')", [solved_id, rule_id])
            assert queued_then_done() == 1
            conn.execute("UPDATE memory.cards SET content = jsonb_set(content, '{question}', "
                         "'\"How many old patients?\"') WHERE id = %s", [solved_id])
            assert queued_then_done() == 1
            conn.execute("DELETE FROM memory.card_links WHERE source_id = %s", [solved_id])
            assert queued_then_done() == 1


async def _elder_clause_and_its_question(env, h) -> tuple[dict, dict]:
    """The elder clause and a solved question linking to it ("elderly"), projected."""
    clause = await _create(env, h, ELDER_CLAUSE)
    solved = await _create(env, h, _solved("How many elderly patients are there?",
                                           [clause["id"]]))
    await env.drain()
    return clause, solved


async def _change_question(env, h, solved: dict, question: str) -> None:
    """PUT a solved card with another question (its current revision, links and the rest kept)."""
    shown = (await env.client.get(f"{BASE}/{solved['id']}", headers=h)).json()["card"]
    body = {k: shown[k] for k in ("family", "title", "content", "links", "revision")}
    body["content"] = {**body["content"], "question": question}
    r = await env.client.put(f"{BASE}/{solved['id']}", headers=h, json=body)
    assert r.status_code == 200, r.text


class _GatedIndex:
    """Test seam: the process's real index engine, whose ``upsert`` waits until ``release`` is
    set (after telling ``upserting``), so that a test can commit a write while a projection job
    is between reading its cards and recording them. Every other method is the real engine's."""

    def __init__(self, inner) -> None:
        import asyncio

        self._inner = inner
        self.upserting = asyncio.Event()
        self.release = asyncio.Event()

    def __getattr__(self, name: str):
        return getattr(self._inner, name)

    async def upsert(self, *args, **kwargs):
        self.upserting.set()
        await self.release.wait()
        return await self._inner.upsert(*args, **kwargs)


@pytest.mark.parametrize("second_pending", [False, True])
async def test_a_question_changed_during_a_projection_of_its_clause_is_projected_after_it(
        make_env, second_pending):
    """Migration 017: a solved card's question that changes while a projection of a clause it
    links to is in flight (the job has read the clause's linked questions, not yet recorded
    them) leaves the clause's re-projection pending: the job completes only the operations it
    saw, unchanged, before reading, so the new question reaches the clause's projection with the
    next job instead of being marked done with the old text. ``second_pending``: the clause has
    another pending upsert, which the job did not lease but would complete; the trigger then
    re-stamps it instead of queuing a new one, and the job must leave it pending."""
    import asyncio

    from shared.projection.project import project_operations

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        clause, solved = await _elder_clause_and_its_question(env, h)
        assert await _bm25_rank(env, h, "elderly", clause["id"]) == 1
        # a new revision of the clause: one pending upsert, projected below by a gated job
        shown = (await env.client.get(f"{BASE}/{clause['id']}", headers=h)).json()["card"]
        body = {k: shown[k] for k in ("family", "title", "content", "dependencies", "revision")}
        r = await env.client.put(f"{BASE}/{clause['id']}", headers=h,
                                 json={**body, "scope": "clinic"})
        assert r.status_code == 200, r.text
        assert _open_upserts(env, clause["id"]) == 1
        leased = env.scalar("SELECT id FROM memory.projection_ops WHERE status = 'pending'")
        if second_pending:
            with psycopg.connect(env.migrator_url) as conn:
                conn.execute("INSERT INTO memory.projection_ops (workspace_id, card_id, op, "
                             "revision) SELECT workspace_id, id, 'upsert', revision "
                             "FROM memory.cards WHERE id = %s", [clause["id"][4:]])
        res = env.resources
        gated = _GatedIndex(res.index)
        job = asyncio.create_task(project_operations(res.db, gated, res.embedder, "acme", leased,
                                                     batch=False))
        await asyncio.wait_for(gated.upserting.wait(), 60)  # read, embedded, not yet written
        await _change_question(env, h, solved, "How many senior patients are there?")
        gated.release.set()
        report = await asyncio.wait_for(job, 60)
        assert report.upserted >= 1 and report.failed == 0, report
        # the job wrote the old question and must not have completed the requeue (new, or the
        # second pending upsert re-stamped by the trigger)
        assert _open_upserts(env, clause["id"]) == 1
        await env.drain()
        assert _open_upserts(env, clause["id"]) == 0
        assert await _bm25_rank(env, h, "senior", clause["id"]) == 1
        assert await _bm25_rank(env, h, "elderly", clause["id"]) is None


async def test_a_question_changed_during_a_rebuild_reaches_its_clause_in_the_new_collection(
        make_env):
    """A rebuild's catch-up compares what each point was built from, not only the revision: a
    linking solved card's question that changes after the clause was written into the new
    collection (the clause's revision stays) is caught up before the switch, which then
    completes the clause's queued re-projection."""
    from shared.projection.rebuild import rebuild_index

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        clause, solved = await _elder_clause_and_its_question(env, h)
        calls = {"n": 0}

        async def change_question(collection: str) -> None:
            calls["n"] += 1
            if calls["n"] == 1:  # both cards are in the new collection, with the old question
                await _change_question(env, h, solved, "How many senior patients are there?")

        r = await env.client.post(f"{BASE}/index", headers=h)
        rid = uuid.UUID(r.json()["id"])
        await rebuild_index(env.resources.db, env.resources.index, env.resources.embedder,
                            "acme", rid, on_batch_written=change_question)
        assert calls["n"] == 1
        row = (await env.client.get(f"{BASE}/index/{rid}", headers=h)).json()
        assert row["status"] == "done" and row["summary"]["caught_up"] == 2, row  # both cards
        await env.drain()
        assert _open_upserts(env, clause["id"]) == 0
        assert await _bm25_rank(env, h, "senior", clause["id"]) == 1
        assert await _bm25_rank(env, h, "elderly", clause["id"]) is None
