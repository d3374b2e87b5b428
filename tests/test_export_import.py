"""Export and idempotent import (issue 15): the cards file round-trips through the HTTP API and
the CLI, a second import changes nothing, ``on_conflict=update`` changes only what changed, bad
input writes nothing, and no workspace exports another's cards."""

from __future__ import annotations

import asyncio
import gzip
import json
from typing import Any

import psycopg
import pytest
from helpers import archive_row_counts, live_writer, row_changes

from shared.cards_file import read_cards
from shared.errors import InvalidInput

SRC = "/api/workspaces/src/memory"
DST = "/api/workspaces/dst/memory"
NDJSON = {"Content-Type": "application/x-ndjson"}

#: Imported lines (they keep their keys) of all four families, linked by key, with sources.
IMPORTED = [
    {"key": "clar-elder", "family": "domain_clarification", "title": "Elder client",
     "content": {"definition": "A client aged 65 or over.", "context": "Used by retention."},
     "concepts": ["clients", "age"], "source": {"dataset": "crm", "record": "glossary-7"},
     "dependencies": [{"database": "bank", "schema": "public", "table": "client",
                       "column": "birth_date"}]},
    {"key": "rule-loans", "family": "sql_rule", "title": "Finished loans have status A",
     "content": {"rule": "Filter loan.status = 'A' for loans finished without problems."},
     "concepts": ["loans"], "scope": "reporting",
     "dependencies": [{"database": "bank", "schema": "public", "table": "loan",
                       "column": "status"}]},
    {"key": "solved-elder-loans", "family": "solved_question",
     "title": "How many elder clients have finished loans?",
     "content": {"question": "How many elder clients have finished loans?",
                 "sql": "SELECT count(*) FROM client c JOIN loan l USING (client_id) "
                        "WHERE l.status = 'A' AND age(c.birth_date) >= interval '65 years'"},
     "concepts": ["clients", "loans"],
     "links": [{"target": "clar-elder", "meaning": "defines elder"},
               {"target": "rule-loans", "meaning": "finished loans"}],
     "dependencies": [{"database": "bank", "schema": "public", "table": "loan"},
                      {"database": "bank", "schema": "public", "table": "client"}]},
    {"key": "error-date-minus", "family": "explained_error",
     "title": "operator does not exist: date - text",
     "content": {"error": "ERROR: operator does not exist: date - text",
                 "correction": "Cast the text to a date: birth_date - '1950-01-01'::date"},
     "links": [{"target": "clar-elder", "meaning": "about birth dates"}],
     "dependencies": [{"database": "bank"}]},
]

WORKFLOW = {"key": "wf-monthly", "family": "sql_rule", "title": "Months are calendar months",
            "content": {"rule": "Group by date_trunc('month', date); never by 30-day windows."},
            "origin": "workflow",
            "source": {"session_id": "s-9", "decision_ids": ["d1", "d2"]},
            "links": [{"target": "rule-loans", "meaning": "reported monthly"}]}

QUERIES = [("search", "what does elder client mean"), ("search", "loan status finished"),
           ("rules", "finished loans status"), ("rules", "date minus text operator error"),
           ("solved", "count old clients with completed loans"),
           ("search", "weekly revenue definition")]


def _file(lines: list[dict[str, Any]]) -> bytes:
    return "\n".join(json.dumps(line) for line in lines).encode()


async def _seed(env) -> dict[str, str]:
    """Workspace src: the imported lines, a workflow card (imported with its origin and
    source), and manual cards of every family linking to them (by id) and to each other.
    Returns src's headers."""
    env.workspace("src")
    h = env.token("src")
    r = await env.client.post(f"{SRC}/import", content=_file(IMPORTED), headers={**h, **NDJSON})
    assert r.status_code == 201 and r.json()["created"] == 4, r.text
    ids = dict(env.scalar("SELECT array_agg(ARRAY[import_key, 'mem-' || id]) FROM memory.cards"
                          " WHERE workspace_id = 'src'"))
    # a reviewed session's card, as an earlier export of a workspace would carry it (restored:
    # a plain import refuses a line claiming a review)
    r = await env.client.post(f"{SRC}/import", headers={**h, **NDJSON}, content=_file([WORKFLOW]),
                              params={"mode": "restore"})
    assert r.status_code == 201 and r.json()["created"] == 1, r.text
    week = (await env.client.post(SRC, headers=h, json={
        "family": "domain_clarification", "title": "Weekly revenue",
        "content": {"definition": "Revenue summed from Monday to Sunday."},
        "concepts": ["revenue"]})).json()["card"]
    manual = [
        {"family": "sql_rule", "title": "Weeks start on Monday",
         "content": {"rule": "Use date_trunc('week', …): weeks start on Monday."},
         "links": [{"target": week["id"], "meaning": "weekly revenue"}]},
        {"family": "solved_question", "title": "Revenue of last week",
         "content": {"question": "What was the revenue of last week?",
                     "sql": "SELECT sum(amount) FROM trans WHERE date >= date_trunc('week', "
                            "now()) - interval '1 week' AND date < date_trunc('week', now())"},
         "links": [{"target": week["id"], "meaning": "weekly revenue"},
                   {"target": ids["rule-loans"], "meaning": "an imported card, by id"}]},
        {"family": "explained_error", "title": "column week does not exist",
         "content": {"error": "ERROR: column \"week\" does not exist",
                     "correction": "Compute the week with date_trunc('week', date)."}},
    ]
    for body in manual:
        r = await env.client.post(SRC, headers=h, json=body)
        assert r.status_code == 201, r.text
    return h


async def _export(env, base: str, h: dict[str, str], **params: Any) -> bytes:
    r = await env.client.get(f"{base}/export", headers=h, params=params)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    return r.content


def _keys(env, workspace: str) -> dict[str, str]:
    """Card id → key (migration 011's card_key) of a workspace's cards."""
    with psycopg.connect(env.migrator_url) as conn:
        return dict(conn.execute("SELECT 'mem-' || id, memory.card_key(import_key, id)"
                                 " FROM memory.cards WHERE workspace_id = %s", [workspace]))


def _state(env, workspace: str) -> dict[str, tuple[str, int]]:
    """Key → (id, revision) of a workspace's cards."""
    with psycopg.connect(env.migrator_url) as conn:
        return {k: (i, r) for k, i, r in conn.execute(
            "SELECT memory.card_key(import_key, id), 'mem-' || id, revision FROM memory.cards"
            " WHERE workspace_id = %s", [workspace])}


async def test_export_import_export_is_identical_and_recall_agrees(make_env):
    async with make_env() as env:
        h = await _seed(env)
        first = await _export(env, SRC, h)
        lines = [json.loads(x) for x in first.splitlines()]
        keys = _keys(env, "src")
        # every card, under its key (import key, else its id), in key order, links by key
        assert sorted(x["key"] for x in lines) == sorted(keys.values()) and len(lines) == 9
        assert [x["key"] for x in lines] == sorted((x["key"] for x in lines),
                                                   key=lambda k: k.encode())
        assert {x["family"] for x in lines} == {"domain_clarification", "sql_rule",
                                                "solved_question", "explained_error"}
        by_key = {x["key"]: x for x in lines}
        assert by_key["solved-elder-loans"]["links"] == [
            {"target": "clar-elder", "meaning": "defines elder"},
            {"target": "rule-loans", "meaning": "finished loans"}]
        assert by_key["clar-elder"]["source"] == {"dataset": "crm", "record": "glossary-7"}
        assert by_key["clar-elder"]["dependencies"] == IMPORTED[0]["dependencies"]
        assert by_key["rule-loans"]["scope"] == "reporting"
        assert {x["origin"] for x in lines} == {"import", "manual", "workflow"}
        assert by_key["wf-monthly"]["source"] == WORKFLOW["source"]
        manual_solved = next(x for x in lines if x["title"] == "Revenue of last week")
        assert manual_solved["key"].startswith("mem-")
        assert {link["target"] for link in manual_solved["links"]} >= {"rule-loans"}
        assert all(link["target"] in by_key for x in lines for link in x["links"])
        for x in lines:  # the card file only: no ids, revisions, vectors or index state
            assert set(x) == {"key", "family", "title", "content", "scope", "concepts",
                              "dependencies", "links", "source", "origin"}

        env.workspace("dst")
        hd = env.token("dst")
        r = await env.client.post(f"{DST}/import", content=first, headers={**hd, **NDJSON},
                                  params={"mode": "restore"})
        assert r.status_code == 201, r.text
        assert (r.json()["created"], r.json()["skipped"]) == (9, 0)
        second = await _export(env, DST, hd)
        assert second == first  # no ids in the file: identical, byte for byte
        assert set(_keys(env, "dst")).isdisjoint(_keys(env, "src"))  # new cards, new ids
        with psycopg.connect(env.migrator_url) as conn:
            origins = conn.execute("SELECT workspace_id, origin, count(*) FROM memory.cards"
                                   " GROUP BY 1, 2 ORDER BY 1, 2").fetchall()
        assert origins == [("dst", "import", 4), ("dst", "manual", 4), ("dst", "workflow", 1),
                           ("src", "import", 4), ("src", "manual", 4), ("src", "workflow", 1)]

        # recall, once the worker projected both: the same cards by key, in the same order
        await env.drain()
        src_keys, dst_keys = _keys(env, "src"), _keys(env, "dst")
        for mode, query in QUERIES:
            found = {}
            for base, hh, key_of in ((SRC, h, src_keys), (DST, hd, dst_keys)):
                r = await env.client.post(f"{base}/search", headers=hh,
                                          json={"query": query, "mode": mode, "top": 5})
                assert r.status_code == 200, r.text
                found[base] = [(key_of[x["card"]["id"]], round(x["score"], 6))
                               for x in r.json()["results"]]
            assert found[SRC] and found[SRC] == found[DST], (mode, query, found)

        # the export of one family keeps its links to others, which resolve where those cards
        # are already in the workspace (here: dst itself), and importing it there changes nothing
        solved = await _export(env, DST, hd, family="solved_question")
        assert {json.loads(x)["family"] for x in solved.splitlines()} == {"solved_question"}
        assert b'"target":"clar-elder"' in solved
        r = await env.client.post(f"{DST}/import", content=solved,
                                  headers={**hd, **NDJSON}, params={"on_conflict": "update"})
        assert r.status_code == 201 and (r.json()["unchanged"], r.json()["created"]) == (2, 0)


async def test_an_import_cannot_claim_a_review_unless_it_restores_an_export(make_env):
    """Issue 25, case 8: only a review writes ``workflow`` cards and session sources. A plain
    import line claiming either is a 422 naming the line and the field, and nothing is written;
    ``manual`` and a dataset source are an import's to give; ``mode=restore`` keeps them all and
    the activity record says so."""
    async with make_env() as env:
        env.workspace("dst")
        hd = env.token("dst")
        manual_session = dict(IMPORTED[2], key="forged", origin="manual",
                              source={"session_id": "s-invented", "decision_ids": ["d9"]})
        for lines, field in (([IMPORTED[0], WORKFLOW], "origin"),
                             ([IMPORTED[0], IMPORTED[1], manual_session], "source")):
            r = await env.client.post(f"{DST}/import", content=_file(lines),
                                      headers={**hd, **NDJSON})
            body = r.json()
            assert r.status_code == 422, r.text
            assert (body["field"], body["line"]) == (field, len(lines)), body
            assert f"key {lines[-1]['key']!r}" in body["detail"] and "mode=restore" in \
                body["detail"], body
            assert env.scalar("SELECT count(*) FROM memory.cards") == 0
        r = await env.client.post(f"{DST}/import", headers={**hd, **NDJSON},
                                  content=_file([dict(IMPORTED[0], origin="manual")]))
        assert r.status_code == 201 and r.json()["created"] == 1, r.text
        r = await env.client.post(f"{DST}/import", headers={**hd, **NDJSON},
                                  content=_file([IMPORTED[1], WORKFLOW, manual_session]),
                                  params={"mode": "restore"})
        assert r.status_code == 201 and r.json()["created"] == 3, r.text
        with psycopg.connect(env.migrator_url) as conn:
            rows = conn.execute("SELECT import_key, origin, source FROM memory.cards "
                                "ORDER BY import_key").fetchall()
            modes = conn.execute("SELECT detail->>'mode' FROM memory.activity WHERE verb = "
                                 "'import' AND outcome = 'ok' ORDER BY id").fetchall()
        assert [(k, o) for k, o, _ in rows] == [
            (IMPORTED[0]["key"], "manual"), ("forged", "manual"), (IMPORTED[1]["key"], "import"),
            ("wf-monthly", "workflow")]
        assert rows[3][2] == WORKFLOW["source"]
        assert modes == [("import",), ("restore",)]
        r = await env.client.post(f"{DST}/import", content=_file([WORKFLOW]),
                                  headers={**hd, **NDJSON}, params={"mode": "trust-me"})
        assert r.status_code == 400, r.text


async def test_reimport_changes_nothing_and_update_changes_only_what_changed(make_env):
    async with make_env() as env:
        env.workspace("dst")
        hd = env.token("dst")
        r = await env.client.post(f"{DST}/import", content=_file(IMPORTED), headers={**hd, **NDJSON})
        assert r.status_code == 201 and r.json()["created"] == 4
        await env.drain()
        before = _state(env, "dst")
        ops = env.scalar("SELECT count(*) FROM memory.projection_ops")
        for on_conflict, counts in (("skip", (0, 0, 0, 4)), ("update", (0, 0, 4, 0))):
            r = await env.client.post(f"{DST}/import", content=_file(IMPORTED),
                                      headers={**hd, **NDJSON}, params={"on_conflict": on_conflict})
            assert r.status_code == 201, r.text
            got = r.json()
            assert (got["created"], got["updated"], got["unchanged"], got["skipped"]) == counts
            assert _state(env, "dst") == before
            assert env.scalar("SELECT count(*) FROM memory.projection_ops") == ops

        # one title changed, one link dropped: skip ignores both, update changes those two cards
        edited = json.loads(json.dumps(IMPORTED))
        edited[1]["title"] = "Loans finished without problems have status A"
        edited[3]["links"] = []
        r = await env.client.post(f"{DST}/import", content=_file(edited), headers={**hd, **NDJSON})
        assert r.json()["skipped"] == 4 and _state(env, "dst") == before
        last_op = env.scalar("SELECT max(id) FROM memory.projection_ops")
        r = await env.client.post(f"{DST}/import", content=_file(edited),
                                  headers={**hd, **NDJSON}, params={"on_conflict": "update"})
        assert r.status_code == 201, r.text
        assert (r.json()["updated"], r.json()["unchanged"], r.json()["created"]) == (2, 2, 0)
        after = _state(env, "dst")
        assert {k: v[1] - before[k][1] for k, v in after.items()} == {
            "clar-elder": 0, "rule-loans": 1, "solved-elder-loans": 0, "error-date-minus": 1}
        assert {k: v[0] for k, v in after.items()} == {k: v[0] for k, v in before.items()}
        with psycopg.connect(env.migrator_url) as conn:
            queued = conn.execute(
                "SELECT memory.card_key(c.import_key, c.id) FROM memory.projection_ops o"
                " JOIN memory.cards c ON c.id = o.card_id WHERE o.id > %s ORDER BY 1",
                [last_op]).fetchall()
            links = conn.execute("SELECT count(*) FROM memory.card_links").fetchone()[0]
        # the two updated cards (and at most the clarification the error no longer links to:
        # migration 006's trigger re-projects a card whose incoming links change)
        assert {"rule-loans", "error-date-minus"} <= {k for (k,) in queued} <= {
            "rule-loans", "error-date-minus", "clar-elder"}, queued
        assert links == 2
        shown = (await env.client.get(f"{DST}/{after['rule-loans'][0]}", headers=hd)).json()
        assert shown["card"]["title"] == edited[1]["title"]
        assert shown["card"]["origin"] == "import" and shown["card"]["source"] is None


async def test_bad_input_is_a_4xx_and_writes_nothing(make_env):
    async with make_env() as env:
        env.workspace("dst")
        hd = env.token("dst")
        r = await env.client.post(f"{DST}/import", content=_file(IMPORTED), headers={**hd, **NDJSON})
        assert r.status_code == 201
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            before = archive_row_counts(conn)
        changed_family = [dict(IMPORTED[0], family="sql_rule", content={"rule": "r"})]
        for method, path, kw in (
                ("GET", f"{DST}/export", {"params": {"family": "recipes"}}),
                ("GET", f"{DST}/export", {"params": {"family": ["sql_rule", "nope"]}}),
                ("POST", f"{DST}/import", {"params": {"on_conflict": "replace"},
                                           "content": _file(IMPORTED)}),
                ("POST", f"{DST}/import", {"params": {"on_conflict": "update"},
                                           "content": _file(changed_family)}),
                # the default on_conflict (skip) does not skip a line of another family
                ("POST", f"{DST}/import", {"content": _file(changed_family)}),
                ("POST", f"{DST}/import", {"content": _file([dict(
                    IMPORTED[2], key="new", links=[{"target": "no-such-key"}])])}),
                ("POST", f"{DST}/import", {"content": _file([dict(
                    IMPORTED[2], key="loop", links=[{"target": "loop"}])])}),
                # a blank key names nothing (no link can tell it from another blank one)
                ("POST", f"{DST}/import", {"content": _file([dict(IMPORTED[2], key="   ")])}),
                ("POST", f"{DST}/import", {"content": _file([dict(IMPORTED[2], key="\t")])})):
            r = await env.client.request(method, path, headers={**hd, **NDJSON}, **kw)
            assert 400 <= r.status_code < 500, (path, kw, r.status_code, r.text)
            assert r.headers["content-type"].startswith("application/problem+json"), r.text
        # a key with surrounding whitespace is refused, not trimmed (" k1" would be another key
        # than "k1"): 422 naming the line and the field, also next to a good line
        for n, lines in ((1, [dict(IMPORTED[2], key=" ws-key")]),
                         (2, [dict(IMPORTED[1], key="ws-ok"), dict(IMPORTED[2], key="ws-key\t")]),
                         (1, [dict(IMPORTED[2], key=f" {IMPORTED[2]['key']}")])):
            r = await env.client.post(f"{DST}/import", content=_file(lines),
                                      headers={**hd, **NDJSON})
            assert r.status_code == 422, r.text
            assert r.headers["content-type"].startswith("application/problem+json"), r.text
            body = r.json()
            assert (body["field"], body["line"]) == ("key", n), body
            assert f"line {n}" in body["detail"] and "whitespace" in body["detail"], body
        # a line naming one card twice, by its key and by its id: 422 naming the line (it was
        # a 500 from the links' primary key)
        elder = env.scalar("SELECT id FROM memory.cards WHERE title = 'Elder client'")
        twice = [dict(IMPORTED[2], key="twice", links=[{"target": "clar-elder"},
                                                       {"target": f"mem-{elder}"}])]
        r = await env.client.post(f"{DST}/import", content=_file(twice), headers={**hd, **NDJSON})
        assert r.status_code == 422, r.text
        assert r.headers["content-type"].startswith("application/problem+json"), r.text
        assert "line 1" in r.json()["detail"] and "same card" in r.json()["detail"], r.text
        # an empty body (or blank lines only) imports nothing: 422 "no cards", not a 201
        for empty in (b"", b"\n  \n", gzip.compress(b"")):
            headers = {**hd, **NDJSON, **({"Content-Encoding": "gzip"} if empty[:2] == b"\x1f\x8b"
                                           else {})}
            r = await env.client.post(f"{DST}/import", content=empty, headers=headers)
            assert r.status_code == 422, (empty, r.text)
            assert r.headers["content-type"].startswith("application/problem+json"), r.text
            assert "no cards" in r.json()["detail"], r.text
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            changed = row_changes(before, archive_row_counts(conn))
            outcomes = [o for (o,) in conn.execute(
                "SELECT outcome FROM memory.activity WHERE verb = 'import' ORDER BY id")]
        # the fourteen rejected imports, nothing else
        assert changed == {"activity": 14}, changed
        assert outcomes[0] == "ok" and all(o.startswith("rejected:") for o in outcomes[1:])
        # the use cases check too (whoever calls them)
        archive = env.resources.archive()
        from shared.auth import Principal

        me = Principal(workspace="dst", permissions=frozenset({"memory.manage"}), actor="test")
        with pytest.raises(InvalidInput, match="on_conflict"):
            await archive.transfer.import_cards(me, "dst", [], "replace")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="no cards"):
            await archive.transfer.import_cards(me, "dst", [])
        with pytest.raises(InvalidInput, match="unknown family"):
            await archive.transfer.export_cards(me, "dst", ["recipes"])


async def test_a_foreign_workspace_cannot_be_exported(make_env):
    async with make_env() as env:
        await _seed(env)
        env.workspace("dst")
        for headers, status in ((env.token("dst"), 404),  # another workspace's token
                                (env.token("src", "memory.read"), 403),  # recall only
                                ({}, 401)):
            r = await env.client.get(f"{SRC}/export", headers=headers)
            assert r.status_code == status, r.text
            assert r.headers["content-type"].startswith("application/problem+json")
            assert b"Weekly revenue" not in r.content and b"clar-elder" not in r.content
        # a token of dst exports dst only (empty), never src's cards
        assert await _export(env, DST, env.token("dst")) == b""


async def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``memarc *argv``: (exit code, stdout, last line of stderr)."""
    from writer.cli import main

    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out = capsys.readouterr()
    return code, out.out, (out.err.strip().splitlines() or [""])[-1]


async def test_cli_export_streams_to_gzip_and_import_is_idempotent(make_env, monkeypatch,
                                                                   capsys, tmp_path):
    from shared.store import cards

    monkeypatch.setattr(cards, "EXPORT_PAGE", 7)  # many cursor fetches for a few hundred cards
    many = [{"key": f"rule-{i:04d}", "family": "sql_rule", "title": f"Rule {i}",
             "content": {"rule": f"Rule number {i} " + "x" * 300},
             "links": [{"target": f"rule-{i - 1:04d}"}] if i else []} for i in range(400)]
    source = tmp_path / "many.jsonl"
    source.write_bytes(_file(many))
    async with live_writer(make_env, monkeypatch) as env:
        code, out, err = await _cli(capsys, "import", "--workspace", "acme", str(source))
        assert code == 0 and json.loads(out)["created"] == 400, err
        exported = tmp_path / "acme.jsonl.gz"
        code, out, err = await _cli(capsys, "export", "--workspace", "acme",
                                    "--output", str(exported))
        assert code == 0 and json.loads(out) == {"exported": 400, "output": str(exported)}, err
        lines = [json.loads(x) for x in gzip.decompress(exported.read_bytes()).splitlines()]
        assert [x["key"] for x in lines] == [x["key"] for x in many]
        assert lines[5]["links"] == [{"target": "rule-0004", "meaning": ""}]
        assert list(tmp_path.glob(".*partial")) == []
        # stdout: the same lines, nothing else
        code, out, _ = await _cli(capsys, "export", "--workspace", "acme", "--family", "sql_rule")
        assert code == 0 and out.encode() == gzip.decompress(exported.read_bytes())
        # the .gz file imports again (read as gzip), and changes nothing
        for extra, key in (((), "skipped"), (("--on-conflict", "update"), "unchanged")):
            code, out, err = await _cli(capsys, "import", "--workspace", "acme", *extra,
                                        str(exported))
            assert code == 0, err
            assert json.loads(out)["created"] == 0 and json.loads(out)[key] == 400
        # a line claiming a review is refused, unless --restore says the file is an export
        claimed = tmp_path / "workflow.jsonl"
        claimed.write_bytes(_file([dict(WORKFLOW, links=[])]))
        code, out, err = await _cli(capsys, "import", "--workspace", "acme", str(claimed))
        assert code == 2 and json.loads(err)["field"] == "origin", err
        code, out, err = await _cli(capsys, "import", "--workspace", "acme", "--restore",
                                    str(claimed))
        assert code == 0 and json.loads(out)["created"] == 1, err
        # bad input: a problem on stderr, exit status 2, no file written
        code, out, err = await _cli(capsys, "export", "--workspace", "acme", "--family",
                                    "recipes", "--output", str(tmp_path / "bad.jsonl"))
        assert code == 2 and out == "" and json.loads(err)["status"] == 400, err
        assert not (tmp_path / "bad.jsonl").exists() and list(tmp_path.glob(".*partial")) == []
        # an --on-conflict that is no choice is refused locally (argparse: usage, exit 2), so
        # nothing reaches the writer (no rejected import is recorded)
        rejected = env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'import'")
        with pytest.raises(SystemExit) as exit_info:
            await _cli(capsys, "import", "--workspace", "acme", "--on-conflict", "replace",
                       str(source))
        err = capsys.readouterr().err
        assert exit_info.value.code == 2, err
        assert "usage:" in err and "--on-conflict: invalid choice: 'replace'" in err, err
        assert env.scalar("SELECT count(*) FROM memory.activity WHERE verb = 'import'") == rejected
        # another workspace: 404 (the live writer's token is acme's)
        code, out, err = await _cli(capsys, "export", "--workspace", "other")
        assert code == 2 and out == "" and json.loads(err)["code"] == "not_found"


async def test_the_demo_import_is_the_idempotent_import(make_env, tmp_path):
    """`memarc up --demo` imports its cards file at every start: the second start creates
    nothing (and, every card indexed, does not wait); a card deleted since comes back, the
    workspace's own cards stay."""
    import io

    from shared.auth import Principal
    from writer.demo import load_demo_cards

    path = tmp_path / "cards.jsonl.gz"
    path.write_bytes(gzip.compress(_file(IMPORTED)))
    async with make_env() as env:
        env.workspace("dst")
        hd = env.token("dst")
        archive = env.resources.archive()
        me = Principal(workspace="dst", permissions=frozenset({"memory.manage"}), actor="test")
        outputs = []
        async with env.running_worker():
            for _ in range(2):
                out = io.StringIO()
                await asyncio.wait_for(load_demo_cards(archive, me, "dst", path, out), 120)
                outputs.append([json.loads(x) for x in out.getvalue().splitlines()
                                if x.startswith("{")])
        first, second = outputs
        assert first[0]["imported"] == 4 and first[-1]["cards"] == 4
        assert "seconds_to_import_and_project" in first[-1]
        assert second[0] == {"imported": 0, "by_family": {}, "already_imported": 4}
        assert second[-1]["cards"] == 4 and "note" in second[-1]
        state = _state(env, "dst")
        r = await env.client.delete(f"{DST}/{state['rule-loans'][0]}", headers=hd)
        assert r.status_code == 200
        async with env.running_worker():
            out = io.StringIO()
            await asyncio.wait_for(load_demo_cards(archive, me, "dst", path, out), 120)
        assert json.loads(out.getvalue().splitlines()[0])["imported"] == 1
        after = _state(env, "dst")
        assert after["rule-loans"] != state["rule-loans"]  # a new card under the same key
        assert {k: v for k, v in after.items() if k != "rule-loans"} == {
            k: v for k, v in state.items() if k != "rule-loans"}


async def test_an_export_cut_short_fails_and_leaves_no_file(make_env, monkeypatch, capsys,
                                                            tmp_path):
    """PostgreSQL lost after the first lines went out: the HTTP stream ends without its last
    chunk, and `memarc export` reports it (exit 3) and removes what it had written."""
    from shared.errors import DatabaseUnavailable
    from shared.store import cards

    real = cards.export_lines

    async def cut(conn, families):
        n = 0
        async for line in real(conn, families):
            yield line
            n += 1
            if n == 300:
                raise DatabaseUnavailable("PostgreSQL is unavailable: test")

    many = [{"key": f"c-{i:04d}", "family": "sql_rule", "title": f"Rule {i}",
             "content": {"rule": f"Rule {i} " + "y" * 400}} for i in range(600)]
    async with live_writer(make_env, monkeypatch) as env:
        h = env.token("acme")
        r = await env.client.post("/api/workspaces/acme/memory/import", content=_file(many),
                                  headers={**h, **NDJSON})
        assert r.status_code == 201
        monkeypatch.setattr(cards, "export_lines", cut)
        output = tmp_path / "cut.jsonl"
        code, out, err = await _cli(capsys, "export", "--workspace", "acme", "--output", str(output))
        assert code == 3 and out == "" and json.loads(err)["code"] == "export_incomplete", err
        assert not output.exists() and list(tmp_path.iterdir()) == []


async def test_cards_imported_before_import_keys_are_adopted_not_duplicated(make_env):
    """A card imported before migration 011 has no import key; importing its file again gives
    it its line's key (nothing else changes) instead of creating it twice. A card that no longer
    says what its line says is not that line's card."""
    async with make_env() as env:
        env.workspace("dst")
        hd = env.token("dst")
        r = await env.client.post(f"{DST}/import", content=_file(IMPORTED), headers={**hd, **NDJSON})
        assert r.status_code == 201
        await env.drain()
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:  # as before 011
            conn.execute("UPDATE memory.cards SET import_key = NULL")
            conn.execute("UPDATE memory.cards SET title = 'Edited since' WHERE family = 'sql_rule'")
            before = {i: (r, u) for i, r, u in conn.execute(
                "SELECT id, revision, updated_at FROM memory.cards")}
        ops = env.scalar("SELECT count(*) FROM memory.projection_ops")
        r = await env.client.post(f"{DST}/import", content=_file(IMPORTED), headers={**hd, **NDJSON})
        assert r.status_code == 201, r.text
        assert (r.json()["created"], r.json()["skipped"]) == (1, 3)
        edited = env.scalar("SELECT id FROM memory.cards WHERE title = 'Edited since'")
        assert set(_state(env, "dst")) == {x["key"] for x in IMPORTED} | {f"mem-{edited}"}
        with psycopg.connect(env.migrator_url) as conn:
            after = {i: (r, u) for i, r, u in conn.execute(
                "SELECT id, revision, updated_at FROM memory.cards")}
        assert {i: v for i, v in after.items() if i in before} == before  # adopted as they were
        assert env.scalar("SELECT count(*) FROM memory.projection_ops") == ops + 1  # the new one
        r = await env.client.post(f"{DST}/import", content=_file(IMPORTED), headers={**hd, **NDJSON})
        assert (r.json()["created"], r.json()["skipped"]) == (0, 4)


async def test_a_demo_restart_waits_for_the_cards_an_earlier_start_left_unindexed(make_env,
                                                                                  tmp_path):
    """Issue 26 (the second newcomer trial): a start stopped in the middle of the projection
    leaves cards unindexed; the next start imports nothing, and must not print the ready block
    until those cards are indexed too (it printed it at once, with 768 of 2,251 indexed)."""
    import io

    from shared.auth import Principal
    from writer.demo import load_demo_cards

    path = tmp_path / "cards.jsonl.gz"
    path.write_bytes(gzip.compress(_file(IMPORTED)))
    async with make_env() as env:
        env.workspace("dst")
        archive = env.resources.archive()
        me = Principal(workspace="dst", permissions=frozenset({"memory.manage"}), actor="test")
        # the first start: imported, then stopped before any card was indexed (no worker ran)
        await archive.transfer.import_cards(me, "dst", read_cards(path))
        assert (await archive.status(me, "dst")).current == 0
        async with env.running_worker():
            out = io.StringIO()
            await asyncio.wait_for(
                load_demo_cards(archive, me, "dst", path, out, ready=lambda: "READY"), 120)
            status = await archive.status(me, "dst")
        lines = out.getvalue().splitlines()
        assert json.loads(lines[0]) == {"imported": 0, "by_family": {}, "already_imported": 4}
        assert "4 cards are not indexed yet" in json.loads(lines[1])["note"]
        assert status.current == status.cards == 4  # ready only once they are indexed
        done = json.loads(next(x for x in lines if '"demo_ready"' in x))
        assert done["cards"] == 4 and lines[-1] == "READY"
