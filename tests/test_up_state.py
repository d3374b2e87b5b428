"""State that `memarc up` keeps across restarts: the explorer's signing secret and a single live
set of demo tokens, the same at every start on one data directory while none is revoked."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from shared.config import load_settings
from shared.store.bootstrap import revoke_labelled_tokens, revoke_token
from writer.demo import DEMO_TOKEN_LABEL
from writer.serving import explorer_app, explorer_secret


def test_the_explorer_secret_survives_a_restart_and_is_private(tmp_path):
    settings = load_settings({}, data_dir=str(tmp_path / "state"))
    first = explorer_secret(settings)
    assert len(first) == 64 and explorer_secret(settings) == first
    path = tmp_path / "state" / "explorer_secret"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # a cookie signed by one start is read by the next
    a = explorer_app(settings, None, {}, secret=first)
    b = explorer_app(settings, None, {}, secret=explorer_secret(settings))
    cookie = a.sign({"a": {"id": "root"}}, "actor")
    assert b.unsign(cookie, "actor") == {"a": {"id": "root"}}
    # without the kept secret (a fresh random one, as Datasette draws by default) it is refused
    from itsdangerous import BadSignature

    with pytest.raises(BadSignature):
        explorer_app(settings, None, {}).unsign(cookie, "actor")


async def test_a_new_demo_start_revokes_the_previous_demo_token(make_env):
    async with make_env() as env:
        env.workspace("bird")
        old = env.token("bird", "memory.manage", label=DEMO_TOKEN_LABEL)
        other = env.token("bird", "memory.manage", label="analyst")
        base = "/api/workspaces/bird/memory"
        assert (await env.client.get(f"{base}/status", headers=old)).status_code == 200
        assert revoke_labelled_tokens(env.migrator_url, "memory", "bird", DEMO_TOKEN_LABEL) == 1
        r = await env.client.get(f"{base}/status", headers=old)
        assert r.status_code == 401 and r.json()["code"] == "unauthorized", r.text
        assert (await env.client.get(f"{base}/status", headers=other)).status_code == 200
        assert revoke_labelled_tokens(env.migrator_url, "memory", "bird", DEMO_TOKEN_LABEL) == 0


async def test_the_demo_tokens_keep_the_reviewer_gate(make_env):
    """`memarc up --demo` prints the assistant's token (read + propose), the administrator's
    (manage) and the reviewer's (review), least privilege: the assistant can neither write a
    card directly nor apply its own proposals."""
    from writer.demo import demo_token

    async with make_env() as env:
        first = demo_token(env.settings, "bird")
        tokens = (first, first["review_token"], first["manage_token"])
        assert [t["permissions"] for t in tokens] == [["memory.propose", "memory.read"],
                                                      ["memory.review"], ["memory.manage"]]
        assert all("warning" not in t for t in tokens)
        agent, reviewer, manager = ({"Authorization": f"Bearer {t['token']}"} for t in tokens)
        card = {"family": "sql_rule", "title": "Net revenue",
                "content": {"rule": "Exclude refunds from revenue."}}
        r = await env.client.post("/api/workspaces/bird/memory", headers=agent, json=card)
        assert r.status_code == 403 and r.json()["code"] == "forbidden", r.text
        r = await env.client.post("/api/workspaces/bird/memory/search", headers=agent,
                                  json={"query": "revenue"})
        assert r.status_code != 403, r.text  # the assistant recalls
        session = "/api/workspaces/bird/sessions/demo"
        proposal = {"key": "k", "decisions": [{"id": "d", "status": "approved"}],
                    "family": "sql_rule", "title": "Net revenue",
                    "content": {"rule": "Exclude refunds from revenue."}}
        r = await env.client.post(f"{session}/proposals", headers=agent,
                                  json={"proposals": [proposal]})
        assert r.status_code == 201, r.text
        review = {"review_id": "rv", "selected": [{"key": "k"}]}
        r = await env.client.post(f"{session}/review", headers=agent, json=review)
        assert r.status_code == 403 and r.json()["code"] == "forbidden", r.text
        r = await env.client.post(f"{session}/proposals", headers=reviewer,
                                  json={"proposals": [proposal]})
        assert r.status_code == 403, r.text
        r = await env.client.post(f"{session}/review", headers=reviewer, json=review)
        assert r.status_code == 200, r.text
        assert (await env.client.get("/api/workspaces/bird/memory/status",
                                     headers=manager)).status_code == 200


async def test_a_restart_prints_the_same_demo_tokens_until_one_is_revoked(make_env):
    """A restart on the same data directory returns the kept tokens (same secrets, ids and
    permissions, still authenticated: never 401); once one of them is revoked (or the kept file names tokens
    this database does not know), the next start revokes the others and keeps three new ones."""
    from writer.demo import DEMO_TOKENS_FILE, demo_token

    status = "/api/workspaces/bird/memory/status"

    def headers(t):
        return {"Authorization": f"Bearer {t['token']}"}

    def tokens(t):
        return [t, t["manage_token"], t["review_token"]]

    async with make_env() as env:
        first = demo_token(env.settings, "bird")
        path = Path(env.settings.data_dir) / DEMO_TOKENS_FILE
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        second = demo_token(env.settings, "bird")
        assert second == first
        for t in tokens(second):
            assert (await env.client.get(status, headers=headers(t))).status_code != 401
        assert env.scalar("SELECT count(*) FROM memory.api_tokens WHERE label = %s",
                          DEMO_TOKEN_LABEL) == 3

        revoke_token(env.migrator_url, "memory", first["review_token"]["id"])
        third = demo_token(env.settings, "bird")
        assert {t["token"] for t in tokens(third)}.isdisjoint(t["token"] for t in tokens(first))
        for t in tokens(first):
            assert (await env.client.get(status, headers=headers(t))).status_code == 401
        for t in tokens(third):
            assert (await env.client.get(status, headers=headers(t))).status_code != 401
        assert demo_token(env.settings, "bird") == third

        # a kept file from another database (its secrets unknown here): three new tokens
        path.write_text(json.dumps({"bird": {"token": "x", "manage_token": "y",
                                             "review_token": "z"}}))
        fourth = demo_token(env.settings, "bird")
        assert fourth["token"] != third["token"]
        assert (await env.client.get(status, headers=headers(third))).status_code == 401
        assert json.loads(path.read_text())["bird"]["token"] == fourth["token"]
