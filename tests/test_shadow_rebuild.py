"""Safe model changes (issue 34 item 4, docs/evaluation.md "Changing the model safely"): a shadow
rebuild with another dense model folder, evaluated against the serving index on the same cases
before it is switched in, a worse one declined, a forced switch, and the switch back to the
kept previous index. Real PostgreSQL, Redis, worker, index engine and model (copies of the
model folder: the same files and one more, so another fingerprint and the same vectors; or a
tokenizer that keeps 4 tokens of every text, so a worse model).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

from helpers import live_writer, run_cli
from test_evaluations import BASE, _archive, bird_subset, settle

MODEL = Path(os.environ.get("MEMARC_DENSE_MODEL_PATH", "../shared/models/all-MiniLM-L6-v2-onnx"))
QUERY = {"query": "superheroes with blue eyes", "top": 5, "mode": "search"}


def model_copy(root: Path, name: str, max_tokens: int | None = None) -> Path:
    """``root/name``: the model's files linked, plus a note (another folder digest, so another
    fingerprint); with ``max_tokens`` a tokenizer configuration that truncates every text
    there (the same weights, a worse model)."""
    folder = root / name
    folder.mkdir(parents=True)
    for f in MODEL.resolve().iterdir():
        if max_tokens is not None and f.name == "tokenizer_config.json":
            config = json.loads(f.read_text())
            (folder / f.name).write_text(json.dumps({**config, "model_max_length": max_tokens}))
        else:
            (folder / f.name).symlink_to(f)
    (folder / "NOTE").write_text(f"a copy for the shadow rebuild test: {name}\n")
    return folder


async def _state(env, h) -> dict:
    r = await env.client.get(f"{BASE}/index/collections", headers=h)
    assert r.status_code == 200, r.text
    return r.json()


async def _top(env, h) -> list[str]:
    r = await env.client.post(f"{BASE}/search", headers=h, json=QUERY)
    assert r.status_code == 200, r.text
    return [x["card"]["id"] for x in r.json()["results"]]


async def _rebuild_while_recalling(env, h) -> list[list[str]]:
    """Drain the queue (the shadow rebuild and its gate) while recall is asked again and again;
    returns every answer's top cards (each one a 200, or the test fails)."""
    answers: list[list[str]] = []
    work = asyncio.create_task(settle(env))
    while not work.done():
        answers.append(await _top(env, h))
        await asyncio.sleep(0.05)
    await work
    answers.append(await _top(env, h))
    return answers


async def test_a_shadow_model_is_switched_in_after_its_evaluation_and_switched_back(
        make_env, tmp_path):
    root = tmp_path / "models"
    copy = model_copy(root, "copy")
    async with make_env(model_root=str(root)) as env:
        env.no_automatic_evaluations()  # the runs here are the gate's
        h = await _archive(env)
        before = await _state(env, h)
        assert before["previous"] is None and before["current"]["model_path"] is None
        served = await _top(env, h)

        # a folder outside the model root, or none at all: refused, nothing queued
        for body in ({"shadow": {"model_path": str(MODEL.resolve())}},
                     {"shadow": {"model_path": "../../etc"}}, {"shadow": {}},
                     {"shadow": {"model_path": "copy", "extra": 1}},
                     # a name the file system cannot hold: a 422 naming the field, not a 500
                     {"shadow": {"model_path": "co\u0000py"}}, {"shadow": {"model_path": "a" * 300}}):
            r = await env.client.post(f"{BASE}/index", headers=h, json=body)
            assert r.status_code in (400, 422), (body, r.text)
        for path in ("co\u0000py", "a" * 300):
            r = await env.client.post(f"{BASE}/index", headers=h, json={"shadow": {"model_path": path}})
            assert r.json()["field"] == "shadow.model_path", r.text
        r = await env.client.post(f"{BASE}/index/switch-back", headers=h, json={"bogus": 1})
        assert r.status_code == 400, r.text  # a member it would ignore, before any other check
        assert env.scalar("SELECT count(*) FROM memory.index_rebuilds") == 0

        r = await env.client.post(f"{BASE}/index", headers=h,
                                  json={"shadow": {"model_path": "copy"}})
        assert r.status_code == 202, r.text
        queued = r.json()
        assert queued["shadow"]["dense_model_path"] == str(copy.resolve())
        answers = await _rebuild_while_recalling(env, h)
        assert len(answers) >= 2 and all(a == served for a in answers)  # the same vectors

        done = (await env.client.get(f"{BASE}/index/{queued['id']}", headers=h)).json()
        assert done["status"] == "done", done
        verdict = done["summary"]["evaluation"]
        assert verdict["switch"] is True and verdict["regressed"] == []
        assert done["summary"]["kept"] == before["current"]["collection"]
        runs = {r["id"]: r for r in (await env.client.get(f"{BASE}/evaluations", headers=h)).json()["runs"]}
        baseline, candidate = runs[verdict["baseline"]], runs[verdict["candidate"]]
        assert baseline["candidate"] is None and baseline["trigger"] == "shadow"
        assert candidate["candidate"] == done["collection"]
        assert candidate["compared_with"] == baseline["id"]
        assert candidate["fingerprint"] != baseline["fingerprint"]  # the copy's fingerprint
        assert [f["r3"] for f in candidate["figures"]] == [f["r3"] for f in baseline["figures"]]

        after = await _state(env, h)
        assert after["current"] == {"collection": done["collection"], "model_path": str(copy.resolve()),
                                    "model": before["current"]["model"]}
        assert after["previous"]["collection"] == before["current"]["collection"]
        # the switch came after the candidate's evaluation
        finished = env.scalar("SELECT finished_at FROM memory.eval_runs WHERE id = %s",
                              verdict["candidate"])
        switched = env.scalar("SELECT switched_at FROM memory.index_collections")
        assert finished < switched
        # cards written now are projected with the new model into the new collection
        r = await env.client.post(BASE, headers=h, json={
            "family": "domain_clarification", "title": "Cerulean hero",
            "content": {"definition": "A cerulean hero is a superhero whose eye colour is "
                        "blue, as the colour table names it."},
            "dependencies": [{"database": "superhero"}]})
        assert r.status_code == 201, r.text
        added = r.json()["card"]["id"]
        await settle(env)
        audit = (await env.client.get(f"{BASE}/audit", headers=h)).json()
        assert audit["missing"] == audit["stale"] == audit["orphan"] == [], audit

        # the switch back restores the kept collection with its model, and re-embeds only
        # what changed since (the new card, and the cards whose texts changed with it)
        r = await env.client.post(f"{BASE}/index/switch-back", headers=h)
        assert r.status_code == 202, r.text
        answers = await _rebuild_while_recalling(env, h)
        back = (await env.client.get(f"{BASE}/index/{r.json()['id']}", headers=h)).json()
        assert back["status"] == "done", back
        assert back["collection"] == before["current"]["collection"]
        cards = back["summary"]["cards"]
        assert 0 < back["summary"]["reused"] < cards  # kept points; the new card is not one
        state = await _state(env, h)
        assert state["current"] == before["current"]
        assert state["previous"]["collection"] == done["collection"]
        audit = (await env.client.get(f"{BASE}/audit", headers=h)).json()
        assert audit["missing"] == audit["stale"] == audit["orphan"] == [], audit
        found = await env.client.post(f"{BASE}/search", headers=h, json={
            "query": "cerulean hero", "top": 3, "mode": "search"})
        assert added in [x["card"]["id"] for x in found.json()["results"]]

        # the previous index can be dropped once; then there is nothing to switch back to
        r = await env.client.delete(f"{BASE}/index/previous", headers=h)
        assert r.status_code == 200 and r.json()["previous"] is None, r.text
        for method, path in (("DELETE", "/index/previous"), ("POST", "/index/switch-back")):
            r = await env.client.request(method, f"{BASE}{path}", headers=h)
            assert r.status_code == 409 and r.json()["code"] == "no_previous_index", r.text
        assert await env.resources.index.check_collection(
            "acme", env.resources.embedder.layout("en", model=(
                before["current"]["model"], str(copy.resolve()))),
            collection=done["collection"]) is None


async def test_a_worse_shadow_model_is_declined_unless_forced(make_env, tmp_path):
    root = tmp_path / "models"
    worse = model_copy(root, "worse", max_tokens=4)
    async with make_env(model_root=str(root)) as env:
        env.no_automatic_evaluations()  # the runs here are the gate's
        h = await _archive(env)
        before = await _state(env, h)
        served = await _top(env, h)
        r = await env.client.post(f"{BASE}/index", headers=h,
                                  json={"shadow": {"model_path": str(worse)}})
        assert r.status_code == 202, r.text
        answers = await _rebuild_while_recalling(env, h)
        assert all(a == served for a in answers)
        declined = (await env.client.get(f"{BASE}/index/{r.json()['id']}", headers=h)).json()
        assert declined["status"] == "declined", declined
        verdict = declined["summary"]["evaluation"]
        assert verdict["switch"] is False and verdict["regressed"]
        assert all(t["regression"] and t["lost"] > t["gained"] for t in verdict["regressed"])
        assert await _state(env, h) == before  # nothing switched, nothing kept
        activity = (await env.client.get(f"{BASE}/activity", headers=h,
                                         params={"verb": "index", "outcome": "declined"})).json()
        assert activity["total"] == 1
        # the declined candidate is no comparison base, and no regression of the workspace
        runs = (await env.client.get(f"{BASE}/evaluations", headers=h)).json()["runs"]
        assert [r["candidate"] is not None for r in runs].count(True) == 1
        assert not any(r["regression"] for r in runs if r["candidate"] is None)

        # forced: switched in without a gate, the old index kept for a switch back
        r = await env.client.post(f"{BASE}/index", headers=h,
                                  json={"shadow": {"model_path": str(worse), "force": True}})
        assert r.status_code == 202, r.text
        await settle(env)
        forced = (await env.client.get(f"{BASE}/index/{r.json()['id']}", headers=h)).json()
        assert forced["status"] == "done" and forced["summary"]["evaluation"] is None, forced
        state = await _state(env, h)
        assert state["current"]["model_path"] == str(worse.resolve())
        assert state["previous"]["collection"] == before["current"]["collection"]
        assert await _top(env, h) != served  # four tokens a text rank otherwise
        r = await env.client.post(f"{BASE}/index/switch-back", headers=h)
        assert r.status_code == 202
        await settle(env)
        assert (await _state(env, h))["current"] == before["current"]
        assert await _top(env, h) == served

        # dropping the workspace's index (what a workspace deletion's sweep does) drops the
        # kept previous one too, and no other workspace's
        other = await env.resources.index.ensure_collection("acme__x", env.resources.embedder.layout("en"))
        state = await _state(env, h)
        kept = state["previous"]["collection"]
        layouts = {kept: env.resources.embedder.layout("en", model=(
            state["previous"]["model"], str(worse.resolve()))),
            state["current"]["collection"]: env.resources.embedder.layout("en")}
        await env.resources.index.drop("acme")
        for collection, layout in layouts.items():
            assert await env.resources.index.check_collection(
                "acme", layout, collection=collection) is None
        assert await env.resources.index.check_collection(
            "acme__x", env.resources.embedder.layout("en"), collection=other) == other


async def test_the_cli_changes_the_model_through_the_shadow_path(make_env, monkeypatch, capsys,
                                                              tmp_path):
    root = tmp_path / "models"
    copy = model_copy(root, "copy")
    async with live_writer(make_env, monkeypatch, settings={"model_root": str(root)}) as env:
        env.no_automatic_evaluations()  # the runs here are the gate's
        h = env.token("acme")
        r = await env.client.post(f"{BASE}/import", content=bird_subset("debit_card_specializing"),
                                  headers={**h, "Content-Type": "application/x-ndjson"})
        assert r.status_code == 201
        await env.drain()
        code, out, err = await run_cli(capsys, "index", "--workspace", "acme", "--model", "x")
        assert code == 2 and out is None and "--shadow" in err  # --model without --shadow
        code, before, _ = await run_cli(capsys, "index", "--workspace", "acme", "--state")
        assert code == 0 and before["previous"] is None
        async with env.running_worker():
            code, row, err = await run_cli(capsys, "index", "--workspace", "acme", "--shadow",
                                           "--model", str(copy))
            assert code == 0, err
            assert row["status"] == "done" and row["summary"]["evaluation"]["switch"] is True
            code, state, _ = await run_cli(capsys, "index", "--workspace", "acme", "--state")
            assert state["current"]["model_path"] == str(copy.resolve())
            assert state["previous"]["collection"] == before["current"]["collection"]
            code, row, err = await run_cli(capsys, "index", "--workspace", "acme",
                                           "--switch-back")
            assert code == 0 and row["status"] == "done", err
        code, state, _ = await run_cli(capsys, "index", "--workspace", "acme", "--drop-previous")
        assert code == 0 and state["current"] == before["current"] and state["previous"] is None


async def test_the_administration_changes_the_model_and_switches_back(make_env, tmp_path):
    """The evaluation page shows the index and model recall serves; its shadow form (CSRF)
    refuses a folder outside the model root as typed and queues a good one; once switched,
    the page shows the previous index with Switch back and Drop, which work."""
    import html
    import re

    from admin_helpers import csrf, sign_in

    root = tmp_path / "models"
    copy = model_copy(root, "copy")
    async with make_env(model_root=str(root)) as env:
        env.no_automatic_evaluations()  # the runs here are the gate's
        h = await _archive(env)
        before = await _state(env, h)
        await sign_in(env.client, h)
        page_url = "/admin/workspaces/acme/evaluations"
        page = await env.client.get(page_url)
        text = html.unescape(page.text)
        assert "Index and model" in text and before["current"]["collection"] in text
        assert "(the configured one)" in text and "Previous index" in text
        assert f"A folder under {root.resolve()}" in re.sub(r"<[^>]+>", "", text)
        assert "Switch back to the previous index" not in text  # nothing kept yet
        token = await csrf(env.client, page_url)
        shadow = "/admin/workspaces/acme/index/shadow"
        r = await env.client.post(shadow, data={"model_path": "copy", "_csrf_token": ""})
        assert r.status_code == 403
        r = await env.client.post(shadow, data={"model_path": "/etc", "_csrf_token": token})
        assert r.status_code == 422 and "Not queued: nothing was written" in r.text
        assert 'value="/etc"' in r.text and "under the model root" in r.text
        # the API's bounds hold for the form too: a page, not a 500
        for path in ("x" * 100_000, "a" * 300):
            r = await env.client.post(shadow, data={"model_path": path, "_csrf_token": token})
            assert r.status_code == 422 and "Not queued: nothing was written" in r.text, path[:9]
            assert r.headers["content-type"].startswith("text/html")
        assert env.scalar("SELECT count(*) FROM memory.index_rebuilds") == 0
        r = await env.client.post(shadow, data={"model_path": "copy", "_csrf_token": token})
        assert r.status_code == 303 and "index=shadow" in r.headers["location"]
        assert "Shadow rebuild queued" in (await env.client.get(r.headers["location"])).text
        await settle(env)
        text = html.unescape((await env.client.get(page_url)).text)
        assert str(copy.resolve()) in text and "Latest rebuild" in text
        assert "done (shadow)" in text and "shadow index not worse" in text
        assert "Switch back to the previous index" in text
        token = await csrf(env.client, page_url)
        r = await env.client.post("/admin/workspaces/acme/index/switch-back",
                                  data={"_csrf_token": token})
        assert r.status_code == 303 and "index=back" in r.headers["location"]
        await settle(env)
        assert (await _state(env, h))["current"] == before["current"]
        r = await env.client.post("/admin/workspaces/acme/index/drop-previous",
                                  data={"_csrf_token": token})
        assert r.status_code == 303 and "index=dropped" in r.headers["location"]
        assert (await _state(env, h))["previous"] is None
        r = await env.client.post("/admin/workspaces/acme/index/drop-previous",
                                  data={"_csrf_token": token})
        assert "index=none" in r.headers["location"]
        assert "There is no previous index" in (await env.client.get(r.headers["location"])).text
