"""Privacy filter (issue 8): secrets never reach the embedder or the index.

The filter fails closed, its configured limit applies to projection and recall alike, projection
format 2 re-projects every card, PostgreSQL keeps the original for callers allowed to see the
workspace.
"""

from __future__ import annotations

import gzip
import json
import re
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_explorer import explorer, get  # noqa: F401  (fixture and helper)

from shared.auth import Principal
from shared.errors import PrivacyFilterFailed, SchemaOutdated
from shared.index.engine import IndexFilter
from shared import models
from shared.models import Card, Dependency, SearchRequest
from shared.privacy import PrivacyFilter, Rule
from shared.projection.documents import projected_document, projected_text
from shared.projection.project import project_operations
from shared.resources import Resources
from shared.store.migrations import migrate

BASE = "/api/workspaces/acme/memory"
F = PrivacyFilter()

# ---- the filter on its own ---------------------------------------------------------------

# (text, secret that must disappear, marker kind that must appear)
EXAMPLES = [
    ("postgresql://alice:s3cr3tPass@db.example.com:5432/sales", "s3cr3tPass", "password"),
    ("mysql+pymysql://etl:Tr0ub4dor&3@10.0.0.5/dw", "Tr0ub4dor&3", "password"),
    ("jdbc:postgresql://db:5432/x?user=bob&password=Hunter2xyz&ssl=true", "Hunter2xyz", "password"),
    ("jdbc:sqlserver://h:1433;databaseName=x;user=sa;password=Pa55w0rd!;encrypt=true", "Pa55w0rd!",
     "password"),
    ("psql 'host=db user=x password=zzTopSecret dbname=y'", "zzTopSecret", "password"),
    ("export PGPASSWORD=abc123def", "abc123def", "password"),
    ('{"db_password": "my secret pw"}', "my secret pw", "password"),
    ("api_key = 'abcdef0123456789abcdef'", "abcdef0123456789abcdef", "api_key"),
    ("client_secret: QmFzZTY0U2VjcmV0", "QmFzZTY0U2VjcmV0", "secret"),
    ("refresh_token=1//0gLongRefresh", "1//0gLongRefresh", "token"),
    ("signing_key: 6f1ed002ab5595859014ebf0951522d96f1ed002", "6f1ed002ab5595859014ebf0951522d96f1ed002",
     "api_key"),
    ("CREATE ROLE app LOGIN PASSWORD 'Sup3r secret';", "Sup3r secret", "password"),
    ("CREATE USER etl IDENTIFIED BY 'OracleSecret1'", "OracleSecret1", "password"),
    ("aws key AKIAIOSFODNN7EXAMPLE in the loader", "AKIAIOSFODNN7EXAMPLE", "aws_access_key"),
    ("my archive token is mat_MIAe2m0CgY0pV7x4rbWq1Hn9sTz_Ku3dLfE8aJ5oXyQ, use it",
     "mat_MIAe2m0CgY0pV7x4rbWq1Hn9sTz_Ku3dLfE8aJ5oXyQ", "memarc_token"),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123456789 for CI", "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
     "github_token"),
    ("slack xoxb-1234567890-1234567890123-abcdefghijklmnopqrstuvwx", "xoxb-1234567890", "slack_token"),
    ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe_key"),
    ("maps AIzaSyA-abcdefghijklmnopqrstuvwxyz12345", "AIzaSyA-abcdefghijklmnopqrstuvwxyz12345",
     "google_api_key"),
    ("curl -H 'Authorization: Bearer abc.def-ghi_jkl123456' https://api", "abc.def-ghi_jkl123456",
     "authorization"),
    ("curl -H 'Authorization: Basic dXNlcjpwYXNzd29yZA==' url", "dXNlcjpwYXNzd29yZA==", "authorization"),
    ("send it as bearer Zm9vYmFyYmF6cXV4MTIz", "Zm9vYmFyYmF6cXV4MTIz", "bearer_token"),
    ("jwt eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3",
     "eyJzdWIiOiIxMjM0NTY3ODkwIn0", "jwt"),
    ("key:\n-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAx4Kb\nq8s9ZmFrZQ==\n"
     "-----END RSA PRIVATE KEY-----\nafter", "MIIEpAIBAAKCAQEAx4Kb", "private_key"),
    ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA (truncated)",
     "b3BlbnNzaC1rZXktdjEAAAAA", "private_key"),
]


@pytest.mark.parametrize(("text", "secret", "kind"), EXAMPLES)
def test_each_kind_of_secret_is_redacted_with_its_marker(text, secret, kind):
    out = F.redact(text)
    assert secret not in out
    assert f"[REDACTED:{kind}]" in out
    assert F.redact(out) == out  # idempotent


def test_what_is_not_a_secret_is_left_alone():
    for text in [
        "SELECT count(*) FROM loan WHERE status = 'A' AND amount > 1000",
        "The password column stores hashes; filter WHERE password IS NOT NULL",
        "Player_Attributes.short_passing: the player's short passing score",
        "chanceCreationPassingClass = 'Safe'",
        "(earliest_fail_id IS NULL AND pass_id = last_pass_id)",
        "tokens are split on whitespace; the key of the table is id",
    ]:
        assert F.redact(text) == text


def test_no_bird_card_is_changed():
    """False positives on real analytics text: the 2,251 BIRD cards shipped with the demo."""
    path = Path(__file__).resolve().parents[1] / "shared" / "data" / "bird_cards.jsonl.gz"
    changed, n = [], 0
    for line in gzip.open(path, "rt", encoding="utf-8"):
        card = json.loads(line)
        text = "\n".join([card["title"], *card["content"].values(), card.get("scope") or "",
                          *card.get("concepts", [])])
        n += 1
        if F.redact(text) != text:
            changed.append(card["key"])
    assert n > 2000 and changed == []


def test_the_filter_fails_closed():
    with pytest.raises(PrivacyFilterFailed, match="MEMARC_PRIVACY_MAX_CHARS") as err:
        PrivacyFilter(max_chars=10).redact("password=hunter2xyz")
    assert "hunter2xyz" not in err.value.message and err.value.code == "privacy_filter_failed"
    # an error inside a rule (here: a rule naming a group its pattern does not have)
    broken = PrivacyFilter(rules=(Rule("password", re.compile(r"password=\S+"), group="nope"),))
    with pytest.raises(PrivacyFilterFailed, match="IndexError"):
        broken.redact("password=hunter2xyz")
    # a rule whose own marker matches it again never converges
    looping = PrivacyFilter(rules=(Rule("ab", re.compile(r"ab")),))
    with pytest.raises(PrivacyFilterFailed, match="did not converge"):
        looping.redact("xaby")


_SAFE = st.characters(codec="ascii", categories=("L", "N"))
_SECRET = st.text(alphabet=_SAFE, min_size=12, max_size=40).map(lambda s: "Zq9" + s)
_PUNCT_SECRET = st.text(alphabet=st.sampled_from("abcXYZ019!#$%*+-./:=?@^_|~"), min_size=12,
                        max_size=30).map(lambda s: "Zq9" + s)
_FILLER = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00",
                                         exclude_categories=("Cs",)), max_size=80)
_KEYS = st.sampled_from(["password", "PASSWORD", "db_password", "PGPASSWORD", "passwd", "pwd",
                         "secret", "client_secret", "api_key", "apiKey", "x-api-key", "token",
                         "access_token", "spring.datasource.password", "db_pass"])
_SEPS = st.sampled_from(["=", ": ", " = ", ":=", " => ", '": "', "="])


@st.composite
def planted(draw) -> tuple[str, str]:
    """A text with one secret planted in a recognisable context, random text around it."""
    secret = draw(_SECRET)
    form = draw(st.integers(0, 7))
    if form == 0:
        key, sep = draw(_KEYS), draw(_SEPS)
        quote = draw(st.sampled_from(["", "'", '"']))
        value = draw(_PUNCT_SECRET) if quote == "" and not sep.startswith('"') else secret
        body = (f'"{key}{sep}{value}"' if sep.startswith('"') else f"{key}{sep}{quote}{value}{quote}")
        secret = value
    elif form == 1:
        scheme = draw(st.sampled_from(["postgresql", "postgres", "mysql+pymysql", "redis", "amqp",
                                       "https", "mongodb+srv", "jdbc:postgresql"]))
        body = f"{scheme}://etl_user:{secret}@db.internal:5432/warehouse"
    elif form == 2:
        body = f"Authorization: {draw(st.sampled_from(['Bearer ', 'Basic ', 'Token ', '']))}{secret}"
    elif form == 3:
        body = f"bearer {secret}"
    elif form == 4:
        secret = "AKIA" + draw(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", min_size=16,
                                       max_size=16))
        body = secret
    elif form == 5:
        secret = draw(st.sampled_from(["ghp_", "xoxb-", "sk_live_", "AIza", "glpat-", "npm_"])) + \
            draw(st.text(alphabet=_SAFE, min_size=36, max_size=40))
        body = secret
    elif form == 6:
        head, payload, sig = (draw(st.text(alphabet=_SAFE, min_size=10, max_size=30)) for _ in range(3))
        secret = f"eyJ{head}.{payload}"
        body = f"{secret}.{sig}"
    else:
        body = (f"-----BEGIN EC PRIVATE KEY-----\n{secret}\n{secret[::-1]}\n"
                "-----END EC PRIVATE KEY-----")
    return body, secret


@settings(max_examples=400, deadline=None)
@given(before=_FILLER, plant=planted(), after=_FILLER, sep_before=st.sampled_from([" ", "\n", "\t"]),
       sep_after=st.sampled_from([" ", "\n", "; ", ", "]))
def test_a_planted_secret_never_survives(before, plant, after, sep_before, sep_after):
    body, secret = plant
    assume(secret not in before and secret not in after)
    out = F.redact(before + sep_before + body + sep_after + after)
    assert secret not in out
    assert "[REDACTED:" in out
    assert F.redact(out) == out


def _card(**fields: Any) -> Card:
    now = datetime.now(timezone.utc)
    base: dict[str, Any] = dict(
        id=f"mem-{uuid.uuid4()}", workspace="acme", family="solved_question", title="t",
        scope=None, origin="manual", source=None, concepts=[], dependencies=[], links=[],
        content={"question": "q", "sql": "SELECT 1"}, revision=1, created_at=now, updated_at=now)
    base.update(fields)
    return Card(**base)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plant=planted(), where=st.sampled_from(["title", "question", "sql", "context", "scope",
                                               "concept", "database", "table"]),
       filler=st.text(alphabet=_SAFE, max_size=20))
def test_a_planted_secret_reaches_neither_the_embedded_text_nor_the_payload(plant, where, filler):
    body, secret = plant
    assume(secret not in filler)
    value = f"{filler} {body} {filler}"
    fields: dict[str, Any] = {}
    content = {"question": "How many loans?", "sql": "SELECT count(*) FROM loan"}
    if where in ("question", "sql", "context"):
        content[where] = value
    elif where == "concept":
        fields["concepts"] = ["loans", value]
    elif where in ("database", "table"):
        dep = {"database": "financial", "schema": "public", "table": "loan"}
        dep[where] = value
        fields["dependencies"] = [Dependency(**dep)]
    else:
        fields[where] = value
    card = _card(content=content, **fields)
    assert secret in projected_text(card)  # planted where the projection reads it
    texts, pl = projected_document(card)
    assert [name for name, text in texts.items() if secret in text] == [], (secret, texts)
    assert secret not in json.dumps(pl, ensure_ascii=False)


# ---- the projection pipeline -------------------------------------------------------------

class RecordingEmbedder:
    """The session's real embedder, remembering every document text it was asked to embed
    (dense and BM25 texts alike, each distinct text once per call)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.documents: list[str] = []
        self.queries: list[str] = []

    def dense_dimension(self) -> int:
        return self.inner.dense_dimension()

    def layout(self, language: str, model=None):
        return self.inner.layout(language, model=model)

    def fingerprint(self, language: str, model=None) -> str:
        return self.inner.fingerprint(language, model)

    async def embed_texts(self, dense_texts: list[str], sparse_texts: list[str], language: str,
                          model=None):
        self.documents.extend(dict.fromkeys([*dense_texts, *sparse_texts]))
        return await self.inner.embed_texts(dense_texts, sparse_texts, language, model)

    async def embed_query(self, text: str, language: str, model=None):
        self.queries.append(text)
        return await self.inner.embed_query(text, language, model)


SECRET_PW = "Hunter2xyzzy"
SECRET_KEY = "AKIAIOSFODNN7EXAMPLE"
SECRET_SCOPE = f"warehouse password={SECRET_PW}"


def _secret_rule(i: int = 0) -> dict[str, Any]:
    return {"family": "sql_rule", "title": f"Invoices loader connection {i}",
            "content": {"rule": f"Invoices are loaded from postgresql://etl:{SECRET_PW}@dw/sales "
                                f"with aws key {SECRET_KEY}.",
                        "rationale": f"export PGPASSWORD={SECRET_PW} before the nightly run"},
            "scope": SECRET_SCOPE, "concepts": ["invoices", f"token={SECRET_PW}"]}


async def _bm25_hits(env, workspace: str, query: str) -> list[uuid.UUID]:
    dense, sparse = await env.resources.embedder.embed_query(query, "en")
    hits = await env.resources.index.hybrid_query(workspace, dense, sparse, IndexFilter(), 20)
    return [h.id for h in hits["bm25"]]


async def test_projection_sends_only_redacted_text_and_payload(make_env, embedder):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        recorder = RecordingEmbedder(embedder)
        env.resources.embedder = recorder  # type: ignore[assignment]
        r = await env.client.post(BASE, headers=h, json=_secret_rule())
        card = r.json()["card"]
        await env.drain()
        assert (await env.client.get(f"{BASE}/{card['id']}", headers=h)).json()["card"]["index_status"] == "current"
        # what the embedding model received: the card's text and its key text (the rule)
        assert len(recorder.documents) == 2
        sent = "\n".join(recorder.documents)
        assert SECRET_PW not in sent and SECRET_KEY not in sent
        assert all("[REDACTED:password]" in d and "[REDACTED:aws_access_key]" in d
                   for d in recorder.documents)
        assert all("Invoices are loaded from postgresql://etl:[REDACTED:password]@dw/sales" in d
                   for d in recorder.documents)
        # what the index stores
        points = await env.resources.index.scroll_ids("acme")
        pl = points[uuid.UUID(card["id"][4:])]
        assert SECRET_PW not in json.dumps(pl) and pl["format"] == models.PROJECTION_FORMAT == 4
        assert pl["scope"] == "warehouse password=[REDACTED:password]"
        # the BM25 vector has no term of the secret; an ordinary word of the card is there
        assert await _bm25_hits(env, "acme", SECRET_PW.lower()) == []
        assert await _bm25_hits(env, "acme", "nightly") == [uuid.UUID(card["id"][4:])]
        # a query with a secret in it is redacted before it is embedded, and still finds the card
        principal = Principal(workspace="acme", permissions=frozenset({"memory.read"}), actor="t")
        res = await env.resources.archive().search(principal, "acme", SearchRequest(
            query=f"nightly run with PGPASSWORD={SECRET_PW}", mode="rules"))
        assert [x.card.id for x in res.results] == [card["id"]]
        assert SECRET_PW in res.results[0].card.content["rationale"]  # from PostgreSQL
        assert recorder.queries[-1] == "nightly run with PGPASSWORD=[REDACTED:password]"


@pytest.mark.parametrize("max_chars", [60, None], ids=["limit-60", "default"])
async def test_recall_applies_the_configured_privacy_limit(make_env, explorer, max_chars):  # noqa: F811
    """``MEMARC_PRIVACY_MAX_CHARS`` reaches recall as it reaches projection: a query longer
    than the limit is refused before anything is sent (503 ``privacy_filter_failed``, on the API
    and on the explorer's recall page alike); under the default limit the same query is answered."""
    overrides = {} if max_chars is None else {"privacy_max_chars": max_chars}
    async with make_env(**overrides) as env:
        env.workspace("acme")
        h = env.token("acme")
        card = (await env.client.post(BASE, headers=h, json={  # projected text: 44 characters
            "family": "sql_rule", "title": "Fiscal weeks",
            "content": {"rule": "Fiscal weeks start on Monday."}})).json()["card"]
        await env.drain()
        query = "when does a fiscal week start in the calendar that finance uses?"
        assert len(query) > 60
        r = await env.client.post(f"{BASE}/search", headers=h, json={"query": query})
        ds = explorer(env, {"alice": ["acme"]})
        page = await get(ds, "/-/memory/acme/-/recall", q=query)
        if max_chars is None:
            assert r.status_code == 200, r.text
            assert [x["card"]["id"] for x in r.json()["results"]] == [card["id"]]
            assert page.status_code == 200 and "Fiscal weeks" in page.text
            return
        assert r.status_code == 503 and r.json()["code"] == "privacy_filter_failed", r.text
        detail = r.json()["detail"]
        assert "MEMARC_PRIVACY_MAX_CHARS" in detail and query not in detail
        assert page.status_code == 503 and detail in page.text
        # a query within the limit is answered (and the card was projected under it)
        r = await env.client.post(f"{BASE}/search", headers=h, json={"query": "fiscal weeks"})
        assert [x["card"]["id"] for x in r.json()["results"]] == [card["id"]]


async def test_a_card_the_filter_refuses_fails_closed(make_env, embedder):
    async with make_env(privacy_max_chars=400, max_attempts=2) as env:
        env.workspace("acme")
        h = env.token("acme")
        recorder = RecordingEmbedder(embedder)
        env.resources.embedder = recorder  # type: ignore[assignment]
        good = (await env.client.post(BASE, headers=h, json={
            "family": "sql_rule", "title": "Short rule", "content": {"rule": "password=abcdefgh1"}})
        ).json()["card"]
        long_text = f"password={SECRET_PW} " + "invoice lines are summed per day. " * 20
        bad = (await env.client.post(BASE, headers=h, json={
            "family": "sql_rule", "title": "Long rule", "content": {"rule": long_text}})).json()["card"]
        # one job leases both operations: the good card is projected, the refused one is not
        report = await project_operations(env.resources.db, env.resources.index, recorder, "acme",
                                          None, max_attempts=2, privacy=env.resources.privacy)
        assert (report.leased, report.upserted, report.failed) == (2, 1, 1)
        # the good card's text and its key text (its rule), redacted; nothing of the refused one
        assert sorted(recorder.documents) == ["Short rule\npassword=[REDACTED:password]",
                                              "password=[REDACTED:password]"]
        bad_uuid = uuid.UUID(bad["id"][4:])
        assert bad_uuid not in await env.resources.index.scroll_ids("acme")
        pending = (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"]
        assert [(o["card_id"], o["status"], o["attempts"]) for o in pending] == [(bad["id"], "pending", 1)]
        assert pending[0]["last_error"].startswith("privacy_filter_failed: privacy filter refused")
        assert SECRET_PW not in pending[0]["last_error"]
        shown = (await env.client.get(f"{BASE}/{good['id']}", headers=h)).json()["card"]
        assert shown["index_status"] == "current"
        # the worker retries it (attempts counted) and then gives up: failed, still nothing sent
        await env.drain()
        pending = (await env.client.get(f"{BASE}/pending", headers=h)).json()["operations"]
        assert [(o["status"], o["attempts"]) for o in pending] == [("failed", 2)]
        assert (await env.client.get(f"{BASE}/{bad['id']}", headers=h)).json()["card"]["index_status"] == "failed"
        assert all(SECRET_PW not in d and "Long rule" not in d for d in recorder.documents)
        assert bad_uuid not in await env.resources.index.scroll_ids("acme")
        # a rebuild refuses the card too: it fails and keeps the old collection
        r = await env.client.post(f"{BASE}/index", headers=h)
        await env.drain()
        row = (await env.client.get(f"{BASE}/index/{r.json()['id']}", headers=h)).json()
        assert row["status"] == "failed" and "privacy filter refused" in row["error"]
        assert set(await env.resources.index.scroll_ids("acme")) == {uuid.UUID(good["id"][4:])}
        assert all(SECRET_PW not in d for d in recorder.documents)


async def _projected_invoice_rule(env) -> tuple[dict[str, str], dict[str, Any]]:
    """Workspace acme, a manage token's headers, one card projected by the worker."""
    env.workspace("acme")
    h = env.token("acme")
    card = (await env.client.post(BASE, headers=h, json={
        "family": "sql_rule", "title": "Invoice rule", "content": {"rule": "Sum invoice lines."}})
    ).json()["card"]
    await env.drain()
    return h, card


async def test_a_refused_edit_removes_the_old_point(make_env):
    async with make_env(privacy_max_chars=300) as env:
        h, card = await _projected_invoice_rule(env)
        cid = uuid.UUID(card["id"][4:])
        assert cid in await env.resources.index.scroll_ids("acme")
        r = await env.client.put(f"{BASE}/{card['id']}", headers=h, json={
            "family": "sql_rule", "title": "Invoice rule", "revision": 1,
            "content": {"rule": "Sum invoice lines. " * 20}})
        assert r.status_code == 200
        report = await project_operations(env.resources.db, env.resources.index,
                                          env.resources.embedder, "acme", None,
                                          privacy=env.resources.privacy)
        assert (report.upserted, report.failed) == (0, 1)
        assert cid not in await env.resources.index.scroll_ids("acme")
        shown = (await env.client.get(f"{BASE}/{card['id']}", headers=h)).json()
        assert shown["card"]["index_status"] == "pending"
        assert shown["open_operations"][0]["last_error"].startswith("privacy_filter_failed")


async def test_a_card_refused_at_its_projected_revision_is_no_longer_current(make_env):
    async with make_env() as env:
        h, card = await _projected_invoice_rule(env)
        assert (await env.client.get(f"{BASE}/{card['id']}", headers=h)).json()["card"]["index_status"] == "current"
        # the same revision meets a stricter filter (a lower MEMARC_PRIVACY_MAX_CHARS since)
        assert (await env.client.post(f"{BASE}/{card['id']}/retry", headers=h)).status_code == 202
        report = await project_operations(env.resources.db, env.resources.index,
                                          env.resources.embedder, "acme", None,
                                          privacy=PrivacyFilter(max_chars=10))
        assert report.failed == 1
        assert uuid.UUID(card["id"][4:]) not in await env.resources.index.scroll_ids("acme")
        shown = (await env.client.get(f"{BASE}/{card['id']}", headers=h)).json()["card"]
        assert shown["index_status"] == "pending" and shown["revision"] == 1


# ---- PostgreSQL keeps the original; only allowed callers see it ---------------------------

async def test_the_original_is_shown_only_to_callers_of_the_workspace(make_env, explorer):  # noqa: F811
    async with make_env() as env:
        env.workspace("acme")
        env.workspace("other")
        h = env.token("acme")
        reader = env.token("acme", "memory.read")
        card = (await env.client.post(BASE, headers=h, json=_secret_rule())).json()["card"]
        await env.drain()
        # the API shows the original to a caller of the workspace
        shown = (await env.client.get(f"{BASE}/{card['id']}", headers=h)).json()["card"]
        assert SECRET_PW in shown["content"]["rule"] and shown["scope"] == SECRET_SCOPE
        # recall results are rebuilt from PostgreSQL: the original text, for memory.read too;
        # a scope filter with the original value matches (the index holds it redacted)
        r = await env.client.post(f"{BASE}/search", headers=reader, json={
            "query": "how are invoices loaded", "mode": "rules",
            "filters": {"scope": SECRET_SCOPE, "concepts": [f"token={SECRET_PW}"]}})
        assert r.status_code == 200, r.text
        [hit] = r.json()["results"]
        assert hit["card"]["id"] == card["id"] and SECRET_PW in hit["card"]["content"]["rationale"]
        # another scope whose redacted form is the same is not matched: PostgreSQL verifies
        r = await env.client.post(f"{BASE}/search", headers=reader, json={
            "query": "how are invoices loaded", "mode": "rules",
            "filters": {"scope": "warehouse password=somethingelse"}})
        assert r.json()["results"] == [] and r.json()["excluded"] == 1
        # another workspace's token learns nothing
        other = env.token("other")
        for method, path in (("GET", f"{BASE}/{card['id']}"),
                             ("GET", f"/api/workspaces/other/memory/{card['id']}"),
                             ("GET", f"/api/workspaces/other/memory?q={SECRET_PW}")):
            r = await env.client.request(method, path, headers=other)
            assert SECRET_PW not in r.text and "Invoices loader" not in r.text, path
            assert r.status_code in (200, 403, 404), path
        # the explorer: an actor allowed to see acme sees the original, another does not
        ds = explorer(env, {"alice": ["acme"], "bob": ["other"]})
        r = await get(ds, f"/-/memory/acme/{card['id']}", actor="alice")
        assert r.status_code == 200 and SECRET_PW in r.text
        for path in (f"/-/memory/acme/{card['id']}", f"/-/memory/acme/{card['id']}.json",
                     f"/-/memory/other/{card['id']}", "/-/memory/acme.csv"):
            r = await get(ds, path, actor="bob")
            assert r.status_code == 404 and SECRET_PW not in r.text, path


# ---- projection format 2: migration 005 re-projects every card ---------------------------

async def _format_1_archive(env, monkeypatch) -> tuple[dict[str, str], list[dict], dict]:
    """Workspaces acme (three cards with a secret) and other (one), projected as the format-1
    code did (no filter, format 1 in the payload and the record), the database taken back to
    before migration 005. Returns (acme's headers, acme's cards, other's card)."""
    env.workspace("acme")
    env.workspace("other")
    h = env.token("acme")
    cards = [(await env.client.post(BASE, headers=h, json=_secret_rule(i))).json()["card"]
             for i in range(3)]
    theirs = (await env.client.post("/api/workspaces/other/memory", headers=env.token("other"),
                                    json=_secret_rule(9))).json()["card"]
    with monkeypatch.context() as m:
        m.setattr(models, "PROJECTION_FORMAT", 1)
        for ws in ("acme", "other"):
            report = await project_operations(env.resources.db, env.resources.index,
                                              env.resources.embedder, ws, None,
                                              privacy=PrivacyFilter(rules=()))
            assert report.failed == 0
    with psycopg.connect(env.migrator_url, autocommit=True) as conn:
        # back to before migration 005 (and 006, which came after it; 014 applies again as it is)
        conn.execute("DELETE FROM memory.schema_migrations WHERE version >= 5")
        conn.execute("DELETE FROM memory.projection_formats WHERE format >= 2")
        for name in ("card_links_inserted_requeue ON memory.card_links",
                     "card_links_deleted_requeue ON memory.card_links",
                     "cards_question_requeue ON memory.cards"):
            conn.execute(f"DROP TRIGGER {name}")
        for name in ("card_links_requeue_inserted()", "card_links_requeue_deleted()",
                     "cards_requeue_question_targets()", "requeue_expanded_cards(uuid[])"):
            conn.execute(f"DROP FUNCTION memory.{name}")
        # 008's visible text (its function body refers to the column; SQL bodies are not tracked)
        conn.execute("ALTER TABLE memory.cards DROP COLUMN search_text")
        conn.execute("DROP FUNCTION memory.card_visible_text(text, text, text[], jsonb)")
        conn.execute("DROP INDEX memory.activity_card_recent_idx")  # 009
        conn.execute("DROP TABLE memory.session_decisions")  # 012
        # 023's lease order: its trigger, functions, index and column
        conn.execute("DROP TRIGGER projection_ops_lease_order ON memory.projection_ops")
        conn.execute("DROP FUNCTION memory.projection_ops_set_lease_order()")
        conn.execute("DROP INDEX memory.projection_ops_lease_idx")
        conn.execute("ALTER TABLE memory.projection_ops DROP COLUMN lease_order")
        conn.execute("DROP FUNCTION memory.projection_head_start(text, text)")
        # 024's recall evaluations: its tables, functions and owner policies
        conn.execute("DROP FUNCTION memory.evaluation_states()")
        conn.execute("DROP FUNCTION memory.evaluation_latest()")
        conn.execute("DROP TABLE memory.eval_runs, memory.eval_cases")
        conn.execute("DROP POLICY owner_all ON memory.projections")
        conn.execute("DROP POLICY owner_all ON memory.activity")
    return h, cards, theirs


# 005 and every migration after it (the undo above takes the database back to before 005; a
# later migration must either be undone there too or apply again over its own objects)
MIGRATIONS_SINCE_005 = sorted(p.stem for p in (Path(__file__).resolve().parents[1] / "migrations")
                              .glob("*.sql") if int(p.stem[:3]) >= 5)


async def _reprojected_after_005(env, monkeypatch) -> tuple[dict[str, str], list[dict], dict]:
    """:func:`_format_1_archive`, migrated, and the worker run (its sweep finds the queued
    operations)."""
    h, cards, theirs = await _format_1_archive(env, monkeypatch)
    assert migrate(env.migrator_url, "memory") == MIGRATIONS_SINCE_005
    await (await Resources.open(env.settings, with_index=False)).close()
    await env.drain()
    return h, cards, theirs


async def test_format_1_points_hold_the_raw_text_and_the_code_refuses_them_until_migrated(
        make_env, monkeypatch):
    async with make_env() as env:
        _, cards, _ = await _format_1_archive(env, monkeypatch)
        ids = {uuid.UUID(c["id"][4:]) for c in cards}
        points = await env.resources.index.scroll_ids("acme")
        assert {p["format"] for p in points.values()} == {1} and set(points) == ids
        assert all(p["scope"] == SECRET_SCOPE for p in points.values())  # raw text in format 1
        assert await _bm25_hits(env, "acme", SECRET_PW.lower()) != []
        # this code refuses to run on it until it is migrated
        with pytest.raises(SchemaOutdated, match="memarc migrate"):
            await (await Resources.open(env.settings, with_index=False)).close()


async def test_migration_005_makes_every_card_pending_and_recall_drops_format_1_hits(
        make_env, monkeypatch):
    async with make_env() as env:
        h, cards, _ = await _format_1_archive(env, monkeypatch)
        assert migrate(env.migrator_url, "memory") == MIGRATIONS_SINCE_005
        pending = (await env.client.get(f"{BASE}/pending", headers=h)).json()
        assert pending["total"] == 3 and {o["card_id"] for o in pending["operations"]} == {
            c["id"] for c in cards}
        assert all(o["op"] == "upsert" and o["status"] == "pending" for o in pending["operations"])
        for c in cards:
            shown = (await env.client.get(f"{BASE}/{c['id']}", headers=h)).json()["card"]
            assert shown["index_status"] == "pending" and shown["revision"] == 1
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "how are invoices loaded", "mode": "rules"})
        assert r.json()["results"] == [] and r.json()["excluded"] == 3
        audit = (await env.client.get(f"{BASE}/audit", headers=h)).json()
        assert (audit["pending"], audit["current"], audit["stale"]) == (3, 0, [])


async def test_after_migration_005_the_worker_reprojects_every_card_redacted(
        make_env, monkeypatch):
    async with make_env() as env:
        h, cards, theirs = await _reprojected_after_005(env, monkeypatch)
        for c in cards:
            shown = (await env.client.get(f"{BASE}/{c['id']}", headers=h)).json()["card"]
            assert shown["index_status"] == "current"
        other_card = (await env.client.get(f"/api/workspaces/other/memory/{theirs['id']}",
                                           headers=env.token("other"))).json()["card"]
        assert other_card["index_status"] == "current"
        points = await env.resources.index.scroll_ids("acme")
        assert {p["format"] for p in points.values()} == {models.PROJECTION_FORMAT}
        assert all(SECRET_PW not in json.dumps(p) for p in points.values())
        assert await _bm25_hits(env, "acme", SECRET_PW.lower()) == []
        r = await env.client.post(f"{BASE}/search", headers=h,
                                  json={"query": "how are invoices loaded", "mode": "rules"})
        assert {x["card"]["id"] for x in r.json()["results"]} == {c["id"] for c in cards}
        audit = (await env.client.get(f"{BASE}/audit", headers=h)).json()
        assert (audit["current"], audit["pending"], audit["stale"], audit["missing"]) == (3, 0, [], [])


async def test_after_migration_005_a_rebuild_writes_format_2_redacted_too(make_env, monkeypatch):
    async with make_env() as env:
        h, cards, _ = await _reprojected_after_005(env, monkeypatch)
        r = await env.client.post(f"{BASE}/index", headers=h)
        await env.drain()
        assert (await env.client.get(f"{BASE}/index/{r.json()['id']}", headers=h)).json()["status"] == "done"
        points = await env.resources.index.scroll_ids("acme")
        assert {p["format"] for p in points.values()} == {models.PROJECTION_FORMAT}
        assert set(points) == {uuid.UUID(c["id"][4:]) for c in cards}
        assert all(SECRET_PW not in json.dumps(p) for p in points.values())
        assert await _bm25_hits(env, "acme", SECRET_PW.lower()) == []
