"""``GET /metrics`` (issue 15): the Prometheus text format of the writer, parsed with
prometheus-client's own parser, and its figures moving as work happens: through the writer app,
a real worker, PostgreSQL, Redis, the embedded index and the real embedding model."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from shared.config import load_settings
from shared.metrics import LAG_BUCKETS, RECALL_STAGES, Metrics
from shared.models import PROJECTION_FORMAT

BASE = "/api/workspaces/acme/memory"
LIST_ROUTE = "/api/workspaces/{workspace_id}/memory"
CARD = {"family": "sql_rule", "title": "Fiscal year starts in April",
        "content": {"rule": "The fiscal year starts on April 1st, not in January."}}
QUERY = "when does the fiscal year start"


async def scrape(env, **headers) -> tuple[dict[tuple[str, tuple], float], str]:
    """``({(sample name, sorted labels): value}, text)`` of one ``GET /metrics``."""
    r = await env.client.get("/metrics", headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples, r.text


def value(samples, name: str, **labels: str) -> float:
    """A sample's value; 0 when the series is absent (a counter not yet incremented)."""
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def wait_for(env, predicate, timeout: float = 60.0):
    """Scrape until ``predicate(samples)`` holds; returns those samples."""
    deadline = time.monotonic() + timeout
    while True:
        samples, _ = await scrape(env)
        if predicate(samples):
            return samples
        assert time.monotonic() < deadline, "the metrics did not reach the expected state"
        await asyncio.sleep(0.2)


async def test_metrics_move_with_requests_projection_and_recall(make_env):
    async with make_env() as env:
        env.workspace("acme")
        h = env.token("acme")
        before, _ = await scrape(env)
        assert value(before, "memarc_database_up") == 1
        assert value(before, "memarc_index_info", engine="qdrant-edge" if
                     env.settings.index_engine == "edge" else "qdrant-local",
                     projection_format=str(PROJECTION_FORMAT)) == 1
        assert value(before, "memarc_projection_operations", status="pending") == 0
        assert value(before, "memarc_projection_oldest_pending_seconds") == 0

        # a request increments its route's counter (the route template, not the path)
        assert (await env.client.get(BASE, headers=h)).status_code == 200
        assert (await env.client.get(f"{BASE}/mem-00000000-0000-0000-0000-000000000000",
                                     headers=h)).status_code == 404
        after, _ = await scrape(env)
        labels = {"method": "GET", "route": LIST_ROUTE, "status": "200"}
        assert value(after, "memarc_http_requests_total", **labels) == \
            value(before, "memarc_http_requests_total", **labels) + 1
        assert value(after, "memarc_http_request_duration_seconds_count", **labels) == \
            value(before, "memarc_http_request_duration_seconds_count", **labels) + 1
        assert value(after, "memarc_http_requests_total", method="GET", status="404",
                     route=LIST_ROUTE + "/{card_id}") == 1

        # a saved card raises the pending operations and the oldest one's age
        r = await env.client.post(BASE, json=CARD, headers=h)
        assert r.status_code == 201
        card_id = r.json()["card"]["id"]
        await asyncio.sleep(0.05)
        saved, text = await scrape(env)
        assert value(saved, "memarc_projection_operations", status="pending") == 1
        assert value(saved, "memarc_projection_oldest_pending_seconds") > 0
        assert value(saved, "memarc_http_requests_total", method="POST", route=LIST_ROUTE,
                     status="201") == 1
        lag_before = value(saved, "memarc_projection_lag_seconds_count")

        # the worker drains them: pending falls, done and the lag histogram rise
        async with env.running_worker():
            drained = await wait_for(env, lambda s: value(
                s, "memarc_projection_operations", status="done") >= 1)
        assert value(drained, "memarc_projection_operations", status="pending") == 0
        assert value(drained, "memarc_projection_oldest_pending_seconds") == 0
        assert value(drained, "memarc_projection_lag_seconds_count") == lag_before + 1
        assert value(drained, "memarc_projection_lag_seconds_sum") > 0
        assert value(drained, "memarc_projection_lag_seconds_bucket", le="+Inf") == lag_before + 1

        # a recall adds one observation to each stage's histogram
        r = await env.client.post(f"{BASE}/search", json={"query": QUERY, "top": 5}, headers=h)
        assert r.status_code == 200
        assert [x["card"]["id"] for x in r.json()["results"]] == [card_id]
        recalled, text = await scrape(env)
        for stage in RECALL_STAGES:
            assert value(recalled, "memarc_recall_stage_duration_seconds_count", stage=stage) == \
                value(drained, "memarc_recall_stage_duration_seconds_count", stage=stage) + 1
        assert value(recalled, "memarc_recall_stage_duration_seconds_sum", stage="embed") > 0
        # labels carry no card content, query, path id or token, and an open scrape no
        # workspace id
        for secret in (QUERY, CARD["title"], card_id, h["Authorization"].split()[1], "acme"):
            assert secret not in text


async def test_lag_buckets_follow_prometheus_le(make_env):
    """A lag equal to a bucket's bound counts in that bucket (``le``, as prometheus-client's
    own histograms): the lags are set exactly on bounds in PostgreSQL."""
    async with make_env() as env:
        env.workspace("acme")
        env.workspace("beta")
        for ws in ("acme", "beta"):
            r = await env.client.post(f"/api/workspaces/{ws}/memory", json=CARD,
                                      headers=env.token(ws))
            assert r.status_code == 201
        await env.drain()
        assert env.scalar("SELECT count(*) FROM memory.projection_ops WHERE status = 'done'") == 2
        env.scalar("UPDATE memory.projection_ops SET created_at = completed_at - "
                   "CASE workspace_id WHEN 'acme' THEN interval '0.5 s' ELSE interval '2 h' END "
                   "RETURNING id")
        samples, _ = await scrape(env)
        bucket = "memarc_projection_lag_seconds_bucket"
        assert value(samples, bucket, le="0.25") == 0
        assert value(samples, bucket, le="0.5") == 1  # exactly on the bound: counted
        assert value(samples, bucket, le="3600.0") == 1
        assert value(samples, bucket, le="+Inf") == 2  # above the last bound
        assert [k[1][0][1] for k in samples if k[0] == bucket][:len(LAG_BUCKETS)] == \
            [str(float(b)) for b in LAG_BUCKETS]
        assert abs(value(samples, "memarc_projection_lag_seconds_sum") - 7200.5) < 1e-6
        assert value(samples, "memarc_projection_operations", status="done") == 2


async def test_metrics_token_is_required_when_configured(make_env, tmp_path):
    token_file = tmp_path / "metrics-token"
    token_file.write_text("s3cret-metrics\n")
    assert load_settings({"MEMARC_METRICS_TOKEN_FILE": str(token_file)}).metrics_token == \
        "s3cret-metrics"
    # a token file that holds no token, or cannot be read, is refused: never an open /metrics
    # while the operator asked for a token
    (tmp_path / "empty").write_text(" \n")
    for path, message in ((tmp_path / "empty", "holds no token"),
                          (tmp_path / "missing", "cannot read")):
        with pytest.raises(ValueError, match=f"MEMARC_METRICS_TOKEN_FILE: .*{message}"):
            load_settings({"MEMARC_METRICS_TOKEN_FILE": str(path)})
    async with make_env(metrics_token="s3cret-metrics") as env:
        env.workspace("acme")
        for headers in ({}, {"Authorization": "Bearer wrong"}, env.token("acme", "memory.read")):
            r = await env.client.get("/metrics", headers=headers)
            assert r.status_code == 401
            assert r.json()["code"] == "unauthorized"
        samples, _ = await scrape(env, Authorization="Bearer s3cret-metrics")
        assert value(samples, "memarc_http_requests_total", method="GET", route="/metrics",
                     status="401") == 3


async def test_metrics_answer_without_postgresql(make_env):
    """PostgreSQL unreachable: ``/metrics`` still answers, says so, and has no queue figures."""
    async with make_env(database_url="postgresql://memarc@127.0.0.1:9/memarc") as env:
        assert (await env.client.get("/healthz")).status_code == 200
        samples, text = await scrape(env)
        assert value(samples, "memarc_database_up") == 0
        # its help names both causes of a 0: unreachable, or a schema not migrated
        help_line = next(x for x in text.splitlines() if x.startswith("# HELP memarc_database_up"))
        assert "could not be reached" in help_line and "schema" in help_line, help_line
        assert not any(name.startswith("memarc_projection_") for name, _ in samples)
        assert value(samples, "memarc_http_requests_total", method="GET", route="/healthz",
                     status="200") == 1


async def test_the_archives_of_one_process_log_a_metrics_outage_once(make_env):
    """``Resources.archive()`` builds an archive per call that holds no state of its own: the
    archives of one process (the writer's, the explorer's, one per call) share its outage log,
    so PostgreSQL being down is one warning for the metrics, not one per archive."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.DEBUG)
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger("shared.archive.cards")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        async with make_env(database_url="postgresql://memarc@127.0.0.1:9/memarc") as env:
            first, second = env.resources.archive(), env.resources.archive()
            assert first is not second
            assert await first.queue_figures() is None
            assert await second.queue_figures() is None
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    said = [r.levelno for r in records
            if r.getMessage().startswith("metrics without the projection queue")]
    assert said == [logging.WARNING, logging.DEBUG], said


async def test_metrics_say_database_down_while_the_schema_is_outdated(make_env):
    """PostgreSQL answers but the archive schema is not the migrated one (renamed under the
    running writer): ``memarc_database_up`` is 0 too, without queue figures, and 1 again once
    the schema is back."""
    async with make_env() as env:
        env.workspace("acme")
        samples, _ = await scrape(env)
        assert value(samples, "memarc_database_up") == 1
        with psycopg.connect(env.migrator_url, autocommit=True) as conn:
            conn.execute("ALTER SCHEMA memory RENAME TO memory_moved")
        try:
            samples, _ = await scrape(env)
            assert value(samples, "memarc_database_up") == 0
            assert not any(name.startswith("memarc_projection_") for name, _ in samples)
        finally:
            with psycopg.connect(env.migrator_url, autocommit=True) as conn:
                conn.execute("ALTER SCHEMA memory_moved RENAME TO memory")
        samples, _ = await scrape(env)
        assert value(samples, "memarc_database_up") == 1


def test_each_metrics_object_has_a_registry_of_its_own():
    """Two apps in one process (the tests, ``memarc up``'s shared resources aside) never
    collide on prometheus-client's global registry, and count apart."""
    first, second = Metrics("qdrant-edge", 3), Metrics("qdrant-local", 3)
    first.observe_request("GET", "/healthz", 200, 0.01)
    first.observe_recall({"embed": 0.01, "search": 0.02, "unknown": 1.0})
    assert first.registry.get_sample_value(
        "memarc_http_requests_total", {"method": "GET", "route": "/healthz", "status": "200"}) == 1
    assert second.registry.get_sample_value(
        "memarc_http_requests_total", {"method": "GET", "route": "/healthz", "status": "200"}) is None
    assert first.registry.get_sample_value(
        "memarc_recall_stage_duration_seconds_count", {"stage": "search"}) == 1
    assert first.registry.get_sample_value(
        "memarc_recall_stage_duration_seconds_count", {"stage": "verify"}) == 0


def test_created_series_are_written_unless_disabled_as_the_readme_says():
    """prometheus-client writes a ``_created`` gauge next to each counter and histogram series;
    ``PROMETHEUS_DISABLE_CREATED_SERIES=True`` (read when prometheus-client is imported, hence a
    child process) leaves them out (docs/operations.md, "Metrics")."""
    import os
    import subprocess
    import sys

    script = ("from shared.metrics import Metrics\n"
              "m = Metrics('qdrant-edge', 3)\n"
              "m.observe_request('GET', '/healthz', 200, 0.01)\n"
              "m.observe_recall({'embed': 0.01})\n"
              "print(m.exposition(None).decode())")
    families = {}
    for disabled in ("", "True"):
        env = {**os.environ, "PROMETHEUS_DISABLE_CREATED_SERIES": disabled}
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, check=True).stdout
        families[disabled] = {f.name for f in text_string_to_metric_families(out)}
    created = {"memarc_http_requests_created", "memarc_http_request_duration_seconds_created",
               "memarc_recall_stage_duration_seconds_created", "memarc_recall_records_created",
               "memarc_recall_records_lost_created"}
    assert created <= families[""]
    assert not created & families["True"]
    assert families["True"] == families[""] - created


class _Counting:
    """Counts the transactions a :class:`~shared.store.database.Database` opens and the
    statements run in them (a spy around the real pool: every transaction still runs on
    PostgreSQL)."""

    def __init__(self, db) -> None:
        self.db, self.transactions, self.statements = db, 0, 0
        self._transaction = db.transaction

    @contextlib.asynccontextmanager
    async def transaction(self, *args, **kwargs):
        self.transactions += 1
        async with self._transaction(*args, **kwargs) as conn:
            execute = conn.execute

            async def counted(*a, **kw):
                self.statements += 1
                return await execute(*a, **kw)

            conn.execute = counted
            try:
                yield conn
            finally:
                conn.execute = execute


async def test_a_scrape_costs_one_statement_whatever_the_number_of_workspaces(make_env):
    """Issue 25, case 7: the queue figures are read in one transaction with 1 workspace and with
    51 (it was 2 and 52 transactions), in one statement, and the latest recall evaluations in
    one more (issue 34), whatever the number of workspaces; an open scrape names no workspace id,
    one that presents the metrics token gets the per-workspace series."""
    async with make_env(metrics_token="s3cret-metrics") as env:
        auth = {"Authorization": "Bearer s3cret-metrics"}
        counts, made = {}, 0
        names = ["acme-hr-layoffs"] + [f"ws-{i:02d}" for i in range(50)]
        for n in (1, 51):
            for name in names[made:n]:
                env.workspace(name)
            made = n
            spy = _Counting(env.resources.db)
            env.resources.db.transaction = spy.transaction
            try:
                samples, text = await scrape(env, **auth)
            finally:
                del env.resources.db.transaction
            counts[n] = (spy.transactions, spy.statements)
            assert value(samples, "memarc_database_up") == 1
            for name in names[:n]:
                assert f'workspace="{name}"' in text
        assert counts[1] == (1, 2) and counts[51] == (1, 2), counts
        r = await env.client.post("/api/workspaces/acme-hr-layoffs/memory", json=CARD,
                                  headers=env.token("acme-hr-layoffs"))
        assert r.status_code == 201
        samples, _ = await scrape(env, **auth)
        assert value(samples, "memarc_projection_operations", workspace="acme-hr-layoffs",
                     status="pending") == 1
        assert value(samples, "memarc_projection_operations", workspace="ws-07",
                     status="pending") == 0
    async with make_env() as env:  # the same database, /metrics open
        samples, text = await scrape(env)
        assert "acme-hr-layoffs" not in text and 'workspace="' not in text
        assert value(samples, "memarc_projection_operations", status="pending") == 1
