"""The explorer's feedback buttons (issue 35 part 2): under each result of the recall page a form
that POSTs a verdict (Helpful, Not helpful, Wrong, with a note) as ``datasette:<actor id>`` via
``explorer`` and answers 303 to the recall's record page, which shows the verdict given (the
pressed button) and a confirmation; only the actor's own recalls of a visible workspace, only a
signed-in actor, only with Datasette's CSRF token; a bad verdict or a card the recall did not
return is a 400 that stores nothing; an explorer without the archive's resources answers 503.
The card page shows the card's feedback.

Through Datasette's own client (asgi-csrf included) as a browser posts: the CSRF token read from
the page's form and its cookie. Real PostgreSQL, Redis, index and embedding model.
"""

from __future__ import annotations

import html
import re
from typing import Any

import psycopg
from datasette import hookimpl
from datasette.plugins import pm
from psycopg.rows import dict_row
from test_explorer import explorer, get  # noqa: F401
from test_recall_records import _archive

from explorer_plugin import resources as explorer_resources
from explorer_plugin.access import VIEW_WORKSPACE

RULE_TITLE = "Fiscal year starts in April"
DEFINITION_TITLE = "Fiscal quarter"


def verdicts(env) -> list[dict[str, Any]]:
    """Every stored verdict, as the database owner (no row-level security)."""
    with psycopg.connect(env.migrator_url, row_factory=dict_row) as conn:
        return conn.execute("SELECT 'mem-' || card_id AS card_id, actor, verdict, note, via"
                            " FROM memory.recall_feedback ORDER BY created_at").fetchall()


def cookies(ds, actor: str) -> dict[str, str]:
    return {"ds_actor": ds.sign({"a": {"id": actor}}, "actor")}


async def recall_page(ds, actor: str = "alice", q: str = "fiscal year start",
                      workspace: str = "acme", **params: Any):
    """The recall page of ``workspace`` as ``actor`` sees it: ``(response, recall_id or None,
    CSRF cookie, CSRF token of its forms or None)``."""
    r = await get(ds, f"/-/memory/{workspace}/-/recall", actor=actor, q=q, **params)
    assert r.status_code == 200, r.text
    action = re.search(rf'action="/-/memory/{workspace}/-/recalls/([0-9a-f-]{{36}})/feedback"',
                       r.text)
    token = re.search(r'name="csrftoken" value="([^"]+)"', r.text)
    return (r, action.group(1) if action else None, r.cookies.get("ds_csrftoken"),
            token.group(1) if token else None)


async def post_verdict(ds, actor: str | None, recall_id: str, card_id: str, verdict: str,
                       note: str = "", *, csrf: tuple[str | None, str | None] = (None, None),
                       workspace: str = "acme"):
    """POST the feedback form as a browser does (``csrf``: the cookie and the form's token)."""
    jar = cookies(ds, actor) if actor else {}
    cookie, token = csrf
    if cookie:
        jar["ds_csrftoken"] = cookie
    form = {"card_id": card_id, "verdict": verdict, "note": note}
    if token:
        form["csrftoken"] = token
    return await ds.client.post(f"/-/memory/{workspace}/-/recalls/{recall_id}/feedback",
                                data=form, cookies=jar or None)


def pressed(page: str) -> list[tuple[str, str]]:
    """``(card id, verdict)`` of every pressed button of a page, in page order."""
    out = []
    for form in re.findall(r'<form class="memarc-feedback".*?</form>', page, re.S):
        card = re.search(r'name="card_id" value="([^"]+)"', form).group(1)
        out += [(card, v) for v in re.findall(r'value="(\w+)" class="memarc-verdict[^"]*" '
                                              r'aria-pressed="true"', form)]
    return out


def text(page: str) -> str:
    """The page's text as read: inline tags dropped, the others a space, whitespace collapsed."""
    inline = re.sub(r"</?(a|strong|em|code|span|time)\b[^>]*>", "", page)
    return re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", " ", inline))).strip()


async def test_the_buttons_store_a_verdict_and_the_record_page_shows_it_pressed(
        make_env, explorer):
    async with make_env() as env:
        _, (rule, definition) = await _archive(env)
        ds = explorer(env, {"alice": ["acme"]})
        r, recall_id, cookie, token = await recall_page(ds)
        assert recall_id and cookie and token, r.text[:2000]
        # three buttons and a labelled note under each result; none pressed yet
        assert r.text.count('<form class="memarc-feedback"') == 2
        for label in ("Helpful", "Not helpful", "Wrong"):
            assert r.text.count(f'aria-pressed="false">{label}</button>') == 2
        assert '<label for="memarc-note-1">Note (optional)</label>' in r.text
        assert 'id="memarc-note-1" name="note"' in r.text and pressed(r.text) == []

        r = await post_verdict(ds, "alice", recall_id, rule, "wrong", "April, not March",
                               csrf=(cookie, token))
        assert r.status_code == 303, r.text
        assert r.headers["location"] == f"/-/memory/acme/-/recalls/{recall_id}?saved={rule}"
        assert verdicts(env) == [{"card_id": rule, "actor": "datasette:alice",
                                  "verdict": "wrong", "note": "April, not March",
                                  "via": "explorer"}]
        page = await get(ds, r.headers["location"])
        assert page.status_code == 200
        shown = text(page.text)
        assert f"Saved: Wrong for {RULE_TITLE} (note: “April, not March”)." in shown
        assert "fiscal year start" in shown  # the question
        assert pressed(page.text) == [(rule, "wrong")]
        assert 'value="April, not March"' in page.text  # the note, to edit
        assert f'href="/-/memory/acme/{rule}">{RULE_TITLE}</a>' in page.text

        # changed: one verdict per card and actor; the other card judged too
        r = await post_verdict(ds, "alice", recall_id, rule, "helpful", csrf=(cookie, token))
        assert r.status_code == 303
        r = await post_verdict(ds, "alice", recall_id, definition, "not_helpful",
                               csrf=(cookie, token))
        assert r.status_code == 303
        assert [(v["card_id"], v["verdict"], v["note"], v["via"]) for v in verdicts(env)] == [
            (rule, "helpful", None, "explorer"), (definition, "not_helpful", None, "explorer")]
        page = await get(ds, r.headers["location"])
        assert f"Saved: Not helpful for {DEFINITION_TITLE}." in text(page.text)
        assert sorted(pressed(page.text)) == sorted([(rule, "helpful"),
                                                     (definition, "not_helpful")])
        # a GET of the form's URL goes to the record page
        r = await get(ds, f"/-/memory/acme/-/recalls/{recall_id}/feedback")
        assert (r.status_code, r.headers["location"]) == (
            303, f"/-/memory/acme/-/recalls/{recall_id}")


async def test_the_card_page_shows_the_cards_feedback(make_env, explorer):
    async with make_env() as env:
        _, (rule, definition) = await _archive(env)
        ds = explorer(env, {"alice": ["acme"], "bob": ["acme"]})
        for actor, verdict in (("alice", "wrong"), ("bob", "helpful")):
            _, recall_id, cookie, token = await recall_page(ds, actor,
                                                            q=f"fiscal year start {actor}")
            r = await post_verdict(ds, actor, recall_id, rule, verdict, f"{actor}'s note",
                                   csrf=(cookie, token))
            assert r.status_code == 303, r.text
        page = text((await get(ds, f"/-/memory/acme/{rule}")).text)
        assert "Feedback Helpful: 1 · Not helpful: 0 · Wrong: 1" in page
        assert "Wrong fiscal year start alice (search) alice's note datasette:alice via explorer" \
            in page
        assert "Helpful fiscal year start bob (search) bob's note datasette:bob via explorer" \
            in page
        assert "No feedback yet." in text((await get(ds, f"/-/memory/acme/{definition}")).text)


async def test_refused_feedback_stores_nothing(make_env, explorer):
    async with make_env() as env:
        _, (rule, definition) = await _archive(env)
        await _archive(env, "other")
        ds = explorer(env, {"alice": ["acme"], "bob": ["acme", "other"]})
        _, mine, cookie, token = await recall_page(ds, top=1, mode="rules")
        _, bobs, _, _ = await recall_page(ds, "bob")
        csrf = (cookie, token)
        # another actor's recall: 404 like a missing one, for the form and the record page
        for recall_id in (bobs, "00000000-0000-0000-0000-000000000000", "not-a-uuid"):
            r = await post_verdict(ds, "alice", recall_id, rule, "wrong", csrf=csrf)
            assert r.status_code == 404 and "no recall" in r.text, r.text
            assert (await get(ds, f"/-/memory/acme/-/recalls/{recall_id}")).status_code == 404
        # another workspace's recall (bob's, under acme): 404; alice may not see "other" at all
        _, theirs, bob_cookie, bob_token = await recall_page(ds, "bob", workspace="other")
        r = await post_verdict(ds, "bob", theirs, rule, "wrong", csrf=(bob_cookie, bob_token))
        assert r.status_code == 404
        assert (await get(ds, f"/-/memory/acme/-/recalls/{theirs}", actor="bob")).status_code \
            == 404
        r = await post_verdict(ds, "alice", theirs, rule, "wrong", csrf=csrf, workspace="other")
        assert r.status_code == 404 and "no workspace" in r.text
        # a card the recall did not return (top 1), and a verdict that is not one: 400
        r = await post_verdict(ds, "alice", mine, definition, "wrong", csrf=csrf)
        assert r.status_code == 400, r.text
        assert f"did not return {definition}; feedback is on the cards a recall returned" in \
            text(r.text) and "cards[0]" not in r.text
        r = await post_verdict(ds, "alice", mine, rule, "great", csrf=csrf)
        assert r.status_code == 400 and "The verdict 'great' is not one of the allowed values" \
            in text(r.text), text(r.text)
        r = await post_verdict(ds, "alice", mine, rule, "", csrf=csrf)
        assert r.status_code == 400 and "Choose a verdict" in text(r.text)
        r = await post_verdict(ds, "alice", mine, rule, "wrong", "x" * 2001, csrf=csrf)
        assert r.status_code == 400 and "The note is longer than 2,000 characters." in \
            text(r.text)
        # the CSRF token missing, or not the cookie's: asgi-csrf's 403
        for broken in ((cookie, None), (None, token), (cookie, token[:-2] + "xx")):
            r = await post_verdict(ds, "alice", mine, rule, "wrong", csrf=broken)
            assert (r.status_code, r.text) == (
                403, "form-urlencoded POST field did not match cookie"), broken
        assert verdicts(env) == []
        # and a good one still goes through
        r = await post_verdict(ds, "alice", mine, rule, "wrong", csrf=csrf)
        assert r.status_code == 303 and len(verdicts(env)) == 1


class _EveryoneSeesAcme:
    """A permission plugin that lets anyone, signed in or not, view the workspace ``acme`` (as
    an instance's own authentication plugin could)."""

    @hookimpl
    def permission_allowed(self, actor, action, resource):
        return True if action == VIEW_WORKSPACE and resource == "acme" else None


async def test_without_a_signed_in_actor_no_buttons_and_a_post_is_refused(make_env, explorer):
    async with make_env() as env:
        _, (rule, _) = await _archive(env)
        ds = explorer(env, {"alice": ["acme"]})
        plugin = _EveryoneSeesAcme()
        pm.register(plugin, name="everyone-sees-acme")
        try:
            r = await get(ds, "/-/memory/acme/-/recall", actor=None, q="fiscal year start")
            assert r.status_code == 200 and "2 results" in r.text
            assert "memarc-feedback" not in r.text and "aria-pressed" not in r.text
            assert "Sign in to give feedback on these results: memarc explorer-sign-in-link" \
                in text(r.text)
            [record] = _records(env)
            r = await post_verdict(ds, None, record, rule, "helpful")
            assert r.status_code == 403 and "Sign in to give feedback" in text(r.text)
            assert (await get(ds, f"/-/memory/acme/-/recalls/{record}", actor=None)
                    ).status_code == 403
        finally:
            pm.unregister(plugin)
        assert verdicts(env) == []


def _records(env) -> list[str]:
    with psycopg.connect(env.migrator_url) as conn:
        return [str(row[0]) for row in conn.execute("SELECT id FROM memory.recall_records")]


async def test_a_recall_without_a_record_shows_no_buttons_and_says_why(make_env, explorer):
    async with make_env() as env:
        await _archive(env)
        ds = explorer(env, {"alice": ["acme"]})
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            conn.execute("REVOKE INSERT ON memory.recall_records FROM memarc_runtime")
        r = await get(ds, "/-/memory/acme/-/recall", q="fiscal year start")
        assert r.status_code == 200 and "2 results" in r.text
        assert "memarc-feedback" not in r.text
        assert "This recall was not recorded (the database did not take its record), so its " \
               "results cannot take feedback." in text(r.text)


async def test_an_explorer_without_the_archives_resources_refuses_feedback_with_a_503(
        make_env, explorer):
    async with make_env() as env:
        _, (rule, _) = await _archive(env)
        _, recall_id, _, _ = await recall_page(explorer(env, {"alice": ["acme"]}))
        browsing = explorer(env, {"alice": ["acme"]}, shared=False,
                            database_url=env.settings.database_url, schema="memory")
        try:
            # the card page still shows, and says where feedback is
            r = await get(browsing, f"/-/memory/acme/{rule}")
            assert r.status_code == 200
            assert "Feedback is not available in this process" in text(r.text)
            token = re.search(r'name="csrftoken" value="([^"]+)"', r.text).group(1)
            r = await post_verdict(browsing, "alice", recall_id, rule, "helpful",
                                   csrf=(r.cookies.get("ds_csrftoken"), token))
            assert r.status_code == 503 and "Feedback is not available in this process" in \
                text(r.text)
            r = await get(browsing, f"/-/memory/acme/-/recalls/{recall_id}")
            assert r.status_code == 503
        finally:
            await explorer_resources.close(browsing)
        assert verdicts(env) == []
