"""The recall evaluation in a real browser (issue 34): headless Chromium at 1280×800 and
1920×1080, signed in as the administrator of a workspace that the worker evaluated by itself
after an import and again after a worse fusion profile. The front page (the card list) says on
its first screen that recall regressed; the evaluation page shows the history chart (an SVG,
no script), the figures with the regression and the misses with links to the cards; Run queues
a run. Screenshots: ``test-output/admin-<size>-evaluation*.png``."""

from __future__ import annotations

import re

import msgspec
import pytest
from helpers import start_server, stop_server
from test_admin_browser import OUT, SIZES, chromium, look, navigate, signed_in_page, text  # noqa: F401
from test_evaluations import _archive, settle

from shared.index.engine import KEY
from shared.recall import profiles


@pytest.mark.parametrize("width,height", SIZES)
async def test_the_evaluation_pages_show_a_regression(make_env, monkeypatch, chromium, width,
                                                      height):
    from playwright.async_api import async_playwright

    size = f"{width}x{height}"
    OUT.mkdir(exist_ok=True)
    async with make_env() as env:
        manager = await _archive(env)
        await settle(env)  # the run after the import
        for mode in ("solved", "search", "rules"):
            weights = {KEY: profiles.MODE_PROFILES[mode].weights[KEY]}
            monkeypatch.setitem(profiles.MODE_PROFILES, mode, msgspec.structs.replace(
                profiles.MODE_PROFILES[mode], weights=weights))
        await settle(env)  # the run after the profile change: a regression
        env.app.state.explorer_url = "http://explorer.example/"  # the misses' Explain links
        server, task, base = await start_server(env.app)
        try:
            async with async_playwright() as pw:
                browser, page = await signed_in_page(pw, chromium, base, manager, width, height)
                await page.goto(f"{base}/admin/workspaces/acme/cards")
                banner = page.locator("#evaluation-summary")
                said = await banner.inner_text()
                assert "Recall regressed" in said and "profile" in said, said
                assert re.search(r"\(derived\) r@[135] lost \d+ cases, gained \d+", said), said
                box = await banner.bounding_box()
                assert box["y"] + box["height"] <= height, box  # on the first screen
                await look(page, "evaluation-front", size)

                await navigate(page, page.click("#evaluation-summary >> text=See the evaluation"))
                assert await text(page, "h1") == "acme: recall evaluation"
                assert "Regression." in await text(page, "#regression")
                chart = page.locator("svg.memarc-chart")
                cbox = await chart.bounding_box()
                assert cbox and cbox["width"] <= width and cbox["height"] >= 150, cbox
                legend = await page.locator("svg.memarc-chart").text_content()
                for label in ("solved · derived", "search · derived", "regression"):
                    assert label in legend, (label, legend)
                assert await page.locator("svg.memarc-chart circle").count() >= 4
                figures = await text(page, "#figures")
                assert "regression" in figures and "lost" in figures, figures
                assert await page.locator("#misses tbody tr").count() > 0
                # the cases that fell since the run before come first, with both ranks
                first_row = page.locator("#misses tbody tr").first
                assert await first_row.get_attribute("class") == "memarc-worse"
                cells = [await c.inner_text() for c in await first_row.locator("td").all()]
                assert "worse" in cells[4] and cells[4].split()[0] != cells[3], cells
                assert "ranked worse than in the run before come first" in await text(
                    page, "#misses-intro")
                explain = await first_row.locator("a.memarc-explain").get_attribute("href")
                assert explain.startswith("http://explorer.example/-/memory/acme/-/recall?q="), \
                    explain
                first_link = page.locator("#misses td:nth-child(3) a").first
                assert (await first_link.get_attribute("href")).startswith(
                    "/admin/workspaces/acme/cards/mem-")
                assert await page.locator("#runs tbody tr").count() == 2
                await look(page, "evaluation", size)
                # the index and model recall serves, and the shadow rebuild's form
                state = await text(page, "#index-state")
                assert "Recall serves" in state and "(the configured one)" in state, state
                assert "Previous index" in state and "none" in state
                field = page.locator("#model_path")
                await field.scroll_into_view_if_needed()
                fbox = await field.bounding_box()
                assert fbox and fbox["width"] >= 300 and fbox["x"] + fbox["width"] <= width, fbox
                assert await page.locator("label[for=model_path]").is_visible()
                assert await page.locator("label[for=force]").is_visible()
                await page.evaluate("document.getElementById('index').scrollIntoView()")
                await page.screenshot(path=str(OUT / f"admin-{size}-evaluation-index.png"))

                await navigate(page, page.click("input[type=submit][value='Run an evaluation now']"))
                assert "Evaluation queued" in await text(page, "#outcome")
                assert "is queued" in await text(page, "#active")
                await look(page, "evaluation-queued", size)

                await navigate(page, page.click("#runs tbody tr:nth-child(2) a"))
                assert (await text(page, "h1")).startswith("acme: evaluation of ")
                await look(page, "evaluation-run", size)

                # a curated case through the form, without JavaScript's help
                await page.goto(f"{base}/admin/workspaces/acme/evaluations")
                first = await page.evaluate(
                    "() => document.querySelector('#misses td:nth-child(3) a').href")
                card_id = first.rsplit("/", 1)[-1]
                assert card_id.startswith("mem-")
                await navigate(page, page.click("text=Add a case"))
                await page.fill("#question", "Which heroes have blue eyes?")
                await page.fill("#expected", card_id)
                await look(page, "evaluation-case-form", size)
                await navigate(page, page.click("input[type=submit][value='Add the case']"))
                assert "Case added" in await text(page, "#outcome")
                assert "Which heroes have blue eyes?" in await text(page, "#cases")
                await browser.close()
        finally:
            await stop_server(server, task)
