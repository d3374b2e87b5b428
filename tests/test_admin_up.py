"""``memarc up --demo`` and the administration (issue 24): it prints the administration's URL and
a one-time sign-in link next to the explorer's, the link signs a browser in, and the explorer's
card page links to the card's administration page (and back)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import httpx
from admin_helpers import CSRF_RE
from helpers import ROOT, free_port, stop_process
from test_outages import _up_env, _wait_for


def test_memarc_up_demo_prints_the_administration_and_a_sign_in_link(fresh_db, redis_url,
                                                                     tmp_path):
    cards = tmp_path / "cards.jsonl"
    cards.write_text("\n".join(json.dumps(line) for line in (
        {"key": "k1", "family": "sql_rule", "title": "Refunds are negative",
         "content": {"rule": "Refunds are stored as negative amounts."}},
        {"key": "k2", "family": "domain_clarification", "title": "Active customer",
         "content": {"definition": "A customer with an order in the last 90 days."}})) + "\n")
    port, explorer_port = free_port(), free_port()
    log = tmp_path / "up.log"
    env_vars = _up_env(tmp_path, MEMARC_DATABASE_URL=fresh_db,
                       MEMARC_MIGRATOR_DATABASE_URL=fresh_db, MEMARC_REDIS_URL=redis_url)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "writer.cli", "up", "--demo", "--workspace", "acme",
             "--cards", str(cards), "--port", str(port), "--explorer-port", str(explorer_port)],
            cwd=ROOT, env=env_vars, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        _wait_for("the demo ready", lambda: '"demo_ready": true' in log.read_text(), 180, proc, log)
        printed = log.read_text()
        admin = json.loads(re.search(r'"admin": (".*?")', printed).group(1))
        link = json.loads(re.search(r'"admin_sign_in": (".*?")', printed).group(1))
        assert admin == f"http://127.0.0.1:{port}/admin"
        assert link.startswith(f"{admin}/sign-in/link?code=")
        with httpx.Client(timeout=30) as browser:
            page = browser.get(link)
            assert page.status_code == 200
            token = CSRF_RE.search(page.text).group(1)
            code = link.split("code=", 1)[1]
            r = browser.post(f"{admin}/sign-in/link", data={"code": code, "_csrf_token": token})
            assert r.status_code == 303 and r.headers["location"] == "/admin/workspaces/acme/cards"
            cards_page = browser.get(f"{admin}/workspaces/acme/cards")
            assert "2 cards" in cards_page.text and "Refunds are negative" in cards_page.text
            explorer_url = f"http://127.0.0.1:{explorer_port}/-/memory"
            assert f'href="{explorer_url}"' in cards_page.text  # the administration links there
            card_id = re.search(r'/admin/workspaces/acme/cards/(mem-[0-9a-f-]+)"',
                                cards_page.text).group(1)
            # the explorer (signed in as root by its own link) links the card to its edit page
            sign_in = json.loads(re.search(r'"explorer_sign_in": (".*?")', printed).group(1))
            assert browser.get(sign_in).status_code in (200, 302)
            explorer_card = browser.get(f"{explorer_url}/acme/{card_id}")
            assert explorer_card.status_code == 200
            assert f'href="{admin}/workspaces/acme/cards/{card_id}">Edit</a>' in explorer_card.text
            # a second use of the link signs nobody in
            r = browser.post(f"{admin}/sign-in/link", data={"code": code, "_csrf_token": token})
            assert r.status_code == 401
            # ... and the page says how to sign in instead: the token form, and the command
            assert "Sign in below with an API token of the workspace" in r.text
            assert 'name="token"' in r.text and "memarc sign-in-link --workspace W" in r.text
        # issue 26: a new explorer link for the running instance, by the printed command, while
        # the explorer's first link is used up and the API tokens stay valid
        commands = json.loads(re.search(r'"new_sign_in_links": (\{.*?\})', printed,
                                        re.S).group(1))
        explorer_base = f"http://127.0.0.1:{explorer_port}"
        assert commands["explorer"].endswith(f"explorer-sign-in-link --url {explorer_base}")
        assert commands["admin"].endswith(
            f"sign-in-link --workspace acme --url http://127.0.0.1:{port}")
        with httpx.Client(timeout=30) as other:
            used = other.get(sign_in)
            assert used.status_code == 401 and "already been used" in used.text
            assert f"memarc explorer-sign-in-link --url {explorer_base}" in used.text
            for _ in range(2):
                done = subprocess.run(["bash", "-c", commands["explorer"]], cwd="/",
                                      env=env_vars, capture_output=True, text=True, timeout=60)
                assert done.returncode == 0, done.stderr
                new_link = json.loads(done.stdout)["explorer_sign_in"]
                assert new_link.startswith(f"{explorer_base}/-/memory/sign-in?ticket=")
                r = other.get(new_link)
                assert r.status_code == 302 and "ds_actor" in r.cookies
                listing = other.get(f"{explorer_base}/-/memory.json")
                assert [w["id"] for w in listing.json()["workspaces"]] == ["acme"]
                other.cookies.clear()
            assert other.get(new_link).status_code == 401  # each new link works once too
            demo_token = json.loads(re.search(r'"manage_token": (".*?")', printed).group(1))
            api = other.get(f"http://127.0.0.1:{port}/api/workspaces/acme/memory",
                            headers={"Authorization": f"Bearer {demo_token}"})
            assert api.status_code == 200  # no token was revoked
        _check_the_ready_block(log, proc, admin, port)
    finally:
        stop_process(proc)


def test_memarc_explorer_alone_signs_in_with_links_issued_again(fresh_db, tmp_path):
    """``memarc explorer`` by itself (as compose runs it) keeps its secret in the data dir, so
    ``memarc explorer-sign-in-link`` on the same machine signs browsers in to it, once per link,
    without a restart."""
    port = free_port()
    log = tmp_path / "explorer.log"
    env_vars = _up_env(tmp_path, MEMARC_DATABASE_URL=fresh_db,
                       MEMARC_MIGRATOR_DATABASE_URL=fresh_db)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "writer.cli", "explorer", "--port", str(port)],
            cwd=ROOT, env=env_vars, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        printed = _wait_for("the explorer's links", lambda: re.search(
            r'\{"explorer".*\}', log.read_text()), 120, proc, log).group(0)
        links = json.loads(printed)
        assert links["new_sign_in_link"] == f"memarc explorer-sign-in-link --url {base}"
        _wait_for("the explorer answering",
                  lambda: httpx.get(f"{base}/-/memory").status_code == 200, 60, proc, log)
        urls = [links["sign_in"]]
        for _ in range(2):
            done = subprocess.run(
                [sys.executable, "-m", "writer.cli", *shlex.split(links["new_sign_in_link"])[1:]],
                cwd=ROOT, env=env_vars, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
            urls.append(json.loads(done.stdout)["explorer_sign_in"])
        for url in urls:
            assert url.startswith(f"{base}/-/memory/sign-in?ticket=")
            with httpx.Client(timeout=30) as browser:
                assert browser.get(url).status_code == 302
                assert browser.get(f"{base}/-/memory.json").status_code == 200
                assert "ds_actor" in browser.cookies
                used = browser.get(url)
                assert used.status_code == 401 and links["new_sign_in_link"] in used.text
    finally:
        stop_process(proc)


def _check_the_ready_block(log, proc, admin: str, port: int) -> None:
    """Issue 26: once the cards are indexed, ``memarc up --demo`` prints where everything is,
    the tokens again and a fresh sign-in link, and its copy-paste lines work as printed: the
    environment line and a ``memarc`` recall in a shell, and the curl recall."""
    _wait_for("the ready block", lambda: "Try it (another terminal):" in log.read_text(), 60,
              proc, log)
    block = log.read_text().split('"demo_ready": true', 1)[1]
    lines = block.splitlines()
    fresh = re.search(r"sign in +(http\S+/admin/sign-in/link\?code=\S+)", block).group(1)
    with httpx.Client(timeout=30) as browser:  # a fresh, unused link
        page = browser.get(fresh)
        token = CSRF_RE.search(page.text).group(1)
        r = browser.post(f"{admin}/sign-in/link", data={"code": fresh.split("code=", 1)[1],
                                                        "_csrf_token": token})
        assert r.status_code == 303, r.text
    export = next(x.strip() for x in lines if x.strip().startswith("export PATH="))
    assert f"MEMARC_URL=http://127.0.0.1:{port}" in export
    shell = subprocess.run(["bash", "-c", f'{export}\nmemarc search "negative refunds" '
                            "--workspace acme"], capture_output=True, text=True, timeout=120,
                           env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert shell.returncode == 0, shell.stderr
    assert [x["card"]["title"] for x in json.loads(shell.stdout)["results"]][0] == \
        "Refunds are negative"
    start = next(i for i, x in enumerate(lines) if x.strip().startswith("curl -s -X POST"))
    curl = "\n".join(lines[start:start + 3])
    answer = subprocess.run(["bash", "-c", curl], capture_output=True, text=True, timeout=60)
    assert answer.returncode == 0 and "results" in json.loads(answer.stdout), answer
