"""The Datasette explorer through the host: permissions, list + facets + exports, card detail,
pending operations and verified recall (DESIGN §10)."""

from __future__ import annotations

import csv
import dataclasses
import io
import re
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from datasette.app import Datasette
from datasette.plugins import pm

import explorer_plugin
from explorer_plugin import resources as explorer_resources
from shared.errors import IndexUnavailable

ORDERS_RULE = {
    "family": "sql_rule",
    "title": "Net revenue excludes cancelled orders",
    "content": {"rule": "Filter orders with status <> 'cancelled' before summing amount for net revenue.",
                "rationale": "Cancelled orders are refunded in full."},
    "concepts": ["revenue", "orders"],
    "dependencies": [{"database": "shop", "schema": "public", "table": "orders", "column": "status"},
                     {"database": "shop"}],
}
CHURN_DEF = {
    "family": "domain_clarification",
    "title": "Churned customer",
    "content": {"definition": "A customer with no purchase in the last 90 days."},
    "concepts": ["churn"],
}
SOLVED = {
    "family": "solved_question",
    "title": "Top <b>customers</b> by revenue",
    "content": {"question": "Who are the top 5 customers by net revenue?",
                "sql": "SELECT customer_id, sum(amount) FROM orders\nWHERE status <> 'cancelled'\n"
                       "GROUP BY 1 ORDER BY 2 DESC LIMIT 5"},
    "dependencies": [{"database": "shop", "schema": "public", "table": "orders"}],
}


@pytest.fixture
def explorer() -> Callable[..., Datasette]:
    """Factory: a Datasette with the explorer plugin over an env's resources (or, with
    ``shared=False``, over its own lazily opened pool). Unregisters the plugin afterwards if this
    fixture registered it (it is normally loaded from the ``datasette`` entry point)."""
    registered_here = not pm.is_registered(explorer_plugin)
    if registered_here:
        pm.register(explorer_plugin, name="memarc_explorer")
    built: list[Datasette] = []

    def build(env: Any, workspaces: dict[str, Any], *, shared: bool = True,
              resources: Any = None, **config: Any) -> Datasette:
        metadata = {"plugins": {"memarc-explorer": {"workspaces": workspaces, **config}}}
        ds = Datasette(memory=False, metadata=metadata)
        if shared:
            ds.memarc_resources = resources or env.resources
        built.append(ds)
        return ds

    yield build
    if registered_here:
        pm.unregister(explorer_plugin)


async def get(ds: Datasette, path: str, actor: str | None = "alice", **params: Any):
    cookies = {"ds_actor": ds.sign({"a": {"id": actor}}, "actor")} if actor else None
    return await ds.client.get(path, cookies=cookies, params=params or None)


async def create(env: Any, ws: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    r = await env.client.post(f"/api/workspaces/{ws}/memory", json=body, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()["card"]


def rows(html: str, column: str = "title") -> int:
    return html.count(f'<td class="col-{column}">')


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


async def test_workspaces_visible_only_with_permission(make_env, explorer):
    async with make_env() as env:
        env.workspace("acme")
        env.workspace("other")
        mine = await create(env, "acme", CHURN_DEF, env.token("acme"))
        theirs = await create(env, "other", ORDERS_RULE, env.token("other"))
        ds = explorer(env, {"alice": ["acme"], "bob": "*"})

        r = await get(ds, "/-/memory")
        assert r.status_code == 200
        assert 'href="/-/memory/acme"' in r.text and "other" not in r.text
        assert '<table class="rows-and-columns">' in r.text
        r = await get(ds, "/-/memory.json")
        assert r.json() == {"workspaces": [{
            "id": "acme", "language": "en", "created_at": r.json()["workspaces"][0]["created_at"],
            "cards": 1, "current": 0, "open_operations": 1}]}
        assert [w["id"] for w in (await get(ds, "/-/memory.json?_shape=array")).json()] == ["acme"]
        r = await get(ds, "/-/memory.csv")
        assert csv_rows(r.text) == [{"id": "acme", "language": "en", "cards": "1", "current": "0",
                                     "open_operations": "1",
                                     "created_at": csv_rows(r.text)[0]["created_at"]}]
        assert 'href="/-/memory.csv"' in (await get(ds, "/-/memory")).text

        # Every page of a workspace without access is a 404, worded like a missing workspace.
        missing = await get(ds, "/-/memory/nope")
        assert missing.status_code == 404 and "no workspace &#39;nope&#39;" in missing.text
        for path in ("/-/memory/other", "/-/memory/other.json", "/-/memory/other.csv",
                     "/-/memory/other/-/pending", "/-/memory/other/-/pending.json",
                     "/-/memory/other/-/pending.csv", "/-/memory/other/-/recall?q=revenue",
                     f"/-/memory/other/{theirs['id']}", f"/-/memory/other/{theirs['id']}.json",
                     f"/-/memory/other/{mine['id']}"):
            r = await get(ds, path)
            assert r.status_code == 404, path
            assert theirs["id"] not in r.text and "Net revenue" not in r.text, path
            if ".json" in path:
                assert r.json()["ok"] is False and r.json()["error"] == "no workspace 'other'"
            else:
                assert "no workspace &#39;other&#39;" in r.text, path
        # Another workspace's card id under a visible workspace is a plain missing card.
        r = await get(ds, f"/-/memory/acme/{theirs['id']}")
        assert r.status_code == 404 and "Net revenue" not in r.text
        r = await get(ds, f"/-/memory/acme/{theirs['id']}.json")
        assert r.status_code == 404 and r.json()["error"].startswith("no card")
        # Malformed ids are 404s too, not errors.
        for path in ("/-/memory/ACME", "/-/memory/acme/not-a-card", "/-/memory/acme/mem-123"):
            assert (await get(ds, path)).status_code == 404, path

        # "*" and the root actor see every workspace.
        for actor in ("bob", "root"):
            r = await get(ds, "/-/memory.json", actor=actor)
            assert [w["id"] for w in r.json()["workspaces"]] == ["acme", "other"], actor
            r = await get(ds, f"/-/memory/other/{theirs['id']}", actor=actor)
            assert r.status_code == 200 and "Net revenue excludes cancelled orders" in r.text

        # An unmapped actor and the anonymous actor see nothing.
        for actor in ("mallory", None):
            r = await get(ds, "/-/memory", actor=actor)
            assert r.status_code == 200 and "No workspace is visible to you" in r.text
            assert "acme" not in r.text and "other" not in r.text
            assert (await get(ds, "/-/memory.json", actor=actor)).json() == {"workspaces": []}
            assert (await get(ds, "/-/memory/acme", actor=actor)).status_code == 404
            assert (await get(ds, f"/-/memory/acme/{mine['id']}", actor=actor)).status_code == 404


async def test_list_filters_search_pagination_and_exports(make_env, explorer):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        rules = []
        for i in range(25):
            rules.append(await create(env, "acme", dict(
                ORDERS_RULE, title=f"Rule {i:02d} on orders",
                content={"rule": f"Rule number {i} about orders."}), h))
        defs = [await create(env, "acme", dict(CHURN_DEF, title=f"Churn definition {i}"), h)
                for i in range(3)]
        await create(env, "acme", SOLVED, h)
        ds = explorer(env, {"alice": ["acme"]})

        r = await get(ds, "/-/memory/acme")
        assert r.status_code == 200
        assert "29 cards" in r.text and rows(r.text) == 20
        assert "page 1 of 2" in r.text and 'href="/-/memory/acme?_page=2"' in r.text
        # most recently updated first: the solved question, then the definitions
        assert r.text.index("Top &lt;b&gt;customers&lt;/b&gt; by revenue") < r.text.index("Churn definition 2")
        assert "<b>customers</b>" not in r.text
        r = await get(ds, "/-/memory/acme", _page=2)
        assert rows(r.text) == 9 and "Showing 21–29 of 29" in r.text
        r = await get(ds, "/-/memory/acme", _size=5, _page=3)
        assert rows(r.text) == 5 and "page 3 of 6" in r.text
        assert 'href="/-/memory/acme?_size=5&amp;_page=4"' in r.text

        # family filter (repeatable), with facet counts of the other values
        r = await get(ds, "/-/memory/acme?family=sql_rule")
        assert "25 cards" in r.text and rows(r.text) == 20
        assert '<option value="sql_rule" selected>' in r.text
        assert ('<a href="/-/memory/acme?family=sql_rule&amp;family=domain_clarification">'
                'domain_clarification</a> 3') in r.text
        assert 'sql_rule &middot; 25 <a href="/-/memory/acme" class="cross">' in r.text
        r = await get(ds, "/-/memory/acme?family=sql_rule&family=domain_clarification")
        assert "28 cards" in r.text
        # a misspelt filter is refused by name, on the page and its exports, never ignored
        for path in ("/-/memory/acme?concept=revenue", "/-/memory/acme.json?famly=sql_rule",
                     "/-/memory/acme.csv?concept=revenue"):
            r = await get(ds, path)
            assert r.status_code in (400, 422), (path, r.status_code)
            assert ("concept" in r.text or "famly" in r.text) and "unknown parameter" in r.text
        # text search and id search, combined with filters before pagination
        r = await get(ds, "/-/memory/acme?q=churn")
        assert "3 cards" in r.text and rows(r.text) == 3
        r = await get(ds, "/-/memory/acme?q=churn&family=sql_rule")
        assert "0 cards" in r.text and rows(r.text) == 0
        r = await get(ds, "/-/memory/acme", q=rules[7]["id"])
        assert "1 card " in r.text and "Rule 07 on orders" in r.text and rows(r.text) == 1
        r = await get(ds, "/-/memory/acme?q=Rule%20number%2012")
        assert rows(r.text) == 1 and "Rule 12 on orders" in r.text
        r = await get(ds, "/-/memory/acme?origin=import")
        assert "0 cards" in r.text
        r = await get(ds, "/-/memory/acme?origin=manual&family=domain_clarification")
        assert "3 cards" in r.text
        # bad parameters are 400s with the message
        for qs, message in (("family=nope", "unknown family"), ("_size=101", "_size must be between"),
                            ("_page=0", "_page must be between"), ("_size=x", "must be an integer"),
                            ("origin=web", "unknown origin")):
            r = await get(ds, f"/-/memory/acme?{qs}")
            assert r.status_code == 400 and message in r.text, qs
        r = await get(ds, "/-/memory/acme.json?family=nope")
        assert r.status_code == 400 and r.json()["code"] == "invalid_input"

        # .json with the same filters
        r = await get(ds, "/-/memory/acme.json?family=sql_rule&_size=10&_page=3")
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
        body = r.json()
        assert set(body) == {"workspace", "total", "page", "per_page", "cards"}
        assert (body["workspace"], body["total"], body["page"], body["per_page"]) == ("acme", 25, 3, 10)
        assert len(body["cards"]) == 5 and {c["family"] for c in body["cards"]} == {"sql_rule"}
        assert body["cards"][0]["index_status"] == "pending"
        # Datasette's _shape=array: the rows alone
        r = await get(ds, "/-/memory/acme.json?family=sql_rule&_size=3&_shape=array")
        assert [c["family"] for c in r.json()] == ["sql_rule"] * 3
        r = await get(ds, "/-/memory/acme.json?_shape=arrays")
        assert r.status_code == 400 and r.json()["code"] == "invalid_input"
        r = await get(ds, "/-/memory/acme.json", q=defs[0]["id"])
        assert [c["id"] for c in r.json()["cards"]] == [defs[0]["id"]]

        # .csv with the same filters
        r = await get(ds, "/-/memory/acme.csv?family=sql_rule&_size=3")
        assert r.status_code == 200
        table = csv_rows(r.text)
        assert list(table[0]) == ["id", "family", "title", "scope", "origin", "concepts",
                                  "dependencies", "revision", "updated_at", "index_status"]
        assert len(table) == 3
        assert table[0]["concepts"] == "revenue; orders"
        assert table[0]["dependencies"] == "shop.public.orders.status; shop"
        assert table[0]["family"] == "sql_rule" and table[0]["revision"] == "1"
        assert table[0]["index_status"] == "pending" and table[0]["updated_at"]
        r = await get(ds, "/-/memory/acme.csv?family=sql_rule&_stream=1&_dl=1")
        assert r.headers["content-type"].startswith("text/csv")
        assert "attachment" in r.headers["content-disposition"]
        assert len(csv_rows(r.text)) == 25


async def test_list_physical_context_concepts_dates_sort_and_facet_links(make_env, explorer):
    """The one-entry rule, concepts (all of), the updated range and sorting through the explorer's
    URL parameters; facet links replace a single-valued filter and clear what depends on it."""
    def body(title, deps, concepts=()):
        return {"family": "sql_rule", "title": title, "content": {"rule": f"{title}."},
                "dependencies": deps, "concepts": list(concepts)}

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        alpha = await create(env, "acme", body("Alpha", [
            {"database": "db1", "schema": "s", "table": "orders", "column": "id"},
            {"database": "db1", "schema": "s", "table": "customers", "column": "name"}],
            ["sales", "keys"]), h)
        bravo = await create(env, "acme", body("Bravo", [
            {"database": "db1", "schema": "s", "table": "orders"}], ["sales"]), h)
        await create(env, "acme", body("Charlie", [
            {"database": "db2", "schema": "s", "table": "customers", "column": "id"}]), h)
        ds = explorer(env, {"alice": ["acme"]})

        async def titles(**params):
            r = await get(ds, "/-/memory/acme.json", **params)
            assert r.status_code == 200, r.text
            return [c["title"] for c in r.json()["cards"]]

        # one dependency entry must carry every level given
        assert await titles(database="db1", table="orders", column="name") == []
        assert await titles(database="db1", table="customers", column="name") == ["Alpha"]
        assert await titles(database="db1", table="orders", _sort="title") == ["Alpha", "Bravo"]
        r = await get(ds, "/-/memory/acme?database=db1&table=orders")
        assert "2 cards where one dependency is on db1.orders" in r.text
        # the table facet lists tables within the database, its own filter left out
        assert re.search(r'<a href="/-/memory/acme\?database=db1&amp;table=customers">customers</a> 1',
                         r.text)
        # removing the database removes its table too; another database replaces this one
        assert 'db1 &middot; 2 <a href="/-/memory/acme" class="cross">' in r.text
        r = await get(ds, "/-/memory/acme?database=db1&table=customers")
        assert '<a href="/-/memory/acme?database=db2">db2</a> 1' in r.text
        assert (await get(ds, "/-/memory/acme?table=orders")).status_code == 400
        # concepts: all of
        assert await titles(concepts=["sales", "keys"]) == ["Alpha"]
        assert await titles(concepts="sales", _sort="title") == ["Alpha", "Bravo"]
        # updated range (dates are UTC days; before is exclusive)
        with psycopg.connect(env.migrator_url) as conn:
            conn.execute("UPDATE memory.cards SET updated_at = '2020-06-01T12:00:00Z' WHERE id = %s",
                         [uuid.UUID(bravo["id"][4:])])
        assert await titles(updated_before="2021-01-01") == ["Bravo"]
        assert "Bravo" not in await titles(updated_after="2021-01-01")
        assert await titles(updated_after="2020-06-01", updated_before="2020-06-02") == ["Bravo"]
        r = await get(ds, "/-/memory/acme?updated_after=2020-01-01&updated_before=2021-01-01")
        assert 'name="updated_after" value="2020-01-01"' in r.text  # the form keeps the state
        # sorts, ties by id; the current sort's link reverses it
        assert await titles(_sort="title") == ["Alpha", "Bravo", "Charlie"]
        assert await titles(_sort_desc="title") == ["Charlie", "Bravo", "Alpha"]
        assert (await titles())[-1] == "Bravo"  # least recently updated last
        r = await get(ds, "/-/memory/acme?_sort=title&concepts=sales")
        assert 'href="/-/memory/acme?concepts=sales&amp;_sort_desc=title"' in r.text
        assert 'href="/-/memory/acme/' + alpha["id"] + '"' in r.text


async def test_card_detail(make_env, explorer):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        rule = await create(env, "acme", ORDERS_RULE, h)
        solved = await create(env, "acme", dict(SOLVED, links=[
            {"target": rule["id"], "meaning": "applies the <rule>"}]), h)
        await create(env, "acme", dict(CHURN_DEF, links=[
            {"target": solved["id"], "meaning": "example query"}]), h)
        ds = explorer(env, {"alice": ["acme"]})

        r = await get(ds, f"/-/memory/acme/{solved['id']}")
        assert r.status_code == 200
        html = r.text
        assert "<h1>Top &lt;b&gt;customers&lt;/b&gt; by revenue</h1>" in html
        assert "Who are the top 5 customers by net revenue?" in html
        assert ("<pre class=\"wrapped-sql\"><code>SELECT customer_id, sum(amount) FROM orders\n"
                "WHERE status &lt;&gt; &#39;cancelled&#39;") in html
        assert "<td class=\"col-table\">orders</td>" in html
        assert "<code>shop.public.orders</code>" in html
        # outgoing link to the rule, incoming from the churn definition, both with meaning
        assert (f'<a href="/-/memory/acme/{rule["id"]}">Net revenue excludes cancelled orders</a>'
                in html)
        assert "applies the &lt;rule&gt;" in html
        assert re.search(r'<a href="/-/memory/acme/mem-[0-9a-f-]+">Churned customer</a>', html)
        assert "example query" in html
        # not projected yet: pending, with its open operation
        assert 'Projection: <strong class="memarc-status-pending">pending</strong>' in html
        assert '<td class="col-op">upsert</td>' in html
        assert "<dt>revision</dt><dd>1</dd>" in html
        assert 'href="/-/memory/acme"' in html  # breadcrumbs back to the list

        r = await get(ds, f"/-/memory/acme/{solved['id']}.json")
        body = r.json()
        assert body["card"]["id"] == solved["id"] and body["card"]["index_status"] == "pending"
        assert [link["source"] for link in body["incoming_links"]] != []
        assert body["link_titles"] == {rule["id"]: "Net revenue excludes cancelled orders"}
        assert body["open_operations"][0]["status"] == "pending"

        await env.drain()
        r = await get(ds, f"/-/memory/acme/{solved['id']}")
        assert 'Projection: <strong class="memarc-status-current">current</strong>' in r.text
        assert '<td class="col-op">' not in r.text

        # an operation that exhausted its attempts shows as failed, with its last error
        r = await env.client.put(f"/api/workspaces/acme/memory/{rule['id']}", headers=h,
                                 json=dict(ORDERS_RULE, title="Net revenue v2", revision=1))
        assert r.status_code == 200, r.text
        with psycopg.connect(env.migrator_url) as conn:
            conn.execute("UPDATE memory.projection_ops SET status = 'failed', attempts = 5, "
                         "last_error = 'qdrant said <no>' WHERE card_id = %s AND status <> 'done'",
                         [uuid.UUID(rule["id"][4:])])
        r = await get(ds, f"/-/memory/acme/{rule['id']}")
        assert 'Projection: <strong class="memarc-status-failed">failed</strong>' in r.text
        assert "qdrant said &lt;no&gt;" in r.text and "<dt>revision</dt><dd>2</dd>" in r.text
        # concepts and dependencies link to the list filtered by them (one entry: every level)
        assert '<a href="/-/memory/acme?concepts=revenue">revenue</a>' in r.text
        dep = "/-/memory/acme?column=status&amp;database=shop&amp;schema=public&amp;table=orders"
        assert f'<a href="{dep}"' in r.text
        listed = await get(ds, dep.replace("&amp;", "&"))
        assert rows(listed.text) == 1 and "Net revenue v2" in listed.text
        assert f"memarc retry --workspace acme {rule['id']}" in r.text


async def test_pending_page(make_env, explorer):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        card = await create(env, "acme", CHURN_DEF, h)
        ds = explorer(env, {"alice": ["acme"]})

        r = await get(ds, "/-/memory/acme/-/pending")
        assert r.status_code == 200
        assert "1 incomplete operation" in r.text
        assert f'<a href="/-/memory/acme/{card["id"]}">Churned customer</a>' in r.text
        assert '<td class="col-status memarc-status-pending">pending</td>' in r.text
        assert '<td class="col-attempts type-int">0</td>' in r.text
        r = await get(ds, "/-/memory/acme/-/pending.json")
        body = r.json()
        assert body["total"] == 1 and body["workspace"] == "acme"
        op = body["operations"][0]
        assert (op["card_id"], op["op"], op["status"], op["attempts"], op["revision"]) == (
            card["id"], "upsert", "pending", 0, 1)
        assert op["age_seconds"] >= 0
        r = await get(ds, "/-/memory/acme/-/pending.csv?_dl=1")
        assert r.headers["content-disposition"] == 'attachment; filename="acme-pending.csv"'
        table = csv_rows((await get(ds, "/-/memory/acme/-/pending.csv")).text)
        assert [(t["card_id"], t["status"], t["title"]) for t in table] == [
            (card["id"], "pending", "Churned customer")]

        # pages keep their size in every link, with page numbers and a next page
        more = [await create(env, "acme", dict(CHURN_DEF, title=f"More {i}"), h) for i in range(2)]
        r = await get(ds, "/-/memory/acme/-/pending", _size=2)
        assert "3 incomplete operations" in r.text and r.text.count('<td class="col-op">') == 2
        assert '<a href="/-/memory/acme/-/pending?_size=2&amp;_page=2">Next page</a>' in r.text
        assert 'href="/-/memory/acme/-/pending.json?_size=2"' in r.text
        r = await get(ds, "/-/memory/acme/-/pending.json", _size=2, _page=2)
        assert [op["card_id"] for op in r.json()["operations"]] == [more[1]["id"]]
        r = await get(ds, "/-/memory/acme/-/pending.json", _size=2, _page=2, _shape="array")
        assert [op["card_id"] for op in r.json()] == [more[1]["id"]]
        r = await get(ds, "/-/memory/acme/-/activity", _size=2, verb="create")
        assert '<a href="/-/memory/acme/-/activity?verb=create&amp;_size=2&amp;_page=2">Next page</a>' in r.text
        assert 'href="/-/memory/acme/-/activity.csv?verb=create&amp;_size=2"' in r.text

        await env.drain()
        r = await get(ds, "/-/memory/acme/-/pending")
        assert "0 incomplete operations" in r.text and "Nothing pending" in r.text
        # a deletion is pending until its point is removed; the card is gone
        r = await env.client.delete(f"/api/workspaces/acme/memory/{card['id']}", headers=h)
        assert r.status_code == 200
        r = await get(ds, "/-/memory/acme/-/pending")
        assert "<em>deleted card</em>" in r.text and '<td class="col-op">delete</td>' in r.text


async def test_recall_page(make_env, explorer):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        rule = await create(env, "acme", ORDERS_RULE, h)
        churn = await create(env, "acme", dict(CHURN_DEF, links=[
            {"target": rule["id"], "meaning": "revenue of churned customers"}]), h)
        ds = explorer(env, {"alice": ["acme"]})

        r = await get(ds, "/-/memory/acme/-/recall")
        assert r.status_code == 200 and '<input id="memarc-q" type="search" name="q" value="">' in r.text
        # before projection nothing is recalled
        r = await get(ds, "/-/memory/acme/-/recall", q="net revenue cancelled orders", mode="rules")
        assert r.status_code == 200 and "0 results" in r.text

        await env.drain()
        r = await get(ds, "/-/memory/acme/-/recall", q="how to compute net revenue", mode="rules")
        assert r.status_code == 200
        assert "1 result" in r.text
        assert f'<a href="/-/memory/acme/{rule["id"]}">Net revenue excludes cancelled orders</a>' in r.text
        assert '<td class="col-score type-float">0.016393</td>' in r.text  # 1/61
        assert '<td class="col-path memarc-path">direct</td>' in r.text
        assert '<strong class="memarc-excluded">0</strong>' in r.text
        assert '<td class="col-seed_rank type-int">1</td>' in r.text
        # a linked card: path from the seed, as links
        r = await get(ds, "/-/memory/acme/-/recall", q="churned customer definition", mode="search",
                      top=5)
        assert r.status_code == 200
        path = re.findall(r'<td class="col-path memarc-path">(.*?)</td>', r.text)
        assert (f'<a href="/-/memory/acme/{churn["id"]}" title="Churned customer">{churn["id"][4:12]}</a> → '
                f'<a href="/-/memory/acme/{rule["id"]}" title="Net revenue excludes cancelled orders">'
                f'{rule["id"][4:12]}</a>') in path

        # invalid input: 400 with the message, the form kept
        for params, message in (({"mode": "everything"}, "mode"), ({"top": "0"}, "top must be"),
                                ({"mode": "solved", "family": "sql_rule"}, "does not return"),
                                ({"table": "orders"}, "needs filters.database")):
            r = await get(ds, "/-/memory/acme/-/recall", q="revenue", **params)
            assert r.status_code == 400, params
            assert 'class="message-error"' in r.text and message in r.text, params
            assert 'value="revenue"' in r.text

        # an unavailable index is a 503 with its message, never an empty result
        class DownIndex:
            async def check_collection(self, *args: Any) -> bool:
                raise IndexUnavailable("Qdrant is unavailable: ConnectError")

        down = explorer(env, {"alice": ["acme"]},
                        resources=dataclasses.replace(env.resources, index=DownIndex()))
        r = await get(down, "/-/memory/acme/-/recall", q="revenue")
        assert r.status_code == 503 and "Qdrant is unavailable: ConnectError" in r.text
        assert "0 results" not in r.text


async def test_standalone_explorer_without_index(make_env, explorer):
    async with make_env() as env:
        env.workspace("acme")
        card = await create(env, "acme", CHURN_DEF, env.token("acme"))
        ds = explorer(env, {"alice": ["acme"]}, shared=False, database_url=env.settings.database_url,
                      schema="memory")
        try:
            r = await get(ds, "/-/memory/acme")
            assert r.status_code == 200 and "Churned customer" in r.text
            r = await get(ds, f"/-/memory/acme/{card['id']}")
            assert r.status_code == 200
            message = ("The search index is not available in this process (start `memarc up`, "
                       "or configure MEMARC_QDRANT_URL).")
            r = await get(ds, "/-/memory/acme/-/recall")
            assert r.status_code == 200 and message in r.text
            r = await get(ds, "/-/memory/acme/-/recall", q="churn")
            assert r.status_code == 503 and message in r.text
        finally:
            await explorer_resources.close(ds)


async def test_misconfigured_plugin_fails_at_startup(make_env, explorer):
    async with make_env() as env:
        ds = explorer(env, {"alice": "acme"})
        with pytest.raises(ValueError, match="workspaces.alice"):
            await ds.invoke_startup()


async def test_unknown_urls_are_quiet_404s_and_home_redirects(make_env, capfd):
    from datasette.app import Datasette

    async with make_env() as env:
        env.workspace("acme")
        ds = Datasette(memory=False, metadata={"plugins": {"memarc-explorer": {
            "database_url": env.settings.database_url, "workspaces": {"alice": ["acme"]}}}})
        ds.memarc_resources = env.resources
        cookies = {"ds_actor": ds.sign({"a": {"id": "alice"}}, "actor")}
        for path in ("/-/memory/acme/-/recall.json", "/-/memory/acme/-/nope", "/x/y/z/w/v",
                     "/-/memory/acme/-/pending.xml"):
            r = await ds.client.get(path, cookies=cookies)
            assert r.status_code == 404, path
        r = await ds.client.get("/-/memory/acme?q=%00", cookies=cookies)
        assert r.status_code == 400 and "NUL" in r.text
        r = await ds.client.get("/", cookies=cookies)
        assert r.status_code == 302 and r.headers["location"] == "/-/memory"
        assert "Traceback" not in capfd.readouterr().err


def test_page_window_and_facet_toggles():
    """Page links show the first, the last and two pages each side, with gaps; a facet link
    replaces a single-valued filter and clears the filters below it."""
    from explorer_plugin import paging, urls

    assert paging.window(1, 1) == [1]
    assert paging.window(2, 5) == [1, 2, 3, 4, 5]
    assert paging.window(6, 20) == [1, None, 4, 5, 6, 7, 8, None, 20]
    pairs = [("database", "db1"), ("table", "t"), ("column", "c"), ("family", "sql_rule")]
    assert urls.toggle(pairs, "database", "db2", False) == [("family", "sql_rule"), ("database", "db2")]
    assert urls.toggle(pairs, "database", "db1", True) == [("family", "sql_rule")]
    assert urls.toggle(pairs, "table", "t", True) == [("database", "db1"), ("family", "sql_rule")]
    assert urls.toggle(pairs, "family", "x", False) == pairs + [("family", "x")]


async def test_one_error_page_for_archive_datasette_and_unexpected_errors(make_env, explorer):
    """Archive errors, Datasette's own 4xx and unexpected exceptions get the same error page
    (JSON for ``.json`` URLs); only the unexpected one is logged, once, with its traceback, and
    its page says nothing of the cause."""
    import logging

    class Broken:
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("secret <cause>")

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            logged.append((record.getMessage(), record.exc_info is not None))

    logged: list[tuple[str, bool]] = []
    handler = Keep()
    logging.getLogger("memarc.explorer").addHandler(handler)
    try:
        async with make_env() as env:
            env.workspace("acme")
            ds = explorer(env, {"alice": ["acme"]})
            r = await get(ds, "/-/memory/acme.json?_size=0")
            assert (r.status_code, r.json()) == (400, {
                "ok": False, "error": "_size must be between 1 and 100", "status": 400,
                "title": "Invalid request", "code": "invalid_input"})
            r = await get(ds, "/-/memory/acme/-/nope.json")
            assert r.status_code == 404 and r.json()["ok"] is False and "code" not in r.json()
            assert '<p class="crumbs">' in (await get(ds, "/-/memory/acme/-/nope")).text

            broken = explorer(env, {"alice": ["acme"]},
                              resources=dataclasses.replace(env.resources, db=Broken()))
            r = await get(broken, "/-/memory/acme.json")
            assert (r.status_code, r.json()) == (500, {"ok": False, "error": "internal error",
                                                       "status": 500})
            r = await get(broken, "/-/memory/acme")
            assert r.status_code == 500 and "The explorer could not complete this request." in r.text
            assert "secret" not in r.text
        assert logged == [("explorer error on /-/memory/acme.json", True),
                          ("explorer error on /-/memory/acme", True)]
    finally:
        logging.getLogger("memarc.explorer").removeHandler(handler)
