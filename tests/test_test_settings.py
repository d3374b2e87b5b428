"""The test suite's own settings (issue 14, "Small ones"): ``MEMARC_TEST_REDIS_URL`` may name the
Redis database (``redis://host:6379/15``) and is then honoured; settings that name no usable
database, or two different ones, are refused before any test runs, with a message that says
what to change. Real Redis (the suite's), and a real pytest process for the refusal."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
import redis
from helpers import DEFAULT_TEST_REDIS_DB, ROOT, redis_test_url


@pytest.mark.parametrize(("url", "db", "expected"), [
    ("redis://h:6379", None, f"redis://h:6379/{DEFAULT_TEST_REDIS_DB}"),
    ("redis://h:6379/", "13", "redis://h:6379/13"),
    ("redis://h:6379/15", None, "redis://h:6379/15"),
    ("redis://h:6379/15", "15", "redis://h:6379/15"),
    ("redis://h:6379/15", "  ", "redis://h:6379/15"),
    ("redis://h:6379?db=15", None, "redis://h:6379/15"),
    ("rediss://u:p@h:6380/2?ssl_cert_reqs=none", None, "rediss://u:p@h:6380/2?ssl_cert_reqs=none"),
    (" redis://h:6379/15 ", None, "redis://h:6379/15"),
    ("unix:///run/redis.sock", "4", "unix:///run/redis.sock?db=4"),
    ("unix:///run/redis.sock?db=3", None, "unix:///run/redis.sock?db=3"),
])
def test_the_redis_database_named_by_the_url_is_honoured(url, db, expected):
    assert redis_test_url(url, db) == expected


@pytest.mark.parametrize(("url", "db", "says"), [
    ("redis://h:6379/15", "13", "name different Redis databases (13, 15)"),
    ("redis://h:6379/15?db=3", None, "name different Redis databases (3, 15)"),
    ("redis://h:6379/15/3", None, "'15/3' is not a Redis database number"),
    ("redis://h:6379/x", None, "'x' is not a Redis database number"),
    ("redis://h:6379", "-1", "'-1' is not a Redis database number"),
    ("redis://h:6379", "١", "'١' is not a Redis database number"),
    ("http://h:6379/1", None, "the scheme must be redis://, rediss:// or unix://"),
])
def test_redis_settings_naming_no_usable_database_are_refused(url, db, says):
    with pytest.raises(ValueError, match="MEMARC_TEST_REDIS") as info:
        redis_test_url(url, db)
    assert says in str(info.value)


def test_a_url_with_a_database_number_reaches_that_database(redis_url):
    """The fixture's URL and one naming the same database as a path or a query parameter write
    to the same Redis database, and not to another."""
    base, _, _ = redis_url.partition("?")
    number = int(redis_url.rsplit("=", 1)[1] if "?db=" in redis_url else base.rsplit("/", 1)[1])
    if redis_url.startswith("unix://"):
        spelled = f"{base}?db={number}"
    else:
        spelled = redis_url.rsplit("/", 1)[0] + f"?db={number}"
    key = f"memarc-test-{uuid.uuid4().hex}"
    honoured = redis.Redis.from_url(redis_test_url(spelled))
    same = redis.Redis.from_url(redis_url)
    other = redis.Redis.from_url(redis_test_url(spelled.replace(f"db={number}",
                                                                f"db={(number + 1) % 16}")))
    try:
        honoured.set(key, "1", ex=60)
        assert same.get(key) == b"1"
        assert other.get(key) is None
    finally:
        same.delete(key)
        for client in (honoured, same, other):
            client.close()


def test_pytest_refuses_two_different_databases_before_any_test_runs():
    env = {**os.environ, "MEMARC_TEST_REDIS_URL": "redis://127.0.0.1:6379/15",
           "MEMARC_TEST_REDIS_DB": "13"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--collect-only", "tests/unit/test_layers.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "name different Redis databases (13, 15)" in proc.stderr, proc.stderr
