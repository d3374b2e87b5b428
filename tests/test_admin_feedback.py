"""The administration's recall records and feedback buttons (issue 35 part 2): the list of
recalls, one recall with its results and the verdicts on each, the person's own verdict given
with a button (CSRF-protected, stored as the person's token, ``via`` admin) and changed, and
the card's page showing its feedback; in Chromium at 1280×800 and 1920×1080, looked at.

Through the writer app, a real worker, PostgreSQL, Redis, the embedded index and the real model.
"""

from __future__ import annotations

import re

import pytest
from admin_helpers import CSRF_RE, sign_in
from helpers import start_server, stop_server
from test_admin_browser import OUT, SIZES, chromium, look, navigate, signed_in_page, text  # noqa: F401
from test_recall_records import BASE, _archive

ADMIN = "/admin/workspaces/acme"


async def _recalled(env) -> tuple[dict[str, str], list[str], dict]:
    """The archive of two cards, a recall that returned both (as a second token), its answer."""
    h, ids = await _archive(env)
    assistant = env.token("acme", "memory.read")
    r = await env.client.post(f"{BASE}/search", headers=assistant,
                              json={"query": "When does the fiscal year start?", "top": 5})
    assert r.status_code == 200 and r.json()["recall_id"], r.text
    assert {x["card"]["id"] for x in r.json()["results"]} >= set(ids)
    return h, ids, r.json()


async def test_a_manager_reads_recalls_and_gives_feedback_with_a_form(make_env):
    async with make_env() as env:
        h, (rule, definition), answer = await _recalled(env)
        recall_id = answer["recall_id"]
        await sign_in(env.client, h)
        r = await env.client.get(f"{ADMIN}/recalls")
        assert r.status_code == 200
        assert "When does the fiscal year start?" in r.text and recall_id in r.text
        page = await env.client.get(f"{ADMIN}/recalls/{recall_id}")
        assert page.status_code == 200
        assert page.text.count('name="verdict" value="wrong"') == len(answer["results"])
        assert 'aria-pressed="true"' not in page.text
        token = CSRF_RE.search(page.text).group(1)
        # without the CSRF token: refused, nothing stored
        r = await env.client.post(f"{ADMIN}/recalls/{recall_id}/feedback",
                                  data={"card_id": rule, "verdict": "wrong"})
        assert r.status_code == 403
        assert env.scalar("SELECT count(*) FROM memory.recall_feedback") == 0
        r = await env.client.post(f"{ADMIN}/recalls/{recall_id}/feedback", data={
            "_csrf_token": token, "card_id": rule, "verdict": "wrong", "note": "April, not May"})
        assert r.status_code == 303, r.text
        assert r.headers["location"].startswith(f"{ADMIN}/recalls/{recall_id}?saved=")
        # stored as the person's own token (not the assistant's that recalled)
        recaller = env.scalar("SELECT actor FROM memory.recall_records")
        assert env.rows("SELECT verdict, note, via FROM memory.recall_feedback") == [
            ("wrong", "April, not May", "admin")]
        actor = env.scalar("SELECT actor FROM memory.recall_feedback")
        assert actor.startswith("token:") and actor != recaller
        page = await env.client.get(r.headers["location"])
        assert "Saved: Wrong for “Fiscal year starts in April”." in page.text
        pressed = re.findall(r'value="(\w+)" aria-pressed="true"', page.text)
        assert pressed == ["wrong"]
        # changed with another button: one verdict, the new one
        await env.client.post(f"{ADMIN}/recalls/{recall_id}/feedback", data={
            "_csrf_token": token, "card_id": rule, "verdict": "helpful", "note": ""})
        assert env.rows("SELECT verdict, note FROM memory.recall_feedback") == [
            ("helpful", None)]
        # a card the recall did not return, an unknown verdict: the form's error, nothing else
        other = await env.client.post(BASE, headers=h, json={
            "family": "domain_clarification", "title": "Unrelated",
            "content": {"definition": "Nothing to do with it."}})
        for data in ({"card_id": other.json()["card"]["id"], "verdict": "helpful"},
                     {"card_id": definition, "verdict": "great"}):
            r = await env.client.post(f"{ADMIN}/recalls/{recall_id}/feedback",
                                      data={"_csrf_token": token, **data})
            assert r.status_code in (400, 422), (data, r.status_code)
        assert env.scalar("SELECT count(*) FROM memory.recall_feedback") == 1
        # the card's page shows its feedback
        card = await env.client.get(f"{ADMIN}/cards/{rule}")
        assert "1 helpful, 0 not helpful, 0 wrong" in re.sub(r"\s+", " ", card.text)
        assert "When does the fiscal year start?" in card.text
        card = await env.client.get(f"{ADMIN}/cards/{definition}")
        assert "No feedback yet" in card.text


async def test_a_reader_sees_no_recall_records(make_env):
    async with make_env() as env:
        _, _, answer = await _recalled(env)
        await sign_in(env.client, env.token("acme", "memory.read"))
        for path in (f"{ADMIN}/recalls", f"{ADMIN}/recalls/{answer['recall_id']}"):
            r = await env.client.get(path)
            assert "When does the fiscal year start?" not in r.text, path


@pytest.mark.parametrize("width,height", SIZES)
async def test_a_person_marks_recalled_cards_in_chromium(make_env, chromium, width, height):
    from playwright.async_api import async_playwright

    size = f"{width}x{height}"
    OUT.mkdir(exist_ok=True)
    async with make_env() as env:
        h, (rule, definition), answer = await _recalled(env)
        # another curator's note of 2,000 characters without a space: it wraps in the window
        r = await env.client.post(f"{BASE}/recalls/{answer['recall_id']}/feedback",
                                  headers=env.token("acme"), json={"cards": [
                                      {"card_id": definition, "verdict": "not_helpful",
                                       "note": "é" * 2000}]})
        assert r.status_code == 200, r.text
        server, task, base = await start_server(env.app)
        try:
            async with async_playwright() as pw:
                browser, page = await signed_in_page(pw, chromium, base, h, width, height)
                await page.goto(f"{base}{ADMIN}/cards")
                await navigate(page, page.click("a:text-is('Recalls')"))
                await look(page, "recalls", size)
                assert "When does the fiscal year start?" in await text(page, "#recalls")
                await navigate(page, page.click("#recalls tbody tr:first-child td a"))
                # each result: its title, a note field with its label, three buttons on a line
                first = page.locator("#result-1")
                title = await first.locator(".memarc-recalled-card a").inner_text()
                for word in ("Helpful", "Not helpful", "Wrong"):
                    box = await first.get_by_role("button", name=word, exact=True).bounding_box()
                    assert box and box["height"] < 40, (word, box)  # one line, not wrapped
                await first.get_by_label("Note").fill("the start month is April")
                # Enter in the note chooses no verdict: nothing is sent
                await first.get_by_label("Note").press("Enter")
                await page.wait_for_timeout(500)
                assert "saved=" not in page.url
                assert env.scalar("SELECT count(*) FROM memory.recall_feedback") == 1
                await navigate(page, first.get_by_role("button", name="Wrong").click())
                await look(page, "recall-saved", size)
                assert f"Saved: Wrong for “{title}”." in await text(page, "#saved")
                first = page.locator("#result-1")
                assert await first.get_by_role("button", name="Wrong").get_attribute(
                    "aria-pressed") == "true"
                assert await first.get_by_role("button", name="Helpful", exact=True).get_attribute(
                    "aria-pressed") == "false"
                assert "the start month is April" in await text(page, "#result-1")
                assert await first.get_by_label("Note").input_value() == \
                    "the start month is April"
                # the card's page: its feedback, the question it was given on
                await navigate(page, first.locator(".memarc-recalled-card a").click())
                await page.locator("#feedback").scroll_into_view_if_needed()
                await look(page, "card-feedback", size)
                seen = await text(page, "#feedback")
                assert "0 helpful" in seen and "1 wrong" in seen
                assert "When does the fiscal year start?" in seen
                assert "the start month is April" in seen
                await browser.close()
        finally:
            await stop_server(server, task)
