"""A lost index under a real ``memarc up`` (issue 25 case 1): the workspace's Qdrant Edge shard
folder is removed under the running process, and again while it is stopped.

Each time recall answers 503 ``index_unavailable`` until the worker has rebuilt the collection by
itself (no ``memarc index``, no ``audit --repair``), every 200 seen while it heals holds every
card (recall is polled throughout: never the silent partial 200 of issue 25, where a fresh shard
made for one new card answered for the whole workspace), and afterwards ``/status`` and the
audit agree: every card current, nothing missing. The in-process variants, on both embedded
engines, are in ``tests/test_lost_index.py``.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import pytest
from test_outages import BASE, _acme, _open_ops, _up_env, _wait_for, memarc_up

pytestmark = pytest.mark.slow  # real processes, tens of seconds: still part of `make test`

CARDS = 6
#: the worker checks every collection at start-up and every 10 s (shared.worker), then rebuilds
HEAL_SECONDS = 90


def _rule(i: int) -> dict:
    return {"family": "sql_rule", "title": f"Rule {i} about invoices",
            "content": {"rule": f"Invoices of region {i} are issued on day {i + 1}."}}


def _remove_shard(data_dir: Path) -> str:
    """Remove workspace ``acme``'s current Qdrant Edge shard folder (``current.json`` still
    names it); returns its name."""
    pointers = json.loads((data_dir / "edge" / "current.json").read_text())
    (physical,) = [v for k, v in pointers.items() if k.endswith("acme")]
    shutil.rmtree(data_dir / "edge" / physical)
    return physical


def _heal(client: httpx.Client, h: dict[str, str], ids: set[str], proc, log: Path) -> dict[int, int]:
    """Poll recall until it answers 200 with every card of ``ids``; meanwhile only 503
    ``index_unavailable`` or complete 200s. Returns how many answers of each status were seen."""
    seen: dict[int, int] = {}

    def complete() -> bool:
        r = client.post(f"{BASE}/search", headers=h,
                        json={"query": "when are invoices issued", "top": 50})
        seen[r.status_code] = seen.get(r.status_code, 0) + 1
        if r.status_code == 503:
            assert r.json()["code"] == "index_unavailable", r.text
            return False
        assert r.status_code == 200, r.text
        got = {x["card"]["id"] for x in r.json()["results"]}
        assert got == ids, (f"a partial 200: {len(got & ids)} of {len(ids)} cards, "
                            f"excluded={r.json()['excluded']}")
        return True

    _wait_for("recall answering with every card", complete, HEAL_SECONDS, proc, log)
    return seen


def _agree(client: httpx.Client, h: dict[str, str], n: int) -> None:
    status = client.get(f"{BASE}/status", headers=h).json()
    assert status["cards"] == status["current"] == n and status["open_operations"] == 0, status
    audit = client.get(f"{BASE}/audit", headers=h).json()
    assert audit["cards"] == audit["current"] == audit["points"] == n, audit
    assert audit["pending"] == 0 and audit["missing"] == audit["stale"] == [], audit


def test_a_shard_removed_under_a_running_and_a_stopped_memarc_up_heals_by_itself(make_env,
                                                                                 redis_url,
                                                                                 tmp_path):
    h, migrator_url, database_url = _acme(make_env)
    log = tmp_path / "up.log"
    env_vars = _up_env(tmp_path, MEMARC_DATABASE_URL=database_url,
                       MEMARC_MIGRATOR_DATABASE_URL=migrator_url, MEMARC_REDIS_URL=redis_url,
                       MEMARC_INDEX_ENGINE="edge")
    data_dir = Path(env_vars["MEMARC_DATA_DIR"])
    ids: set[str] = set()
    with memarc_up(env_vars, log) as (proc, client, _):
        for i in range(CARDS):
            r = client.post(BASE, headers=h, json=_rule(i))
            assert r.status_code == 201, r.text
            ids.add(r.json()["card"]["id"])
        _wait_for("the cards projected", lambda: _open_ops(migrator_url) == 0, 60, proc, log)
        _heal(client, h, ids, proc, log)

        # (b) under the running process: recall knows at once, the worker's periodic check heals
        running_lost = _remove_shard(data_dir)
        r = client.post(f"{BASE}/search", headers=h, json={"query": "invoices", "top": 50})
        assert r.status_code == 503 and r.json()["code"] == "index_unavailable", r.text
        seen = _heal(client, h, ids, proc, log)
        assert seen.get(503), seen
        _agree(client, h, CARDS)
        print(f"running: recall answers while healing {seen}")

    # (a) while it is stopped; one new card after the restart (it used to get a shard of its own)
    stopped_lost = _remove_shard(data_dir)
    assert stopped_lost != running_lost
    restart_log = tmp_path / "up-again.log"  # its own: the harness reads the sign-in link from it
    with memarc_up(env_vars, restart_log) as (proc, client, _):
        r = client.post(BASE, headers=h, json=_rule(CARDS))
        assert r.status_code == 201, r.text
        ids.add(r.json()["card"]["id"])
        seen = _heal(client, h, ids, proc, restart_log)
        _agree(client, h, CARDS + 1)
        print(f"stopped: recall answers while healing {seen}")
        assert proc.poll() is None, restart_log.read_text()[-3000:]
    current = json.loads((data_dir / "edge" / "current.json").read_text())
    assert stopped_lost not in current.values() and running_lost not in current.values()
    for text in (log.read_text(), restart_log.read_text()):  # one loss noticed by each
        assert text.count("is lost (recorded") == 1, text[-3000:]
