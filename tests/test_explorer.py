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


async def _acme_and_other(env, explorer) -> tuple[Datasette, dict[str, Any], dict[str, Any]]:
    """Workspaces acme (a definition) and other (a rule); alice sees acme, bob every workspace.
    Returns (explorer, acme's card, other's card)."""
    env.workspace("acme")
    env.workspace("other")
    mine = await create(env, "acme", CHURN_DEF, env.token("acme"))
    theirs = await create(env, "other", ORDERS_RULE, env.token("other"))
    return explorer(env, {"alice": ["acme"], "bob": "*"}), mine, theirs


async def test_the_workspace_list_shows_the_actors_workspaces_only_in_every_format(
        make_env, explorer):
    async with make_env() as env:
        ds, _, _ = await _acme_and_other(env, explorer)
        r = await get(ds, "/-/memory")
        assert r.status_code == 200
        assert 'href="/-/memory/acme"' in r.text and "other" not in r.text
        assert '<table class="rows-and-columns">' in r.text
        r = await get(ds, "/-/memory.json")
        assert r.json() == {"workspaces": [{
            "id": "acme", "language": "en", "created_at": r.json()["workspaces"][0]["created_at"],
            "cards": 1, "current": 0, "open_operations": 1, "evaluation": None}]}
        assert [w["id"] for w in (await get(ds, "/-/memory.json?_shape=array")).json()] == ["acme"]
        r = await get(ds, "/-/memory.csv")
        assert csv_rows(r.text) == [{"id": "acme", "language": "en", "cards": "1", "current": "0",
                                     "open_operations": "1",
                                     "created_at": csv_rows(r.text)[0]["created_at"]}]
        assert 'href="/-/memory.csv"' in (await get(ds, "/-/memory")).text


async def test_every_page_of_a_workspace_without_access_is_a_404_worded_like_a_missing_one(
        make_env, explorer, subtests):
    async with make_env() as env:
        ds, mine, theirs = await _acme_and_other(env, explorer)
        missing = await get(ds, "/-/memory/nope")
        assert missing.status_code == 404 and "no workspace &#39;nope&#39;" in missing.text
        for path in ("/-/memory/other", "/-/memory/other.json", "/-/memory/other.csv",
                     "/-/memory/other/-/pending", "/-/memory/other/-/pending.json",
                     "/-/memory/other/-/pending.csv", "/-/memory/other/-/recall?q=revenue",
                     f"/-/memory/other/{theirs['id']}", f"/-/memory/other/{theirs['id']}.json",
                     f"/-/memory/other/{mine['id']}"):
            with subtests.test(path=path):
                r = await get(ds, path)
                assert r.status_code == 404, path
                assert theirs["id"] not in r.text and "Net revenue" not in r.text, path
                if ".json" in path:
                    assert r.json()["ok"] is False and r.json()["error"] == "no workspace 'other'"
                else:
                    assert "no workspace &#39;other&#39;" in r.text, path


async def test_another_workspaces_card_or_a_malformed_id_is_a_plain_404(make_env, explorer):
    async with make_env() as env:
        ds, _, theirs = await _acme_and_other(env, explorer)
        # Another workspace's card id under a visible workspace is a plain missing card.
        r = await get(ds, f"/-/memory/acme/{theirs['id']}")
        assert r.status_code == 404 and "Net revenue" not in r.text
        r = await get(ds, f"/-/memory/acme/{theirs['id']}.json")
        assert r.status_code == 404 and r.json()["error"].startswith("no card")
        # Malformed ids are 404s too, not errors.
        for path in ("/-/memory/ACME", "/-/memory/acme/not-a-card", "/-/memory/acme/mem-123"):
            assert (await get(ds, path)).status_code == 404, path


@pytest.mark.parametrize("actor", ["bob", "root"])
async def test_star_and_the_root_actor_see_every_workspace(make_env, explorer, actor):
    async with make_env() as env:
        ds, _, theirs = await _acme_and_other(env, explorer)
        r = await get(ds, "/-/memory.json", actor=actor)
        assert [w["id"] for w in r.json()["workspaces"]] == ["acme", "other"], actor
        r = await get(ds, f"/-/memory/other/{theirs['id']}", actor=actor)
        assert r.status_code == 200 and "Net revenue excludes cancelled orders" in r.text


@pytest.mark.parametrize("actor", ["mallory", None], ids=["unmapped", "anonymous"])
async def test_an_unmapped_or_anonymous_actor_sees_nothing(make_env, explorer, actor):
    async with make_env() as env:
        ds, mine, _ = await _acme_and_other(env, explorer)
        r = await get(ds, "/-/memory", actor=actor)
        assert r.status_code == 200 and "No workspace is visible to you" in r.text
        assert "acme" not in r.text and "other" not in r.text
        assert (await get(ds, "/-/memory.json", actor=actor)).json() == {"workspaces": []}
        assert (await get(ds, "/-/memory/acme", actor=actor)).status_code == 404
        assert (await get(ds, f"/-/memory/acme/{mine['id']}", actor=actor)).status_code == 404


async def _list_of_29(env, explorer) -> tuple[Datasette, list[dict[str, Any]], list[dict[str, Any]]]:
    """Workspace acme with 25 rules, then 3 definitions, then a solved question (all pending);
    returns (alice's explorer, the rules, the definitions)."""
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
    return explorer(env, {"alice": ["acme"]}), rules, defs


async def test_the_list_pages_its_cards_most_recently_updated_first(make_env, explorer):
    async with make_env() as env:
        ds, _, _ = await _list_of_29(env, explorer)
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


async def test_the_family_filter_repeats_and_facets_count_the_other_values(make_env, explorer):
    async with make_env() as env:
        ds, _, _ = await _list_of_29(env, explorer)
        r = await get(ds, "/-/memory/acme?family=sql_rule")
        assert "25 cards" in r.text and rows(r.text) == 20
        assert '<input type="checkbox" id="memarc-family-sql_rule" name="family" value="sql_rule" checked>' in r.text
        assert ('<a href="/-/memory/acme?family=sql_rule&amp;family=domain_clarification">'
                'domain_clarification</a> 3') in r.text
        assert 'sql_rule &middot; 25 <a href="/-/memory/acme" class="cross">' in r.text
        r = await get(ds, "/-/memory/acme?family=sql_rule&family=domain_clarification")
        assert "28 cards" in r.text


async def test_text_id_and_origin_searches_combine_with_filters_before_paging(make_env, explorer):
    async with make_env() as env:
        ds, rules, _ = await _list_of_29(env, explorer)
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


async def test_the_list_text_search_matches_visible_text_not_json(make_env, explorer):
    """The explorer's ``q`` is the API's: content keys and JSON syntax are not text; a line
    break in the SQL and a term in the concepts are."""
    async with make_env() as env:
        ds, _, _ = await _list_of_29(env, explorer)
        # "question" and "sql" are only the solved question's keys; '"' only the JSON's quotes
        for q in ("question", "sql", '"'):
            r = await get(ds, "/-/memory/acme", q=q)
            assert "0 cards" in r.text and rows(r.text) == 0, q
        r = await get(ds, "/-/memory/acme", q="orders\nWHERE status")
        assert "1 card " in r.text and "Top &lt;b&gt;customers" in r.text and rows(r.text) == 1
        # the rules' concepts (revenue) and the solved question's title
        r = await get(ds, "/-/memory/acme.json", q="revenue", _size=100)
        assert r.json()["total"] == 26
        assert {c["family"] for c in r.json()["cards"]} == {"sql_rule", "solved_question"}


async def test_a_misspelt_or_bad_list_parameter_is_refused_with_its_message(
        make_env, explorer, subtests):
    async with make_env() as env:
        ds, _, _ = await _list_of_29(env, explorer)
        # a misspelt filter is refused by name, on the page and its exports, never ignored
        for path in ("/-/memory/acme?concpets=revenue", "/-/memory/acme.json?famly=sql_rule",
                     "/-/memory/acme.csv?concpets=revenue"):
            with subtests.test(path=path):
                r = await get(ds, path)
                assert r.status_code in (400, 422), (path, r.status_code)
                assert ("concpets" in r.text or "famly" in r.text) and "unknown parameter" in r.text
        # bad parameters are 400s with the message
        for qs, message in (
                ("family=nope", "unknown family &#39;nope&#39;; allowed: domain_clarification, "
                                "sql_rule, solved_question, explained_error"),
                ("_size=101", "_size must be between"),
                ("_page=0", "_page must be between"), ("_size=x", "must be an integer"),
                ("origin=web", "unknown origin &#39;web&#39;; allowed: manual, workflow, import")):
            with subtests.test(query=qs):
                r = await get(ds, f"/-/memory/acme?{qs}")
                assert r.status_code == 400 and message in r.text, qs
        r = await get(ds, "/-/memory/acme.json?family=nope")
        assert r.status_code == 400 and r.json()["code"] == "invalid_input"


async def test_the_json_export_takes_the_same_filters_and_datasettes_array_shape(
        make_env, explorer):
    async with make_env() as env:
        ds, _, defs = await _list_of_29(env, explorer)
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


async def test_the_csv_export_takes_the_same_filters_and_streams_every_row(make_env, explorer):
    async with make_env() as env:
        ds, _, _ = await _list_of_29(env, explorer)
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


async def _alpha_bravo_charlie(env, explorer):
    """Workspace acme with three rules: Alpha (db1.s.orders.id and db1.s.customers.name;
    concepts sales, keys), Bravo (db1.s.orders; sales; last updated 2020-06-01) and Charlie
    (db2.s.customers.id). Returns (alice's explorer, Alpha, Bravo, ``titles(**params)``: the
    titles the list's JSON answers for these parameters)."""
    def body(title, deps, concepts=()):
        return {"family": "sql_rule", "title": title, "content": {"rule": f"{title}."},
                "dependencies": deps, "concepts": list(concepts)}

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
    with psycopg.connect(env.migrator_url) as conn:
        conn.execute("UPDATE memory.cards SET updated_at = '2020-06-01T12:00:00Z' WHERE id = %s",
                     [uuid.UUID(bravo["id"][4:])])
    ds = explorer(env, {"alice": ["acme"]})

    async def titles(**params):
        r = await get(ds, "/-/memory/acme.json", **params)
        assert r.status_code == 200, r.text
        return [c["title"] for c in r.json()["cards"]]

    return ds, alpha, bravo, titles


async def test_one_dependency_entry_must_carry_every_level_and_facet_links_follow_the_levels(
        make_env, explorer):
    """The one-entry rule through the explorer's URL parameters; facet links replace a
    single-valued filter and clear what depends on it."""
    async with make_env() as env:
        ds, _, _, titles = await _alpha_bravo_charlie(env, explorer)
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


async def test_the_list_filters_by_all_of_its_concepts_and_by_updated_range(make_env, explorer):
    async with make_env() as env:
        ds, _, _, titles = await _alpha_bravo_charlie(env, explorer)
        # concepts: all of
        assert await titles(concepts=["sales", "keys"]) == ["Alpha"]
        assert await titles(concepts="sales", _sort="title") == ["Alpha", "Bravo"]
        # updated range (dates are UTC days; before is exclusive)
        assert await titles(updated_before="2021-01-01") == ["Bravo"]
        assert "Bravo" not in await titles(updated_after="2021-01-01")
        assert await titles(updated_after="2020-06-01", updated_before="2020-06-02") == ["Bravo"]
        r = await get(ds, "/-/memory/acme?updated_after=2020-01-01&updated_before=2021-01-01")
        assert 'name="updated_after" value="2020-01-01"' in r.text  # the form keeps the state


async def test_the_list_sorts_ties_by_id_and_the_current_sorts_link_reverses_it(
        make_env, explorer):
    async with make_env() as env:
        ds, alpha, _, titles = await _alpha_bravo_charlie(env, explorer)
        assert await titles(_sort="title") == ["Alpha", "Bravo", "Charlie"]
        assert await titles(_sort_desc="title") == ["Charlie", "Bravo", "Alpha"]
        assert (await titles())[-1] == "Bravo"  # least recently updated last
        r = await get(ds, "/-/memory/acme?_sort=title&concepts=sales")
        assert 'href="/-/memory/acme?concepts=sales&amp;_sort_desc=title"' in r.text
        assert 'href="/-/memory/acme/' + alpha["id"] + '"' in r.text


async def _linked_cards(env, explorer):
    """Workspace acme: the orders rule, a solved question linking to it and the churn
    definition linking to the question (all pending). Returns (alice's explorer, headers, rule,
    solved question)."""
    env.workspace("acme")
    h = env.token("acme")
    rule = await create(env, "acme", ORDERS_RULE, h)
    solved = await create(env, "acme", dict(SOLVED, links=[
        {"target": rule["id"], "meaning": "applies the <rule>"}]), h)
    await create(env, "acme", dict(CHURN_DEF, links=[
        {"target": solved["id"], "meaning": "example query"}]), h)
    return explorer(env, {"alice": ["acme"]}), h, rule, solved


async def test_the_card_page_shows_content_sql_dependencies_links_and_pending_projection(
        make_env, explorer):
    async with make_env() as env:
        ds, _, rule, solved = await _linked_cards(env, explorer)
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


async def test_the_card_json_has_the_card_its_links_and_open_operations(make_env, explorer):
    async with make_env() as env:
        ds, _, rule, solved = await _linked_cards(env, explorer)
        r = await get(ds, f"/-/memory/acme/{solved['id']}.json")
        body = r.json()
        assert body["card"]["id"] == solved["id"] and body["card"]["index_status"] == "pending"
        assert [link["source"] for link in body["incoming_links"]] != []
        assert body["link_titles"] == {rule["id"]: "Net revenue excludes cancelled orders"}
        assert body["open_operations"][0]["status"] == "pending"


async def test_a_projected_card_shows_as_current_without_operations(make_env, explorer):
    async with make_env() as env:
        ds, _, _, solved = await _linked_cards(env, explorer)
        await env.drain()
        r = await get(ds, f"/-/memory/acme/{solved['id']}")
        assert 'Projection: <strong class="memarc-status-current">current</strong>' in r.text
        assert '<td class="col-op">' not in r.text


async def test_a_failed_operation_shows_on_the_card_with_its_error_and_a_retry_command(
        make_env, explorer):
    async with make_env() as env:
        ds, h, rule, _ = await _linked_cards(env, explorer)
        await env.drain()
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
        assert f"memarc retry --workspace acme {rule['id']}" in r.text


async def test_the_cards_concepts_and_dependencies_link_to_the_list_filtered_by_them(
        make_env, explorer):
    async with make_env() as env:
        ds, _, rule, _ = await _linked_cards(env, explorer)
        r = await get(ds, f"/-/memory/acme/{rule['id']}")
        # concepts and dependencies link to the list filtered by them (one entry: every level)
        assert '<a href="/-/memory/acme?concepts=revenue">revenue</a>' in r.text
        dep = "/-/memory/acme?column=status&amp;database=shop&amp;schema=public&amp;table=orders"
        assert f'<a href="{dep}"' in r.text
        listed = await get(ds, dep.replace("&amp;", "&"))
        assert rows(listed.text) == 1 and "Net revenue excludes cancelled orders" in listed.text


async def _one_pending_card(env, explorer):
    """Workspace acme with the churn definition (pending); returns (alice's explorer, headers,
    the card)."""
    env.workspace("acme")
    h = env.token("acme")
    card = await create(env, "acme", CHURN_DEF, h)
    return explorer(env, {"alice": ["acme"]}), h, card


async def test_the_pending_page_lists_open_operations_in_every_format(make_env, explorer):
    async with make_env() as env:
        ds, _, card = await _one_pending_card(env, explorer)
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


async def test_pending_and_activity_pages_keep_their_size_in_every_link(make_env, explorer):
    async with make_env() as env:
        ds, h, _ = await _one_pending_card(env, explorer)
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


async def test_the_pending_page_empties_after_projection_and_shows_a_deletion_until_done(
        make_env, explorer):
    async with make_env() as env:
        ds, h, card = await _one_pending_card(env, explorer)
        await env.drain()
        r = await get(ds, "/-/memory/acme/-/pending")
        assert "0 incomplete operations" in r.text and "Nothing pending" in r.text
        # a deletion is pending until its point is removed; the card is gone
        r = await env.client.delete(f"/api/workspaces/acme/memory/{card['id']}", headers=h)
        assert r.status_code == 200
        r = await get(ds, "/-/memory/acme/-/pending")
        assert "<em>deleted card</em>" in r.text and '<td class="col-op">delete</td>' in r.text


async def _rule_and_linked_definition(env, explorer):
    """Workspace acme: the orders rule and the churn definition linking to it (pending);
    returns (alice's explorer, rule, definition)."""
    env.workspace("acme")
    h = env.token("acme")
    rule = await create(env, "acme", ORDERS_RULE, h)
    churn = await create(env, "acme", dict(CHURN_DEF, links=[
        {"target": rule["id"], "meaning": "revenue of churned customers"}]), h)
    return explorer(env, {"alice": ["acme"]}), rule, churn


async def test_the_recall_page_has_a_form_and_recalls_nothing_before_projection(
        make_env, explorer):
    async with make_env() as env:
        ds, _, _ = await _rule_and_linked_definition(env, explorer)
        r = await get(ds, "/-/memory/acme/-/recall")
        assert r.status_code == 200 and '<input id="memarc-q" type="search" name="q" value="">' in r.text
        # before projection nothing is recalled, and the page says why (issue 26)
        r = await get(ds, "/-/memory/acme/-/recall", q="net revenue cancelled orders", mode="rules")
        assert r.status_code == 200 and "0 results" in r.text
        assert "<strong>2 cards of this workspace are not indexed yet</strong>" in r.text
        assert 'href="/-/memory/acme/-/pending">pending index updates</a>' in r.text


async def test_the_recall_page_shows_score_path_ranks_and_exclusions(make_env, explorer):
    async with make_env() as env:
        ds, rule, _ = await _rule_and_linked_definition(env, explorer)
        await env.drain()
        r = await get(ds, "/-/memory/acme/-/recall", q="how to compute net revenue", mode="rules")
        assert r.status_code == 200
        assert "1 result" in r.text
        assert f'<a href="/-/memory/acme/{rule["id"]}">Net revenue excludes cancelled orders</a>' in r.text
        assert '<td class="col-score type-float">0.016393</td>' in r.text  # 1/61
        assert '<td class="col-path memarc-path">direct</td>' in r.text
        assert '<strong class="memarc-excluded">0</strong>' in r.text
        assert '<span class="memarc-rank col-seed_rank" title="seed_rank">seed 1</span>' in r.text
        # rules mode ranks the rule by its own text: those columns are filled
        assert '<span class="memarc-rank col-own_rank" title="own_rank">own 1</span>' in r.text
        assert '<span class="memarc-rank col-own_bm25_rank" title="own_bm25_rank">own bm25 1</span>' in r.text
        assert "memarc-truncated" not in r.text
        assert "memarc-not-indexed" not in r.text  # every card is indexed: no notice


async def test_the_recall_page_shows_a_linked_cards_path_from_its_seed_as_links(
        make_env, explorer):
    async with make_env() as env:
        ds, rule, churn = await _rule_and_linked_definition(env, explorer)
        await env.drain()
        r = await get(ds, "/-/memory/acme/-/recall", q="churned customer definition", mode="search",
                      top=5)
        assert r.status_code == 200
        path = re.findall(r'<td class="col-path memarc-path">(.*?)</td>', r.text)
        assert (f'<a href="/-/memory/acme/{churn["id"]}" title="Churned customer">{churn["id"][4:12]}</a> → '
                f'<a href="/-/memory/acme/{rule["id"]}" title="Net revenue excludes cancelled orders">'
                f'{rule["id"][4:12]}</a>') in path
        assert ('Link expansion: <strong class="memarc-expansion">1 link inspected, 0 cards '
                'looked up</strong>.') in r.text


async def test_the_recall_page_says_when_a_budget_cut_link_expansion_short(make_env, explorer):
    """Issue 16: a card with 21 links (20 are followed): the page says which budget."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        targets = [await create(env, "acme", dict(ORDERS_RULE, title=f"Orders note {i}"), h)
                   for i in range(21)]
        await create(env, "acme", dict(CHURN_DEF, links=[
            {"target": t["id"], "meaning": "see also"} for t in targets]), h)
        await env.drain()
        ds = explorer(env, {"alice": ["acme"]})
        r = await get(ds, "/-/memory/acme/-/recall", q="churned customer definition",
                      mode="search", top=30)
        assert r.status_code == 200
        assert ('<strong class="memarc-expansion">20 links inspected, 0 cards looked up</strong>; '
                '<strong class="memarc-truncated">cut short by its budget: links_per_card</strong>'
                ) in r.text


@pytest.mark.parametrize("params, message", [
    ({"mode": "everything"}, "The mode &#39;everything&#39; is not one of the allowed values. "
                             "Allowed: rules, search, solved."),
    ({"family": "sql_rules"}, "&#39;sql_rules&#39; is not one of the allowed values. Allowed: "
                              "domain_clarification, explained_error, solved_question, sql_rule."),
    ({"scope": "s" * 5000}, "The scope filter is longer than "),
    ({"top": "0"}, "top must be"),
    ({"mode": "solved", "family": "sql_rule"}, "does not return"),
    ({"table": "orders"}, "needs filters.database")],
    ids=["unknown mode", "unknown family", "scope length", "top 0", "family outside the mode", "table without database"])
async def test_invalid_recall_input_is_a_400_with_its_message_and_the_form_kept(
        make_env, explorer, params, message):
    async with make_env() as env:
        ds, _, _ = await _rule_and_linked_definition(env, explorer)
        r = await get(ds, "/-/memory/acme/-/recall", q="revenue", **params)
        assert r.status_code == 400, params
        assert 'class="message-error"' in r.text and message in r.text, params
        assert 'value="revenue"' in r.text


async def test_an_unavailable_index_is_a_503_on_the_recall_page_never_an_empty_result(
        make_env, explorer):
    class DownIndex:
        async def check_collection(self, *args: Any, **kwargs: Any) -> bool:
            raise IndexUnavailable("Qdrant is unavailable: ConnectError")

    async with make_env() as env:
        await _rule_and_linked_definition(env, explorer)
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


async def test_no_csv_cell_can_run_as_a_spreadsheet_formula(make_env, explorer):
    """OWASP "CSV Injection": text cells beginning with ``= + - @``, tab or carriage return are
    prefixed with ``'`` on every CSV the explorer serves; numbers stay numbers."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        card = await create(env, "acme", {
            "family": "domain_clarification", "title": '=HYPERLINK("http://evil.example","x")',
            "scope": "+1+1", "concepts": ["-2", "@SUM(1)"],
            "content": {"definition": "A formula-looking card."}}, h)
        await create(env, "acme", {**CHURN_DEF, "title": "-2"}, h)
        ds = explorer(env, {"alice": ["acme"]})
        table = csv_rows((await get(ds, "/-/memory/acme.csv?_sort=title")).text)
        cells = {t["title"]: t for t in table}
        assert set(cells) == {"'-2", "'=HYPERLINK(\"http://evil.example\",\"x\")"}
        evil = cells["'=HYPERLINK(\"http://evil.example\",\"x\")"]
        assert (evil["scope"], evil["concepts"]) == ("'+1+1", "'-2; @SUM(1)")
        assert evil["revision"] == "1" and evil["id"] == card["id"]
        for path in ("/-/memory/acme/-/pending.csv", "/-/memory/acme/-/activity.csv"):
            text = (await get(ds, path)).text
            assert "\r\n=" not in text and ",=" not in text and ',"=' not in text, path
            assert "'=HYPERLINK" in text or "activity" in path, path


async def test_a_sign_in_link_can_be_issued_again_and_works_once(make_env, explorer):
    """Issue 26: a link signed with the explorer's secret (what ``memarc
    explorer-sign-in-link`` prints) signs in once without a restart; a used, expired or forged
    one, Datasette's used root link and the signed-out page say which command prints a new one."""
    import time

    from itsdangerous import URLSafeSerializer

    from shared.archive.explorer_sign_in import NAMESPACE, SIGN_IN_PATH, issue

    async with make_env() as env:
        await _acme_and_other(env, explorer)  # registers the plugin, two workspaces
        secret = "s" * 64
        ds = Datasette(memory=False, metadata={"plugins": {"memarc-explorer": {"workspaces": {}}}},
                       secret=secret)
        ds.memarc_resources = env.resources
        command = "memarc explorer-sign-in-link --url http://localhost"
        signed_out = await ds.client.get("/-/memory")
        assert "No workspace is visible to you" in signed_out.text
        assert f'<pre class="memarc-command">{command}</pre>' in signed_out.text
        for _ in range(2):  # a new link each time, for the same running explorer
            ticket = issue(secret)["ticket"]
            r = await ds.client.get(SIGN_IN_PATH, params={"ticket": ticket})
            assert r.status_code == 302 and r.headers["location"] == "/-/memory"
            cookie = r.cookies.get("ds_actor")
            assert ds.unsign(cookie, "actor") == {"a": {"id": "root"}}
            page = await ds.client.get("/-/memory.json", cookies={"ds_actor": cookie})
            assert [w["id"] for w in page.json()["workspaces"]] == ["acme", "other"]
        again = await ds.client.get(SIGN_IN_PATH, params={"ticket": ticket})
        assert again.status_code == 401 and "ds_actor" not in again.cookies
        assert "this sign-in link has already been used" in again.text and command in again.text
        expired = URLSafeSerializer(secret, NAMESPACE).dumps(
            {"a": "root", "n": "x", "e": int(time.time()) - 1})
        forged = issue("f" * 64)["ticket"]
        for bad, reason in ((expired, "has expired"), (forged, "is not valid for this explorer"),
                            ("", "is not valid for this explorer")):
            r = await ds.client.get(SIGN_IN_PATH, params={"ticket": bad})
            assert r.status_code == 401 and reason in r.text and command in r.text, reason
            assert "ds_actor" not in r.cookies
        mapped = issue(secret, actor="alice")["ticket"]  # an actor the settings map, or not
        r = await ds.client.get(SIGN_IN_PATH, params={"ticket": mapped})
        page = await ds.client.get("/-/memory.json", cookies={"ds_actor": r.cookies["ds_actor"]})
        assert page.json() == {"workspaces": []}
        # Datasette's own root link, once used, points to the same command
        root = f"/-/auth-token?token={ds._root_token}"
        assert (await ds.client.get(root)).status_code == 302
        used = await ds.client.get(root)
        assert used.status_code == 403 and "Root token has already been used" in used.text
        assert command in used.text
