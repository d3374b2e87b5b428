"""PostgreSQL access: the connection pool, workspace transactions and the named-query loader.

Every transaction that touches workspace tables goes through :meth:`Database.transaction`, which
does ``SET LOCAL ROLE`` to the runtime or reader role (superusers bypass row-level security
otherwise) and sets ``memarc.workspace`` for the forced row-level security policies. Writes of one
workspace are serialised by a transaction-scoped advisory lock keyed by the workspace; recall reads
take the same lock in shared mode (DESIGN §3, §5).

Runtime SQL lives in ``shared/store/queries.sql`` under ``-- name: <query>`` headers and is referred
to by name (``Q.cards_get``), only from the store modules beside this one
(``tests/test_store_queries.py`` checks it).

Driver errors are translated here, once, into the archive's errors (:mod:`shared.errors`), as
procrastinate's ``wrap_exceptions`` does: :meth:`Database.connection` for every runtime
transaction, :func:`savepoint` for a part of one, :func:`bootstrap_errors` for the migrator's
commands. No module above the store imports the driver.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path
from typing import Literal, TypeVar

import psycopg
from psycopg import AsyncConnection, sql
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from shared.errors import (BootstrapUnavailable, DatabaseUnavailable, IntegrityViolation,
                           InvalidInput, LockTimeout, PoolExhausted, SchemaOutdated,
                           StatementCanceled, TransactionConflict)

log = logging.getLogger(__name__)

#: a connection of a transaction (:meth:`Database.transaction`), as the store functions take it
Connection = AsyncConnection

RUNTIME_ROLE = "memarc_runtime"
READER_ROLE = "memarc_reader"
MIGRATOR_ROLE = "memarc_migrator"
MIGRATIONS_DIR = Path(__file__).resolve().parents[2] / "migrations"
#: seconds a pool checkout waits before it asks PostgreSQL directly whether it is there (when the
#: pool is not simply busy): a server that went away is then a 503 within about this long
PROBE_AFTER_SECONDS = 0.3
#: libpq connect_timeout of that probe (libpq treats values below 2 as 2)
PROBE_CONNECT_TIMEOUT = 2


class _Queries:
    """Named SQL statements from ``shared/store/queries.sql``; attribute access by name."""

    def __init__(self, text: str) -> None:
        self._queries: dict[str, str] = {}
        for block in re.split(r"^-- name: ", text, flags=re.M)[1:]:
            name, _, body = block.partition("\n")
            lines = body.strip().splitlines()
            while lines and (not lines[-1].strip() or lines[-1].lstrip().startswith("--")):
                lines.pop()  # comments between blocks belong to the next section, not this query
            self._queries[name.strip()] = "\n".join(lines).strip().rstrip(";")

    def __getattr__(self, name: str) -> str:
        try:
            return self._queries[name]
        except KeyError:
            raise AttributeError(f"no query named {name!r} in queries.sql") from None


@cache
def _load_queries() -> _Queries:
    return _Queries((Path(__file__).parent / "queries.sql").read_text(encoding="utf-8"))


class _LazyQueries:
    def __getattr__(self, name: str) -> str:
        return getattr(_load_queries(), name)


Q = _LazyQueries()


def expected_schema_versions() -> set[int]:
    """The migration numbers shipped with this code (``migrations/NNN_*.sql``)."""
    return {int(p.name.split("_", 1)[0]) for p in MIGRATIONS_DIR.glob("[0-9][0-9][0-9]_*.sql")}


def expected_schema_version() -> int:
    """The highest migration number shipped with this code."""
    return max(expected_schema_versions(), default=0)


_Unavailable = TypeVar("_Unavailable", DatabaseUnavailable, StatementCanceled)


def translate_db_error(exc: BaseException,
                       kind: type[_Unavailable] = DatabaseUnavailable) -> _Unavailable:
    """Map a connection-level driver error to the archive's 503 ``database_unavailable`` (the
    one place its text is written)."""
    return kind(f"PostgreSQL is unavailable: {type(exc).__name__}")


#: What PostgreSQL answers when the archive schema was dropped or altered under a running
#: process (a schema, table, column, function, type or role the named queries rely on is gone,
#: or an object was replaced by one of another kind). The named queries are checked against the
#: migrated schema (tests/test_store_queries.py), so at run time these mean the schema changed.
SCHEMA_ERRORS: tuple[type[psycopg.Error], ...] = (
    psycopg.errors.InvalidSchemaName, psycopg.errors.UndefinedTable,
    psycopg.errors.UndefinedColumn, psycopg.errors.UndefinedFunction,
    psycopg.errors.UndefinedObject, psycopg.errors.WrongObjectType)


def translate_schema_error(exc: psycopg.Error) -> SchemaOutdated:
    """Map a :data:`SCHEMA_ERRORS` error to the archive's 503 ``schema_outdated``, naming what
    PostgreSQL found missing."""
    found = (exc.diag.message_primary or type(exc).__name__)[:200]
    return SchemaOutdated(f"the archive schema was changed under the running process ({found}): "
                          "run `memarc migrate`")


class Database:
    """An async connection pool to the archive database, with workspace-scoped transactions.

    :param url: libpq URL of the runtime login.
    :param schema: PostgreSQL schema of the archive tables.
    :param max_size: most pooled connections (``MEMARC_DB_POOL_SIZE``).
    :param timeout: seconds a request waits for a pooled connection before 503
        ``pool_exhausted`` (``MEMARC_DB_POOL_TIMEOUT_SECONDS``).
    :param lock_timeout: see :attr:`lock_timeout`.
    """

    def __init__(self, url: str, schema: str = "memory", *, min_size: int = 1, max_size: int = 8,
                 timeout: float = 5.0, lock_timeout: float = 10.0) -> None:
        self.url = url
        self.schema = schema
        self.timeout = timeout
        #: seconds a transaction that takes the workspace lock waits for it (and for row locks
        #: after it) before it ends in :class:`LockTimeout` (503 ``lock_timeout``), never a hang
        self.lock_timeout = lock_timeout
        self.pool = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            open=False,
            timeout=timeout,
            check=AsyncConnectionPool.check_connection,
            kwargs={
                "options": f"-c search_path={schema} -c timezone=UTC",
                "row_factory": dict_row,
                "connect_timeout": max(1, int(timeout)),
                "application_name": "memarc",
            },
            reconnect_timeout=0,
        )
        #: set when PostgreSQL was last found unreachable: requests then probe it directly and
        #: fail at once instead of each waiting the pool's whole timeout (issue 14)
        self._unreachable = False

    async def open(self) -> None:
        """Open the pool without waiting for PostgreSQL (connections are made on demand)."""
        await self.pool.open(wait=False)

    async def close(self) -> None:
        """Close the pool."""
        await self.pool.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection]:
        """A pooled connection; driver connection failures become :class:`DatabaseUnavailable`,
        a schema dropped or altered since start-up (:data:`SCHEMA_ERRORS`) :class:`SchemaOutdated`
        (both 503).

        :raises PoolExhausted: every pooled connection stayed in use for the pool's whole
            ``timeout`` while PostgreSQL itself answers (503 ``pool_exhausted``).
        :raises DatabaseUnavailable: PostgreSQL cannot be reached (within about
            :data:`PROBE_AFTER_SECONDS` of the request when the server refuses connections).
        :raises LockTimeout: a lock was not granted within ``lock_timeout``.
        :raises TransactionConflict: PostgreSQL aborted the transaction for a deadlock or a
            serialization failure (503 ``transaction_conflict``; the server stays marked up).
        :raises StatementCanceled: PostgreSQL canceled a statement (503 ``database_unavailable``;
            the server stays marked up).
        :raises InvalidInput: a value PostgreSQL cannot store.

        Other driver errors (a constraint a write breaks, a missing privilege) pass unchanged: a
        store function that expects one catches it (or its caller uses :func:`savepoint`);
        anywhere else it is a bug, which the writer answers 500.
        """
        if self._unreachable:
            await self._probe()
        conn = await self._checkout()
        try:
            async with conn:
                yield conn
        except psycopg.DataError as exc:  # a value PostgreSQL cannot store: bad input, not a 500
            raise InvalidInput(f"invalid value: {exc.diag.message_primary or exc}") from exc
        except (psycopg.errors.TransactionRollback, psycopg.errors.DeadlockDetected,
                psycopg.errors.SerializationFailure) as exc:  # deadlock / serialization: retry
            raise TransactionConflict(f"PostgreSQL aborted the transaction to resolve a conflict "
                                      f"with a concurrent one ({exc.sqlstate}); nothing was "
                                      "written, try again") from exc
        except psycopg.errors.LockNotAvailable as exc:  # lock_timeout: the server is fine
            raise LockTimeout(f"a lock of this workspace was not granted within "
                              f"{self.lock_timeout:g} s (MEMARC_LOCK_TIMEOUT_SECONDS); "
                              "try again") from exc
        except SCHEMA_ERRORS as exc:
            raise translate_schema_error(exc) from exc
        except psycopg.errors.QueryCanceled as exc:  # the server answers: not marked unreachable
            raise translate_db_error(exc, StatementCanceled) from exc
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self._unreachable = True
            raise translate_db_error(exc) from exc
        finally:
            await self.pool.putconn(conn)

    def _saturated(self) -> bool:
        """True when every connection the pool may hold exists and is checked out (a wait is
        then for a busy pool, not for a server that refuses new connections)."""
        stats = self.pool.get_stats()
        return stats["pool_size"] >= self.pool.max_size and not stats["pool_available"]

    async def _checkout(self) -> AsyncConnection:
        """Take a connection from the pool, waiting at most ``timeout`` seconds in all.

        A wait longer than :data:`PROBE_AFTER_SECONDS` while the pool is not saturated means the
        pool cannot make connections: PostgreSQL is then probed directly, so a server that went
        away is a 503 ``database_unavailable`` at once rather than after the whole pool wait. A
        wait that outlasts ``timeout`` is classified by one more probe: the server answers, so
        the pool is exhausted by requests in progress (``pool_exhausted``), or it does not
        (``database_unavailable``).

        :raises PoolExhausted / DatabaseUnavailable: see above.
        """
        first = min(PROBE_AFTER_SECONDS, self.timeout)
        try:
            return await self.pool.getconn(timeout=first)
        except PoolTimeout:
            if not self._saturated():
                await self._probe()
        try:
            return await self.pool.getconn(timeout=max(0.01, self.timeout - first))
        except PoolTimeout as exc:
            await self._probe()
            raise PoolExhausted(
                f"all {self.pool.max_size} pooled PostgreSQL connections stayed in use for "
                f"{self.timeout:g} s (MEMARC_DB_POOL_SIZE, MEMARC_DB_POOL_TIMEOUT_SECONDS); "
                "try again") from exc
        except (psycopg.OperationalError, psycopg.InterfaceError) as exc:
            self._unreachable = True
            raise translate_db_error(exc) from exc

    async def _probe(self) -> None:
        """One direct connection attempt (refused at once when the server is down), so that a
        request answers 503 in milliseconds rather than after the pool's timeout; while
        PostgreSQL is known to be unreachable every request probes first, and once it connects
        the pool is used again (its broken connections are discarded by its check).

        :raises DatabaseUnavailable: PostgreSQL cannot be reached (and is then marked so).
        """
        try:
            conn = await psycopg.AsyncConnection.connect(
                self.url, connect_timeout=PROBE_CONNECT_TIMEOUT, application_name="memarc")
        except (psycopg.OperationalError, OSError) as exc:
            self._unreachable = True
            raise translate_db_error(exc) from exc
        await conn.close()
        self._unreachable = False

    @asynccontextmanager
    async def transaction(
        self,
        workspace: str | None,
        *,
        role: Literal["runtime", "reader"] = "runtime",
        lock: Literal["exclusive", "shared"] | None = None,
        read_only: bool = False,
    ) -> AsyncIterator[AsyncConnection]:
        """One transaction as the runtime (or reader) role with ``workspace`` set for RLS.

        :param lock: take the workspace advisory lock, exclusively (writes) or shared (recall),
            waiting at most ``lock_timeout`` seconds.
        :raises DatabaseUnavailable: PostgreSQL cannot be reached.
        :raises LockTimeout: the lock (or a row lock later in the transaction) was not granted in
            time.
        """
        # One statement sets up the transaction (one round trip instead of four):
        # set_config('role', …, true) is SET LOCAL ROLE, and 'transaction_read_only' is
        # SET TRANSACTION READ ONLY (PostgreSQL docs, "SET", "set_config").
        setup = [sql.SQL("set_config('role', %(role)s, true)"),
                 sql.SQL("set_config('memarc.workspace', %(workspace)s, true)")]
        if read_only:
            setup.insert(0, sql.SQL("set_config('transaction_read_only', 'on', true)"))
        if lock is not None:  # bounded wait (lock_timeout is set before the lock is asked for)
            setup.append(sql.SQL("set_config('lock_timeout', %(lock_timeout)s, true)"))
            setup.append(sql.SQL(Q.database_workspace_lock_expr if lock == "exclusive"
                                 else Q.database_workspace_lock_shared_expr))
        statement = sql.SQL("SELECT ") + sql.SQL(", ").join(setup)
        params = {"role": RUNTIME_ROLE if role == "runtime" else READER_ROLE,
                  "workspace": workspace or "", "lock_timeout": f"{int(self.lock_timeout * 1000)}ms"}
        async with self.connection() as conn:
            async with conn.transaction():
                await conn.execute(statement, params)
                yield conn

    async def check_schema(self) -> None:
        """Refuse to run on a missing or outdated schema.

        :raises SchemaOutdated: the schema has no migrations table or an older version.
        :raises DatabaseUnavailable: PostgreSQL cannot be reached.
        """
        expected = expected_schema_versions()
        async with self.connection() as conn:
            try:
                cur = await conn.execute(
                    sql.SQL("SELECT version FROM {}.schema_migrations").format(
                        sql.Identifier(self.schema)
                    )
                )
                applied = {r["version"] for r in await cur.fetchall()}
            except psycopg.errors.UndefinedTable as exc:
                await conn.rollback()
                raise SchemaOutdated(
                    f"schema {self.schema!r} is missing: run `memarc migrate` first"
                ) from exc
            except psycopg.errors.InsufficientPrivilege as exc:
                await conn.rollback()
                raise SchemaOutdated(
                    f"this login cannot read {self.schema}.schema_migrations: run `memarc migrate`"
                ) from exc
            await conn.rollback()
        version, newest = max(applied, default=0), max(expected, default=0)
        missing = sorted(expected - applied)
        if missing and version <= newest:
            raise SchemaOutdated(
                f"schema {self.schema!r} lacks migration(s) "
                f"{', '.join(f'{v:03d}' for v in missing)} that this code needs: run `memarc migrate`"
            )
        if version > newest:
            raise SchemaOutdated(
                f"schema {self.schema!r} is at version {version}, newer than this code ({newest})"
            )


async def lock_workspace(conn: AsyncConnection, workspace: str) -> None:
    """Take the workspace's write lock (what :meth:`Database.transaction` takes at its start with
    ``lock="exclusive"``) in a transaction already open on ``conn``; it is released when the
    transaction ends, and no write of the workspace commits until then (an index rebuild's
    switch, see :mod:`shared.projection.rebuild`)."""
    await conn.execute(sql.SQL("SELECT ") + sql.SQL(Q.database_workspace_lock_expr),
                       {"workspace": workspace})


@asynccontextmanager
async def savepoint(conn: Connection) -> AsyncIterator[Connection]:
    """A savepoint in the transaction open on ``conn``: when the block raises, only its writes are
    undone and the transaction goes on.

    :raises IntegrityViolation: PostgreSQL refused a write of the block (a reference or a
        uniqueness rule), with PostgreSQL's message.
    """
    try:
        async with conn.transaction():
            yield conn
    except psycopg.errors.IntegrityError as exc:
        raise IntegrityViolation(str(exc)) from exc


_F = TypeVar("_F", bound=Callable[..., object])


def bootstrap_errors(func: _F) -> _F:
    """Decorate a bootstrap function (migrator credentials, synchronous): a connection-level
    driver error it raises is raised as :class:`~shared.errors.BootstrapUnavailable`, whose
    message is the driver error's type and text."""

    @functools.wraps(func)
    def wrapped(*args: object, **kwargs: object) -> object:
        try:
            return func(*args, **kwargs)
        except psycopg.OperationalError as exc:
            raise BootstrapUnavailable(f"{type(exc).__name__}: {exc}") from exc

    return wrapped  # type: ignore[return-value]
