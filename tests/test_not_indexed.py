"""A recall says how many of the workspace's cards are not indexed yet (issue 26): while cards
wait for their projection, ``not_indexed`` counts them (before the first card is indexed too),
the CLI warns on stderr, and the figure is 0 once the worker has indexed them. Real writer,
PostgreSQL, Redis, worker, index and model."""

from __future__ import annotations

import asyncio
import json

from helpers import live_writer

MEM = "/api/workspaces/acme/memory"


def _card(n: int) -> dict:
    return {"family": "sql_rule", "title": f"Refund rule {n}",
            "content": {"rule": f"Refunds of kind {n} are stored as negative amounts."}}


async def _recall(env, headers) -> dict:
    r = await env.client.post(f"{MEM}/search", headers=headers,
                              json={"query": "negative refunds", "top": 10})
    assert r.status_code == 200, r.text
    return r.json()


async def test_a_recall_counts_the_cards_not_indexed_yet(make_env, monkeypatch, capsys):
    from writer.cli import main

    async with live_writer(make_env, monkeypatch) as env:
        h = env.token("acme")
        for n in range(2):  # saved, no worker yet: no collection either
            assert (await env.client.post(MEM, headers=h, json=_card(n))).status_code == 201
        first = await _recall(env, h)
        assert (first["results"], first["not_indexed"]) == ([], 2), first
        await env.drain()
        indexed = await _recall(env, h)
        assert len(indexed["results"]) == 2 and indexed["not_indexed"] == 0, indexed
        for n in range(2, 5):  # three more while the worker is away
            assert (await env.client.post(MEM, headers=h, json=_card(n))).status_code == 201
        partial = await _recall(env, h)
        assert len(partial["results"]) == 2 and partial["not_indexed"] == 3, partial
        # the CLI prints the answer on stdout and the warning on stderr
        capsys.readouterr()
        code = await asyncio.to_thread(main, ["search", "negative refunds", "--workspace", "acme"])
        out = capsys.readouterr()
        assert code == 0 and json.loads(out.out)["not_indexed"] == 3
        warning = json.loads(out.err.strip().splitlines()[-1])
        assert warning["not_indexed"] == 3 and "not indexed yet" in warning["warning"], warning
        await env.drain()
        assert (await _recall(env, h))["not_indexed"] == 0
        capsys.readouterr()
        code = await asyncio.to_thread(main, ["search", "negative refunds", "--workspace", "acme"])
        assert code == 0 and "not indexed" not in capsys.readouterr().err
