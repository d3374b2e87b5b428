"""The list query (DESIGN §10): filters before pagination, facets, stable sorts.

One query in ``shared/store/listing.py`` serves the API, the CLI and the explorer.
"""

from __future__ import annotations

import psycopg

from shared.models import card_id_str

BASE = "/api/workspaces/acme/memory"


def _card(title, family="sql_rule", **kw):
    field = {"sql_rule": "rule", "domain_clarification": "definition"}[family]
    return {"family": family, "title": title, "content": {field: f"{title} text"}, **kw}


CARDS = [
    _card("Alpha orders id", dependencies=[{"database": "db1", "schema": "s", "table": "orders", "column": "id"},
                                          {"database": "db1", "schema": "s", "table": "customers", "column": "name"}],
          concepts=["sales", "keys"]),
    _card("Bravo orders table", dependencies=[{"database": "db1", "schema": "s", "table": "orders"}],
          concepts=["sales"]),
    _card("Charlie db only", family="domain_clarification", dependencies=[{"database": "db1"}]),
    _card("Delta other db", dependencies=[{"database": "db2", "schema": "s", "table": "orders"}],
          concepts=["sales"]),
    _card("Echo workspace wide", family="domain_clarification", concepts=["keys"]),
]


async def _seed(env):
    env.workspace("acme")
    h = env.token("acme")
    ids = {}
    for body in CARDS:
        r = await env.client.post(BASE, json=body, headers=h)
        assert r.status_code == 201, r.text
        ids[r.json()["card"]["id"]] = body["title"].split()[0]
    return h, ids


async def _titles(env, h, ids, **params):
    r = await env.client.get(BASE, params=params, headers=h)
    assert r.status_code == 200, r.text
    body = r.json()
    return [ids[c["id"]] for c in body["cards"]], body["total"]


async def test_filters_sorts_and_pagination(make_env):
    async with make_env() as env:
        h, ids = await _seed(env)
        assert await _titles(env, h, ids, sort="title") == (
            ["Alpha", "Bravo", "Charlie", "Delta", "Echo"], 5)
        assert (await _titles(env, h, ids, sort="title", desc="true"))[0][0] == "Echo"
        assert await _titles(env, h, ids, sort="title", per_page=2, page=2) == (["Charlie", "Delta"], 5)
        # physical context: one entry must carry every level given
        assert (await _titles(env, h, ids, sort="title", database="db1", table="orders"))[0] == ["Alpha", "Bravo"]
        assert (await _titles(env, h, ids, sort="title", database="db1", table="orders",
                              column="name"))[0] == []
        assert (await _titles(env, h, ids, sort="title", database="db1", table="customers",
                              column="name"))[0] == ["Alpha"]
        assert (await _titles(env, h, ids, sort="title", database="db1"))[0] == ["Alpha", "Bravo", "Charlie"]
        # concepts: all of
        assert (await _titles(env, h, ids, sort="title", concepts=["sales", "keys"]))[0] == ["Alpha"]
        assert (await _titles(env, h, ids, sort="title", concepts="keys"))[0] == ["Alpha", "Echo"]
        # family and text
        assert (await _titles(env, h, ids, sort="title", family="domain_clarification", q="wide"))[0] == ["Echo"]
        # updated range
        with psycopg.connect(env.migrator_url) as conn:
            conn.execute("UPDATE memory.cards SET updated_at = '2020-01-01T00:00:00Z' "
                         "WHERE title LIKE 'Alpha%'")
        assert (await _titles(env, h, ids, updated_before="2021-01-01T00:00:00Z"))[0] == ["Alpha"]
        assert "Alpha" not in (await _titles(env, h, ids, updated_after="2021-01-01T00:00:00Z"))[0]
        # a plain date is midnight UTC, as in the explorer and the CLI's --updated-after DATE
        assert (await _titles(env, h, ids, updated_before="2020-01-02"))[0] == ["Alpha"]
        assert "Alpha" not in (await _titles(env, h, ids, updated_after="2020-01-02"))[0]
        r = await env.client.get(BASE, params={"updated_after": "last tuesday"}, headers=h)
        assert r.status_code == 422 and r.json()["field"] == "updated_after", r.text
        # default order: most recently updated first, ties by id
        assert (await _titles(env, h, ids))[0][-1] == "Alpha"
        # gaps and bad values are refused
        for params in ({"table": "orders"}, {"database": "db1", "column": "id"}, {"sort": "nope"},
                       {"per_page": 101}, {"family": "nope"}):
            r = await env.client.get(BASE, params=params, headers=h)
            assert r.status_code in (400, 422), params


async def test_facets_count_every_filter_but_their_own(make_env):
    from shared.store import listing
    from shared.store.listing import ListQuery

    async with make_env() as env:
        await _seed(env)
        async with env.resources.db.transaction("acme", read_only=True) as conn:
            f = await listing.facet_counts(conn, ListQuery())
            assert f["family"] == {"sql_rule": 3, "domain_clarification": 2}
            assert f["concepts"] == {"sales": 3, "keys": 2}
            assert f["database"] == {"db1": 3, "db2": 1}
            assert "table" not in f  # tables are listed within a database
            f = await listing.facet_counts(conn, ListQuery(database="db1", family=["sql_rule"]))
            assert f["family"] == {"sql_rule": 2, "domain_clarification": 1}  # own filter left out
            assert f["database"] == {"db1": 2, "db2": 1}
            assert f["table"] == {"orders": 2, "customers": 1}
            assert f["origin"] == {"manual": 2}


async def test_text_search_is_a_literal_substring_of_title_or_content_in_this_workspace(make_env):
    """``q`` goes through migration 004's owner function: same matches as ILIKE on the
    workspace's cards, wildcards taken literally, another workspace's cards never matched."""
    from shared.store import listing
    from shared.store.listing import ListQuery

    async with make_env() as env:
        h, ids = await _seed(env)
        for body in (_card("Foxtrot 50% off_peak"),
                     _card("Golf", content={"rule": "Mentions ALPHA in its text"})):
            r = await env.client.post(BASE, json=body, headers=h)
            assert r.status_code == 201, r.text
            ids[r.json()["card"]["id"]] = body["title"].split()[0]
        env.workspace("other")
        r = await env.client.post("/api/workspaces/other/memory", json=_card("Alpha elsewhere"),
                                  headers=env.token("other"))
        assert r.status_code == 201, r.text
        other_id = r.json()["card"]["id"]

        # case-insensitive, title or content (Golf matches through its content only)
        assert await _titles(env, h, ids, sort="title", q="alpha") == (["Alpha", "Golf"], 2)
        # LIKE wildcards are literal characters
        assert await _titles(env, h, ids, q="%") == (["Foxtrot"], 1)
        assert await _titles(env, h, ids, q="f_p") == (["Foxtrot"], 1)
        assert await _titles(env, h, ids, q="50% off") == (["Foxtrot"], 1)
        # combined with filters, and in the facets
        assert await _titles(env, h, ids, q="alpha", concepts="keys") == (["Alpha"], 1)
        async with env.resources.db.transaction("acme", role="reader", read_only=True) as conn:
            query = ListQuery(q="alpha")
            matches = await listing.text_matches(conn, query)
            assert {ids[card_id_str(m)] for m in matches} == {"Alpha", "Golf"}
            f = await listing.facet_counts(conn, query, matches=matches)
            assert f["family"] == {"sql_rule": 2} and f["database"] == {"db1": 1}
            # the same page without pre-resolved matches
            cards, total = await listing.list_cards(conn, query)
            assert total == 2 and other_id not in {c.id for c in cards}
            # the function itself is confined to the transaction's workspace
            cur = await conn.execute("SELECT count(*) AS n FROM card_text_matches('%%elsewhere%%')")
            assert (await cur.fetchone())["n"] == 0
        async with env.resources.db.transaction("other", role="reader", read_only=True) as conn:
            cur = await conn.execute("SELECT count(*) AS n FROM card_text_matches('%%elsewhere%%')")
            assert (await cur.fetchone())["n"] == 1
        async with env.resources.db.transaction(None, role="reader", read_only=True) as conn:
            cur = await conn.execute("SELECT count(*) AS n FROM card_text_matches('%%')")
            assert (await cur.fetchone())["n"] == 0


async def test_text_search_matches_the_visible_text_and_never_the_json(make_env, subtests):
    """``q`` searches what a reader sees of a card (title, scope, concepts, content values, the
    SQL included), as text: never the content's keys or its JSON syntax, and a quote or a line
    break in a value is found as typed (migration 008)."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        bodies = {
            "Net": {"family": "sql_rule", "title": "Net revenue excludes cancelled orders",
                    "content": {"rule": "Filter out status 'cancelled' before summing.",
                                "rationale": "Cancelled orders are refunded."},
                    "scope": "finance-team", "concepts": ["revenue", "churnrate"]},
            "Thumb": {"family": "sql_rule", "title": "Thumb: weeks start on Monday",
                      "content": {"rule": "A rule of thumb: ISO weeks."}},
            "Churn": {"family": "domain_clarification", "title": "Churned customer",
                      "content": {"definition": 'A customer "lost" after 90 days\nwithout orders.'}},
            "Term": {"family": "domain_clarification", "title": "Glossary term",
                     "content": {"definition": "The definition of an active user.",
                                 "context": "Used by the growth dashboards."}},
            "Top": {"family": "solved_question", "title": "Top customers",
                    "content": {"question": "Who are the top 5 customers?",
                                "sql": "SELECT customer_id, sum(amount)\nFROM orders\n"
                                       "GROUP BY 1 ORDER BY 2 DESC LIMIT 5"}},
            "Umlaut": {"family": "domain_clarification", "title": "ÜBER die Straße",
                       "content": {"definition": "Die Größe ÄNDERT sich."}},
        }
        ids = {}
        for name, body in bodies.items():
            r = await env.client.post(BASE, json=body, headers=h)
            assert r.status_code == 201, r.text
            ids[r.json()["card"]["id"]] = name
        for q, expected in (
                # content keys: only the cards whose text has the word
                ("rule", ["Thumb"]), ("definition", ["Term"]), ("rationale", []),
                ("question", []), ("sql", []), ("context", []),
                # JSON syntax is not text
                ('": "', []), ('{"', []), ("\\n", []), ('\\"', []),
                # a quote and a line break in a value are found as typed
                ('"lost"', ["Churn"]), ('"', ["Churn"]), ("90 days\nwithout", ["Churn"]),
                ("sum(amount)\nFROM orders\nGROUP", ["Top"]),
                # scope, concepts and the SQL
                ("finance-team", ["Net"]), ("CHURNRATE", ["Net"]), ("revenue", ["Net"]),
                ("customer_id", ["Top"]), ("order by 2 desc", ["Top"]),
                # content values still (any field), case-insensitive
                ("GROWTH dashboards", ["Term"]), ("refunded", ["Net"]),
                # beyond ASCII too (the stored text is lower-cased, the term too: migration 015)
                ("über die", ["Umlaut"]), ("STRAßE", ["Umlaut"]), ("größe ändert", ["Umlaut"]),
                # a term never spans two fields
                ("orders filter", []), ("finance-team revenue", [])):
            with subtests.test(q=q):
                assert await _titles(env, h, ids, sort="title", q=q) == (expected, len(expected))
        # an update re-derives the searchable text
        net = next(i for i, name in ids.items() if name == "Net")
        r = await env.client.put(f"{BASE}/{net}", headers=h, json={
            **bodies["Net"], "revision": 1, "scope": None, "concepts": [],
            "content": {"rule": "Exclude refunds."}})
        assert r.status_code == 200, r.text
        assert await _titles(env, h, ids, q="finance-team") == ([], 0)
        assert await _titles(env, h, ids, q="churnrate") == ([], 0)
        assert await _titles(env, h, ids, q="exclude refunds") == (["Net"], 1)


def _kept(card, query, skip: str | None) -> bool:
    """Whether ``card`` passes ``query``'s text search and every filter but facet ``skip`` (a
    facet counts the cards that pass every other filter)."""
    fields = [card.title, card.scope or "", *card.concepts, *card.content.values()]
    if not any(query.q.lower() in field.lower() for field in fields):
        return False
    if skip != "family" and query.family and card.family not in query.family:
        return False
    if skip != "concepts" and not set(query.concepts) <= set(card.concepts):
        return False
    wanted = {"database": query.database, "table": query.table}
    if skip == "database":
        wanted.pop("database")
    if skip == "table":
        wanted.pop("table")
    wanted = {k: v for k, v in wanted.items() if v is not None}
    return not wanted or any(all(getattr(d, k) == v for k, v in wanted.items())
                             for d in card.dependencies)


def _recount(cards, query) -> dict[str, dict[str, int]]:
    """The facets of ``query`` counted here, card by card: ``{facet: {value: cards}}`` (the
    table facet only within a database)."""
    out = {}
    for facet in ("family", "origin", "concepts", "database", "table"):
        if facet == "table" and query.database is None:
            continue
        counts: dict[str, int] = {}
        for card in (c for c in cards if _kept(c, query, facet)):
            if facet in ("family", "origin"):
                values = {getattr(card, facet)}
            elif facet == "concepts":
                values = set(card.concepts)
            elif facet == "database":
                values = {d.database for d in card.dependencies}
            else:
                values = {d.table for d in card.dependencies
                          if d.database == query.database and d.table}
            for v in values:
                counts[v] = counts.get(v, 0) + 1
        out[facet] = counts
    return out


async def test_facets_of_a_text_search_match_a_recount_of_the_cards(make_env, subtests):
    """The one-statement facets of a text search agree with facets recounted here from the cards
    themselves, for combinations of every filter (the one-entry rule included), and the
    explorer's one statement for page, total and facets agrees with the statements by part."""
    import itertools

    from shared.store import listing
    from shared.store.listing import ListQuery

    async with make_env() as env:
        h, _ = await _seed(env)
        r = await env.client.post(BASE, json=_card("Foxtrot orders", family="domain_clarification",
                                                   dependencies=[{"database": "db2"}],
                                                   concepts=["sales"]), headers=h)
        assert r.status_code == 201, r.text
        async with env.resources.db.transaction("acme", role="reader", read_only=True) as conn:
            cards, _ = await listing.list_cards(conn, ListQuery(per_page=100))
            checked = 0
            for q, family, concepts, place in itertools.product(
                    ("orders", "a", "o", "zzz"), ([], ["sql_rule"]), ([], ["sales"]),
                    ({}, {"database": "db1"}, {"database": "db1", "table": "orders"},
                     {"database": "db2"})):
                # every sort, both directions and two pages of two (the facets ignore them)
                page = dict(sort=("updated", "created", "title", "family")[checked % 4],
                            desc=(None, True, False)[checked % 3], per_page=2,
                            page=1 + checked % 2)
                query = ListQuery(q=q, family=family, concepts=concepts, **place, **page)
                with subtests.test(q=q, family=family, concepts=concepts, **place, **page):
                    got = await listing.facet_counts(conn, query)
                    assert got == _recount(cards, query), query
                    for counts in got.values():
                        assert list(counts.values()) == sorted(counts.values(), reverse=True)
                    # the explorer's one statement (migration 015) gives the same page, total
                    # and facets as the search by ids and a statement for each part
                    found, total, facets = await listing.list_cards_and_facets(conn, query)
                    expected, expected_total = await listing.list_cards(
                        conn, query, await listing.text_matches(conn, query))
                    assert facets == got
                    assert (total, [c.id for c in found]) == (expected_total,
                                                              [c.id for c in expected])
                    assert (found, total) == await listing.list_cards(conn, query)
                checked += 1
            assert checked == 64
