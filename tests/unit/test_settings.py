"""Settings from the environment (:func:`shared.config.load_settings`): every default, how each
variable is read, and the refusal of a bad value; and that every setting is a row
of :data:`shared.config.SETTINGS` with a description (``tests/test_docs.py`` checks that the
manual's settings chapter, ``docs/settings.md``, names each of them and every variable the code
reads).

Pure: an ``env`` dictionary and files in the test's temporary folder.
"""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest

from shared.config import SETTINGS, Settings, load_settings


#: every field of an empty environment, as ``load_settings({})`` resolves it
DEFAULTS = {
    "database_url": None, "migrator_database_url": None, "db_schema": "memory",
    "redis_url": None, "qdrant_url": None, "qdrant_path": None, "qdrant_api_key": None,
    "qdrant_shards": None, "qdrant_replicas": None, "qdrant_write_consistency": None,
    "index_engine": "edge", "collection_prefix": "memarc_",
    "dense_model": "sentence-transformers/all-MiniLM-L6-v2", "dense_model_path": None,
    "dense_model_it": None, "dense_model_it_path": None, "model_root": None, "bm25_model_path": None,
    "embed_threads": 2, "data_dir": ".memarc", "sweep_seconds": 5.0, "lease_seconds": 120,
    "job_timeout_seconds": 600,
    "max_attempts": 5, "eval_every_hours": 24.0, "worker_jobs": 2, "lock_timeout_seconds": 10.0, "db_pool_size": 8,
    "db_pool_timeout_seconds": 5.0, "privacy_max_chars": 500_000, "metrics_token": None,
    "admin_session_hours": 12.0, "admin_secret": None, "explorer_url": None, "admin_url": None,
    "recall_query_text": True, "recall_retention_days": 90,
}


def _fields(settings: Settings) -> dict[str, object]:
    return msgspec.structs.asdict(settings)


def _typed(values: dict[str, object]) -> dict[str, tuple[type, object]]:
    """Each value with its type, so that ``5`` and ``5.0`` differ."""
    return {name: (type(value), value) for name, value in values.items()}


def test_an_empty_environment_gives_every_default():
    assert _typed(_fields(load_settings({}))) == _typed(DEFAULTS)


def test_an_empty_variable_is_unset():
    env = {row.variable: "" for row in SETTINGS}
    assert _typed(_fields(load_settings(env))) == _typed(DEFAULTS)


def test_each_variable_is_read_into_its_field(tmp_path: Path):
    (tmp_path / "key").write_text(" qdrant-key \n")
    (tmp_path / "metrics").write_text("metrics-token\n")
    (tmp_path / "admin").write_text("admin-secret\n")
    env = {
        "MEMARC_DATABASE_URL": "postgresql://app@db.example:5433/archive?sslmode=require",
        "MEMARC_DB_SCHEMA": "mem", "MEMARC_REDIS_URL": "redis://r:6379/2",
        "MEMARC_QDRANT_URL": "http://q:6333", "MEMARC_QDRANT_PATH": "/q",
        "MEMARC_QDRANT_API_KEY_FILE": str(tmp_path / "key"), "MEMARC_QDRANT_SHARDS": "3",
        "MEMARC_QDRANT_REPLICAS": " 2", "MEMARC_QDRANT_WRITE_CONSISTENCY": "1",
        "MEMARC_INDEX_ENGINE": "LOCAL", "MEMARC_COLLECTION_PREFIX": "x_",
        "MEMARC_DENSE_MODEL": "m", "MEMARC_DENSE_MODEL_PATH": "/m",
        "MEMARC_DENSE_MODEL_IT": "m-it", "MEMARC_DENSE_MODEL_IT_PATH": "/m-it",
        "MEMARC_MODEL_ROOT": "/models", "MEMARC_BM25_MODEL_PATH": "/bm25", "MEMARC_EMBED_THREADS": "0",
        "MEMARC_DATA_DIR": "/state", "MEMARC_SWEEP_SECONDS": "0.5", "MEMARC_LEASE_SECONDS": "30",
        "MEMARC_JOB_TIMEOUT_SECONDS": "90", "MEMARC_MAX_ATTEMPTS": "-1", "MEMARC_EVAL_EVERY_HOURS": "0",
        "MEMARC_WORKER_JOBS": "4",
        "MEMARC_LOCK_TIMEOUT_SECONDS": "2", "MEMARC_DB_POOL_SIZE": "16",
        "MEMARC_DB_POOL_TIMEOUT_SECONDS": "1e1", "MEMARC_PRIVACY_MAX_CHARS": "60",
        "MEMARC_METRICS_TOKEN_FILE": str(tmp_path / "metrics"),
        "MEMARC_ADMIN_SESSION_HOURS": "0.5", "MEMARC_ADMIN_SECRET_FILE": str(tmp_path / "admin"),
        "MEMARC_EXPLORER_URL": "http://e:8001", "MEMARC_ADMIN_URL": "http://w:8000/admin",
        "MEMARC_RECALL_QUERY_TEXT": " OFF", "MEMARC_RECALL_RETENTION_DAYS": "7",
    }
    assert _typed(_fields(load_settings(env))) == _typed({
        "database_url": "postgresql://app@db.example:5433/archive?sslmode=require",
        "migrator_database_url": "postgresql://app@db.example:5433/archive?sslmode=require",
        "db_schema": "mem", "redis_url": "redis://r:6379/2", "qdrant_url": "http://q:6333",
        "qdrant_path": "/q", "qdrant_api_key": "qdrant-key", "qdrant_shards": 3,
        "qdrant_replicas": 2, "qdrant_write_consistency": 1, "index_engine": "local",
        "collection_prefix": "x_", "dense_model": "m", "dense_model_path": "/m",
        "dense_model_it": "m-it", "dense_model_it_path": "/m-it", "model_root": "/models",
        "bm25_model_path": "/bm25",
        "embed_threads": 0, "data_dir": "/state", "sweep_seconds": 0.5, "lease_seconds": 30,
        "job_timeout_seconds": 90, "max_attempts": -1, "eval_every_hours": 0.0, "worker_jobs": 4, "lock_timeout_seconds": 2.0, "db_pool_size": 16,
        "db_pool_timeout_seconds": 10.0, "privacy_max_chars": 60,
        "metrics_token": "metrics-token", "admin_session_hours": 0.5,
        "admin_secret": "admin-secret", "explorer_url": "http://e:8001",
        "admin_url": "http://w:8000/admin", "recall_query_text": False,
        "recall_retention_days": 7,
    })


def test_password_files_complete_their_logins(tmp_path: Path):
    (tmp_path / "app").write_text("p@ss word\n")
    (tmp_path / "owner").write_text("s3cret")
    env = {"MEMARC_DATABASE_URL": "postgresql://app@[::1]:5432/archive",
           "MEMARC_DATABASE_PASSWORD_FILE": str(tmp_path / "app")}
    s = load_settings(env)
    assert s.database_url == "postgresql://app:p%40ss%20word@[::1]:5432/archive"
    assert s.migrator_database_url == s.database_url
    s = load_settings({**env, "MEMARC_MIGRATOR_DATABASE_URL": "postgresql://owner@h/archive",
                       "MEMARC_MIGRATOR_PASSWORD_FILE": str(tmp_path / "owner")})
    assert s.migrator_database_url == "postgresql://owner:s3cret@h/archive"
    # a password file without its URL is not read
    s = load_settings({"MEMARC_DATABASE_PASSWORD_FILE": str(tmp_path / "missing"),
                       "MEMARC_MIGRATOR_PASSWORD_FILE": str(tmp_path / "missing")})
    assert (s.database_url, s.migrator_database_url) == (None, None)
    with pytest.raises(FileNotFoundError):
        load_settings({**env, "MEMARC_DATABASE_PASSWORD_FILE": str(tmp_path / "missing")})


def test_the_runtime_login_can_be_host_port_name_user_and_a_password_file(tmp_path: Path):
    """As the specification's installation gives it: no URL, its parts and a password file."""
    (tmp_path / "app").write_text("p@ss\n")
    env = {"MEMARC_DATABASE_HOST": "db.internal", "MEMARC_DATABASE_PORT": "5433",
           "MEMARC_DATABASE_NAME": "archive", "MEMARC_DATABASE_USER": "memarc app",
           "MEMARC_DATABASE_PASSWORD_FILE": str(tmp_path / "app")}
    s = load_settings(env)
    assert s.database_url == "postgresql://memarc%20app:p%40ss@db.internal:5433/archive"
    assert s.migrator_database_url == s.database_url
    s = load_settings({"MEMARC_DATABASE_HOST": "::1", "MEMARC_DATABASE_NAME": "a"})
    assert s.database_url == "postgresql://[::1]/a"  # libpq's port and user
    with pytest.raises(ValueError, match="MEMARC_DATABASE_URL or MEMARC_DATABASE_HOST, .*not both"):
        load_settings({**env, "MEMARC_DATABASE_URL": "postgresql://app@h/archive"})
    with pytest.raises(ValueError, match="MEMARC_DATABASE_NAME need MEMARC_DATABASE_HOST"):
        load_settings({"MEMARC_DATABASE_NAME": "archive"})
    with pytest.raises(ValueError, match="MEMARC_DATABASE_PORT must be a positive integer"):
        load_settings({**env, "MEMARC_DATABASE_PORT": "0"})


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("MEMARC_QDRANT_SHARDS", "0", "MEMARC_QDRANT_SHARDS must be a positive integer, not '0'"),
    ("MEMARC_QDRANT_REPLICAS", "-2", "MEMARC_QDRANT_REPLICAS must be a positive integer, not '-2'"),
    ("MEMARC_QDRANT_WRITE_CONSISTENCY", "two", "invalid literal for int() with base 10: 'two'"),
    ("MEMARC_DB_POOL_SIZE", "0", "MEMARC_DB_POOL_SIZE must be a positive integer, not '0'"),
    ("MEMARC_EMBED_THREADS", "1.5", "invalid literal for int() with base 10: '1.5'"),
    ("MEMARC_LEASE_SECONDS", "2m", "invalid literal for int() with base 10: '2m'"),
    ("MEMARC_LEASE_SECONDS", "0", "MEMARC_LEASE_SECONDS must be a positive integer, not '0'"),
    ("MEMARC_JOB_TIMEOUT_SECONDS", "-5",
     "MEMARC_JOB_TIMEOUT_SECONDS must be a positive integer, not '-5'"),
    ("MEMARC_MAX_ATTEMPTS", " ", "invalid literal for int() with base 10: ' '"),
    ("MEMARC_WORKER_JOBS", "x", "invalid literal for int() with base 10: 'x'"),
    ("MEMARC_PRIVACY_MAX_CHARS", "5e5", "invalid literal for int() with base 10: '5e5'"),
    ("MEMARC_SWEEP_SECONDS", "soon", "could not convert string to float: 'soon'"),
    ("MEMARC_LOCK_TIMEOUT_SECONDS", "1s", "could not convert string to float: '1s'"),
    ("MEMARC_DB_POOL_TIMEOUT_SECONDS", "-", "could not convert string to float: '-'"),
    ("MEMARC_INDEX_ENGINE", "Disk", "MEMARC_INDEX_ENGINE must be one of local, edge, not 'disk'"),
    ("MEMARC_RECALL_QUERY_TEXT", "no", "MEMARC_RECALL_QUERY_TEXT must be on or off, not 'no'"),
    ("MEMARC_RECALL_RETENTION_DAYS", "0",
     "MEMARC_RECALL_RETENTION_DAYS must be a positive integer, not '0'"),
])
def test_a_bad_value_is_refused_naming_it(variable: str, value: str, message: str):
    with pytest.raises(ValueError) as refused:
        load_settings({variable: value})
    assert str(refused.value) == message


def test_unreadable_secret_files_are_refused(tmp_path: Path):
    with pytest.raises(FileNotFoundError):
        load_settings({"MEMARC_QDRANT_API_KEY_FILE": str(tmp_path / "missing")})
    (tmp_path / "empty").write_text(" \n")
    with pytest.raises(ValueError, match="MEMARC_METRICS_TOKEN_FILE: .* holds no token"):
        load_settings({"MEMARC_METRICS_TOKEN_FILE": str(tmp_path / "empty")})
    with pytest.raises(ValueError, match="MEMARC_METRICS_TOKEN_FILE: cannot read"):
        load_settings({"MEMARC_METRICS_TOKEN_FILE": str(tmp_path / "missing")})


def test_keyword_overrides_win_and_are_checked():
    s = load_settings({"MEMARC_DB_SCHEMA": "mem", "MEMARC_WORKER_JOBS": "4"},
                      db_schema="other", sweep_seconds=1.0)
    assert (s.db_schema, s.worker_jobs, s.sweep_seconds) == ("other", 4, 1.0)
    with pytest.raises(ValueError, match="MEMARC_INDEX_ENGINE must be one of local, edge"):
        load_settings({}, index_engine="disk")


def test_the_process_environment_is_read_by_default(monkeypatch: pytest.MonkeyPatch):
    for row in SETTINGS:
        monkeypatch.delenv(row.variable, raising=False)
    monkeypatch.setenv("MEMARC_DB_SCHEMA", "from_env")
    assert load_settings().db_schema == "from_env"


# ---- every setting is documented ----

def test_every_setting_is_a_row_with_a_description():
    variables = [row.variable for row in SETTINGS]
    assert len(variables) == len(set(variables))
    assert all(re.fullmatch(r"MEMARC_[A-Z0-9_]+", v) for v in variables)
    assert [row.variable for row in SETTINGS if len(row.description.split()) < 3] == []
    fields = [row.field for row in SETTINGS if row.field is not None]
    assert len(fields) == len(set(fields))
    assert sorted(fields) == sorted(Settings.__struct_fields__)
