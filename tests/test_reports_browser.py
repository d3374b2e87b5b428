"""The curation reports in a real browser (issue 35 part 3): headless Chromium at 1280×800 and
1920×1080, signed in as the workspace's administrator. The never-recalled report lists the
cards no recall returned, the longest idle first, "never since created" on one line; the
conflicts report puts the planted pair of contradicting clarifications (two definitions of
"active customer", 30 and 90 days, over one table) first, the exact duplicate after, each with
its links; the merge page shows the two cards side by side. Screenshots, as the other browser
tests keep theirs: ``test-output/reports-<size>-*.png``."""

from __future__ import annotations

import pytest
from helpers import start_server, stop_server
from test_admin_browser import OUT as SHOTS
from test_admin_browser import OVERFLOW_JS, SIZES, chromium, navigate, signed_in_page, text  # noqa: F401
from test_reports import (ACTIVE_30, ACTIVE_90, ACTIVE_SUPPORT, CENTS_A, CENTS_B, CHURN, _cards,
                          seed_recall)


async def shot(page, name: str, size: str) -> None:
    """Screenshot the whole page as ``reports-<size>-<name>.png`` and check that every table
    cell fits its content and the page is no wider than the window."""
    await page.screenshot(path=str(SHOTS / f"reports-{size}-{name}.png"), full_page=True)
    assert await page.evaluate(OVERFLOW_JS) == [], name


async def _lines(page, selector: str) -> float:
    """How many lines the text of ``selector`` (its first match) takes."""
    return await page.evaluate("""(sel) => {
        const el = document.querySelector(sel);
        const lh = parseFloat(getComputedStyle(el).lineHeight) || 18;
        return el.getBoundingClientRect().height / lh; }""", selector)


@pytest.mark.parametrize("width,height", SIZES)
async def test_never_recalled_and_conflicts_reports_in_the_browser(make_env, chromium, width,
                                                                   height):
    from playwright.async_api import async_playwright

    size = f"{width}x{height}"
    SHOTS.mkdir(parents=True, exist_ok=True)
    async with make_env() as env:
        h, (a30, a90, ca, cb, support, churn) = await _cards(
            env, ACTIVE_30, ACTIVE_90, CENTS_A, CENTS_B, ACTIVE_SUPPORT, CHURN)
        seed_recall(env, [churn], days_ago=45)
        seed_recall(env, [a30, a90, ca, cb], days_ago=1)
        server, task, base = await start_server(env.app)
        try:
            async with async_playwright() as pw:
                browser, page = await signed_in_page(pw, chromium, base, h, width, height)
                await page.goto(f"{base}/admin/workspaces/acme/cards")
                await navigate(page, page.click(".memarc-nav >> text=Curation reports"))
                assert await text(page, "h1") == "acme: never recalled"
                rows = page.locator("table.memarc-report tbody tr")
                assert await rows.count() == 2
                first = [await c.inner_text() for c in await rows.nth(0).locator("td").all()]
                second = [await c.inner_text() for c in await rows.nth(1).locator("td").all()]
                # the churn definition was last returned 45 days ago: idle longest, first
                assert first[0] == "Churned account" and first[3].endswith("UTC"), first
                assert second[0] == "Active customer (support)", second
                assert second[3] == "never since created" and second[4] == "0", second
                assert await _lines(page, "table.memarc-report tbody tr:nth-child(2) "
                                          "td.col-last") < 1.6  # on one line
                assert "2 cards" in await text(page, "h3")
                await shot(page, "never-recalled", size)

                await navigate(page, page.click(".memarc-report-tabs >> text=Possible conflicts"))
                assert await text(page, "h1") == "acme: possible conflicts"
                pairs = page.locator("table.memarc-conflicts tbody tr")
                assert await pairs.count() == 2
                top = await text(page, "table.memarc-conflicts tbody tr:nth-child(1)")
                assert top.startswith("same term, values differ"), top
                assert "only here: 90" in top and "only here: 30" in top, top
                assert "last 30 days" in top and "last 90 days" in top, top
                assert "same scope 'sales'" in top and "shop.public.customers" in top, top
                assert "Active customer (support)" not in top  # another scope
                below = await text(page, "table.memarc-conflicts tbody tr:nth-child(2)")
                assert below.startswith("duplicate") and "cents" in below, below
                # the cards' texts get room enough to read: at least 16em each
                for cell in await pairs.nth(0).locator("td.col-card").all():
                    box = await cell.bounding_box()
                    assert box["width"] >= 200, box
                # every column on screen: the merge link needs no horizontal scrolling
                merge = await pairs.nth(0).locator("text=Compare and merge").bounding_box()
                assert merge["x"] + merge["width"] <= width, merge
                await shot(page, "conflicts", size)

                # the tables nothing showed in use: subscriptions (its card's last recall was
                # 45 days ago), with the card that names it and when
                await navigate(page, page.click(
                    ".memarc-report-tabs >> text=Tables not seen in use"))
                stale = await text(page, "table.memarc-stale tbody")
                assert stale.startswith("shop.public.subscriptions"), stale
                assert "Churned account" in stale and "a recall returned one of its cards" in stale
                assert "shop.public.orders" not in stale  # returned a day ago
                await shot(page, "stale-dependencies", size)
                await page.go_back()
                pairs = page.locator("table.memarc-conflicts tbody tr")
                await navigate(page, pairs.nth(0).locator("text=Compare and merge").click())
                assert await text(page, "h1") == "acme: compare two cards"
                sides = page.locator("section.memarc-merge-side")
                boxes = [await sides.nth(i).bounding_box() for i in (0, 1)]
                assert abs(boxes[0]["y"] - boxes[1]["y"]) < 2  # side by side
                assert boxes[0]["x"] + boxes[0]["width"] <= boxes[1]["x"]
                said = await text(page, "section.memarc-merge-side:nth-child(1)")
                assert "Keep this one: delete" in said and "Links are not moved" in await text(page)
                await shot(page, "merge", size)
                await navigate(page, sides.nth(0).locator("text=Keep this one").click())
                assert "delete" in (await text(page, "h1")).lower()
                await browser.close()
        finally:
            await stop_server(server, task)
