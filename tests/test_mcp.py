"""The MCP server (issue 15), driven by the ``mcp`` SDK's own client (``ClientSession``) over both
transports: streamable HTTP at the writer's ``/mcp`` (uvicorn with the app's lifespan, which runs
the SDK's session manager; the handshake era and the 2026-07-28 era without one) and stdio
(``memarc mcp`` in a child process over the test archive's settings and its embedded index, which
this process closes first).

Per permission: the tools listed, each tool called, its result compared with the HTTP API's
answer to the same request, a card of another workspace ``not_found``, a ``memory.read`` token
that neither sees nor can call ``propose`` (403 ``forbidden``, recorded as the API records it),
and a bad token refused with ``unauthorized``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, Env, model_env, start_server, stop_server
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from writer.app import create_app

API = "/api/workspaces/{}/memory"
#: the tools each permission lists (memory.manage implies memory.read)
TOOLS_OF = {
    "memory.manage": {"search", "rules", "solved", "feedback", "get_card", "list_pending"},
    "memory.read": {"search", "rules", "solved", "feedback"},
    "memory.propose": {"propose"},
}
RECALL_TOOLS = ("search", "rules", "solved")

ELDERLY = {"family": "domain_clarification", "title": "Elderly patients",
           "content": {"definition": "An elderly patient is older than 65: Age > 65."},
           "concepts": ["age"],
           "dependencies": [{"database": "hospital", "schema": "public", "table": "patient"}]}
RULE = {"family": "sql_rule", "title": "Ages from birthdays",
        "content": {"rule": "Compute a patient's age from Birthday with the current date, never "
                            "from a stored age column."},
        "dependencies": [{"database": "hospital", "schema": "public", "table": "patient"}]}
SOLVED = {"family": "solved_question", "title": "How many elderly patients are there?",
          "content": {"question": "How many elderly patients are there?",
                      "sql": "SELECT COUNT(*) FROM patient WHERE Age > 65"},
          "dependencies": [{"database": "hospital", "schema": "public", "table": "patient"}]}
PROPOSAL = {"key": "p1", "kind": "addition", "decisions": [{"id": "d1", "status": "approved"}],
            "family": "sql_rule", "title": "Count distinct patients",
            "content": {"rule": "Count patients with COUNT(DISTINCT ID), never COUNT(*) over "
                                "a join."},
            "rationale": "the user approved it"}
QUERIES = {"search": "what does elderly patient mean", "rules": "how to compute a patient's age",
           "solved": "number of patients older than 65"}


async def _seed(env: Env) -> dict[str, Any]:
    """Workspaces ``acme`` (three projected cards, a linked solved question, one card left
    pending) and ``other`` (one card); a token of each permission; the API's answers."""
    env.workspace("acme")
    env.workspace("other")
    manage = env.token("acme", "memory.manage")
    ids = {}
    for name, body in (("elderly", ELDERLY), ("rule", RULE)):
        r = await env.client.post(API.format("acme"), json=body, headers=manage)
        assert r.status_code == 201, r.text
        ids[name] = r.json()["card"]["id"]
    r = await env.client.post(API.format("acme"), headers=manage, json={
        **SOLVED, "links": [{"target": ids["elderly"], "meaning": "uses the definition"}]})
    ids["solved"] = r.json()["card"]["id"]
    r = await env.client.post(API.format("other"), json=ELDERLY, headers=env.token("other"))
    ids["foreign"] = r.json()["card"]["id"]
    await env.drain()
    r = await env.client.post(API.format("acme"), json={**RULE, "title": "Unprojected"},
                              headers=manage)
    ids["pending"] = r.json()["card"]["id"]  # no worker runs from here on: stays pending
    expected = {}
    for mode, query in QUERIES.items():
        r = await env.client.post(f"{API.format('acme')}/search", headers=manage,
                                  json={"query": query, "mode": mode, "top": 5})
        assert r.status_code == 200, r.text
        expected[mode] = r.json()
        assert expected[mode]["results"], mode
    r = await env.client.get(f"{API.format('acme')}/{ids['solved']}", headers=manage)
    expected["get_card"] = r.json()
    tokens = {p: env.token("acme", p)["Authorization"].split()[1] for p in TOOLS_OF}
    return {"ids": ids, "expected": expected, "tokens": tokens}


def doc(result: Any) -> Any:
    """A tool result's document: sent once, as JSON text, with no structured copy."""
    assert result.structured_content is None and len(result.content) == 1, result
    return json.loads(result.content[0].text)


def same_recall(answer: Any, expected: Any) -> bool:
    """Whether a recall tool's ``answer`` is the API's ``expected`` answer, but for its own
    ``recall_id``: each recall is recorded apart (issue 35), so each has a new one."""
    assert answer["recall_id"] and answer["recall_id"] != expected["recall_id"], answer
    return ({k: v for k, v in answer.items() if k != "recall_id"}
            == {k: v for k, v in expected.items() if k != "recall_id"})


def _problem(exc: pytest.ExceptionInfo[MCPError]) -> dict[str, Any]:
    data = exc.value.error.data
    assert isinstance(data, dict), exc.value
    return data


Connect = Callable[[str], AbstractAsyncContextManager[ClientSession]]


@asynccontextmanager
async def _transport(env: Env, transport: str, tmp_path: Path) -> AsyncIterator[Connect]:
    """``connect(token)`` opening an initialized client session over ``transport``."""
    if transport == "http":
        server, task, url = await start_server(create_app(env.settings, env.resources),
                                               lifespan="on")

        @asynccontextmanager
        async def connect(token: str) -> AsyncIterator[ClientSession]:
            async with (create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
                        as http, streamable_http_client(f"{url}/mcp", http_client=http)
                        as (read, write), ClientSession(read, write) as session):
                await session.initialize()
                yield session

        try:
            yield connect
        finally:
            await stop_server(server, task)
        return
    await env.resources.index.close()  # the child opens the embedded index itself
    s = env.settings
    child_env = {**{k: v for k, v in os.environ.items() if not k.startswith("MEMARC_")},
                 **model_env(), "MEMARC_DATABASE_URL": s.database_url or "",
                 "MEMARC_REDIS_URL": s.redis_url or "", "MEMARC_DATA_DIR": s.data_dir,
                 "MEMARC_INDEX_ENGINE": s.index_engine, "MEMARC_DB_SCHEMA": s.db_schema,
                 "MEMARC_COLLECTION_PREFIX": s.collection_prefix, "MEMARC_LOG_LEVEL": "WARNING"}

    @asynccontextmanager
    async def connect(token: str) -> AsyncIterator[ClientSession]:
        params = StdioServerParameters(command=sys.executable, args=["-m", "writer.cli", "mcp"],
                                       env={**child_env, "MEMARC_TOKEN": token}, cwd=ROOT)
        with open(tmp_path / "mcp-stderr.log", "a") as errlog:
            async with (stdio_client(params, errlog=errlog) as (read, write),
                        ClientSession(read, write) as session):
                await session.initialize()
                yield session

    yield connect


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_mcp_tools_per_permission_over_each_transport(make_env, tmp_path, transport):
    async with make_env() as env:
        seeded = await _seed(env)
        ids, expected, tokens = seeded["ids"], seeded["expected"], seeded["tokens"]
        async with _transport(env, transport, tmp_path) as connect:
            # memory.manage: recall in each mode, a card, the pending operations
            async with connect(tokens["memory.manage"]) as session:
                assert session.initialize_result.server_info.name == "memarc"
                assert session.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS
                tools = {t.name: t for t in (await session.list_tools()).tools}
                assert set(tools) == TOOLS_OF["memory.manage"]
                for tool in tools.values():  # feedback stores a verdict: the one writing tool
                    assert tool.annotations.read_only_hint is (tool.name != "feedback"), tool.name
                    assert tool.input_schema["type"] == "object" and tool.output_schema is None
                assert "not a similarity" in tools["search"].description
                for mode in RECALL_TOOLS:
                    assert "mode" not in tools[mode].input_schema["properties"]
                    assert {"query", "top", "filters", "exclude"} <= set(
                        tools[mode].input_schema["properties"])
                    result = await session.call_tool(mode, {"query": QUERIES[mode], "top": 5})
                    assert not result.is_error
                    # the same verified cards, scores and retrieval explanation as POST /search
                    assert same_recall(doc(result), expected[mode]), mode
                found = {r["card"]["id"] for r in expected["search"]["results"]}
                assert ids["elderly"] in found and ids["foreign"] not in found
                solved = [r["card"]["id"] for r in expected["solved"]["results"]]
                assert solved == [ids["solved"]]  # the mode's family only
                filtered = await session.call_tool("search", {
                    "query": QUERIES["search"], "filters": {"database": "shop"}})
                assert ids["elderly"] not in {r["card"]["id"]
                                              for r in doc(filtered)["results"]}
                card = await session.call_tool("get_card", {"card_id": ids["solved"].upper()})
                assert doc(card) == expected["get_card"]
                pending = await session.call_tool("list_pending", {"limit": 10})
                assert [op["card_id"] for op in doc(pending)["operations"]] \
                    == [ids["pending"]] and doc(pending)["total"] == 1
                # errors carry the API's problem code
                for card_id in (ids["foreign"], "not-a-card-id"):
                    with pytest.raises(MCPError) as exc:
                        await session.call_tool("get_card", {"card_id": card_id})
                    assert _problem(exc)["code"] == "not_found" and _problem(exc)["status"] == 404
                for bad in ({"query": "x", "top": 0}, {"query": "x", "mode": "solved"}, {}):
                    with pytest.raises(MCPError) as exc:
                        await session.call_tool("search", bad)
                    assert _problem(exc)["code"] == "invalid_input", bad
                    assert exc.value.error.code == -32602  # JSON-RPC invalid params
                with pytest.raises(MCPError) as exc:
                    await session.call_tool("propose", {"session": "s1",
                                                        "proposals": [PROPOSAL]})
                assert _problem(exc)["code"] == "forbidden"

            # memory.read: recall only; propose is neither listed nor allowed
            async with connect(tokens["memory.read"]) as session:
                tools = {t.name for t in (await session.list_tools()).tools}
                assert tools == TOOLS_OF["memory.read"]
                result = await session.call_tool("rules", {"query": QUERIES["rules"], "top": 5})
                assert same_recall(doc(result), expected["rules"])
                # feedback on that recall's first card (issue 35): stored, then replaced
                recall_id, first = doc(result)["recall_id"], doc(result)["results"][0]["card"]
                for verdict, change in (("helpful", "created"), ("wrong", "updated")):
                    out = doc(await session.call_tool("feedback", {
                        "recall_id": recall_id, "cards": [
                            {"card_id": first["id"], "verdict": verdict, "note": "via MCP"}]}))
                    assert out["recall_id"] == recall_id
                    assert [(c["card_id"], c["verdict"], c["via"], c["change"])
                            for c in out["cards"]] == [(first["id"], verdict, "mcp", change)]
                with pytest.raises(MCPError) as exc:  # a card that recall did not return
                    await session.call_tool("feedback", {"recall_id": recall_id, "cards": [
                        {"card_id": ids["foreign"], "verdict": "helpful"}]})
                assert _problem(exc)["code"] == "invalid_input"
                assert _problem(exc)["field"] == "cards[0].card_id"
                for name, args in (("propose", {"session": "s1", "proposals": [PROPOSAL]}),
                                   ("get_card", {"card_id": ids["solved"]})):
                    with pytest.raises(MCPError) as exc:
                        await session.call_tool(name, args)
                    assert _problem(exc)["code"] == "forbidden", name
                    assert _problem(exc)["status"] == 403
                assert _problem(exc)["permissions"] == ["memory.manage"]
            # the refused proposal is in the activity log, as the API records it
            assert env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'propose' "
                              "AND outcome = 'rejected:forbidden'") == 2  # manage and read

            # memory.propose: proposals of a session, stored once
            async with connect(tokens["memory.propose"]) as session:
                tools = {t.name: t for t in (await session.list_tools()).tools}
                assert set(tools) == TOOLS_OF["memory.propose"]
                assert tools["propose"].annotations.read_only_hint is False
                assert tools["propose"].annotations.destructive_hint is False
                for stored in ("new", "unchanged"):
                    result = await session.call_tool("propose", {"session": "s1",
                                                                 "proposals": [PROPOSAL]})
                    out = doc(result)
                    assert out["session_id"] == "s1" and out["session_total"] == 1
                    assert [(p["key"], p["action"], p["stored"]) for p in out["proposals"]] \
                        == [("p1", "create", stored)]
                with pytest.raises(MCPError) as exc:  # invalid arguments: recorded as well
                    await session.call_tool("propose", {"session": "s1", "proposals": []})
                assert _problem(exc)["code"] == "invalid_input"
                with pytest.raises(MCPError) as exc:
                    await session.call_tool("search", {"query": "x"})
                assert _problem(exc)["code"] == "forbidden"
            proposer = {"Authorization": f"Bearer {tokens['memory.propose']}"}
            r = await env.client.get("/api/workspaces/acme/sessions/s1/summary", headers=proposer)
            assert [p["key"] for p in r.json()["proposals"]] == ["p1"]
            assert env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'propose' "
                              "AND outcome = 'rejected:invalid_input'") == 1

            # a token that is not one: unauthorized (over HTTP at initialize, HTTP 401; over
            # stdio at its first request); the SDK's task groups wrap the error in a group
            with pytest.raises(BaseExceptionGroup) as group:
                async with connect("mat_not-a-token") as session:
                    await session.list_tools()
            error = _innermost(group.value)
            assert isinstance(error, MCPError) and error.error.data["code"] == "unauthorized"
            assert error.error.data["status"] == 401


async def test_mcp_http_answers_the_modern_protocol_without_a_handshake(make_env, tmp_path):
    """The SDK's 2026-07-28 era (``server/discover``, then self-contained requests: no
    ``initialize``, no session) over the writer's ``/mcp``: the same tools per token."""
    async with make_env() as env:
        seeded = await _seed(env)
        server, task, url = await start_server(create_app(env.settings, env.resources),
                                               lifespan="on")
        try:
            for permission, names in TOOLS_OF.items():
                token = seeded["tokens"][permission]
                async with (create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
                            as http, streamable_http_client(f"{url}/mcp", http_client=http)
                            as (read, write), ClientSession(read, write) as session):
                    await session.discover()
                    assert session.protocol_version in MODERN_PROTOCOL_VERSIONS
                    assert {t.name for t in (await session.list_tools()).tools} == names
                    if "search" in names:
                        result = await session.call_tool("search", {"query": QUERIES["search"],
                                                                    "top": 5})
                        assert same_recall(doc(result), seeded["expected"]["search"])
                        foreign = {"card_id": seeded["ids"]["foreign"]}
                        with pytest.raises(MCPError) as exc:
                            await session.call_tool("get_card", foreign)
                        assert _problem(exc)["code"] == (
                            "not_found" if permission == "memory.manage" else "forbidden")
        finally:
            await stop_server(server, task)


async def test_mcp_results_are_sent_once_and_cut_to_the_documented_cap(make_env, tmp_path):
    """Twelve long cards (about 9,000 characters each): ``search`` with ``top=100`` answers one
    JSON text of at most :data:`~writer.mcp_server.MAX_RESULT_BYTES` bytes (it was twice the
    whole document, as structured content and as text), whose results are the first of the API's
    own answer, in its order, with ``truncated`` saying how many were kept of how many; one card
    longer than the cap comes back from ``get_card`` with its text cut and marked. The tool list
    stays small (its descriptions are short; the argument schemas carry the detail)."""
    from writer.mcp_server import MAX_RESULT_BYTES
    async with make_env() as env:
        env.workspace("acme")
        manage = env.token("acme", "memory.manage")
        long_definition = " ".join(f"Revenue note {i}: net of refunds and taxes." for i in range(210))
        for i in range(12):
            r = await env.client.post(API.format("acme"), headers=manage, json={
                "family": "domain_clarification", "title": f"Revenue variant {i}",
                "content": {"definition": long_definition}, "concepts": ["revenue"]})
            assert r.status_code == 201, r.text
        r = await env.client.post(API.format("acme"), headers=manage, json={
            "family": "sql_rule", "title": "A very long rule",
            "content": {"rule": "Always filter cancelled orders. " * 600,  # 19,200 characters
                        "rationale": "Cancelled orders are refunded in full. " * 480}})
        huge = r.json()["card"]["id"]
        await env.drain()
        body = {"query": "what is net revenue", "top": 100}
        api = (await env.client.post(f"{API.format('acme')}/search", headers=manage,
                                     json={**body, "mode": "search"})).json()
        assert len(api["results"]) >= 10
        token = manage["Authorization"].split()[1]
        server, task, url = await start_server(create_app(env.settings, env.resources),
                                               lifespan="on")
        try:
            async with (create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
                        as http, streamable_http_client(f"{url}/mcp", http_client=http)
                        as (read, write), ClientSession(read, write) as session):
                await session.initialize()
                listing = await session.list_tools()
                assert len(listing.model_dump_json(by_alias=True, exclude_none=True)) < 16_000
                result = await session.call_tool("search", body)
                text = result.content[0].text
                assert len(text.encode()) <= MAX_RESULT_BYTES
                out = doc(result)
                kept = out["truncated"]["returned"]
                assert 1 <= kept < len(api["results"]) == out["truncated"]["found"]
                assert out["results"] == api["results"][:kept]
                assert "top" in out["truncated"]["hint"]
                card = doc(await session.call_tool("get_card", {"card_id": huge}))
                assert card["truncated"]["strings_cut"] >= 1
                assert "… [cut: " in card["card"]["content"]["rule"]
                assert card["card"]["id"] == huge and card["card"]["title"] == "A very long rule"
                small = doc(await session.call_tool("search", {**body, "top": 2}))
                assert "truncated" not in small and len(small["results"]) == 2
        finally:
            await stop_server(server, task)


async def test_memarc_mcp_refuses_to_start_without_a_token_or_next_to_memarc_up(
        tmp_path, monkeypatch, capsys):
    """``memarc mcp`` starts nothing without ``MEMARC_TOKEN``, nor while another process holds
    the embedded index of its data dir (the message points to the running writer's ``/mcp``)."""
    from helpers import run_cli

    from writer.serving import _data_dir_lock

    for name in [k for k in os.environ if k.startswith("MEMARC_")]:
        monkeypatch.delenv(name)
    code, _, err = await run_cli(capsys, "mcp")
    assert code == 2 and json.loads(err)["code"] == "token_missing"
    monkeypatch.setenv("MEMARC_TOKEN", "mat_x")
    code, _, err = await run_cli(capsys, "mcp")
    assert code == 2 and json.loads(err)["code"] == "database_url_missing"
    monkeypatch.setenv("MEMARC_DATABASE_URL", "postgresql://127.0.0.1:1/none")
    monkeypatch.setenv("MEMARC_DATA_DIR", str(tmp_path))
    with _data_dir_lock(tmp_path):  # as `memarc up` holds it
        code, _, err = await run_cli(capsys, "mcp")
    assert code == 2 and json.loads(err)["code"] == "already_running"
    assert "/mcp" in json.loads(err)["error"]
    # the running writer may serve on another port: the message points to what `memarc up` printed
    assert "the `mcp` URL `memarc up` printed" in json.loads(err)["error"]


def _innermost(error: BaseException) -> BaseException:
    """The first exception inside the SDK's (nested) exception groups."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


async def test_mcp_over_http_answers_unavailable_dependencies_with_their_codes(make_env):
    """A writer without its index: recall is an MCP error ``index_unavailable`` (503), the card
    tools keep working; a writer whose PostgreSQL is down refuses every MCP request with
    ``database_unavailable`` (HTTP 503, the JSON-RPC error in the body)."""
    import dataclasses

    from shared.store.database import Database

    async with make_env() as env:
        env.workspace("acme")
        token = env.token("acme")["Authorization"].split()[1]
        no_index = create_app(env.settings, dataclasses.replace(env.resources, index=None,
                                                                embedder=None))
        dead = Database("postgresql://postgres@127.0.0.1:1/none", "memory", timeout=1)
        await dead.open()
        no_database = create_app(env.settings, dataclasses.replace(env.resources, db=dead))
        for app, expected in ((no_index, "index_unavailable"),
                              (no_database, "database_unavailable")):
            server, task, url = await start_server(app, lifespan="on")
            try:
                async with (create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
                            as http, streamable_http_client(f"{url}/mcp", http_client=http)
                            as (read, write), ClientSession(read, write) as session):
                    await session.initialize()
                    pending = await session.call_tool("list_pending", {})
                    assert doc(pending) == {"operations": [], "total": 0}
                    with pytest.raises(MCPError) as exc:
                        await session.call_tool("search", {"query": "anything"})
                    assert _problem(exc)["code"] == expected and _problem(exc)["status"] == 503
            except BaseExceptionGroup as group:  # PostgreSQL down: refused at initialize
                error = _innermost(group)
                assert isinstance(error, MCPError), error
                assert expected == "database_unavailable"
                assert error.error.data["code"] == expected and error.error.data["status"] == 503
            else:
                assert expected == "index_unavailable"
            finally:
                await stop_server(server, task)
        await dead.close()


async def test_mcp_http_checks_the_permission_before_the_arguments_and_offers_no_sse_stream(
        make_env):
    """A ``memory.read`` token calling ``propose`` (or ``get_card``) with bad arguments is told
    403 ``forbidden``, as the API's guard answers before reading a body, never the arguments of
    a tool it may not call (422); ``GET /mcp`` is a prompt 405 (a stateless endpoint sends no
    server-initiated messages), not an empty event stream held open until the client leaves."""
    import httpx

    async with make_env() as env:
        seeded = await _seed(env)
        server, task, url = await start_server(create_app(env.settings, env.resources),
                                               lifespan="on")
        try:
            token = seeded["tokens"]["memory.read"]
            async with (create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
                        as http, streamable_http_client(f"{url}/mcp", http_client=http)
                        as (read, write), ClientSession(read, write) as session):
                await session.initialize()
                for name, args in (("propose", {"session": "s1", "proposals": []}),
                                   ("propose", {}), ("get_card", {"card_id": 3})):
                    with pytest.raises(MCPError) as exc:
                        await session.call_tool(name, args)
                    assert _problem(exc)["code"] == "forbidden", (name, args)
                    assert _problem(exc)["status"] == 403 and exc.value.error.code == -32050
                result = await session.call_tool("search", {"query": QUERIES["search"], "top": 5})
                assert same_recall(doc(result), seeded["expected"]["search"])
            async with httpx.AsyncClient(timeout=10) as client:
                for headers in ({"Authorization": f"Bearer {token}"}, {}):
                    r = await client.get(f"{url}/mcp", headers={
                        **headers, "Accept": "text/event-stream",
                        "MCP-Protocol-Version": "2025-11-25"})
                    assert r.status_code == 405 and r.headers["allow"] == "POST"
                    assert r.json()["error"]["code"] == -32600
        finally:
            await stop_server(server, task)
