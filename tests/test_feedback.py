"""Feedback on recalls (issue 35 part 2, migration 027, docs/usage.md): a principal that may
recall judges the cards a recall returned (helpful, not_helpful, wrong, with a note), once per
recall, card and principal, and may change its verdict; a card the recall did not return is a
422, another workspace's recall a 404 like a missing one, a token without ``memory.read`` a 403;
the recall records and a card's feedback are read back; a review that applies a session's
proposals records ``helpful`` for the existing cards they link to; ``/metrics`` counts recalls
and verdicts by outcome (totals open, per workspace behind the token).

Through the writer app, a real worker, PostgreSQL, Redis, the embedded index and the real
embedding model. (The MCP tool is driven by the SDK's client in ``tests/test_mcp.py``.)
"""

from __future__ import annotations

import uuid

from prometheus_client.parser import text_string_to_metric_families
from test_metrics import scrape, value
from test_recall_records import BASE, QUERY, SECRET, _archive

from shared.metrics import Metrics


async def _recall(env, h, query: str = QUERY, workspace: str = "acme", **body) -> dict:
    r = await env.client.post(f"/api/workspaces/{workspace}/memory/search",
                              json={"query": query, **body}, headers=h)
    assert r.status_code == 200, r.text
    assert r.json()["recall_id"], r.json()
    return r.json()


def _feedback_url(recall_id: str, workspace: str = "acme") -> str:
    return f"/api/workspaces/{workspace}/memory/recalls/{recall_id}/feedback"


async def test_feedback_is_stored_once_per_card_and_principal_and_can_be_changed(make_env):
    async with make_env() as env:
        h, (rule, definition) = await _archive(env)
        answer = await _recall(env, h)
        recall_id = answer["recall_id"]
        returned = [r["card"]["id"] for r in answer["results"]]
        assert returned[:2] == [rule, definition] or set(returned[:2]) == {rule, definition}
        body = {"cards": [
            {"card_id": rule, "verdict": "helpful", "note": f"used it {SECRET}"},
            {"card_id": definition.upper(), "verdict": "not_helpful"}]}
        r = await env.client.post(_feedback_url(recall_id), json=body, headers=h)
        assert r.status_code == 200, r.text
        out = r.json()
        assert out["recall_id"] == recall_id
        assert [(c["card_id"], c["verdict"], c["change"], c["via"]) for c in out["cards"]] == [
            (rule, "helpful", "created", "api"), (definition, "not_helpful", "created", "api")]
        # the note went through the privacy filter
        assert "hunter2secret" not in out["cards"][0]["note"]
        assert out["cards"][0]["note"].startswith("used it ") and "[REDACTED:" in out["cards"][0]["note"]

        # the same again changes nothing; a new verdict replaces the old (one row each)
        again = (await env.client.post(_feedback_url(recall_id), json=body, headers=h)).json()
        assert [c["change"] for c in again["cards"]] == ["unchanged", "unchanged"]
        assert again["cards"][0]["updated_at"] == out["cards"][0]["updated_at"]
        r = await env.client.post(_feedback_url(recall_id), headers=h, json={
            "cards": [{"card_id": definition, "verdict": "wrong", "note": "stale definition"}]})
        assert [(c["verdict"], c["change"]) for c in r.json()["cards"]] == [("wrong", "updated")]
        assert env.scalar("SELECT count(*) FROM memory.recall_feedback") == 2

        # another curator's verdict on the same card is its own
        curator = env.token("acme", "memory.manage")
        r = await env.client.post(_feedback_url(recall_id), headers=curator, json={
            "cards": [{"card_id": rule, "verdict": "not_helpful"}]})
        assert r.status_code == 200 and r.json()["cards"][0]["change"] == "created"
        assert env.scalar("SELECT count(*) FROM memory.recall_feedback") == 3

        # read back: the recall record with each result's verdicts, and the card's feedback
        r = await env.client.get(f"{BASE}/recalls/{recall_id}", headers=h)
        assert r.status_code == 200, r.text
        record = r.json()
        assert record["query_text"].startswith("When does the fiscal year start?")
        assert SECRET not in record["query_text"]
        assert [x["card_id"] for x in record["results"]] == returned
        assert [x["rank"] for x in record["results"]] == list(range(1, len(returned) + 1))
        by_card = {x["card_id"]: x for x in record["results"]}
        assert sorted(f["verdict"] for f in by_card[rule]["feedback"]) == [
            "helpful", "not_helpful"]
        assert [f["verdict"] for f in by_card[definition]["feedback"]] == ["wrong"]
        assert by_card[rule]["title"] == "Fiscal year starts in April"
        r = await env.client.get(f"{BASE}/{definition}/feedback", headers=h)
        assert r.status_code == 200, r.text
        card = r.json()
        assert card["counts"] == {"helpful": 0, "not_helpful": 0, "wrong": 1}
        assert [(e["verdict"], e["note"], e["recall_id"]) for e in card["recent"]] == [
            ("wrong", "stale definition", recall_id)]
        assert card["recent"][0]["query_text"] == record["query_text"]
        page = (await env.client.get(f"{BASE}/recalls", headers=h)).json()
        assert page["total"] == 1 and page["recalls"][0]["recall_id"] == recall_id
        assert page["recalls"][0]["verdicts"] == 3
        # each accepted request leaves one activity record naming the recall
        details = env.rows("SELECT detail FROM memory.activity WHERE verb = 'feedback' "
                           "AND outcome = 'ok' ORDER BY id")
        assert len(details) == 4
        assert details[0][0] == {"recall": recall_id, "via": "api", "helpful": 1,
                                 "not_helpful": 1}
        assert details[1][0] == {"recall": recall_id, "via": "api"}  # nothing changed

        # a note at the bound whose secret the filter replaces with a longer marker: kept, cut
        # to the bound
        long_note = "x" * 1985 + " password=abc"
        assert len(long_note) <= 2000 < len(env.resources.privacy.redact(long_note))
        r = await env.client.post(_feedback_url(recall_id), headers=env.token("acme"), json={
            "cards": [{"card_id": rule, "verdict": "helpful", "note": long_note}]})
        assert r.status_code == 200, r.text
        note = r.json()["cards"][0]["note"]
        assert len(note) == 2000 and "abc" not in note


async def test_feedback_is_refused_for_cards_recalls_and_tokens_it_does_not_concern(make_env):
    async with make_env() as env:
        h, (rule, definition) = await _archive(env)
        oh, (foreign, _) = await _archive(env, "other")
        answer = await _recall(env, h, top=1)
        recall_id = answer["recall_id"]
        [only] = [r["card"]["id"] for r in answer["results"]]
        unreturned = definition if only == rule else rule
        r = await env.client.post("/api/workspaces/other/memory/search", headers=oh,
                                  json={"query": "fiscal year"})
        foreign_recall = r.json()["recall_id"]
        assert foreign_recall

        async def post(url, body, headers=h):
            return await env.client.post(url, json=body, headers=headers)

        # a card the recall did not return: 422 naming it; nothing stored
        r = await post(_feedback_url(recall_id), {"cards": [
            {"card_id": only, "verdict": "helpful"},
            {"card_id": unreturned, "verdict": "wrong"}]})
        assert r.status_code == 422, r.text
        assert (r.json()["code"], r.json()["field"]) == ("invalid_input", "cards[1].card_id")
        assert "did not return" in r.json()["detail"]
        # another workspace's card, a card named twice, a card id that is not one, no cards,
        # an unknown verdict, an unknown member: each 4xx, nothing stored
        for body, status, field in (
                ({"cards": [{"card_id": foreign, "verdict": "helpful"}]}, 422, "cards[0].card_id"),
                ({"cards": [{"card_id": only, "verdict": "helpful"},
                            {"card_id": only.upper(), "verdict": "wrong"}]}, 422,
                 "cards[1].card_id"),
                ({"cards": [{"card_id": "card-1", "verdict": "helpful"}]}, 422,
                 "cards[0].card_id"),
                ({"cards": []}, 400, None),
                ({"cards": [{"card_id": only, "verdict": "great"}]}, 400, None),
                ({"cards": [{"card_id": only, "verdict": "helpful", "score": 1}]}, 400, None),
                ({"cards": [{"card_id": only, "verdict": "helpful", "note": "a\x00b"}]}, 422,
                 "cards[0].note")):
            r = await post(_feedback_url(recall_id), body)
            assert r.status_code == status, (body, r.text)
            if field:
                assert r.json()["field"] == field, (body, r.text)
        # another workspace's recall, a recall that never was, a recall id that is not one:
        # the same 404 (no existence oracle)
        details = set()
        for rid in (foreign_recall, str(uuid.uuid4()), "not-a-recall"):
            r = await post(_feedback_url(rid), {"cards": [{"card_id": only,
                                                           "verdict": "helpful"}]})
            assert r.status_code == 404, (rid, r.text)
            assert r.json()["code"] == "not_found"
            details.add(r.json()["detail"].replace(rid, "<id>"))
            r = await env.client.get(f"{BASE}/recalls/{rid}", headers=h)
            assert r.status_code == 404, (rid, r.text)
        assert len(details) == 1, details
        # a token that may recall but not curate, on another principal's recall: the same 404
        # (which cards that recall returned is not told either)
        r = await post(_feedback_url(recall_id), {"cards": [
            {"card_id": only, "verdict": "helpful"}]}, headers=env.token("acme", "memory.read"))
        assert r.status_code == 404 and r.json()["detail"].replace(recall_id, "<id>") in details
        # a token of another workspace on this workspace's recall: 404 as well
        r = await post(_feedback_url(recall_id), {"cards": [
            {"card_id": only, "verdict": "helpful"}]}, headers=oh)
        assert r.status_code == 404
        # a token without memory.read: 403 naming the permission
        for permission in ("memory.propose", "memory.schema"):
            r = await post(_feedback_url(recall_id), {"cards": [
                {"card_id": only, "verdict": "helpful"}]},
                headers=env.token("acme", permission))
            assert r.status_code == 403, r.text
            assert r.json()["permissions"] == ["memory.read"]
        # reading the records needs memory.manage
        reader = env.token("acme", "memory.read")
        assert (await env.client.get(f"{BASE}/recalls", headers=reader)).status_code == 403
        assert (await env.client.get(f"{BASE}/recalls/{recall_id}",
                                     headers=reader)).status_code == 403
        assert env.scalar("SELECT count(*) FROM memory.recall_feedback") == 0
        # the refusals are in the activity log (the other workspace's token leaves none)
        assert env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'feedback' "
                          "AND starts_with(outcome, 'rejected:') AND workspace_id = 'acme'") >= 8

        # a card deleted since the recall: 422; then its feedback goes with it
        r = await post(_feedback_url(recall_id), {"cards": [{"card_id": only,
                                                             "verdict": "wrong"}]})
        assert r.status_code == 200
        assert (await env.client.delete(f"{BASE}/{only}", headers=h)).status_code == 200
        r = await post(_feedback_url(recall_id), {"cards": [{"card_id": only,
                                                             "verdict": "helpful"}]})
        assert r.status_code == 422 and "deleted" in r.json()["detail"]
        assert env.scalar("SELECT count(*) FROM memory.recall_feedback") == 0


async def test_an_approved_review_records_helpful_for_the_cards_its_proposals_cite(make_env):
    async with make_env() as env:
        env.no_automatic_evaluations()
        h, (rule, definition) = await _archive(env)
        assistant = env.token("acme", "memory.read", "memory.propose")
        reviewer = env.token("acme", "memory.review")
        # the assistant recalls in its session (both cards come back), then proposes a solved
        # question that cites the rule, and an update of the definition (which cites nothing)
        answer = await _recall(env, assistant, query="fiscal year start", session="s1")
        assert {rule, definition} <= {r["card"]["id"] for r in answer["results"]}
        earlier = await _recall(env, assistant, query="fiscal quarter", session="s1")
        other_session = await _recall(env, assistant, query="fiscal year start", session="s2")
        revision = (await env.client.get(f"{BASE}/{definition}", headers=h)).json()["card"]
        r = await env.client.post("/api/workspaces/acme/sessions/s1/proposals",
                                  headers=assistant, json={"proposals": [
            {"key": "q1", "decisions": [{"id": "d1", "status": "approved"}],
             "family": "solved_question", "title": "Orders this fiscal year",
             "content": {"question": "How many orders this fiscal year?",
                         "sql": "SELECT count(*) FROM orders WHERE ordered_at >= '2024-04-01'"},
             "links": [{"target": rule, "meaning": "uses the rule"}]},
            {"key": "u1", "kind": "update", "decisions": [{"id": "d2", "status": "approved"}],
             "card_id": definition, "revision": revision["revision"],
             "title": "Fiscal quarter (April start)"}]})
        assert r.status_code in (200, 201), r.text
        version = (await env.client.get("/api/workspaces/acme/sessions/s1/summary",
                                        headers=reviewer)).json()["version"]
        before, _ = await scrape(env)
        r = await env.client.post("/api/workspaces/acme/sessions/s1/review", headers=reviewer,
                                  json={"review_id": "rev-1", "version": version,
                                        "selected": [{"key": "q1"}, {"key": "u1"}]})
        assert r.status_code == 200, r.text
        rows = env.rows("SELECT recall_id::text, 'mem-' || card_id, verdict, via, review_id, "
                        "actor FROM memory.recall_feedback")
        # helpful for the cited rule, on the session's newest recall that returned it (not
        # the other session's), from the reviewer; the updated definition gets none
        reviewer_actor = env.scalar("SELECT reviewed_by FROM memory.review_receipts")
        newest = answer["recall_id"] if rule not in {
            x["card"]["id"] for x in earlier["results"]} else earlier["recall_id"]
        assert rows == [(newest, rule, "helpful", "review", "rev-1", reviewer_actor)]
        assert other_session["recall_id"] != newest
        after, _ = await scrape(env)
        labels = {"verdict": "helpful", "via": "review", "outcome": "created"}
        assert value(after, "memarc_recall_feedback_total", **labels) == \
            value(before, "memarc_recall_feedback_total", **labels) + 1
        # the replayed review writes nothing again
        r = await env.client.post("/api/workspaces/acme/sessions/s1/review", headers=reviewer,
                                  json={"review_id": "rev-1", "version": version,
                                        "selected": [{"key": "q1"}, {"key": "u1"}]})
        assert r.status_code == 200
        assert env.scalar("SELECT count(*) FROM memory.recall_feedback") == 1


async def test_metrics_count_recalls_and_feedback_by_outcome(make_env):
    async with make_env() as env:
        h, (rule, _) = await _archive(env)
        oh, _ = await _archive(env, "other")
        before, _ = await scrape(env)
        answer = await _recall(env, h)
        empty = await env.client.post(f"{BASE}/search", headers=h, json={
            "query": "fiscal year", "family": ["explained_error"]})
        assert empty.json()["results"] == []
        await _recall(env, oh, query="fiscal year", workspace="other")
        await env.client.post(_feedback_url(answer["recall_id"]), headers=h, json={
            "cards": [{"card_id": rule, "verdict": "helpful"}]})
        after, text = await scrape(env)

        def delta(name: str, **labels: str) -> float:
            return value(after, name, **labels) - value(before, name, **labels)

        assert delta("memarc_recalls_total", mode="search", outcome="results") == 2
        assert delta("memarc_recalls_total", mode="search", outcome="empty") == 1
        assert delta("memarc_recall_feedback_total", verdict="helpful", via="api",
                     outcome="created") == 1
        assert 'workspace="acme"' not in text  # an open scrape names no workspace
        # per workspace behind the metrics token (the exposition the writer gives then)
        per = _samples(env.resources.archive().metrics.exposition(None, per_workspace=True))
        assert per[("memarc_recalls_total", (("mode", "search"), ("outcome", "results"),
                                             ("workspace", "acme")))] == 1
        assert per[("memarc_recalls_total", (("mode", "search"), ("outcome", "results"),
                                             ("workspace", "other")))] == 1


def _samples(text: bytes) -> dict[tuple[str, tuple], float]:
    return {(x.name, tuple(sorted(x.labels.items()))): x.value
            for family in text_string_to_metric_families(text.decode()) for x in family.samples}


def test_usage_counters_sum_over_workspaces_on_an_open_scrape():
    """The counters' two expositions, from a registry of its own (no database needed)."""
    metrics = Metrics()
    metrics.observe_recall_outcome("a", "rules", 3)
    metrics.observe_recall_outcome("b", "rules", 1)
    metrics.observe_recall_outcome("b", "rules", 0)
    metrics.observe_feedback("a", "wrong", "mcp", "created")
    metrics.observe_feedback("b", "wrong", "mcp", "created")
    totals = _samples(metrics.exposition(None))
    assert totals[("memarc_recalls_total", (("mode", "rules"), ("outcome", "results")))] == 2
    assert totals[("memarc_recalls_total", (("mode", "rules"), ("outcome", "empty")))] == 1
    assert totals[("memarc_recall_feedback_total", (
        ("outcome", "created"), ("verdict", "wrong"), ("via", "mcp")))] == 2
    assert not any(dict(labels).get("workspace") for _, labels in totals)
    per = _samples(metrics.exposition(None, per_workspace=True))
    assert per[("memarc_recalls_total", (("mode", "rules"), ("outcome", "results"),
                                         ("workspace", "b")))] == 1
    assert per[("memarc_recall_feedback_total", (
        ("outcome", "created"), ("verdict", "wrong"), ("via", "mcp"), ("workspace", "a")))] == 1
