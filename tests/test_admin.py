"""The administration pages (issue 24, DESIGN §12) over HTTP: sign-in and its cookie, sign-out and
a revoked token ending the session, the one-time sign-in link, CSRF (a POST without the form's
token is a 403 and writes nothing), escaping of card text, a ``memory.read`` person without edit
controls whose POSTs are 403, and the card pages' outcomes (saved, stale, invalid, deleted,
retried). The browser test is ``tests/test_admin_browser.py``.
"""

from __future__ import annotations

import re
from typing import Any

import admin_helpers
from admin_helpers import CSRF_RE, bearer, csrf
from helpers import archive_row_counts, row_changes

from shared.archive.browser_sessions import create_sign_in_link
from shared.store.bootstrap import revoke_token

API = "/api/workspaces/acme/memory"
ADMIN = "/admin/workspaces/acme"


async def sign_in(env, headers: dict[str, str]) -> Any:
    """Sign the env's client in with the token of ``headers``; returns the response."""
    return await admin_helpers.sign_in(env.client, headers)


async def new_rule(env, headers: dict[str, str], title: str) -> str:
    """A new SQL rule of acme through the API; its id."""
    r = await env.client.post(API, headers=headers, json={
        "family": "sql_rule", "title": title, "content": {"rule": f"{title}."}})
    assert r.status_code == 201, r.text
    return r.json()["card"]["id"]


def hidden_fields(html: str) -> dict[str, str]:
    """The hidden inputs of a page's forms, by name (the last one of a name wins)."""
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', html))


async def signed_in_on(env, title: str, page: str) -> tuple[dict[str, str], str, Any]:
    """Workspace acme with one SQL rule ``title``, the client signed in with a manage token:
    ``(headers, card id, response of the card's page + page)``."""
    env.workspace("acme")
    h = env.token("acme")
    card = await new_rule(env, h, title)
    await sign_in(env, h)
    return h, card, await env.client.get(f"{ADMIN}/cards/{card}{page}")


def card_form(title: str, definition: str = "A definition.", **extra: str) -> dict[str, str]:
    return {"family": "domain_clarification", "title": title, "content.definition": definition,
            "scope": "", "concepts": "", **extra}


def counts(env) -> dict[str, int]:
    import psycopg

    with psycopg.connect(env.migrator_url) as conn:
        return archive_row_counts(conn)


async def test_sign_in_sets_a_strict_http_only_cookie_and_sign_out_ends_it(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        r = await env.client.get(f"{ADMIN}/cards")
        assert r.status_code == 303 and r.headers["location"].startswith("/admin/sign-in?")
        r = await sign_in(env, h)
        assert r.headers["location"] == f"{ADMIN}/cards"
        assert bearer(h) not in r.headers["location"]
        cookie = next(c for c in r.headers.get_list("set-cookie") if c.startswith("memarc_admin="))
        flags = [f.strip().lower() for f in cookie.split(";")]
        assert "httponly" in flags and "samesite=strict" in flags and "path=/admin" in flags
        assert any(f.startswith("max-age=") for f in flags)
        csrf_cookie = env.client.cookies.get("memarc_csrf")
        assert csrf_cookie
        page = await env.client.get(f"{ADMIN}/cards")
        assert page.status_code == 200 and "0 cards" in page.text
        assert bearer(h) not in page.text
        # signing in again in this browser ends its earlier session
        await sign_in(env, h)
        assert env.scalar("SELECT count(*) FROM memory.admin_sessions WHERE ended_at IS NULL") == 1
        secret = env.client.cookies.get("memarc_admin")
        # sign out: the session row ends, so even a copy of the cookie is signed out
        token = await csrf(env.client, f"{ADMIN}/cards")
        r = await env.client.post("/admin/sign-out", data={"_csrf_token": token})
        assert r.status_code == 303 and r.headers["location"] == "/admin/sign-in?reason=ended"
        env.client.cookies.set("memarc_admin", secret, path="/admin")
        r = await env.client.get(f"{ADMIN}/cards")
        assert r.status_code == 303 and "reason=ended" in r.headers["location"]
        assert env.scalar("SELECT count(*) FROM memory.admin_sessions WHERE ended_at IS NULL") == 0


async def test_a_reviewer_lands_on_the_review_queue_and_an_editor_on_the_cards(make_env):
    """A reviewer who cannot edit cards starts where their work is (the sessions), not on a
    card list that says they cannot edit; ``/admin`` sends each to the same page."""
    async with make_env() as env:
        env.workspace("acme")
        for permissions, page in ((("memory.review",), "sessions"),
                                  (("memory.review", "memory.manage"), "cards"),
                                  (("memory.read",), "cards")):
            env.client.cookies.clear()
            r = await sign_in(env, env.token("acme", *permissions))
            assert r.headers["location"] == f"{ADMIN}/{page}", (permissions, r.headers)
            r = await env.client.get("/admin")
            assert r.status_code == 303 and r.headers["location"] == f"{ADMIN}/{page}"
            assert (await env.client.get(r.headers["location"])).status_code == 200


async def test_a_wrong_token_does_not_sign_in(make_env):
    async with make_env() as env:
        env.workspace("acme")
        token = await csrf(env.client, "/admin/sign-in")
        r = await env.client.post("/admin/sign-in", data={"token": "mat_nope", "_csrf_token": token})
        assert r.status_code == 401 and "That token cannot sign in" in r.text
        assert "mat_nope" not in r.text
        assert "memarc_admin" not in env.client.cookies


async def test_a_revoked_token_ends_its_sessions(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        await sign_in(env, h)
        assert (await env.client.get(f"{ADMIN}/cards")).status_code == 200
        token_id = env.scalar("SELECT token_id FROM memory.admin_sessions")
        revoke_token(env.migrator_url, "memory", str(token_id))
        r = await env.client.get(f"{ADMIN}/cards")
        assert r.status_code == 303 and "reason=revoked" in r.headers["location"]
        page = await env.client.get(r.headers["location"])
        assert "was revoked" in page.text
        # and a POST with that session writes nothing
        before = counts(env)
        r = await env.client.post(f"{ADMIN}/cards/new", data={
            **card_form("After revocation"), "_csrf_token": env.client.cookies.get("memarc_csrf")})
        assert r.status_code == 401
        assert row_changes(before, counts(env)) == {}


async def test_a_one_time_sign_in_link_signs_in_once(make_env):
    async with make_env() as env:
        env.workspace("acme")
        link = create_sign_in_link(env.migrator_url, "memory", "acme", ["memory.manage"])
        page = await env.client.get(f"/admin/sign-in/link?code={link['code']}")
        assert page.status_code == 200
        token = CSRF_RE.search(page.text).group(1)
        r = await env.client.post("/admin/sign-in/link", data={"code": link["code"],
                                                               "_csrf_token": token})
        assert r.status_code == 303 and r.headers["location"] == f"{ADMIN}/cards"
        assert link["code"] not in r.headers["location"]
        assert (await env.client.get(f"{ADMIN}/cards")).status_code == 200
        r = await env.client.post("/admin/sign-in/link", data={"code": link["code"],
                                                               "_csrf_token": token})
        assert r.status_code == 401 and "used already" in r.text


async def test_a_post_from_another_site_is_403_even_with_a_valid_csrf_token(make_env):
    """Issue 36: a state-changing request whose Origin (or, without one, Referer) names another
    site is refused with a page saying so, nothing written, though its CSRF token is valid; the
    same origin, the public address of MEMARC_ADMIN_URL (a reverse proxy's), and a request
    with neither header (non-browser clients, privacy settings) pass."""
    async with make_env(admin_url="https://memarc.example.org/admin") as env:
        env.workspace("acme")
        await sign_in(env, env.token("acme"))
        token = await csrf(env.client, f"{ADMIN}/cards/new")
        before = counts(env)
        for headers in ({"Origin": "https://evil.example"}, {"Origin": "null"},
                        {"Origin": "http://memarc.test:8080"},
                        {"Origin": "http://memarc.example.org"},
                        {"Referer": "https://evil.example/page"}):
            r = await env.client.post(f"{ADMIN}/cards/new", headers=headers,
                                      data={**card_form("Forged"), "_csrf_token": token})
            assert r.status_code == 403, (headers, r.status_code)
            assert "sent from another site" in r.text and "Nothing was saved" in r.text, headers
        r = await env.client.post("/admin/sign-in", headers={"Origin": "https://evil.example"},
                                  data={"token": "mat_x", "_csrf_token": token})
        assert r.status_code == 403  # a forged sign-in (login CSRF) too
        assert row_changes(before, counts(env)) == {}
        for n, headers in enumerate(({"Origin": "http://memarc.test"},
                                     {"Origin": "https://memarc.example.org"},
                                     {"Referer": f"http://memarc.test{ADMIN}/cards/new"},
                                     {})):
            r = await env.client.post(f"{ADMIN}/cards/new", headers=headers,
                                      data={**card_form(f"Made {n}"), "_csrf_token": token})
            assert r.status_code == 303, (headers, r.status_code, r.text[:300])


async def test_a_post_refused_with_401_keeps_a_valid_session_and_its_cookie(make_env):
    """Issue 36: a form sent to another workspace than the session's is a 401 sign-in page;
    the session stays valid server-side, so the browser keeps its cookie (only sign-out, which
    ends the session, deletes it)."""
    async with make_env() as env:
        env.workspace("acme")
        env.workspace("beta")
        await sign_in(env, env.token("acme"))
        token = await csrf(env.client, f"{ADMIN}/cards/new")
        r = await env.client.post("/admin/workspaces/beta/cards/new",
                                  data={**card_form("Elsewhere"), "_csrf_token": token})
        assert r.status_code == 401 and "not 'beta'" in r.text.replace("&#39;", "'")
        assert "memarc_admin" not in r.headers.get("set-cookie", "")
        assert (await env.client.get(f"{ADMIN}/cards")).status_code == 200  # still signed in
        r = await env.client.post("/admin/sign-out", data={"_csrf_token": token})
        assert r.status_code == 303 and "memarc_admin" in r.headers.get("set-cookie", "")
        assert (await env.client.get(f"{ADMIN}/cards")).status_code == 303  # ended


async def test_a_post_without_the_csrf_token_is_403_and_writes_nothing(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        await sign_in(env, h)
        created = await env.client.post(API, headers=h, json={
            "family": "sql_rule", "title": "Kept", "content": {"rule": "Keep it."}})
        assert created.status_code == 201  # the bearer-token API needs no CSRF token
        card_id = created.json()["card"]["id"]
        before = counts(env)
        for data in (card_form("Forged"), {**card_form("Forged"), "_csrf_token": "x" * 128}):
            for path in (f"{ADMIN}/cards/new", f"{ADMIN}/cards/{card_id}/delete",
                         f"{ADMIN}/pending/retry-all", "/admin/sign-out"):
                r = await env.client.post(path, data={**data, "confirm": "delete"})
                assert r.status_code == 403, (path, r.status_code)
                assert "Nothing was changed" in r.text
        assert row_changes(before, counts(env)) == {}
        assert (await env.client.get(f"{ADMIN}/cards")).status_code == 200  # still signed in
        # with the token, the same form creates the card
        token = await csrf(env.client, f"{ADMIN}/cards/new")
        r = await env.client.post(f"{ADMIN}/cards/new", data={**card_form("Made"),
                                                               "_csrf_token": token})
        assert r.status_code == 303 and "saved=pending" in r.headers["location"]


async def test_card_text_is_escaped(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        evil = '<script>alert(1)</script>'
        quote = '" onmouseover="alert(2)'
        r = await env.client.post(API, headers=h, json={
            "family": "domain_clarification", "title": f"{evil} title {quote}",
            "content": {"definition": f"{evil} {quote}"}, "scope": quote,
            "concepts": [evil], "dependencies": [{"database": quote}]})
        card_id = r.json()["card"]["id"]
        await sign_in(env, h)
        for path in (f"{ADMIN}/cards", f"{ADMIN}/cards/{card_id}", f"{ADMIN}/cards/{card_id}/delete",
                     f"{ADMIN}/cards/{card_id}/activity", f"{ADMIN}/pending"):
            page = await env.client.get(path)
            assert page.status_code == 200, path
            assert "<script>alert" not in page.text, path
            assert '" onmouseover=' not in page.text, path
            if path.endswith(card_id):
                assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
                assert "&#34; onmouseover=&#34;alert(2)" in page.text


async def test_a_read_only_person_sees_no_edit_control_and_cannot_post(make_env):
    async with make_env() as env:
        env.workspace("acme")
        manager = env.token("acme")
        card_id = await new_rule(env, manager, "Stays")
        reader = env.token("acme", "memory.read")
        await sign_in(env, reader)
        page = await env.client.get(f"{ADMIN}/cards")
        assert page.status_code == 200 and "it cannot edit cards" in page.text
        assert "<code>memory.read</code> allows recall only" in page.text
        forms = re.findall(r'<form[^>]*action="([^"]+)"', page.text)
        assert forms == ["/admin/sign-out"]
        assert "New card" not in page.text and "Delete" not in page.text
        for path in (f"{ADMIN}/cards/new", f"{ADMIN}/cards/{card_id}",
                     f"{ADMIN}/cards/{card_id}/delete"):
            r = await env.client.get(path)
            assert r.status_code == 403, path
            assert "<form" not in r.text.replace('<form method="post" action="/admin/sign-out"', "")
        token = env.client.cookies.get("memarc_csrf")
        before = counts(env)
        posts = [(f"{ADMIN}/cards/new", card_form("Sneaky")),
                 (f"{ADMIN}/cards/{card_id}", {**card_form("Sneaky"), "family": "sql_rule",
                                               "revision": "1"}),
                 (f"{ADMIN}/cards/{card_id}/delete", {"confirm": "delete"}),
                 (f"{ADMIN}/cards/{card_id}/retry", {}),
                 (f"{ADMIN}/pending/retry", {"card_id": card_id}),
                 (f"{ADMIN}/pending/retry-all", {})]
        for path, data in posts:
            r = await env.client.post(path, data={**data, "_csrf_token": token})
            assert r.status_code == 403, (path, r.status_code, r.text[:300])
        changes = row_changes(before, counts(env))
        assert set(changes) <= {"activity"}, changes  # only the refusals are recorded
        assert env.scalar("SELECT title FROM memory.cards") == "Stays"


async def test_saves_answer_three_ways_and_name_the_token_in_the_activity(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        await sign_in(env, h)
        token = await csrf(env.client, f"{ADMIN}/cards/new")
        # failed: nothing written, the reason next to the field, what was typed kept
        before = counts(env)
        r = await env.client.post(f"{ADMIN}/cards/new", data={
            **card_form("Typed title", definition="  "), "concepts": "typed concept",
            "dep-0-database": "db", "dep-0-table": "orders", "_csrf_token": token})
        assert r.status_code == 422
        assert "Not saved: nothing was written." in r.text
        assert 'id="error-content.definition"' in r.text or 'id="error-dependencies[0]"' in r.text
        assert 'value="Typed title"' in r.text and "typed concept" in r.text
        assert row_changes(before, counts(env)) == {"activity": 1}
        r = await env.client.post(f"{ADMIN}/cards/new", data={
            **card_form("Typed title"), "dep-0-database": "db", "dep-0-table": "orders",
            "_csrf_token": token})
        assert r.status_code == 422 and 'id="error-dependencies[0]"' in r.text
        assert "a table needs its schema" in r.text
        # saved, index update incomplete (no worker): the card is kept, a Retry is offered
        r = await env.client.post(f"{ADMIN}/cards/new", data={
            **card_form("Typed title"), "dep-0-database": "db", "dep-0-schema": "public",
            "_csrf_token": token})
        assert r.status_code == 303 and "saved=pending" in r.headers["location"]
        page = await env.client.get(r.headers["location"])
        assert "index update incomplete" in page.text and 'value="Retry"' in page.text
        card_id = re.search(r"/cards/(mem-[0-9a-f-]+)", r.headers["location"]).group(1)
        token_id = env.scalar("SELECT token_id FROM memory.admin_sessions")
        actor = env.scalar("SELECT actor FROM memory.activity WHERE verb = 'create'"
                           " AND outcome = 'ok'")
        assert actor == f"token:{token_id}"
        activity = await env.client.get(f"{ADMIN}/cards/{card_id}/activity")
        assert f"token:{token_id}" in activity.text
        # retry: queued
        r = await env.client.post(f"{ADMIN}/cards/{card_id}/retry", data={"_csrf_token": token})
        assert r.status_code == 303 and "retried=queued" in r.headers["location"]
        # saved and indexed: with the worker running
        async with env.running_worker():
            r = await env.client.post(f"{ADMIN}/cards/{card_id}", data={
                **card_form("Indexed title"), "revision": "1", "_csrf_token": token})
            assert r.status_code == 303 and "saved=current" in r.headers["location"], r.headers
        page = await env.client.get(r.headers["location"])
        assert "Saved and indexed (revision 2)" in page.text


async def test_a_form_out_of_bounds_says_so_in_plain_words_next_to_its_field(make_env):
    """A bound the card body's type checks (msgspec's ``Expected `str` of length <= 200 - at
    `$.title```) is shown in a person's words next to its field, never as the decoder's text;
    a tampered hidden field (the revision) is reported at the top, not as a field "marked
    below" that no one can see. Nothing is written."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        await sign_in(env, h)
        token = await csrf(env.client, f"{ADMIN}/cards/new")
        card = await new_rule(env, h, "Fiscal year")
        cases = [
            ({"title": "t" * 201}, "error-title", "The title is longer than 200 characters."),
            ({"concepts": "c" * 101}, "error-concepts", "Concept 1 is longer than 100 characters."),
            ({"concepts": "\n".join(f"c{i}" for i in range(51))}, "error-concepts",
             "At most 50 concepts are allowed."),
            ({"link-0-meaning": "see"}, "error-links[0]",
             "The target of link row 1 is blank: fill it in, or clear the whole row."),
        ]
        before = counts(env)
        for extra, field_id, words in cases:
            r = await env.client.post(f"{ADMIN}/cards/new", data={
                **card_form("Typed title"), **extra, "_csrf_token": token})
            assert r.status_code == 422, (extra, r.text[:300])
            assert f'id="{field_id}"' in r.text and words in r.text, (extra, words)
            assert "Expected `" not in r.text and "$." not in r.text, extra
        r = await env.client.post(f"{ADMIN}/cards/{card}", data={
            **card_form("Fiscal year"), "revision": "x", "_csrf_token": token})
        assert r.status_code == 422
        assert "an update must name the revision it edits" in r.text, r.text[:2000]
        assert "See the field marked below" not in r.text
        assert row_changes(before, counts(env)) == {"activity": len(cases) + 1}


async def test_a_card_list_address_out_of_bounds_says_what_is_wrong(make_env):
    """An unknown family is refused (it used to list every card as if unfiltered), and a query
    over its length says which parameter and why, not "Validation failed for GET …"."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        await new_rule(env, h, "Fiscal year")
        await sign_in(env, h)
        r = await env.client.get(f"{ADMIN}/cards", params={"family": "bogus"})
        assert r.status_code == 422 and "there is no family &#39;bogus&#39;" in r.text, r.text[:3000]
        assert "Sign out" in r.text and "Pending index updates" in r.text  # navigation kept
        assert "sql_rule" in r.text and "Fiscal year" not in r.text
        r = await env.client.get(f"{ADMIN}/cards", params={"q": "q" * 5000})
        assert r.status_code == 400 and "The search text is longer than 200 characters." in r.text,\
            r.text[:3000]
        assert "Validation failed" not in r.text
        r = await env.client.get(f"{ADMIN}/cards", params={"page": "9"})
        assert "There is no page 9: the 1 card fills 1 page." in r.text and "No cards" not in r.text
        r = await env.client.get(f"{ADMIN}/cards", params={"page": "abc"})
        assert r.status_code == 400 and "The page must be a whole number." in r.text, r.text[:3000]
        r = await env.client.get(f"{ADMIN}/cards/mem-00000000-0000-4000-8000-000000000000/activity")
        assert r.status_code == 404 and "This card was deleted" not in r.text


async def test_saving_a_card_deleted_meanwhile_keeps_the_typing_as_a_new_card(make_env):
    """The card was deleted in another tab: the save answers 404 with the form as typed, as a
    new card's form (it posts to "new") with a link to the deleted card's activity; sent, it
    creates the card. A reload of a save's outcome after the card moved on shows no stale
    notice."""
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        card = await new_rule(env, h, "Fiscal year")
        await sign_in(env, h)
        token = await csrf(env.client, f"{ADMIN}/cards/{card}")
        assert (await env.client.delete(f"{API}/{card}", headers=h)).status_code in (200, 204)
        typed = {"family": "sql_rule", "title": "Fiscal year (typed)", "content.rule": "Typed.",
                 "scope": "", "concepts": "", "revision": "1", "_csrf_token": token}
        r = await env.client.post(f"{ADMIN}/cards/{card}", data=typed)
        assert r.status_code == 404, r.text[:500]
        assert "This card is gone: it was deleted meanwhile" in r.text
        assert 'value="Fiscal year (typed)"' in r.text and "Typed." in r.text
        assert f'action="{ADMIN}/cards/new"' in r.text and f"{card}/activity" in r.text
        r = await env.client.post(f"{ADMIN}/cards/new", data={
            k: v for k, v in typed.items() if k != "revision"})
        assert r.status_code == 303 and "created=1" in r.headers["location"], r.text[:500]
        outcome = r.headers["location"]
        assert "rev=1" in outcome
        assert "Created" in (await env.client.get(outcome)).text
        new_id = re.search(r"/cards/(mem-[0-9a-f-]+)", outcome).group(1)
        r = await env.client.put(f"{API}/{new_id}", headers=h, json={
            "family": "sql_rule", "title": "Changed elsewhere", "content": {"rule": "X."},
            "revision": 1})
        assert r.status_code == 200, r.text
        page = await env.client.get(outcome)  # a reload after the card moved on
        assert page.status_code == 200 and 'id="outcome"' not in page.text


async def test_a_stale_save_never_overwrites_and_can_be_applied_again(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        card = (await env.client.post(API, headers=h, json={
            "family": "sql_rule", "title": "Original", "content": {"rule": "Old rule."}})).json()["card"]
        await sign_in(env, h)
        token = await csrf(env.client, f"{ADMIN}/cards/{card['id']}")
        r = await env.client.put(f"{API}/{card['id']}", headers=h, json={
            "family": "sql_rule", "title": "Changed by someone", "content": {"rule": "Their rule."},
            "revision": 1})
        assert r.status_code == 200
        mine = {"family": "sql_rule", "title": "My title", "content.rule": "My rule.",
                "revision": "1", "_csrf_token": token}
        r = await env.client.post(f"{ADMIN}/cards/{card['id']}", data=mine)
        assert r.status_code == 409
        assert "Changed by someone" in r.text and "My title" in r.text
        assert "Apply my changes on revision 2" in r.text
        assert env.scalar("SELECT title FROM memory.cards") == "Changed by someone"
        fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', r.text))
        assert fields["revision"] == "2" and fields["title"] == "My title"
        r = await env.client.post(f"{ADMIN}/cards/{card['id']}", data=fields)
        assert r.status_code == 303
        assert env.scalar("SELECT title || ' ' || revision FROM memory.cards") == "My title 3"


async def test_a_stale_save_applies_only_the_fields_this_person_changed(make_env):
    """Two tabs: A changes the rule and saves; B, opened before, changes only the title. B's
    save goes stale; its page marks the rule "changed meanwhile: kept" and the title "changed by
    you"; applied, the card has B's title and A's rule (a three-way merge against the revision
    B opened, carried by the form's ``base-<field>`` digests), not B's stale copy of the rule."""
    async with make_env() as env:
        h, card, page = await signed_in_on(env, "Original", "")
        fields = hidden_fields(page.text)
        assert {"base-title", "base-content.rule", "base-links"} <= set(fields), fields
        r = await env.client.put(f"{API}/{card}", headers=h, json={
            "family": "sql_rule", "title": "Original", "content": {"rule": "Rule by A."},
            "revision": 1})
        assert r.status_code == 200
        mine = {**fields, "title": "Title by B", "content.rule": "Original.", "scope": "",
                "concepts": ""}
        r = await env.client.post(f"{ADMIN}/cards/{card}", data=mine)
        assert r.status_code == 409, r.text[:500]
        rule_row = re.search(r'<tr[^>]*data-field="rule".*?</tr>', r.text, re.S).group(0)
        title_row = re.search(r'<tr[^>]*data-field="title".*?</tr>', r.text, re.S).group(0)
        assert "changed meanwhile: kept" in rule_row and "Original." not in rule_row
        assert "changed by you" in title_row and "Title by B" in title_row
        again = hidden_fields(r.text)
        r = await env.client.post(f"{ADMIN}/cards/{card}", data=again)
        assert r.status_code == 303, r.text[:500]
        stored = (await env.client.get(f"{API}/{card}", headers=h)).json()["card"]
        assert (stored["title"], stored["content"]["rule"], stored["revision"]) == \
            ("Title by B", "Rule by A.", 3)


async def test_delete_asks_names_what_goes_and_says_what_was_removed(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        target = (await env.client.post(API, headers=h, json={
            "family": "sql_rule", "title": "Target", "content": {"rule": "R."}})).json()["card"]
        doomed = (await env.client.post(API, headers=h, json={
            "family": "sql_rule", "title": "Doomed", "content": {"rule": "D."},
            "dependencies": [{"database": "shop", "schema": "public", "table": "orders"}],
            "links": [{"target": target["id"], "meaning": "refines"}]})).json()["card"]
        (await env.client.post(API, headers=h, json={
            "family": "sql_rule", "title": "Linker", "content": {"rule": "L."},
            "links": [{"target": doomed["id"], "meaning": "see"}]}))
        await sign_in(env, h)
        page = await env.client.get(f"{ADMIN}/cards/{doomed['id']}/delete")
        assert "1 dependency: <code>shop.public.orders</code>" in page.text
        assert "1 outgoing link: to “Target” (refines)" in page.text
        assert "1 incoming link: from “Linker” (see)" in page.text
        token = CSRF_RE.search(page.text).group(1)
        r = await env.client.post(f"{ADMIN}/cards/{doomed['id']}/delete", data={"_csrf_token": token})
        assert r.status_code == 303  # no confirmation: back to the question
        assert env.scalar("SELECT count(*) FROM memory.cards") == 3
        r = await env.client.post(f"{ADMIN}/cards/{doomed['id']}/delete",
                                  data={"_csrf_token": token, "confirm": "delete"})
        assert r.status_code == 200
        text = re.sub(r"\s+", " ", r.text)
        assert "was deleted, with 1 dependency, 1 outgoing link and 1 incoming link:" in text
        assert "1 incoming link: from “Linker” (see) (those cards stay)" in text
        assert "1 outgoing link: to “Target” (refines)" in text
        assert env.scalar("SELECT count(*) FROM memory.cards") == 2
        assert env.scalar("SELECT count(*) FROM memory.card_links") == 0
        # the deleted card keeps its activity page
        r = await env.client.get(f"{ADMIN}/cards/{doomed['id']}/activity")
        assert r.status_code == 200 and "This card was deleted." in r.text


async def test_a_delete_asks_again_when_the_card_changed_since_its_confirmation(make_env):
    """The confirmation said "0 incoming links"; another card links to it meanwhile: the delete
    writes nothing and shows the confirmation again (409) naming the new link; confirmed again,
    it deletes. Sent once more (another tab), it says the card is deleted already."""
    async with make_env() as env:
        h, doomed, page = await signed_in_on(env, "Doomed", "/delete")
        assert "0 incoming links" in page.text
        form = hidden_fields(page.text)
        assert {"_csrf_token", "confirm", "seen"} <= set(form), form
        r = await env.client.post(API, headers=h, json={
            "family": "sql_rule", "title": "Linker", "content": {"rule": "L."},
            "links": [{"target": doomed, "meaning": "see"}]})
        assert r.status_code == 201
        before = counts(env)
        r = await env.client.post(f"{ADMIN}/cards/{doomed}/delete", data=form)
        assert r.status_code == 409 and "Nothing was deleted: this card or its links changed" \
            in r.text and "1 incoming link: from “Linker” (see)" in r.text
        assert row_changes(before, counts(env)) == {}
        again = hidden_fields(r.text)
        r = await env.client.post(f"{ADMIN}/cards/{doomed}/delete", data=again)
        assert r.status_code == 200 and "was deleted" in r.text
        r = await env.client.post(f"{ADMIN}/cards/{doomed}/delete", data=again)
        assert r.status_code == 404 and "deleted already" in r.text and "Sign out" in r.text


async def test_pending_lists_operations_and_retries_each_and_all(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        ids = [(await env.client.post(API, headers=h, json={
            "family": "sql_rule", "title": f"Rule {i}", "content": {"rule": "R."}})).json()["card"]["id"]
            for i in range(2)]
        await env.client.delete(f"{API}/{ids[1]}", headers=h)
        await sign_in(env, h)
        page = await env.client.get(f"{ADMIN}/pending")
        assert "3 incomplete operations" in page.text and "deleted card" in page.text
        token = CSRF_RE.search(page.text).group(1)
        r = await env.client.post(f"{ADMIN}/pending/retry", data={"_csrf_token": token,
                                                                  "card_id": ids[1]})
        assert r.status_code == 303
        page = await env.client.get(r.headers["location"])
        assert f"Retry of {ids[1]} queued" in page.text
        r = await env.client.post(f"{ADMIN}/pending/retry-all", data={"_csrf_token": token})
        page = await env.client.get(r.headers["location"])
        assert "Retried every card: 2 queued" in page.text
        await env.drain()
        page = await env.client.get(f"{ADMIN}/pending")
        assert "Nothing pending" in page.text


async def test_the_explorer_and_the_administration_serve_one_stylesheet(make_env):
    from datasette.app import Datasette

    async with make_env() as env:
        env.workspace("acme")
        ds = Datasette(memory=False, metadata={"plugins": {"memarc-explorer": {
            "database_url": env.settings.database_url, "workspaces": {"alice": ["acme"]}}}})
        page = await ds.client.get("/-/memory/acme", cookies={
            "ds_actor": ds.sign({"a": {"id": "alice"}}, "actor")})
        assert page.status_code == 200
        href = re.search(r'<link rel="stylesheet" href="([^"]*memarc\.css)"', page.text).group(1)
        explorer_css = await ds.client.get(href)
        assert explorer_css.status_code == 200 and ".memarc-nav" in explorer_css.text
        admin_css = await env.client.get("/admin/static/memarc.css")
        assert admin_css.status_code == 200 and admin_css.text == explorer_css.text
        assert (await env.client.get("/admin/static/app.css")).status_code == 200  # Datasette's
        sign_in = await env.client.get("/admin/sign-in")
        assert 'href="/admin/static/memarc.css"' in sign_in.text
        assert re.findall(r'<input[^>]*id="([^"]+)"', sign_in.text) == ["token"]
        assert '<label for="token">' in sign_in.text


async def test_the_explorer_links_to_the_administration_or_says_where_editing_happens(make_env):
    from datasette.app import Datasette

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        card_id = await new_rule(env, h, "Linked")
        for admin_url in (None, "http://writer.example/admin"):
            plugin = {"database_url": env.settings.database_url, "workspaces": {"alice": ["acme"]},
                      **({"admin_url": admin_url} if admin_url else {})}
            ds = Datasette(memory=False, metadata={"plugins": {"memarc-explorer": plugin}})
            cookies = {"ds_actor": ds.sign({"a": {"id": "alice"}}, "actor")}
            card = await ds.client.get(f"/-/memory/acme/{card_id}", cookies=cookies)
            pending = await ds.client.get("/-/memory/acme/-/pending", cookies=cookies)
            if admin_url is None:
                assert "This explorer is read-only" in card.text and "/admin" in card.text
                assert "Retry in the administration" not in pending.text
            else:
                edit = f"{admin_url}/workspaces/acme/cards/{card_id}"
                assert f'href="{edit}">Edit</a>' in card.text
                assert f'href="{edit}/delete">Delete…</a>' in card.text
                assert f'href="{admin_url}/workspaces/acme/pending">Retry' in pending.text


async def test_a_token_without_memory_manage_is_told_what_it_holds(make_env):
    async with make_env() as env:
        env.workspace("acme")
        await sign_in(env, env.token("acme", "memory.review"))
        page = await env.client.get(f"{ADMIN}/cards")
        text = re.sub(r"\s+", " ", page.text)
        assert "Your token holds <code>memory.review</code>: it cannot edit cards." in text
        assert "allows recall only" not in text and "New card" not in text


SCHEMA_CHANGES = f"{ADMIN}/schema-changes"
HOSTILE = '<script>alert(1)</script>" onmouseover="alert(2)'


async def recorded_run(env, run_id: str = "sync-1", table: str = "orders") -> tuple[dict, dict]:
    """Workspace acme with a card depending on ``shop.public.<table>`` and a run recorded (phase
    ``recorded``: nothing deleted yet) that removes that table. Returns (manage headers, schema
    headers)."""
    env.workspace("acme")
    manager, schema = env.token("acme"), env.token("acme", "memory.schema")
    r = await env.client.post(API, headers=manager, json={
        "family": "sql_rule", "title": f"Rule on {table}", "content": {"rule": "R."},
        "dependencies": [{"database": "shop", "schema": "public", "table": table}]})
    assert r.status_code == 201, r.text
    r = await env.client.post("/api/workspaces/acme/schema-changes/record", headers=schema, json={
        "run_id": run_id, "database": "shop", "schema": "public", "removed_tables": [table]})
    assert r.status_code == 201, r.text
    return manager, schema


def run_state(env, run_id: str = "sync-1") -> tuple[str, bool, int]:
    """(status, whether its cards are deleted, cards left in acme) of a run."""
    status, deleted = psycopg_row(env, "SELECT status, cards_deleted_at IS NOT NULL FROM "
                                       "memory.schema_change_runs WHERE run_id = %s", run_id)
    return status, deleted, env.scalar("SELECT count(*) FROM memory.cards")


def psycopg_row(env, query: str, *params: Any) -> tuple:
    import psycopg

    with psycopg.connect(env.migrator_url) as conn:
        return conn.execute(query, params).fetchone()


async def test_schema_change_runs_are_listed_and_an_unfinished_one_is_retried(make_env):
    async with make_env() as env:
        _, schema = await recorded_run(env)
        await sign_in(env, schema)
        cards = await env.client.get(f"{ADMIN}/cards")
        assert f'href="{SCHEMA_CHANGES}">Schema-change cleanups</a>' in cards.text
        page = await env.client.get(SCHEMA_CHANGES)
        assert page.status_code == 200
        text = re.sub(r"\s+", " ", page.text)
        assert "1 run" in text and "<code>shop.public</code>" in text
        assert "recorded, cards not deleted yet" in text and "<code>orders</code>" in text
        assert 'value="Retry"' in text and "<strong>Schema-change cleanups</strong>" in text
        run_page = await env.client.get(f"{SCHEMA_CHANGES}/run", params={"run_id": "sync-1"})
        assert "A Retry deletes the cards that depend on the removed objects" in run_page.text
        token = CSRF_RE.search(run_page.text).group(1)
        # no worker: the cards go, their index points wait (the retry waits for the worker)
        r = await env.client.post(f"{SCHEMA_CHANGES}/retry", data={"run_id": "sync-1",
                                                                  "_csrf_token": token})
        assert r.status_code == 303 and "retried=1" in r.headers["location"]
        assert run_state(env) == ("cleanup_pending", True, 0)
        page = re.sub(r"\s+", " ", (await env.client.get(r.headers["location"])).text)
        assert "the worker has not removed 1 index point yet" in page
        assert "cards deleted, index cleanup open" in page and "index point not removed yet" in page
        async with env.running_worker():
            r = await env.client.post(f"{SCHEMA_CHANGES}/retry", data={"run_id": "sync-1",
                                                                      "_csrf_token": token})
        page = re.sub(r"\s+", " ", (await env.client.get(r.headers["location"])).text)
        assert "Retried: the run is complete. 1 card deleted, their index points removed." in page
        assert 'value="Retry"' not in page and run_state(env) == ("done", True, 0)
        token_id = env.scalar("SELECT token_id FROM memory.admin_sessions WHERE ended_at IS NULL")
        actors = env.scalar("SELECT array_agg(DISTINCT actor) FROM memory.activity "
                            "WHERE verb IN ('schema_change', 'delete') AND outcome <> 'recorded'")
        assert actors == [f"token:{token_id}"]
        listing = re.sub(r"\s+", " ", (await env.client.get(SCHEMA_CHANGES)).text)
        assert "1 card" in listing and ">done</span>" in listing and 'value="Retry"' not in listing


async def test_schema_change_pages_need_memory_schema_and_the_csrf_token(make_env):
    async with make_env() as env:
        manager, schema = await recorded_run(env)
        await sign_in(env, manager)  # memory.manage alone: not the API's memory.schema
        cards = await env.client.get(f"{ADMIN}/cards")
        assert "Schema-change cleanups" not in cards.text
        for path in (SCHEMA_CHANGES, f"{SCHEMA_CHANGES}/run?run_id=sync-1"):
            r = await env.client.get(path)
            assert r.status_code == 403 and "lacks the memory.schema permission" in r.text
        token = env.client.cookies.get("memarc_csrf")
        before = counts(env)
        r = await env.client.post(f"{SCHEMA_CHANGES}/retry", data={"run_id": "sync-1",
                                                                  "_csrf_token": token})
        assert r.status_code == 403 and "lacks the memory.schema permission" in r.text
        assert set(row_changes(before, counts(env))) <= {"activity"}  # the refusal is recorded
        assert run_state(env) == ("cleanup_pending", False, 1)
        # with memory.schema, but without the form's CSRF token: 403, nothing written
        env.client.cookies.clear()
        await sign_in(env, schema)
        before = counts(env)
        for data in ({"run_id": "sync-1"}, {"run_id": "sync-1", "_csrf_token": "x" * 128}):
            r = await env.client.post(f"{SCHEMA_CHANGES}/retry", data=data)
            assert r.status_code == 403 and "Nothing was changed" in r.text
        assert row_changes(before, counts(env)) == {}
        assert run_state(env) == ("cleanup_pending", False, 1)
        r = await env.client.get(f"{SCHEMA_CHANGES}/run", params={"run_id": "no-such-run"})
        assert r.status_code == 404 and "no schema-change run" in r.text


async def test_schema_change_pages_escape_hostile_text(make_env):
    async with make_env() as env:
        env.workspace("acme")
        schema = env.token("acme", "memory.schema")
        r = await env.client.post("/api/workspaces/acme/schema-changes/record", headers=schema,
                                  json={"run_id": HOSTILE, "database": HOSTILE, "schema": "public",
                                        "removed_tables": [HOSTILE],
                                        "removed_columns": [{"table": HOSTILE, "column": HOSTILE}]})
        assert r.status_code == 201, r.text
        await sign_in(env, schema)
        for path, params in ((SCHEMA_CHANGES, {}), (f"{SCHEMA_CHANGES}/run", {"run_id": HOSTILE})):
            page = await env.client.get(path, params=params)
            assert page.status_code == 200, path
            assert "<script>alert" not in page.text and '" onmouseover=' not in page.text, path
            assert "&lt;script&gt;alert(1)&lt;/script&gt;&#34; onmouseover=&#34;alert(2)" in page.text
        # the retry form carries the run id escaped, and it round-trips to the same run
        token = CSRF_RE.search(page.text).group(1)
        value = re.search(r'name="run_id" value="([^"]*)"', page.text).group(1)
        import html
        r = await env.client.post(f"{SCHEMA_CHANGES}/retry", data={"run_id": html.unescape(value),
                                                                  "_csrf_token": token})
        assert r.status_code == 303
        assert env.scalar("SELECT status FROM memory.schema_change_runs") == "done"


async def test_the_worker_purges_ended_sessions_and_used_links(make_env):
    """The sweep deletes, in every workspace, sessions that ended (signed out, expired, token
    revoked) and links used or expired more than the grace ago; the rest stays and still works."""
    import psycopg

    from shared.archive.browser_sessions import BrowserSessions
    from shared.auth import token_digest
    from shared.worker import PURGE_GRACE_HOURS, purge_admin_sessions

    async with make_env() as env:
        env.workspace("acme")
        env.workspace("beta")
        browser = BrowserSessions(env.resources.db)
        opened = {name: await browser.sign_in(bearer(env.token(ws)))
                  for name, ws in (("active", "acme"), ("out-recently", "acme"),
                                   ("out-long-ago", "acme"), ("expired", "acme"),
                                   ("revoked", "acme"), ("beta-out", "beta"))}
        links = {name: create_sign_in_link(env.migrator_url, "memory", "acme", ["memory.manage"])
                 for name in ("fresh", "used-recently", "used-long-ago", "expired")}
        old = f"now() - interval '{PURGE_GRACE_HOURS + 1} hours'"
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            def session(name: str, assignment: str) -> None:
                conn.execute(f"UPDATE memory.admin_sessions SET {assignment} "
                             "WHERE secret_hash = %s", (token_digest(opened[name].secret),))

            def link(name: str, assignment: str) -> None:
                conn.execute(f"UPDATE memory.admin_sign_in_links SET {assignment} "
                             "WHERE code_hash = %s", (token_digest(links[name]["code"]),))

            session("out-recently", "ended_at = now() - interval '1 hour'")
            session("out-long-ago", f"ended_at = {old}")
            session("expired", f"expires_at = {old}")
            session("beta-out", f"ended_at = {old}")
            conn.execute(f"UPDATE memory.api_tokens SET revoked_at = {old} WHERE id = %s",
                         (opened["revoked"].principal.actor.removeprefix("token:"),))
            link("used-recently", "used_at = now() - interval '1 hour'")
            link("used-long-ago", f"used_at = {old}")
            link("expired", f"expires_at = {old}")
        assert env.scalar("SELECT count(*) FROM memory.admin_sessions") == 6
        await env.drain()  # the worker's start-up sweep purges
        assert env.scalar("SELECT count(*) FROM memory.admin_sessions") == 2
        assert env.scalar("SELECT count(*) FROM memory.admin_sign_in_links") == 2
        for name in ("active", "out-recently"):
            assert env.scalar("SELECT count(*) FROM memory.admin_sessions WHERE secret_hash = %s",
                              token_digest(opened[name].secret)) == 1, name
        for name in ("fresh", "used-recently"):
            assert env.scalar("SELECT count(*) FROM memory.admin_sign_in_links "
                              "WHERE code_hash = %s", token_digest(links[name]["code"])) == 1
        assert (await browser.principal(opened["active"].secret)).workspace == "acme"
        r = await env.client.get(f"/admin/sign-in/link?code={links['fresh']['code']}")
        assert r.status_code == 200 and CSRF_RE.search(r.text)
        # the purge is due once an hour per worker: a second sweep at once does not run it
        ctx = {"resources": env.resources, "session_purge": {}}
        assert await purge_admin_sessions(ctx) == (0, 0)
        assert await purge_admin_sessions(ctx) is None


async def test_a_reviewer_sees_pending_updates_but_no_card_edit_control(make_env):
    """``memory.review`` alone: the cards page says it cannot edit, the pending page lists the
    incomplete updates without a Retry, card pages and every card or retry POST are 403."""
    async with make_env() as env:
        env.workspace("acme")
        card_id = await new_rule(env, env.token("acme"), "Waits for the index")
        reviewer = env.token("acme", "memory.review")
        r = await env.client.get(f"{API}/pending", headers=reviewer)  # the API agrees
        assert r.status_code == 200 and r.json()["total"] == 1
        await sign_in(env, reviewer)
        cards = re.sub(r"\s+", " ", (await env.client.get(f"{ADMIN}/cards")).text)
        assert "Your token holds <code>memory.review</code>: it cannot edit cards." in cards
        assert "New card" not in cards and "Create a card" not in cards
        pending = await env.client.get(f"{ADMIN}/pending")
        text = re.sub(r"\s+", " ", pending.text)
        assert pending.status_code == 200 and "1 incomplete operation" in text
        assert "Waits for the index" in text and "you can see these updates but not retry" in text
        assert re.findall(r'<form[^>]*action="([^"]+)"', pending.text) == ["/admin/sign-out"]
        assert f'href="{ADMIN}/cards/{card_id}"' not in pending.text  # no way into the edit form
        for path in (f"{ADMIN}/cards/new", f"{ADMIN}/cards/{card_id}",
                     f"{ADMIN}/cards/{card_id}/delete", f"{ADMIN}/cards/{card_id}/activity"):
            r = await env.client.get(path)
            assert r.status_code == 403, path
            assert "your token holds memory.review: seeing and editing cards here needs " \
                   "memory.manage" in r.text, path
        token = env.client.cookies.get("memarc_csrf")
        before = counts(env)
        for path, data in ((f"{ADMIN}/cards/new", card_form("Sneaky")),
                           (f"{ADMIN}/cards/{card_id}/delete", {"confirm": "delete"}),
                           (f"{ADMIN}/cards/{card_id}/retry", {}),
                           (f"{ADMIN}/pending/retry", {"card_id": card_id}),
                           (f"{ADMIN}/pending/retry-all", {})):
            r = await env.client.post(path, data={**data, "_csrf_token": token})
            assert r.status_code == 403, (path, r.status_code)
        assert set(row_changes(before, counts(env))) <= {"activity"}
        assert env.scalar("SELECT title FROM memory.cards") == "Waits for the index"
        await env.drain()  # nothing left to retry: a retry of all is refused all the same
        r = await env.client.post(f"{ADMIN}/pending/retry-all", data={"_csrf_token": token})
        assert r.status_code == 403
