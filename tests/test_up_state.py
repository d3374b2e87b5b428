"""State that `memarc up` keeps across restarts: the explorer's signing secret and a single live
demo token."""

from __future__ import annotations

import stat

import pytest

from shared.config import load_settings
from shared.store.bootstrap import revoke_labelled_tokens
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
    card directly nor apply its own proposals; all three are revoked by the next start."""
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
        # the next start revokes both
        second = demo_token(env.settings, "bird")
        for h in (agent, reviewer, manager):
            r = await env.client.get("/api/workspaces/bird/memory/status", headers=h)
            assert r.status_code == 401, r.text
        assert second["token"] != first["token"]
