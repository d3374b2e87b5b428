"""Card ids as callers spell them (issue 14, "Input that reaches the database"): a ``mem-`` id is
accepted in any case and with surrounding whitespace wherever an id is accepted (path
parameters, link targets, search exclusions, list ``q``, the activity filter, workflow
proposals), every comparison sees its one spelling (``mem-<uuid>``, lower case), and two
spellings of one card are a duplicate reference, treated as two equal spellings are: a
duplicate link is a 422 that writes nothing, a repeated exclusion excludes the card once.
Anything else (a bare UUID, another prefix, a malformed UUID) is not an id. Real PostgreSQL,
Redis, index and models, over the writer's HTTP API."""

from __future__ import annotations

import json
import uuid

import psycopg
from helpers import archive_row_counts, row_changes

MEM = "/api/workspaces/acme/memory"
SESSION = "/api/workspaces/acme/sessions"
APPROVED = [{"id": "d-1", "status": "approved"}]
REFUNDS = {"family": "sql_rule", "title": "Revenue excludes refunds",
           "content": {"rule": "Sum orders.amount where orders.status <> 'refunded'."},
           "concepts": ["revenue"]}
CHURN = {"family": "domain_clarification", "title": "Churned customer",
         "content": {"definition": "A customer with no purchase in the last 90 days."}}
ACTIVE = {"family": "domain_clarification", "title": "Active customer",
          "content": {"definition": "A customer with a purchase in the last 30 days."}}


def odd(card_id: str, pad: str = "  ") -> str:
    """Another spelling of ``card_id``: upper case (prefix too) inside whitespace."""
    return f"{pad}{card_id.upper()}{pad[::-1]}"


async def _setup(env):
    env.workspace("acme")
    h = env.token("acme", "memory.manage", "memory.read", "memory.propose",
                    "memory.review")  # both sides of the gate: an administrator's token
    ids = []
    for body in (REFUNDS, CHURN):
        r = await env.client.post(MEM, json=body, headers=h)
        assert r.status_code == 201, r.text
        ids.append(r.json()["card"]["id"])
    return h, *ids


class Writes:
    """Row counts of the archive before and after a request: nothing but the rejection's own
    activity record may change."""

    def __init__(self, env):
        self.conn = psycopg.connect(env.migrator_url, autocommit=True)
        self.before = archive_row_counts(self.conn)

    def changed(self) -> dict[str, int]:
        after = archive_row_counts(self.conn)
        changed, self.before = row_changes(self.before, after), after
        return changed

    def close(self) -> None:
        self.conn.close()


async def test_an_id_in_any_case_with_spaces_names_the_card_on_every_route(make_env):
    async with make_env() as env:
        h, a, b = await _setup(env)
        # path parameters
        r = await env.client.get(f"{MEM}/{odd(a)}", headers=h)
        assert r.status_code == 200 and r.json()["card"]["id"] == a, r.text
        # an update names its link target in another spelling: stored in the one spelling
        r = await env.client.put(f"{MEM}/{odd(a)}", headers=h, json={
            **REFUNDS, "revision": 1, "links": [{"target": odd(b, "\t "), "meaning": "see"}]})
        assert r.status_code == 200, r.text
        assert r.json()["card"]["id"] == a
        assert r.json()["card"]["links"] == [{"target": b, "meaning": "see"}]
        r = await env.client.post(MEM, headers=h, json={**ACTIVE, "links": [{"target": odd(a)}]})
        assert r.status_code == 201, r.text
        c = r.json()["card"]["id"]
        assert r.json()["card"]["links"] == [{"target": a, "meaning": ""}]
        r = await env.client.get(f"{MEM}/{odd(a, ' ')}", headers=h)
        assert [i["source"] for i in r.json()["incoming_links"]] == [c]
        r = await env.client.post(f"{MEM}/{odd(c)}/retry", headers=h)
        assert r.status_code == 202 and r.json()["card_id"] == c, r.text
        # list q (an exact id) and the activity filter
        r = await env.client.get(MEM, params={"q": odd(a)}, headers=h)
        assert [x["id"] for x in r.json()["cards"]] == [a], r.text
        r = await env.client.get(f"{MEM}/activity", params={"card_id": odd(a)}, headers=h)
        assert r.status_code == 200 and r.json()["total"] == 2, r.text  # create, update
        # search exclusions
        await env.drain()
        query = {"query": "revenue refunds", "mode": "rules"}
        r = await env.client.post(f"{MEM}/search", headers=h, json=query)
        assert a in [x["card"]["id"] for x in r.json()["results"]], r.text
        r = await env.client.post(f"{MEM}/search", headers=h, json={**query, "exclude": [odd(a)]})
        assert r.status_code == 200, r.text
        assert a not in [x["card"]["id"] for x in r.json()["results"]]
        # a workflow update names its card and its links in other spellings: stored, compared
        # and shown in the one spelling (the links it restates are no change)
        r = await env.client.post(f"{SESSION}/s-1/proposals", headers=h, json={"proposals": [
            {"key": "refunds-up", "kind": "update", "card_id": odd(a), "revision": 2,
             "title": "Revenue excludes refunded orders", "decisions": APPROVED,
             "links": [{"target": odd(b), "meaning": "see"}]},
            {"key": "active-again", **CHURN, "title": "Churn", "decisions": APPROVED,
             "content": {"definition": "A customer with no purchase in the last 90 days!"},
             "links": [{"target": f" {c.upper()}"}]}]})
        assert r.status_code == 201, r.text
        assert r.json()["proposals"][0]["card_id"] == a
        r = await env.client.get(f"{SESSION}/s-1/summary", headers=h)
        assert r.status_code == 200, r.text
        items = {i["key"]: i for i in r.json()["proposals"]}
        assert set(items["refunds-up"]["changes"]) == {"title"}, items["refunds-up"]
        assert items["active-again"]["card"]["links"] == [{"target": c, "meaning": ""}]
        stored = env.scalar("SELECT proposal FROM memory.session_proposals WHERE key = %s",
                            "refunds-up")
        assert stored["card_id"] == a and stored["links"][0]["target"] == b
        # re-sending the batch in the one spelling is the same proposal (no conflict)
        r = await env.client.post(f"{SESSION}/s-1/proposals", headers=h, json={"proposals": [
            {"key": "refunds-up", "kind": "update", "card_id": a, "revision": 2,
             "title": "Revenue excludes refunded orders", "decisions": APPROVED,
             "links": [{"target": b, "meaning": "see"}]}]})
        assert r.status_code == 201 and r.json()["proposals"][0]["stored"] == "unchanged", r.text
        r = await env.client.post(f"{SESSION}/s-1/review", headers=h, json={
            "review_id": "rv-1", "selected": [{"key": "refunds-up"}, {"key": "active-again"}]})
        assert r.status_code == 200, r.text
        r = await env.client.get(f"{MEM}/{a}", headers=h)
        assert r.json()["card"]["links"] == [{"target": b, "meaning": "see"}]
        assert r.json()["card"]["revision"] == 3
        r = await env.client.delete(f"{MEM}/{odd(c)}", headers=h)
        assert r.status_code in (200, 204), r.text
        assert (await env.client.get(f"{MEM}/{c}", headers=h)).status_code == 404


async def test_two_spellings_of_one_card_are_a_duplicate_reference(make_env):
    async with make_env() as env:
        h, a, b = await _setup(env)
        writes = Writes(env)
        try:
            # (the fuzz test's find: [a, "\xa0MEM-<A>"] was a 500 on create)
            twice = [{"target": a}, {"target": odd(a, "\xa0 "), "meaning": "again"}]
            # links of a create and of an update: 422 naming the second link, like an exact
            # duplicate, and nothing written
            for method, url, body in (("POST", MEM, {**ACTIVE, "links": twice}),
                                      ("PUT", f"{MEM}/{b}", {**CHURN, "revision": 1,
                                                              "links": twice}),
                                      ("POST", MEM, {**ACTIVE, "links": [twice[0]] * 2})):
                r = await env.client.request(method, url, headers=h, json=body)
                assert r.status_code == 422, r.text
                assert r.json()["field"] == "links[1]" and a in r.json()["detail"], r.text
                assert writes.changed() == {"activity": 1}
            # an import line
            line = {"key": "k1", **ACTIVE, "links": twice}
            r = await env.client.post(f"{MEM}/import", content=json.dumps(line).encode(),
                                      headers={**h, "Content-Type": "application/x-ndjson"})
            assert r.status_code == 422 and "duplicate link" in r.json()["detail"], r.text
            assert writes.changed() == {"activity": 1}
            # a proposal
            r = await env.client.post(f"{SESSION}/s-1/proposals", headers=h, json={"proposals": [
                {"key": "p1", **ACTIVE, "decisions": APPROVED, "links": twice}]})
            assert r.status_code == 422, r.text
            assert "duplicate link" in r.json()["detail"], r.text
            assert writes.changed() == {"activity": 1}
            # a review where one card is named by id and by the key of a proposal that reuses
            # it: refused, naming the item, and nothing written (no card, link or receipt)
            r = await env.client.post(f"{SESSION}/s-2/proposals", headers=h, json={"proposals": [
                {"key": "churn-again", **CHURN, "decisions": APPROVED},
                {"key": "refunds-up", "kind": "update", "card_id": a, "revision": 1,
                 "decisions": APPROVED,
                 "links": [{"target": "churn-again"}, {"target": odd(b)}]}]})
            assert r.status_code == 201, r.text
            assert r.json()["proposals"][0]["action"] == "reuse"
            writes.changed()
            r = await env.client.post(f"{SESSION}/s-2/review", headers=h, json={
                "review_id": "rv-2", "selected": [{"key": "churn-again"}, {"key": "refunds-up"}]})
            assert r.status_code == 422, r.text
            problem = r.json()
            assert problem["item"] == "refunds-up" and "duplicate link" in problem["detail"]
            assert problem["field"] == "selected[1].links[1].target", problem
            assert writes.changed() == {"activity": 1}
            # exclusions: a card named twice, in two spellings, is excluded once
            await env.drain()
            query = {"query": "revenue refunds", "mode": "rules"}
            r = await env.client.post(f"{MEM}/search", headers=h,
                                      json={**query, "exclude": [a, odd(a), f"{a} "]})
            assert r.status_code == 200, r.text
            assert a not in [x["card"]["id"] for x in r.json()["results"]]
            r = await env.client.post(f"{MEM}/search", headers=h, json={**query, "exclude": [b, b]})
            assert a in [x["card"]["id"] for x in r.json()["results"]], r.text
        finally:
            writes.close()


async def test_what_is_not_a_card_id_is_refused(make_env):
    async with make_env() as env:
        h, a, b = await _setup(env)
        raw = a.removeprefix("mem-")
        spellings = [raw, f"MEM_{raw}", f"mem:{raw}", f"mem-{raw}0", f"mem-{raw.replace('-', '')}",
                     f"mem-{raw[:-1]}g", f"mem- {raw}", "mem-", f"{a}\x00"]
        writes = Writes(env)
        try:
            for spelling in spellings:
                if "\x00" not in spelling:
                    r = await env.client.get(f"{MEM}/{spelling}", headers=h)
                    assert r.status_code == 404, (spelling, r.text)
                r = await env.client.post(MEM, headers=h,
                                          json={**ACTIVE, "links": [{"target": spelling}]})
                assert r.status_code == 422, (spelling, r.text)
                r = await env.client.post(f"{MEM}/search", headers=h,
                                          json={"query": "revenue", "exclude": [spelling]})
                assert r.status_code == 422 and r.json()["field"] == "exclude[0]", r.text
                r = await env.client.post(f"{SESSION}/s-1/proposals", headers=h, json={
                    "proposals": [{"key": "p1", "kind": "update", "card_id": spelling,
                                   "revision": 1, "title": "x", "decisions": APPROVED}]})
                assert r.status_code == 422, (spelling, r.text)
            assert set(writes.changed()) <= {"activity"}
            # an import line's key that looks like a card id (an export keys a card without an
            # import key by its id) is read in the one spelling links use: a line linking to
            # another spelling of it links to that line, and the key is stored in that spelling
            raw_key = str(uuid.uuid4())
            lines = [{"key": f"MEM-{raw_key.upper()}", **ACTIVE},
                     {"key": "second", **ACTIVE, "title": "Second",
                      "links": [{"target": f" mem-{raw_key} ", "meaning": "uses"}]}]
            body = "\n".join(json.dumps(line) for line in lines).encode()
            r = await env.client.post(f"{MEM}/import", content=body,
                                      headers={**h, "Content-Type": "application/x-ndjson"})
            assert r.status_code == 201 and r.json()["created"] == 2, r.text
            assert env.scalar("SELECT count(*) FROM memory.cards WHERE import_key = %s",
                              f"mem-{raw_key}") == 1
            assert env.scalar("SELECT count(*) FROM memory.card_links l JOIN memory.cards c"
                              " ON c.id = l.target_id WHERE c.import_key = %s",
                              f"mem-{raw_key}") == 1
            # and it is that card's key: importing it again in either spelling creates nothing
            r = await env.client.post(f"{MEM}/import", content=body,
                                      headers={**h, "Content-Type": "application/x-ndjson"})
            assert r.status_code == 201 and r.json()["skipped"] == 2, r.text
        finally:
            writes.close()
