"""The explorer in a real browser: headless Chromium (Debian's package) driven by Playwright.

Loads the card list, applies two filters through the form, opens a card, and saves a screenshot
under ``test-output/``. The card list is read at 1280×800 and 1920×1080 with long titles, many
dependencies and long single words: each title is at least as wide as its longest word, the
table does not scroll sideways, and the first card shows on the first screen. ``.ci/run`` installs Chromium and sets ``MEMARC_NO_SKIP=1``, so
in CI a missing browser is a failure, not a skip; elsewhere the test is skipped when no Chromium
binary exists.
"""

from __future__ import annotations

import os
import re
import shutil
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import urlencode

import pytest
from helpers import skip_or_fail, start_server, stop_server

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("MEMARC_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
BASE = "/api/workspaces/acme/memory"
SIZES = [(1280, 800), (1920, 1080)]
OUT = ROOT / "test-output"
#: one word as long as a real column identifier: its title cell must be this wide at least
LONG_WORD = "k_symbol_POJISTNE_SIPO_LEASING_UVER"
#: one word too long for any column: the only one allowed to break (at the column's widest)
ENDLESS_WORD = "x" * 150

#: per title cell: its content width, and its longest word's width in the cell's own font
TITLE_WIDTHS_JS = """() => [...document.querySelectorAll('table.rows-and-columns td.col-title')].map(cell => {
  const link = cell.querySelector('a');
  const style = getComputedStyle(cell);
  const inner = cell.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  let longest = 0, word = '';
  for (const w of link.textContent.split(/\\s+/)) {
    const probe = document.createElement('span');
    probe.textContent = w;
    probe.style.cssText = 'position:absolute;visibility:hidden;white-space:nowrap';
    link.appendChild(probe);
    const width = probe.getBoundingClientRect().width;
    probe.remove();
    if (width > longest) { longest = width; word = w; }
  }
  return {title: link.textContent, inner, longest, word,
          cap: parseFloat(getComputedStyle(link).maxWidth) || null};
})"""

#: the table's wrapper scrolls sideways, or the page is wider than the window
SIDEWAYS_JS = """() => {
  const wrapper = document.querySelector('.table-wrapper');
  const columns = [...wrapper.querySelectorAll('thead th')].map(th => th.className + ' ' + th.offsetWidth);
  return {table: wrapper.scrollWidth, wrapper: wrapper.clientWidth,
          page: document.documentElement.scrollWidth, window: window.innerWidth, columns};
}"""



@pytest.fixture
def chromium() -> str:
    if CHROMIUM is None:
        skip_or_fail("no chromium binary (CI installs Debian's chromium)")
    return CHROMIUM


async def create_cards(env, cards: list[dict]) -> dict[str, str]:
    """Create ``cards`` in the workspace ``acme`` through the API: ``{title: id}``."""
    env.workspace("acme")
    headers = env.token("acme")
    responses = [await env.client.post(BASE, json=body, headers=headers) for body in cards]
    assert [r.status_code for r in responses] == [201] * len(cards), [r.text for r in responses]
    return {r.json()["card"]["title"]: r.json()["card"]["id"] for r in responses}


@asynccontextmanager
async def explorer_page(env, chromium: str, width: int, height: int):
    """A Chromium page of the explorer over ``env``'s archive, ``alice`` signed in with the
    workspace ``acme``, in a ``width`` × ``height`` window: yields ``(page, base_url)``."""
    from datasette.app import Datasette
    from playwright.async_api import async_playwright

    ds = Datasette(memory=False, metadata={"plugins": {"memarc-explorer": {
        "database_url": env.settings.database_url, "workspaces": {"alice": ["acme"]}}}})
    ds.memarc_resources = env.resources
    server, task, base = await start_server(ds.app())
    try:
        async with async_playwright() as pw:
            browser = await pw.chromium.launch(executable_path=chromium, args=[
                "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
            context = await browser.new_context(viewport={"width": width, "height": height})
            await context.add_cookies([{"name": "ds_actor", "url": base,
                                        "value": ds.sign({"a": {"id": "alice"}}, "actor")}])
            yield await context.new_page(), base
            await browser.close()
    finally:
        await stop_server(server, task)


async def test_filter_list_open_card_in_headless_chromium(make_env, chromium):
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
    OUT.mkdir(exist_ok=True)
    async with make_env() as env:
        await create_cards(env, cards)
        async with explorer_page(env, chromium, 1280, 1000) as (page, base):
            await page.goto(f"{base}/-/memory/acme")
            assert "3 cards" in await page.inner_text("h3")
            # the dependency filters are folded under "More filters" while none is set
            more = page.locator("details.memarc-more")
            assert await more.get_attribute("open") is None
            assert not await page.is_visible("#memarc-database")
            # two filters through the form: a family (a checkbox) and a database (under "More")
            await page.check("#memarc-family-sql_rule")
            await page.click("details.memarc-more > summary")
            await page.fill("#memarc-database", "db1")
            await page.click("input[type=submit][value=Apply]")
            await page.wait_for_load_state()
            assert "family=sql_rule" in page.url and "database=db1" in page.url
            # a filtered state stays in sight: the folded filters open, the box checked
            assert await more.get_attribute("open") is not None
            assert await page.input_value("#memarc-database") == "db1"
            assert await page.is_checked("#memarc-family-sql_rule")
            heading = await page.inner_text("h3")
            assert heading.startswith("1 card where"), heading
            titles = await page.locator("table.rows-and-columns td.col-title a").all_inner_texts()
            assert titles == ["Orders: use order_date"]
            await page.screenshot(path=str(OUT / "explorer-list-filtered.png"), full_page=True)
            # open the card
            await page.click("text=Orders: use order_date")
            await page.wait_for_load_state()
            assert "/-/memory/acme/mem-" in page.url
            body = await page.inner_text("body")
            assert "Count orders by order_date." in body and "db1" in body
            await page.screenshot(path=str(OUT / "explorer-card.png"), full_page=True)
    for name in ("explorer-list-filtered.png", "explorer-card.png"):
        assert (OUT / name).stat().st_size > 10_000


def _dependencies(database: str, table: str, columns: list[str]) -> list[dict[str, str]]:
    return [{"database": database, "schema": "public", "table": table, "column": c} for c in columns]


#: cards as a real archive holds them: long titles, a long identifier as one word, many
#: dependencies with long qualified names, several concepts
READABLE_CARDS = [
    {"family": "domain_clarification",
     "title": "Loans: status A means the contract finished without problems, B finished with the loan unpaid",
     "content": {"definition": "Statuses A and B are finished contracts; C and D are running."},
     "concepts": ["loan", "loan status", "contract", "debt", "default risk", "running contract",
                  "finished contract", "client", "loan amount"],
     "dependencies": _dependencies("financial", "loan", ["status", "amount", "duration"])},
    {"family": "sql_rule",
     "title": f"Payments: {LONG_WORD} names what a permanent order pays for",
     "content": {"rule": "Filter trans.k_symbol, never the free-text bank field."},
     "concepts": ["payment purpose", "permanent order", "insurance payment", "household payment",
                  "leasing", "loan payment", "transaction type", "bank transfer", "card withdrawal"],
     "dependencies": _dependencies("financial", "transaction_history_by_account", [
         "k_symbol", "operation", "type", "amount", "balance", "bank", "account_to",
         "transaction_date", "district_identifier", "account_identifier", "order_identifier",
         "card_identifier"])},
    {"family": "sql_rule", "title": "Orders: use order_date",
     "content": {"rule": "Count orders by order_date."},
     "concepts": ["order", "order date", "paid order"],
     "dependencies": _dependencies("shop", "orders", ["order_date"])},
    {"family": "explained_error", "title": f"Import of {ENDLESS_WORD} failed",
     "content": {"error": "value too long", "correction": "Shorten the generated name."}},
    {"family": "solved_question",
     "title": "How many clients who opened their account in the Prague district in 1993 took a loan of more than 100,000?",
     "content": {"question": "Clients of Prague from 1993 with a loan over 100,000?",
                 "sql": "SELECT count(*) FROM client"},
     "concepts": ["client", "district", "loan amount", "region", "account opening", "Prague",
                  "account owner", "disponent", "year of opening"],
     "dependencies": _dependencies("financial", "client", ["client_id", "district_id"])
     + _dependencies("financial", "district", ["A2", "A3"])},
]


def _assert_titles_fit(cells: list[dict], size: str) -> None:
    """Each title cell is at least as wide as its longest word; a word longer than the column's
    widest breaks, and only then, with the cell at that widest."""
    assert len(cells) == len(READABLE_CARDS), cells
    for cell in cells:
        if cell["cap"] is not None and cell["longest"] > cell["cap"]:
            assert cell["word"] == ENDLESS_WORD, (size, cell)
            assert cell["inner"] >= cell["cap"] - 1, (size, cell)
        else:
            assert cell["inner"] + 0.5 >= cell["longest"], (size, cell)


@pytest.mark.parametrize("width,height", SIZES)
async def test_card_list_readable_at_every_width(make_env, chromium, width, height):
    """The card list as a person sees it at 1280×800 and 1920×1080: titles as wide as their
    longest word, two dependencies and "+N more", short ids with the full id on hover, no
    sideways scrolling, and the first card on the first screen."""
    size = f"{width}x{height}"
    OUT.mkdir(exist_ok=True)
    async with make_env() as env:
        ids = await create_cards(env, READABLE_CARDS)
        async with explorer_page(env, chromium, width, height) as (page, base):
            await page.goto(f"{base}/-/memory/acme")
            await page.screenshot(path=str(OUT / f"explorer-{size}-card-list-long.png"), full_page=True)
            _assert_titles_fit(await page.evaluate(TITLE_WIDTHS_JS), size)
            sideways = await page.evaluate(SIDEWAYS_JS)
            assert sideways["table"] <= sideways["wrapper"] + 1, f"{sideways}"
            assert sideways["page"] <= sideways["window"] + 1, sideways
            first_row = await page.locator("table.rows-and-columns tbody tr").first.bounding_box()
            assert first_row["y"] < height, first_row
            await _assert_short_dependencies_and_id(page, READABLE_CARDS[1], ids)
            await _assert_family_on_one_line(page, len(READABLE_CARDS))
    assert (OUT / f"explorer-{size}-card-list-long.png").stat().st_size > 10_000


async def _assert_short_dependencies_and_id(page, card: dict, ids: dict[str, str]) -> None:
    """The card's row shows two dependencies and "+N more" (every one on hover), and its id
    shortened (the full id on hover)."""
    row = page.locator("table.rows-and-columns tbody tr", has_text=card["title"][:12])
    deps = row.locator("td.col-dependencies")
    shown = re.sub(r"\s+", " ", await deps.inner_text()).strip()
    assert shown == ("financial.public.transaction_history_by_account.k_symbol "
                     "financial.public.transaction_history_by_account.operation +10 more"), shown
    hover = await deps.locator("[title]").get_attribute("title")
    assert hover.split("\n") == [f"financial.public.transaction_history_by_account.{d['column']}"
                                 for d in card["dependencies"]], hover
    full_id = ids[card["title"]]
    id_link = row.locator("td.col-id a")
    assert await id_link.inner_text() == full_id[:12] + "…"
    assert await id_link.get_attribute("title") == full_id


#: per family cell: the family name's line boxes and its line height, px
FAMILY_LINES_JS = """() => [...document.querySelectorAll('table.rows-and-columns td.col-family .memarc-family')]
  .map(el => ({family: el.textContent, rects: el.getClientRects().length,
               height: el.getBoundingClientRect().height,
               line: parseFloat(getComputedStyle(el.closest('td')).lineHeight)}))"""


async def _assert_family_on_one_line(page, rows: int) -> None:
    """Every row's family name sits on one line: one line box, one line high."""
    cells = await page.evaluate(FAMILY_LINES_JS)
    assert len(cells) == rows, cells
    for cell in cells:
        assert cell["rects"] == 1 and cell["height"] <= cell["line"] + 1, cell


def _demo_cards(n: int) -> list[dict]:
    """The first ``n`` solved questions of the demo's cards file (what ``make demo`` imports):
    titles of 60-150 characters, several dependencies each, in the API's create shape."""
    import gzip
    import json

    from shared.cards_file import bundled_cards

    picked = []
    with gzip.open(bundled_cards(), "rt", encoding="utf-8") as lines:
        for line in lines:
            card = json.loads(line)
            if card["family"] == "solved_question":
                picked.append({k: card[k] for k in ("family", "title", "scope", "concepts",
                                                     "dependencies", "content")})
                if len(picked) == n:
                    return picked
    raise AssertionError(f"fewer than {n} solved questions in {bundled_cards()}")


#: the visible card rows' boxes, and every element wider than the window (class and width)
FIRST_SCREEN_JS = """() => ({
  rows: [...document.querySelectorAll('table.rows-and-columns tbody tr')].map(tr => {
    const r = tr.getBoundingClientRect(); return {top: r.top, bottom: r.bottom}; }),
  table: document.querySelector('table.rows-and-columns').getBoundingClientRect().right,
  wide: [...document.querySelectorAll('body *')].filter(el => el.getBoundingClientRect().right > window.innerWidth + 1)
    .map(el => el.tagName + '.' + el.className + ' ' + Math.round(el.getBoundingClientRect().right)),
  window: window.innerWidth})"""

#: card rows wholly on the first screen, at least, per window size (1280x800: the trial found 1.8)
FIRST_SCREEN_ROWS = {(1280, 800): 4, (1920, 1080): 8}


@pytest.mark.parametrize("width,height", SIZES)
async def test_card_list_first_screen_shows_cards(make_env, chromium, width, height):
    """The card list as it opens, with the demo's own solved questions: the filter bar is compact
    enough that at 1280×800 four whole card rows (eight at 1920×1080) sit on the first screen,
    below every filter (search, family, origin, and the folded "More filters"); no family name
    wraps; nothing is wider than the window."""
    size = f"{width}x{height}"
    OUT.mkdir(exist_ok=True)
    cards = _demo_cards(12)
    async with make_env() as env:
        await create_cards(env, cards)
        async with explorer_page(env, chromium, width, height) as (page, base):
            await page.goto(f"{base}/-/memory/acme")
            await page.screenshot(path=str(OUT / f"explorer-{size}-card-list.png"))
            for control in ("#memarc-q", "#memarc-family-solved_question", "#memarc-origin-manual",
                            "details.memarc-more > summary", "input[type=submit][value=Apply]"):
                box = await page.locator(control).bounding_box()
                assert box is not None and box["y"] + box["height"] <= height, (control, box)
            screen = await page.evaluate(FIRST_SCREEN_JS)
            whole = [r for r in screen["rows"] if r["bottom"] <= height]
            assert len(whole) >= FIRST_SCREEN_ROWS[(width, height)], (size, screen["rows"][:6])
            assert screen["wide"] == [] and screen["table"] <= width, screen
            await _assert_family_on_one_line(page, len(cards))
    assert (OUT / f"explorer-{size}-card-list.png").stat().st_size > 10_000


#: the card page's first screen: where the content heading, the first content field and the
#: details grid sit (px from the top), and how many details share a row
CARD_SCREEN_JS = """() => {
  const top = sel => { const el = document.querySelector(sel); return el ? el.getBoundingClientRect().top : null; };
  const bottom = sel => { const el = document.querySelector(sel); return el ? el.getBoundingClientRect().bottom : null; };
  const pairs = [...document.querySelectorAll('dl.memarc-meta > div')].map(d => d.getBoundingClientRect().top);
  const content = [...document.querySelectorAll('h2')].find(h => h.textContent.trim() === 'Content');
  return {content: content ? content.getBoundingClientRect().top : null,
          first_field: bottom('dl.memarc-content dd'), meta: top('dl.memarc-meta'),
          pairs: pairs.length, rows: new Set(pairs.map(Math.round)).size,
          page: document.documentElement.scrollWidth, window: window.innerWidth};
}"""


@pytest.mark.parametrize("width,height", SIZES)
async def test_card_page_shows_its_content_first(make_env, chromium, width, height):
    """A demo solved question's page: the content (its question and SQL) comes right after the
    title and the action links, its first field wholly on the first screen; the details follow as
    a grid of label-value pairs, several to a row (nine pairs in at most five rows)."""
    size = f"{width}x{height}"
    OUT.mkdir(exist_ok=True)
    card = _demo_cards(1)[0]
    async with make_env() as env:
        ids = await create_cards(env, [card])
        async with explorer_page(env, chromium, width, height) as (page, base):
            await page.goto(f"{base}/-/memory/acme/{ids[card['title']]}")
            await page.screenshot(path=str(OUT / f"explorer-{size}-card.png"))
            screen = await page.evaluate(CARD_SCREEN_JS)
            assert screen["content"] is not None and screen["meta"] is not None, screen
            assert screen["content"] < screen["meta"], screen  # content before the details
            assert screen["first_field"] <= height, screen
            assert screen["pairs"] == 9 and screen["rows"] <= 5, screen
            assert screen["page"] <= screen["window"], screen
            first = next(iter(card["content"].values()))
            assert first[:40] in await page.locator("dl.memarc-content dd").first.inner_text()
    assert (OUT / f"explorer-{size}-card.png").stat().st_size > 10_000


#: the recall results table's right edge, the window's width, and every element wider than it
RECALL_SCREEN_JS = """() => ({
  table: document.querySelector('table.memarc-results').getBoundingClientRect().right,
  window: window.innerWidth, page: document.documentElement.scrollWidth,
  wide: [...document.querySelectorAll('body *')].filter(el => el.getBoundingClientRect().right > window.innerWidth + 1)
    .map(el => el.tagName + '.' + el.className + ' ' + Math.round(el.getBoundingClientRect().right)),
  ranks: [...document.querySelectorAll('td.col-ranks')].map(td => td.innerText)})"""


@pytest.mark.parametrize("width,height", SIZES)
async def test_recall_results_fit_the_window(make_env, chromium, width, height):
    """Recall (mode ``solved``) over twelve demo solved questions at 1280×800 and 1920×1080: the results table ends inside the
    window and nothing is wider than it; every retrieval rank shows, as "dense 3 · bm25 1" in one
    cell, each equal to the API's figure for that card."""
    size = f"{width}x{height}"
    OUT.mkdir(exist_ok=True)
    query = "average monthly consumption of customers in 2013"
    async with make_env() as env:
        ids = await create_cards(env, _demo_cards(12))
        await env.drain()
        api = await env.client.post(f"{BASE}/search", json={"query": query, "top": 10, "mode": "solved"},
                                    headers=env.token("acme"))
        assert api.status_code == 200, api.text
        expected = [" · ".join(f"{label} {r['retrieval'][name]}" for name, label in RANK_LABELS
                               if r["retrieval"].get(name) is not None) for r in api.json()["results"]]
        assert len(expected) >= 5 and all(expected), api.json()
        async with explorer_page(env, chromium, width, height) as (page, base):
            await page.goto(f"{base}/-/memory/acme/-/recall?{urlencode({'q': query, 'top': 10, 'mode': 'solved'})}")
            await page.screenshot(path=str(OUT / f"explorer-{size}-recall.png"))
            screen = await page.evaluate(RECALL_SCREEN_JS)
            assert screen["table"] <= width and screen["page"] <= width, screen
            assert screen["wide"] == [], screen
            assert [re.sub(r"\s+", " ", r).strip() for r in screen["ranks"]] == expected, screen
            # three more cards, not indexed yet: the page says so on the first screen (issue 26)
            await create_cards(env, _demo_cards(15)[12:])
            await page.goto(f"{base}/-/memory/acme/-/recall?{urlencode({'q': query, 'top': 10, 'mode': 'solved'})}")
            await page.screenshot(path=str(OUT / f"explorer-{size}-recall-pending.png"))
            notice = page.locator("p.memarc-not-indexed")
            assert await notice.is_visible()
            assert "3 cards of this workspace are not indexed yet" in await notice.inner_text()
            box = await notice.bounding_box()
            assert box["y"] + box["height"] <= height and box["x"] + box["width"] <= width, box
            assert (await page.evaluate(RECALL_SCREEN_JS))["wide"] == []
    assert ids and (OUT / f"explorer-{size}-recall.png").stat().st_size > 10_000


#: the recall page's rank labels, in its order (retrieval member, label)
RANK_LABELS = [("seed_rank", "seed"), ("key_rank", "key"), ("dense_rank", "dense"),
               ("bm25_rank", "bm25"), ("key_bm25_rank", "key bm25"), ("own_rank", "own"),
               ("own_bm25_rank", "own bm25")]


@pytest.mark.parametrize("width,height", SIZES)
async def test_activity_page_wraps_long_details_and_reds_only_failures(make_env, chromium,
                                                                       width, height):
    """The activity page at 1280×800 and 1920×1080 after a request rejected with a 5,000-
    character session id (its detail holds an unbroken word of hundreds of characters) and an applied review: the table
    does not scroll sideways, the detail cell wraps inside the window, and only the rejected
    outcome is drawn in the failure colour (an applied review is a success)."""
    size = f"{width}x{height}"
    OUT.mkdir(exist_ok=True)
    sessions = "/api/workspaces/acme/sessions"
    proposal = {"key": "k1", "kind": "addition", "decisions": [{"id": "d", "status": "approved"}],
                "family": "sql_rule", "title": "Fiscal year", "content": {"rule": "April 1st."}}
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme", "memory.manage", "memory.propose", "memory.review")
        r = await env.client.post(f"{sessions}/{'x' * 5000}/proposals",
                                  json={"proposals": [proposal]}, headers=h)
        assert r.status_code in (400, 422), r.text[:300]
        r = await env.client.post(f"{sessions}/s1/proposals", json={"proposals": [proposal]},
                                  headers=h)
        assert r.status_code == 201, r.text
        r = await env.client.post(f"{sessions}/s1/review", headers=h, json={
            "review_id": "r1", "selected": [{"key": "k1"}]})
        assert r.status_code == 200, r.text
        async with explorer_page(env, chromium, width, height) as (page, base):
            await page.goto(f"{base}/-/memory/acme/-/activity")
            await page.screenshot(path=str(OUT / f"explorer-{size}-activity.png"), full_page=True)
            screen = await page.evaluate(SIDEWAYS_JS)
            assert screen["table"] <= screen["wrapper"] and screen["page"] <= width, screen
            cells = await page.evaluate("""() => [...document.querySelectorAll(
                'table.rows-and-columns tbody tr')].map(tr => ({
                  outcome: tr.querySelector('td.col-outcome').innerText.trim(),
                  colour: getComputedStyle(tr.querySelector('td.col-outcome')).color,
                  detail: tr.querySelector('td.col-detail').innerText.length,
                  detail_width: tr.querySelector('td.col-detail').clientWidth,
                  right: tr.querySelector('td.col-detail').getBoundingClientRect().right}))""")
            outcomes = {c["outcome"]: c["colour"] for c in cells}
            assert "applied" in outcomes and any(o.startswith("rejected") for o in outcomes), cells
            failed = {c for o, c in outcomes.items() if o.startswith("rejected")}
            assert outcomes["applied"] not in failed, outcomes
            long_detail = max(cells, key=lambda c: c["detail"])
            assert long_detail["detail"] >= 500 and long_detail["right"] <= width, long_detail
            # and wide enough to read: at least 18 em of the page's 16 px font
            assert long_detail["detail_width"] >= 280, long_detail
