"""The review pages of the administration (issue 24 "Review of a session") over HTTP: the list of
sessions to review, the editable summary (an update's difference, an addition's reuse and
possible duplicate, the approved SQL read-only), apply into a receipt, the same form submitted
again answering the same receipt with nothing written twice, a stale update rolling the whole
selection back and naming the card, and a person without ``memory.review`` who cannot review.
The browser test is in ``tests/test_admin_browser.py``."""

from __future__ import annotations

import re

import admin_helpers
from admin_helpers import csrf
from helpers import archive_row_counts, row_changes
from test_workflow import APPROVED, _card, _propose, _tokens, active_def, solved

ADMIN = "/admin/workspaces/acme"
MEM = "/api/workspaces/acme/memory"


def counts(env) -> dict[str, int]:
    import psycopg

    with psycopg.connect(env.migrator_url) as conn:
        return archive_row_counts(conn)


def form_of(html: str) -> list[tuple[str, str]]:
    """The review form's fields as a browser sends them (inputs with their values, checked
    boxes, textareas; the apply button), without JavaScript."""
    form = html[html.index('id="review-form"'):html.index("</form>", html.index('id="review-form"'))]
    pairs = []
    for tag in re.finditer(r"<input ([^>]*)>", form):
        attrs = dict(re.findall(r'(\w+)="([^"]*)"', tag.group(1)))
        if "name" not in attrs:
            continue
        if attrs.get("type") == "checkbox" and " checked" not in tag.group(1):
            continue
        pairs.append((attrs["name"], _unescape(attrs.get("value", ""))))
    for ta in re.finditer(r"<textarea ([^>]*)>(.*?)</textarea>", form, re.S):
        attrs = dict(re.findall(r'(\w+)="([^"]*)"', ta.group(1)))
        if "name" in attrs:
            pairs.append((attrs["name"], _unescape(ta.group(2))))
    return pairs + [("decision", "apply")]


def _unescape(text: str) -> str:
    import html

    return html.unescape(text)


async def post(env, pairs):
    """POST the review form's ``pairs`` (repeated names kept, in order) as a browser does."""
    from urllib.parse import urlencode

    return await env.client.post(f"{ADMIN}/sessions/s1", content=urlencode(pairs),
                                 headers={"content-type": "application/x-www-form-urlencoded"})


def replace(pairs, name, value):
    return [(n, value if n == name else v) for n, v in pairs]


async def _session(env):
    admin, agent, reviewer = _tokens(env)
    old = await _card(env, admin, {"family": "sql_rule", "title": "Paid orders",
                                   "content": {"rule": "Keep paid orders."}})
    await _propose(env, agent, "s1", [active_def(), solved(), {
        "key": "upd", "kind": "update", "card_id": old["id"], "revision": 1,
        "content": {"rule": "Keep paid and refunded orders."}, "decisions": APPROVED}])
    return admin, agent, reviewer, old


async def _reviewing(env):
    """Workspace acme with session s1 (:func:`_session`), the client signed in as its reviewer
    on the summary page; ``(admin, reviewer, old card, page)``."""
    env.workspace("acme")
    admin, _, reviewer, old = await _session(env)
    await admin_helpers.sign_in(env.client, reviewer)
    page = await env.client.get(f"{ADMIN}/sessions/s1")
    assert page.status_code == 200, page.text
    return admin, reviewer, old, page


async def test_a_reviewer_lists_edits_applies_and_replays_the_same_form(make_env):
    async with make_env() as env:
        admin, reviewer, old, page = await _reviewing(env)
        listed = await env.client.get(f"{ADMIN}/sessions")
        assert listed.status_code == 200 and ">s1</a>" in listed.text
        text = page.text
        # the update's difference against the card now; the approved SQL read-only, unnamed
        assert "Keep paid orders." in text and "Keep paid and refunded orders." in text
        sql = re.search(r'<textarea id="p1-content-sql"[^>]*>', text).group(0)
        assert "readonly" in sql and "name=" not in sql
        assert 'for="p1-content-sql"' in text and 'for="p0-title"' in text
        pairs = replace(form_of(text), "p0-title", "Active customer (30 days)")
        before = counts(env)
        r = await post(env, pairs)
        assert r.status_code == 303, r.text
        receipt = await env.client.get(r.headers["location"])
        assert "Review applied: 3 cards" in receipt.text, receipt.text
        assert "Active customer (30 days)" in receipt.text
        after = counts(env)
        changed = row_changes(before, after)
        assert changed["cards"] == 2 and changed["review_receipts"] == 1, changed
        # the same form again (back button, double click): the same receipt, nothing written
        r = await post(env, pairs)
        assert r.status_code == 303 and "replayed=1" in r.headers["location"]
        again = await env.client.get(r.headers["location"])
        assert "already applied" in again.text and "Nothing was written again" in again.text
        assert counts(env) == after
        # the API's receipt has the edited title
        r = await env.client.get("/api/workspaces/acme/sessions/s1/summary", headers=reviewer)
        titles = {i["key"]: i["title"] for i in r.json()["review"]["items"]}
        assert titles["active"] == "Active customer (30 days)"


async def test_a_stale_update_writes_nothing_and_names_the_card(make_env):
    async with make_env() as env:
        admin, _, old, page = await _reviewing(env)
        pairs = replace(form_of(page.text), "p0-title", "Typed by the reviewer")
        r = await env.client.put(f"{MEM}/{old['id']}", headers=admin, json={
            "family": "sql_rule", "title": "Paid orders", "content": {"rule": "Changed."},
            "revision": 1})
        assert r.status_code == 200
        before = counts(env)
        r = await post(env, pairs)
        assert r.status_code == 409, r.text
        assert "whole selection was rolled back" in r.text
        assert "now at revision 2" in r.text and old["id"][:12] in r.text
        assert 'value="Typed by the reviewer"' in r.text  # what was typed is kept
        assert "selected[" not in r.text, re.findall(r".{200}selected\[.{200}", r.text)
        assert "Stale: stale:" not in r.text
        assert row_changes(before, counts(env)) == {"activity": 1}  # the refusal, recorded


async def test_a_refused_apply_names_the_proposal_and_says_why_in_words(make_env):
    """A value out of bounds in a kept proposal's fields: 422, nothing written, the banner links
    to the proposal by its number on the page and says what is wrong in a person's words (not
    the decoder's `` - at `$.concepts[0]` `` nor the request's ``selected[0]``). The browser's
    own checks are off on this form (a declined proposal's blank field must not block Apply or
    Decline all), and Decline all asks first when JavaScript runs. A crafted ``decision`` is
    refused."""
    async with make_env() as env:
        *_, page = await _reviewing(env)
        assert re.search(r'<form [^>]*id="review-form"[^>]*novalidate', page.text)
        decline = re.search(r'<button [^>]*id="decline-all"[^>]*>', page.text).group(0)
        assert "formnovalidate" in decline and "data-confirm=" in decline
        before = counts(env)
        r = await post(env, replace(form_of(page.text), "p0-concepts", "c" * 101))
        assert r.status_code == 422, r.text[:500]
        assert '<a href="#proposal-0">Proposal 1</a>: Concept 1 is longer than 100 characters.' \
            in r.text, r.text[:3000]
        assert "Expected `" not in r.text and "selected[" not in r.text
        r = await post(env, replace(form_of(page.text), "decision", "nuke"))
        assert r.status_code == 422 and "not &#39;nuke&#39;" in r.text, r.text[:2000]
        assert row_changes(before, counts(env)) == {"activity": 1}  # the first refusal


async def test_decline_all_and_nothing_kept(make_env):
    async with make_env() as env:
        *_, page = await _reviewing(env)
        pairs = [(n, v) for n, v in form_of(page.text) if not n.endswith("-keep")]
        before = counts(env)
        r = await post(env, pairs)
        assert r.status_code == 422 and "Nothing was written" in r.text
        assert row_changes(before, counts(env)) == {"activity": 1}  # the refusal, recorded
        r = await post(env, replace(pairs, "decision", "decline"))
        assert r.status_code == 303
        receipt = await env.client.get(r.headers["location"])
        assert "Every proposal of this session was declined" in receipt.text
        assert row_changes(before, counts(env)) == {"review_receipts": 1, "activity": 2}


async def test_without_memory_review_the_page_says_so_and_a_post_is_403(make_env):
    async with make_env() as env:
        env.workspace("acme")
        await _session(env)
        for perms in (("memory.read",), ("memory.manage",), ("memory.propose",)):
            env.client.cookies.clear()
            await admin_helpers.sign_in(env.client, env.token("acme", *perms))
            page = await env.client.get(f"{ADMIN}/sessions/s1")
            assert page.status_code == 403 and "You cannot review" in page.text, perms
            assert 'id="review-form"' not in page.text
            token = await csrf(env.client, f"{ADMIN}/cards")
            before = counts(env)
            r = await env.client.post(f"{ADMIN}/sessions/s1", data={
                "_csrf_token": token, "review_id": "x", "decision": "decline"})
            assert r.status_code == 403, (perms, r.status_code)
            assert row_changes(before, counts(env)) == {"activity": 1}  # the refusal recorded


async def test_a_review_post_without_the_csrf_token_is_refused(make_env):
    async with make_env() as env:
        *_, page = await _reviewing(env)
        pairs = [(n, v) for n, v in form_of(page.text) if n != "_csrf_token"]
        before = counts(env)
        r = await post(env, pairs)
        assert r.status_code == 403 and "Nothing was changed" in r.text
        assert counts(env) == before


async def test_a_second_tab_after_the_review_gets_that_receipt_and_writes_nothing(make_env):
    """Two tabs of one session: the first applies; the second's form (another review id) is
    refused with a 409 page that keeps the navigation, shows the first review's receipt and
    says its own choices were not applied."""
    async with make_env() as env:
        *_, first = await _reviewing(env)
        second = await env.client.get(f"{ADMIN}/sessions/s1")
        r = await post(env, form_of(first.text))
        assert r.status_code == 303, r.text
        applied = counts(env)
        r = await post(env, form_of(second.text))
        assert r.status_code == 409, r.text[:500]
        assert "this session was reviewed meanwhile" in r.text and 'id="receipt"' in r.text
        assert "Sign out" in r.text  # the page keeps the workspace bar
        assert row_changes(applied, counts(env)) == {"activity": 1}  # the refusal, recorded


async def test_decline_all_declines_what_the_page_showed_not_a_proposal_stored_since(make_env):
    """Issue 36: the form carries the version of the summary it shows, so Decline all sent after
    the assistant proposed once more declines the page's proposals only; the new one stays open
    and is the next page's."""
    async with make_env() as env:
        _, reviewer, _, page = await _reviewing(env)
        assert re.search(r'name="version" value="[^"]+"', page.text)
        _, agent, _ = _tokens(env)
        await _propose(env, agent, "s1", [{"key": "late", "family": "sql_rule",
                                           "title": "Late rule", "content": {"rule": "Late."},
                                           "decisions": APPROVED}])
        r = await post(env, replace(form_of(page.text), "decision", "decline"))
        assert r.status_code == 303, r.text[:500]
        r = await env.client.get("/api/workspaces/acme/sessions/s1/summary", headers=reviewer)
        decided = {i["key"]: i.get("reviewed") for i in r.json()["proposals"]}
        assert decided.pop("late") is None and set(decided.values()) == {"declined"}, decided
        nxt = await env.client.get(f"{ADMIN}/sessions/s1")
        assert nxt.status_code == 200 and 'id="review-form"' in nxt.text
        assert [n for n, _ in form_of(nxt.text) if n.endswith("-keep")] == ["p3-keep"]
