"""The explorer's feedback buttons in a real browser (headless Debian Chromium, Playwright) at
1280×800 and 1920×1080: run a recall, press "Wrong" with a note under one result, land on the
recall's record page with that button pressed and "Saved: Wrong for …"; press "Helpful" under
another; open the first card and read its feedback counts. Each verdict button is one line and
the three sit side by side; nothing is wider than the window; Enter in a note submits nothing.
Screenshots go to ``/tmp/shots40e/`` (``MEMARC_SHOTS`` overrides).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from urllib.parse import urlencode

import pytest
from test_explorer_browser import (RECALL_SCREEN_JS, SIZES, chromium,  # noqa: F401
                                   create_cards, explorer_page)
from test_recall_records import DEFINITION, RULE

SHOTS = Path(os.environ.get("MEMARC_SHOTS", "/tmp/shots40e"))
CARDS = [RULE, DEFINITION,
         {"family": "sql_rule", "title": "Fiscal year reports use the closing date",
          "content": {"rule": "Assign a report to the fiscal year of its closing_date."},
          "dependencies": [{"database": "shop", "schema": "public", "table": "reports"}]}]
QUERY = "When does the fiscal year start?"

#: per verdict button of the page: its form's card, label, pressed state, line boxes, top, colour
BUTTONS_JS = """() => [...document.querySelectorAll('form.memarc-feedback button.memarc-verdict')].map(b => {
  const range = document.createRange();
  range.selectNodeContents(b);
  const box = b.getBoundingClientRect();
  return {card: b.form.querySelector('input[name=card_id]').value, label: b.innerText.trim(),
          pressed: b.getAttribute('aria-pressed'), lines: range.getClientRects().length,
          top: Math.round(box.top), left: Math.round(box.left), height: box.height, right: box.right,
          background: getComputedStyle(b).backgroundColor};
})"""


def _form(page, card_id: str):
    return page.locator("form.memarc-feedback").filter(
        has=page.locator(f"input[name=card_id][value='{card_id}']"))


async def _check_buttons(page, width: int) -> list[dict]:
    """Each verdict button one line, the three of a form on one row, in the same place on every
    row, all inside the window."""
    buttons = await page.evaluate(BUTTONS_JS)
    assert buttons, "no feedback buttons"
    for b in buttons:
        assert b["lines"] == 1 and b["height"] < 40 and b["right"] <= width, b
    for card in {b["card"] for b in buttons}:
        row = [b for b in buttons if b["card"] == card]
        assert [b["label"] for b in row] == ["Helpful", "Not helpful", "Wrong"], row
        assert len({b["top"] for b in row}) == 1, row
    for label in ("Helpful", "Not helpful", "Wrong"):  # a pressed button moves none of them
        assert len({b["left"] for b in buttons if b["label"] == label}) == 1, buttons
    screen = await page.evaluate(RECALL_SCREEN_JS)
    assert screen["page"] <= width and screen["wide"] == [], screen
    return buttons


def _pressed(buttons: list[dict]) -> dict[str, str]:
    return {b["card"]: b["label"] for b in buttons if b["pressed"] == "true"}


@pytest.mark.parametrize("width,height", SIZES)
async def test_press_wrong_then_helpful_and_read_the_cards_counts(make_env, chromium, width,
                                                                  height):
    size = f"{width}x{height}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    async with make_env() as env:
        ids = await create_cards(env, CARDS)
        await env.drain()
        rule, definition = ids[RULE["title"]], ids[DEFINITION["title"]]
        async with explorer_page(env, chromium, width, height) as (page, base):
            await page.goto(f"{base}/-/memory/acme/-/recall?{urlencode({'q': QUERY})}")
            assert "3 results" in await page.inner_text("h3")
            buttons = await _check_buttons(page, width)
            assert _pressed(buttons) == {}
            assert await page.is_visible("label[for=memarc-note-1]")
            await page.screenshot(path=str(SHOTS / f"{size}-1-recall.png"), full_page=True)
            # Enter in a note chooses no verdict: the page stays
            before = page.url
            await page.fill("#memarc-note-2", "typed, then Enter")
            await page.press("#memarc-note-2", "Enter")
            await page.wait_for_timeout(400)
            assert page.url == before

            # "Wrong" with a note under the rule
            form = _form(page, rule)
            await form.get_by_label("Note (optional)").fill("It starts in April, not March")
            await form.get_by_role("button", name="Wrong", exact=True).click()
            await page.wait_for_url(re.compile(r"/-/memory/acme/-/recalls/[0-9a-f-]{36}\?saved="))
            saved = page.locator("p.memarc-saved")
            assert await saved.is_visible()
            assert await saved.inner_text() == (f"Saved: Wrong for {RULE['title']} "
                                                "(note: “It starts in April, not March”).")
            assert QUERY in await page.inner_text("dd.memarc-question")
            buttons = await _check_buttons(page, width)
            assert _pressed(buttons) == {rule: "Wrong"}
            wrong = next(b for b in buttons if b["card"] == rule and b["label"] == "Wrong")
            helpful = next(b for b in buttons if b["card"] == rule and b["label"] == "Helpful")
            assert wrong["background"] != helpful["background"], (wrong, helpful)
            assert await _form(page, rule).get_by_label("Note (optional)").input_value() == \
                "It starts in April, not March"
            await page.screenshot(path=str(SHOTS / f"{size}-2-record-wrong.png"), full_page=True)

            # "Helpful" under the definition, on the record page
            await _form(page, definition).get_by_role("button", name="Helpful", exact=True).click()
            await page.wait_for_url(re.compile(rf"saved={definition}$"))
            assert await page.inner_text("p.memarc-saved") == \
                f"Saved: Helpful for {DEFINITION['title']}."
            buttons = await _check_buttons(page, width)
            assert _pressed(buttons) == {rule: "Wrong", definition: "Helpful"}
            await page.screenshot(path=str(SHOTS / f"{size}-3-record-helpful.png"),
                                  full_page=True)

            # the rule's card page: its counts and the verdict with its question and note
            await page.click(f"td.col-title a[href$='{rule}']")
            await page.wait_for_url(re.compile(rf"/-/memory/acme/{rule}$"))
            counts = page.locator("p.memarc-feedback-counts")
            await counts.scroll_into_view_if_needed()
            assert await counts.is_visible()
            assert await counts.inner_text() == "Helpful: 0 · Not helpful: 0 · Wrong: 1"
            row = await page.inner_text("table.memarc-card-feedback tbody tr")
            assert "Wrong" in row and QUERY in row and "It starts in April, not March" in row \
                and "datasette:alice" in row, row
            await page.screenshot(path=str(SHOTS / f"{size}-4-card.png"), full_page=True)
    for name in ("1-recall", "2-record-wrong", "3-record-helpful", "4-card"):
        assert (SHOTS / f"{size}-{name}.png").stat().st_size > 10_000
