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
