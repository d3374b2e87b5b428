"""The explorer in a real browser: headless Chromium (Debian's package) driven by Playwright.

Loads the card list, applies two filters through the form, opens a card, and saves a screenshot
under ``test-output/``. ``.ci/run`` installs Chromium and sets ``MEMARC_NO_SKIP=1``, so
in CI a missing browser is a failure, not a skip; elsewhere the test is skipped when no Chromium
binary exists.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from helpers import skip_or_fail, start_server, stop_server

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("MEMARC_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
BASE = "/api/workspaces/acme/memory"



@pytest.fixture
def chromium() -> str:
    if CHROMIUM is None:
        skip_or_fail("no chromium binary (CI installs Debian's chromium)")
    return CHROMIUM


async def test_filter_list_open_card_in_headless_chromium(make_env, chromium):
    from datasette.app import Datasette
    from playwright.async_api import async_playwright

    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        cards = [
            {"family": "sql_rule", "title": "Orders: use order_date",
             "content": {"rule": "Count orders by order_date."},
             "dependencies": [{"database": "db1", "schema": "public", "table": "orders"}]},
            {"family": "sql_rule", "title": "Customers: dedupe by email",
             "content": {"rule": "Deduplicate customers by lower(email)."},
             "dependencies": [{"database": "db2", "schema": "public", "table": "customers"}]},
            {"family": "domain_clarification", "title": "Order means paid order",
             "content": {"definition": "An order counts once it is paid."},
             "dependencies": [{"database": "db1", "schema": "public", "table": "orders"}]},
        ]
        for body in cards:
            assert (await env.client.post(BASE, json=body, headers=h)).status_code == 201
        ds = Datasette(memory=False, metadata={"plugins": {"memarc-explorer": {
            "database_url": env.settings.database_url, "workspaces": {"alice": ["acme"]}}}})
        ds.memarc_resources = env.resources
        server, task, base = await start_server(ds.app())
        out = ROOT / "test-output"
        out.mkdir(exist_ok=True)
        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=chromium, args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
                context = await browser.new_context(viewport={"width": 1280, "height": 1000})
                await context.add_cookies([{"name": "ds_actor", "url": base,
                                            "value": ds.sign({"a": {"id": "alice"}}, "actor")}])
                page = await context.new_page()
                await page.goto(f"{base}/-/memory/acme")
                assert "3 cards" in await page.inner_text("h3")
                # two filters through the form: a family and a database
                await page.select_option("#memarc-family", ["sql_rule"])
                await page.fill("#memarc-database", "db1")
                await page.click("input[type=submit][value=Apply]")
                await page.wait_for_load_state()
                assert "family=sql_rule" in page.url and "database=db1" in page.url
                heading = await page.inner_text("h3")
                assert heading.startswith("1 card where"), heading
                titles = await page.locator("table.rows-and-columns td.col-title a").all_inner_texts()
                assert titles == ["Orders: use order_date"]
                await page.screenshot(path=str(out / "explorer-list-filtered.png"), full_page=True)
                # open the card
                await page.click("text=Orders: use order_date")
                await page.wait_for_load_state()
                assert "/-/memory/acme/mem-" in page.url
                body = await page.inner_text("body")
                assert "Count orders by order_date." in body and "db1" in body
                await page.screenshot(path=str(out / "explorer-card.png"), full_page=True)
                await browser.close()
        finally:
            await stop_server(server, task)
        for name in ("explorer-list-filtered.png", "explorer-card.png"):
            assert (out / name).stat().st_size > 10_000
