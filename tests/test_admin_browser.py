"""The administration pages in a real browser: headless Chromium (Debian's package) driven by
Playwright, at 1280×800 and at 1920×1080, as a person uses them: sign in; create a card (the
link target found by the search picker); edit it; a stale save resolved; cancel with the
unsaved-changes guard; delete with its confirmation; pending index updates; a ``memory.read``
person who sees no edit control. Each page is saved under ``test-output/admin-<size>-*.png``,
and what a person sees is checked: texts, states, and that no table cell is narrower than its
content (nothing cut off or spilling over).

``.ci/run`` installs Chromium and sets ``MEMARC_NO_SKIP=1``, so in CI a missing browser is a
failure, not a skip.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import skip_or_fail, start_server, stop_server

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "test-output"
CHROMIUM = os.environ.get("MEMARC_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
API = "/api/workspaces/acme/memory"
SIZES = [(1280, 800), (1920, 1080)]
EXPLORER = "http://127.0.0.1:8001/-/memory/acme"

#: cells whose content does not fit (scrolls or spills), inputs in tables too narrow to type in,
#: form fields without a label, and pages wider than the window
OVERFLOW_JS = """() => {
  const bad = [];
  for (const cell of document.querySelectorAll('table td, table th')) {
    if (cell.scrollWidth > cell.clientWidth + 1) {
      bad.push(cell.tagName + ': ' + cell.innerText.slice(0, 60) + ' (' + cell.scrollWidth + ' > ' + cell.clientWidth + ')');
    }
  }
  for (const input of document.querySelectorAll('table input[type=text]')) {
    if (input.clientWidth < 60) { bad.push('input too narrow: ' + input.id + ' ' + input.clientWidth); }
  }
  for (const field of document.querySelectorAll('input, select, textarea')) {
    if (['hidden', 'submit', 'button'].includes(field.type)) { continue; }
    if (!field.labels || field.labels.length === 0) { bad.push('no label: ' + (field.id || field.name)); }
  }
  if (document.documentElement.scrollWidth > window.innerWidth + 1) {
    bad.push('page wider than the window: ' + document.documentElement.scrollWidth);
  }
  return bad;
}"""


@pytest.fixture
def chromium() -> str:
    if CHROMIUM is None:
        skip_or_fail("no chromium binary (CI installs Debian's chromium)")
    return CHROMIUM


async def look(page, name: str, size: str) -> None:
    """Screenshot the page as ``test-output/admin-<size>-<name>.png`` and check that every table
    cell fits its content."""
    await page.screenshot(path=str(OUT / f"admin-{size}-{name}.png"), full_page=True)
    assert await page.evaluate(OVERFLOW_JS) == [], name


async def text(page, selector: str = "body") -> str:
    return re.sub(r"\s+", " ", await page.inner_text(selector))


async def dismissing(page: Any, selector: str) -> list[tuple[str, str]]:
    """Click ``selector`` and dismiss the dialog it opens (a person answering Cancel): the
    dialogs seen, as ``(type, message)``."""
    asked: list[tuple[str, str]] = []

    async def dismiss(dialog: Any) -> None:
        asked.append((dialog.type, dialog.message))
        await dialog.dismiss()

    page.once("dialog", lambda d: asyncio.ensure_future(dismiss(d)))
    await page.click(selector)
    await page.wait_for_timeout(500)
    return asked


async def navigate(page, action) -> None:
    """Run ``action`` (a click or a submit) and wait for the page it loads."""
    async with page.expect_navigation():
        await action


async def signed_in_page(pw: Any, chromium: str, base: str, headers: dict[str, str],
                         width: int, height: int) -> tuple[Any, Any]:
    """A Chromium page of a ``width`` × ``height`` window, signed in to the administration at
    ``base`` with the token of ``headers`` through the sign-in form: ``(browser, page)``."""
    browser = await pw.chromium.launch(executable_path=chromium, args=[
        "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
    page = await (await browser.new_context(viewport={"width": width, "height": height})).new_page()
    await page.goto(f"{base}/admin/sign-in")
    await page.fill("#token", headers["Authorization"].removeprefix("Bearer "))
    await navigate(page, page.click("input[type=submit][value='Sign in']"))
    return browser, page

@pytest.mark.parametrize("width,height", SIZES)
async def test_long_unbroken_values_wrap_on_the_card_pages(make_env, chromium, width, height):
    """A scope of 160 characters without a space and a dependency path as long: the card list
    (where the card sorts first) and its delete confirmation stay inside the window at
    1280×800 and 1920×1080, every column readable (the date and index columns not cut)."""
    from playwright.async_api import async_playwright

    size = f"{width}x{height}"
    OUT.mkdir(exist_ok=True)
    async with make_env() as env:
        env.workspace("acme")
        manager = env.token("acme")
        long_name = "scope_" + "very_long_identifier_" * 7
        card = (await env.client.post(API, headers=manager, json={
            "family": "sql_rule", "title": "Long scope", "content": {"rule": "R."},
            "scope": long_name, "dependencies": [{"database": long_name[:100],
                                                  "schema": long_name[:100],
                                                  "table": long_name[:100]}]})).json()["card"]
        server, task, base = await start_server(env.app)
        try:
            async with async_playwright() as pw:
                browser, page = await signed_in_page(pw, chromium, base, manager, width, height)
                cards = f"{base}/admin/workspaces/acme/cards"
                for name, url in (("long-list", cards),
                                  ("long-delete", f"{cards}/{card['id']}/delete")):
                    await page.goto(url)
                    await look(page, name, size)
                    wide = await page.evaluate("() => document.documentElement.scrollWidth")
                    assert wide <= width, (name, wide)
                    assert long_name[:40] in await text(page), name
                await page.goto(f"{base}/admin/workspaces/acme/cards")
                right = await page.evaluate("() => Math.max(...[...document.querySelectorAll("
                                            "'table.memarc-cards th')].map(th => "
                                            "th.getBoundingClientRect().right))")
                assert right <= width, right  # every column on screen, none scrolled away
                await browser.close()
        finally:
            await stop_server(server, task)


@pytest.mark.parametrize("width,height", SIZES)
async def test_a_card_deleted_meanwhile_keeps_the_typing_in_chromium(make_env, chromium, width,
                                                                     height):
    """Two tabs' worth of races as a person meets them, at 1280×800 and 1920×1080: a save of a
    card deleted meanwhile shows, on the first screen, why nothing was saved, with the typed
    title kept in a new card's form; a delete confirmed after the card was deleted elsewhere
    says "Deleted already" and keeps the navigation."""
    from playwright.async_api import async_playwright

    size = f"{width}x{height}"
    OUT.mkdir(exist_ok=True)
    async with make_env() as env:
        env.workspace("acme")
        manager = env.token("acme")
        ids = [(await env.client.post(API, headers=manager, json={
            "family": "sql_rule", "title": title, "content": {"rule": "R."}})).json()["card"]["id"]
            for title in ("Edited here", "Deleted twice")]
        server, task, base = await start_server(env.app)
        cards = f"{base}/admin/workspaces/acme/cards"
        try:
            async with async_playwright() as pw:
                browser, page = await signed_in_page(pw, chromium, base, manager, width, height)
                await page.goto(f"{cards}/{ids[0]}")
                await page.fill("#title", "Edited here, then saved")
                assert (await env.client.delete(f"{API}/{ids[0]}", headers=manager)).is_success
                await navigate(page, page.click("input[type=submit][value='Save']"))
                banner = page.locator("#outcome")
                assert "This card is gone: it was deleted meanwhile" in await banner.inner_text()
                box = await banner.bounding_box()
                assert box["y"] + box["height"] <= height, box  # on the first screen
                assert await page.input_value("#title") == "Edited here, then saved"
                assert await page.is_visible("input[type=submit][value='Create card']")
                await look(page, "deleted-meanwhile", size)
                await page.goto(f"{cards}/{ids[1]}/delete")
                assert (await env.client.delete(f"{API}/{ids[1]}", headers=manager)).is_success
                await navigate(page, page.click("input[type=submit].memarc-danger"))
                assert await text(page, "h1") == "Deleted already"
                assert await page.is_visible(".memarc-nav >> text=Cards")
                await look(page, "deleted-already", size)
                await browser.close()
        finally:
            await stop_server(server, task)


@pytest.mark.parametrize("width,height", SIZES)
async def test_a_person_administers_cards_in_chromium(make_env, chromium, width, height):
    from playwright.async_api import async_playwright

    size = f"{width}x{height}"
    OUT.mkdir(exist_ok=True)
    async with make_env(explorer_url=EXPLORER) as env:
        env.workspace("acme")
        manager, reader = env.token("acme"), env.token("acme", "memory.read")
        target = (await env.client.post(API, headers=manager, json={
            "family": "domain_clarification", "title": "Target: paid order",
            "content": {"definition": "An order counts once it is paid."}})).json()["card"]
        server, task, base = await start_server(env.app)
        try:
            async with env.running_worker(), async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=chromium, args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
                context = await browser.new_context(viewport={"width": width, "height": height})
                page = await context.new_page()

                # sign in
                await page.goto(f"{base}/admin/")
                assert "/admin/sign-in" in page.url
                await look(page, "sign-in", size)
                await page.fill("#token", manager["Authorization"].removeprefix("Bearer "))
                await navigate(page, page.click("input[type=submit][value='Sign in']"))
                assert page.url == f"{base}/admin/workspaces/acme/cards"
                assert "mat_" not in page.url
                assert "1 card" in await text(page, "h3")
                cookies = {c["name"]: c for c in await context.cookies()}
                assert cookies["memarc_admin"]["httpOnly"] and cookies["memarc_admin"]["sameSite"] == "Strict"
                await look(page, "cards", size)

                # create an SQL rule with a dependency and a link found by the picker
                await navigate(page, page.click("text=New card"))
                await navigate(page, page.select_option("#choose-family", "sql_rule"))
                assert await page.is_visible("#content-rule") and await page.is_visible("#content-rationale")
                await page.fill("#title", "Orders: count paid orders by order_date")
                await page.fill("#content-rule", "Count orders by order_date, paid ones only.")
                await page.fill("#content-rationale", "Unpaid orders are carts, not orders.")
                await page.fill("#scope", "sales")
                await page.fill("#concepts", "order\npayment")
                for part, value in (("database", "shop"), ("schema", "public"), ("table", "orders"),
                                    ("column", "order_date")):
                    await page.fill(f"#dep-0-{part}", value)
                await page.type("#link-0-target", "paid ord")
                await page.wait_for_selector(f"#card-picker option[value='{target['id']}']",
                                             state="attached")
                await page.fill("#link-0-target", target["id"])
                await page.fill("#link-0-meaning", "defines the paid order")
                await look(page, "create", size)
                await navigate(page, page.click("input[type=submit][value='Create card']"))
                outcome = await text(page, "#outcome")
                assert outcome.startswith("Created and indexed (revision 1)"), outcome
                card_url = page.url.split("?")[0]
                assert await page.input_value("#dep-0-column") == "order_date"
                assert await page.input_value("#link-0-target") == target["id"]
                assert await text(page, "#links .memarc-target") == "→ Target: paid order"
                assert await page.get_attribute("header a[href*='8001']", "href") == EXPLORER
                await look(page, "created", size)

                # edit: a new title, saved and indexed
                await page.fill("#title", "Orders: count paid orders by their order_date")
                await navigate(page, page.click("input[type=submit][value='Save']"))
                assert (await text(page, "#outcome")).startswith("Saved and indexed (revision 2)")
                assert await page.input_value("#title") == "Orders: count paid orders by their order_date"

                # a stale save: someone saves revision 3 while the page edits revision 2
                card_id = card_url.rsplit("/", 1)[1]
                async with httpx.AsyncClient(base_url=base, headers=manager) as api:
                    card = (await api.get(f"{API}/{card_id}")).json()["card"]
                    body = {k: card[k] for k in ("family", "title", "content", "scope", "concepts",
                                                 "dependencies", "revision")}
                    body["links"] = card["links"]
                    body["title"] = "Orders: someone else's title"
                    assert (await api.put(f"{API}/{card_id}", json=body)).status_code == 200
                await page.fill("#title", "Orders: my title")
                await navigate(page, page.click("input[type=submit][value='Save']"))
                body_text = await text(page)
                assert "This card changed while you edited it" in body_text
                differs = await page.locator("#compare tr.memarc-differs th").all_inner_texts()
                assert [d.split()[0] for d in differs] == ["title"], differs
                row = await text(page, "#compare tr[data-field=title]")
                assert "Orders: someone else's title" in row and "Orders: my title" in row
                links = await text(page, "#compare tr[data-field=links]")
                assert links.count("“Target: paid order” (defines the paid order)") == 2
                await look(page, "stale", size)
                await navigate(page, page.click("input[type=submit][value^='Apply my changes']"))
                assert (await text(page, "#outcome")).startswith("Saved and indexed (revision 4)")
                assert await page.input_value("#title") == "Orders: my title"

                # cancel with the guard: asked first; dismissed keeps the typing, accepted drops it
                await page.goto(card_url)
                await page.fill("#title", "Unsaved typing")
                dialogs: list[str] = []

                async def answer(dialog, accept: bool) -> None:
                    dialogs.append(dialog.message)
                    await (dialog.accept() if accept else dialog.dismiss())

                page.once("dialog", lambda d: asyncio.ensure_future(answer(d, False)))
                await page.click("a[data-cancel]")
                await page.wait_for_timeout(300)
                assert dialogs == ["Discard your unsaved changes?"]
                assert await page.input_value("#title") == "Unsaved typing"
                page.once("dialog", lambda d: asyncio.ensure_future(answer(d, True)))
                await navigate(page, page.click("a[data-cancel]"))
                assert len(dialogs) == 2
                assert await page.input_value("#title") == "Orders: my title"
                # leaving by another link with unsaved typing: the browser asks first
                await page.click("#title")
                await page.keyboard.type(" (unsaved)")
                asked = await dismissing(page, ".memarc-nav >> text=Cards")
                assert [kind for kind, _ in asked] == ["beforeunload"] and page.url == card_url
                assert await page.input_value("#title") == "Orders: my title (unsaved)"
                await page.goto(card_url)  # (the test's own navigation is not asked about)

                # the card's activity names the token
                await navigate(page, page.click("text=Activity"))
                activity = await text(page, "#activity")
                assert activity.count("token:") >= 4 and "update" in activity and "create" in activity
                await look(page, "activity", size)

                # delete with the confirmation naming what goes with it
                await page.goto(card_url)
                await navigate(page, page.click("text=Delete…"))
                goes = await text(page, "#goes-with")
                assert "1 dependency: shop.public.orders.order_date" in goes
                assert "1 outgoing link: to “Target: paid order” (defines the paid order)" in goes
                await look(page, "delete-confirm", size)
                await navigate(page, page.click("input[type=submit].memarc-danger"))
                deleted = await text(page, "#outcome")
                assert "was deleted, with 1 dependency, 1 outgoing link and 0 incoming links:" in deleted
                assert "1 dependency: shop.public.orders.order_date" in deleted
                await look(page, "deleted", size)

                # pending index updates
                await navigate(page, page.click("text=Pending index updates"))
                assert "incomplete operation" in await text(page, "h3")
                await look(page, "pending", size)
                await navigate(page, page.click("text=Cards"))
                assert "1 card" in await text(page, "h3")

                # a memory.read person: no edit control anywhere
                reader_context = await browser.new_context(viewport={"width": width, "height": height})
                rpage = await reader_context.new_page()
                await rpage.goto(f"{base}/admin/sign-in")
                await rpage.fill("#token", reader["Authorization"].removeprefix("Bearer "))
                await navigate(rpage, rpage.click("input[type=submit][value='Sign in']"))
                assert "it cannot edit cards" in await text(rpage)
                assert await rpage.locator("text=New card").count() == 0
                assert await rpage.locator("form").count() == 1  # sign-out only
                await look(rpage, "read-only", size)
                await rpage.goto(f"{base}/admin/workspaces/acme/cards/{target['id']}")
                assert "Not allowed" in await text(rpage, "h1")
                assert await rpage.locator("input[type=text], textarea").count() == 0
                await browser.close()
        finally:
            await stop_server(server, task)
        for name in ("sign-in", "cards", "create", "created", "stale", "activity",
                     "delete-confirm", "deleted", "pending", "read-only"):
            assert (OUT / f"admin-{size}-{name}.png").stat().st_size > 10_000, name


async def test_a_save_while_redis_is_down_is_kept_and_retry_completes_it(make_env, chromium,
                                                                         tmp_path):
    """Redis (a redis-server of the test's own, never the machine's) stopped: a save answers
    "saved, index update incomplete" and the card waits on the pending page; once Redis is back,
    Retry queues it and the worker indexes it."""
    from playwright.async_api import async_playwright
    from test_outages import _redis_server

    from helpers import free_port, stop_process

    size = "1280x800"
    OUT.mkdir(exist_ok=True)
    port = free_port()
    redis_proc = _redis_server(port, tmp_path / "redis", tmp_path / "redis.log")
    async with make_env(redis_url=f"redis://127.0.0.1:{port}/0") as env:
        env.workspace("acme")
        manager = env.token("acme")
        card = (await env.client.post(API, headers=manager, json={
            "family": "sql_rule", "title": "Refunds: subtract them",
            "content": {"rule": "Subtract refunds from revenue."}})).json()["card"]
        server, task, base = await start_server(env.app)
        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=chromium, args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
                page = await (await browser.new_context(
                    viewport={"width": 1280, "height": 800})).new_page()
                await page.goto(f"{base}/admin/sign-in")
                await page.fill("#token", manager["Authorization"].removeprefix("Bearer "))
                await navigate(page, page.click("input[type=submit][value='Sign in']"))
                await page.goto(f"{base}/admin/workspaces/acme/cards/{card['id']}")
                stop_process(redis_proc)  # Redis goes away while the page is open
                await page.fill("#content-rule", "Subtract refunds from revenue, by refund date.")
                await navigate(page, page.click("input[type=submit][value='Save']"))
                outcome = await text(page, "#outcome")
                assert outcome.startswith("Saved (revision 2), index update incomplete"), outcome
                assert await page.input_value("#content-rule") == \
                    "Subtract refunds from revenue, by refund date."
                await look(page, "saved-index-incomplete", size)
                await navigate(page, page.click("text=Pending index updates"))
                assert "Redis) is unreachable" in await text(page)
                row = await text(page, "#pending tbody tr")
                assert row.startswith("Refunds: subtract them index the current version (2 operations) pending"), row
                assert "2 incomplete operations on 1 card" in await text(page, "h3")
                await look(page, "pending-redis-down", size)
                # Redis is back; the Retry of the pending page queues it, the worker indexes it
                redis_proc = _redis_server(port, tmp_path / "redis", tmp_path / "redis.log")
                async with env.running_worker():
                    await navigate(page, page.click("#pending input[type=submit][value=Retry]"))
                    assert "queued" in await text(page, "#outcome")
                    await look(page, "pending-retried", size)
                    for _ in range(100):
                        await page.goto(f"{base}/admin/workspaces/acme/pending")
                        if "Nothing pending" in await text(page):
                            break
                        await asyncio.sleep(0.2)
                    assert "Nothing pending" in await text(page)
                await page.goto(f"{base}/admin/workspaces/acme/cards/{card['id']}")
                assert "revision 2" in await text(page) and "indexed" in await text(page)
                await browser.close()
        finally:
            await stop_server(server, task)
            stop_process(redis_proc)


@pytest.mark.parametrize("width,height", SIZES)
async def test_a_person_retries_an_unfinished_schema_change_cleanup(make_env, chromium, width,
                                                                    height):
    """The schema-change cleanup pages: the runs with their phase, removed objects and receipts;
    a run's page; its Retry, which completes it and says so."""
    from playwright.async_api import async_playwright

    size = f"{width}x{height}"
    OUT.mkdir(exist_ok=True)
    changes = "/api/workspaces/acme/schema-changes"
    async with make_env() as env:
        env.workspace("acme")
        person = env.token("acme", "memory.manage", "memory.schema")
        for table in ("orders", "customers", "refunds"):
            r = await env.client.post(API, headers=person, json={
                "family": "sql_rule", "title": f"Rule on {table}", "content": {"rule": "R."},
                "dependencies": [{"database": "shop", "schema": "public", "table": table}]})
            assert r.status_code == 201
        server, task, base = await start_server(env.app)
        try:
            async with env.running_worker(), async_playwright() as pw:
                done = await env.client.post(f"{changes}?wait=20", headers=person, json={
                    "run_id": "catalog-sync-2026-11-30", "database": "shop", "schema": "public",
                    "removed_tables": ["refunds"],
                    "removed_columns": [{"table": "customers", "column": "fax"}]})
                assert done.json()["status"] == "done", done.text
                r = await env.client.post(f"{changes}/record", headers=person, json={
                    "run_id": "catalog-sync-2026-12-03", "database": "shop", "schema": "public",
                    "removed_tables": ["orders"],
                    "removed_columns": [{"table": "customers", "column": "phone"}]})
                assert r.status_code == 201
                browser = await pw.chromium.launch(executable_path=chromium, args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
                page = await (await browser.new_context(
                    viewport={"width": width, "height": height})).new_page()
                await page.goto(f"{base}/admin/sign-in")
                await page.fill("#token", person["Authorization"].removeprefix("Bearer "))
                await navigate(page, page.click("input[type=submit][value='Sign in']"))
                await navigate(page, page.click(".memarc-nav >> text=Schema-change cleanups"))
                assert await text(page, "h3") == "2 runs"
                rows = await page.locator("#runs tbody tr").all_inner_texts()
                rows = [re.sub(r"\s+", " ", r) for r in rows]
                assert rows[0].startswith("catalog-sync-2026-12-03 shop.public orders, "
                                          "customers.phone recorded, cards not deleted yet 0 cards 0")
                assert rows[1].startswith("catalog-sync-2026-11-30 shop.public refunds, "
                                          "customers.fax done 1 card 0")
                assert await page.locator("#runs input[type=submit][value=Retry]").count() == 1
                lines = await page.evaluate("[...document.querySelectorAll('#runs td.col-run a')]"
                                            ".map(a => a.getClientRects().length)")
                assert lines == [1, 1], lines  # run ids are not broken over lines
                await look(page, "schema-changes", size)
                await navigate(page, page.click("text=catalog-sync-2026-12-03"))
                assert "recorded, cards not deleted yet" in await text(page, "#run")
                await look(page, "schema-changes-run", size)
                await navigate(page, page.click("input[type=submit][value=Retry]"))
                outcome = await text(page, "#outcome")
                assert outcome == ("Retried: the run is complete. 1 card deleted, their index "
                                   "points removed."), outcome
                assert "done" in await text(page, "#run")
                assert await page.locator("#deleted li").count() == 1
                await look(page, "schema-changes-retried", size)
                await navigate(page, page.click("text=All schema-change runs"))
                assert await page.locator("#runs input[type=submit][value=Retry]").count() == 0
                await navigate(page, page.click(".memarc-nav >> text=Cards"))
                assert await text(page, "h3") == "1 card"  # customers stays
                await browser.close()
        finally:
            await stop_server(server, task)
        for name in ("schema-changes", "schema-changes-run", "schema-changes-retried"):
            assert (OUT / f"admin-{size}-{name}.png").stat().st_size > 10_000, name


async def test_a_reviewer_sees_pending_updates_without_retry_in_chromium(make_env, chromium):
    """A ``memory.review`` person: the pending page lists the updates that wait (no Retry, and
    it says why), the cards page says it cannot edit, no form but sign-out."""
    from playwright.async_api import async_playwright

    size = "1280x800"
    OUT.mkdir(exist_ok=True)
    async with make_env() as env:
        env.workspace("acme")
        manager, reviewer = env.token("acme"), env.token("acme", "memory.review")
        r = await env.client.post(API, headers=manager, json={
            "family": "sql_rule", "title": "Refunds: subtract them by refund date",
            "content": {"rule": "Subtract refunds from revenue."}})
        assert r.status_code == 201  # no worker: its index update waits
        server, task, base = await start_server(env.app)
        try:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=chromium, args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
                page = await (await browser.new_context(
                    viewport={"width": 1280, "height": 800})).new_page()
                await page.goto(f"{base}/admin/sign-in")
                await page.fill("#token", reviewer["Authorization"].removeprefix("Bearer "))
                await navigate(page, page.click("input[type=submit][value='Sign in']"))
                # a reviewer starts on the review queue; the card list says what they cannot do
                assert page.url.endswith("/admin/workspaces/acme/sessions"), page.url
                assert "sessions waiting for review" in await text(page, "h3")
                await navigate(page, page.click(".memarc-nav >> text=Cards"))
                assert "Your token holds memory.review: it cannot edit cards." in await text(page)
                assert await page.locator("text=New card").count() == 0
                await look(page, "reviewer-cards", size)
                await navigate(page, page.click(".memarc-nav >> text=Pending index updates"))
                assert await text(page, "h3") == "1 incomplete operation"
                row = await text(page, "#pending tbody tr")
                assert row.startswith("Refunds: subtract them by refund date index the current "
                                      "version pending"), row
                assert "you can see these updates but not retry them" in await text(page)
                assert await page.locator("input[type=submit]").count() == 0
                assert await page.locator("form").count() == 1  # sign-out only
                await look(page, "reviewer-pending", size)
                await browser.close()
        finally:
            await stop_server(server, task)


#: the review form's fields as the browser would send them on a click of "Apply" (a re-submission
#: of the very same form sends exactly these)
FORM_DATA_JS = """() => [...new FormData(document.querySelector('#review-form')).entries(),
                         ['decision', 'apply']]"""

#: submit ``pairs`` as a form from the current page (what the browser does when a person goes
#: back and submits the form again)
RESUBMIT_JS = """([action, pairs]) => {
  const form = document.createElement('form');
  form.method = 'post'; form.action = action;
  for (const [name, value] of pairs) {
    const input = document.createElement('input');
    input.type = 'hidden'; input.name = name; input.value = value; form.appendChild(input);
  }
  document.body.appendChild(form); form.submit();
}"""


@pytest.mark.parametrize("width,height", SIZES)
async def test_a_reviewer_reviews_a_session_in_chromium(make_env, chromium, width, height):
    """A reviewer (``memory.review``) opens the sessions to review, opens one, edits a proposal,
    applies, reads the receipt; the same form submitted again (after going back) answers the
    same receipt and writes nothing twice."""
    from playwright.async_api import async_playwright
    from test_workflow import APPROVED, active_def, solved

    size = f"{width}x{height}"
    OUT.mkdir(exist_ok=True)
    async with make_env() as env:
        env.workspace("acme")
        manager, agent = env.token("acme"), env.token("acme", "memory.propose")
        reviewer = env.token("acme", "memory.review")
        old = (await env.client.post(API, headers=manager, json={
            "family": "sql_rule", "title": "Paid orders only",
            "content": {"rule": "Keep orders whose status is 'paid'."}})).json()["card"]
        r = await env.client.post("/api/workspaces/acme/sessions/analysis-2026-12-03/proposals",
                                  headers=agent, json={"proposals": [active_def(), solved(), {
                                      "key": "paid", "kind": "update", "card_id": old["id"],
                                      "revision": 1, "decisions": APPROVED,
                                      "content": {"rule": "Keep orders whose status is 'paid' "
                                                          "or 'refunded'."}}]})
        assert r.status_code == 201, r.text
        server, task, base = await start_server(env.app)

        def counts() -> tuple[int, int, int]:
            return (env.scalar("SELECT count(*) FROM memory.cards"),
                    env.scalar("SELECT count(*) FROM memory.review_receipts"),
                    env.scalar("SELECT count(*) FROM memory.projection_ops"))

        try:
            async with async_playwright() as pw:
                browser, page = await signed_in_page(pw, chromium, base, reviewer, width, height)
                assert page.url.endswith("/admin/workspaces/acme/sessions"), page.url  # landed
                assert "1 session waiting for review" in await text(page, "h3")
                row = await text(page, "#sessions tbody tr")
                assert row.startswith("analysis-2026-12-03 2 1 0"), row
                await look(page, "review-list", size)

                await navigate(page, page.click("#sessions >> text=analysis-2026-12-03"))
                assert "3 proposals: 2 new cards, 0 reuses of an existing card, 1 update" \
                    in await text(page)
                changes = await text(page, "#changes-2")
                assert "Keep orders whose status is 'paid'." in changes and "'refunded'" in changes
                assert await page.get_attribute("#p1-content-sql", "readonly") is not None
                assert await page.is_checked("#p0-keep") and await page.is_checked("#p2-keep")
                await page.fill("#p0-title", "Active customer (last 30 days)")
                await page.uncheck("#p1-keep")  # the solved question is declined
                await page.fill("#p1-title", "")  # its blank title must not block Apply
                await look(page, "review-summary", size)
                # Decline all asks first; dismissed, nothing is sent
                before = counts()
                asked = await dismissing(page, "#decline-all")
                assert asked and asked[0][1].startswith("Decline every proposal of this session?")
                assert counts() == before and await page.input_value("#p0-title") == \
                    "Active customer (last 30 days)"
                form = await page.evaluate(FORM_DATA_JS)
                action = page.url
                await navigate(page, page.click("#apply"))
                outcome = await text(page, "#outcome")
                assert outcome.startswith("Review applied: 2 cards written or reused, 1 proposal "
                                          "declined"), outcome
                receipt = await text(page, "#receipt")
                assert "Active customer (last 30 days)" in receipt and "updated" in receipt
                assert "created" in receipt and await text(page, "#declined") == \
                    "q1: Active customers per country"
                applied = counts()
                assert applied[:2] == (before[0] + 1, before[1] + 1), (before, applied)
                await look(page, "review-receipt", size)

                # back, and the same form submitted again: the same receipt, nothing written
                await page.go_back()
                await navigate(page, page.evaluate(RESUBMIT_JS, [action, form]))
                assert "already applied" in await text(page, "#outcome")
                assert await text(page, "#receipt") == receipt
                assert counts() == applied
                await look(page, "review-replay", size)
                await browser.close()
        finally:
            await stop_server(server, task)
        for name in ("review-list", "review-summary", "review-receipt", "review-replay"):
            assert (OUT / f"admin-{size}-{name}.png").stat().st_size > 10_000, name
