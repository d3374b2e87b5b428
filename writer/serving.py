"""Serving and supervision: the process bodies of ``memarc up|writer|worker|explorer|mcp``
(DESIGN §11).

``memarc up`` runs everything in one process over the embedded defaults
(:mod:`writer.embedded`): the embedded index allows one process per storage path, so writer,
worker and explorer share one event loop and one set of :class:`~shared.resources.Resources`.
Separate processes need a Qdrant server (``MEMARC_QDRANT_URL``) and refuse otherwise. One signal
handler stops every server and the worker together.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import shlex
import signal
import socket
import sys
from pathlib import Path
from typing import Any

from shared.archive.explorer_sign_in import SIGN_IN_PATH, issue, signing_secret
from shared.auth import Principal
from shared.cards_file import bundled_cards
from shared.config import Settings, load_settings
from shared.models import LANGUAGES
from shared.worker import build_worker, stop_worker, supervise_worker
from shared.resources import Resources
from shared.store.migrations import login_of, migrate
from writer.demo import admin_sign_in_link, demo_token, load_demo_cards, ready_block
from writer.embedded import EmbeddedServices

log = logging.getLogger("memarc.serving")

EMBEDDED_REFUSAL = (
    "memarc {what} runs as a separate process and needs a shared Qdrant server "
    "(set MEMARC_QDRANT_URL). The embedded index allows one process per storage path: "
    "run `memarc up` to serve the writer, the worker and the explorer together."
)


class UsageError(Exception):
    """A condition that stops a command before it starts anything; ``code`` names it
    (``port_in_use``, ``already_running``)."""

    def __init__(self, message: str, code: str) -> None:
        super().__init__(message)
        self.code = code


def explorer_secret(settings: Settings) -> str:
    """The explorer's signing secret: ``DATASETTE_SECRET`` when set, else the one kept in
    ``data_dir/explorer_secret`` (mode 0600, created on first use), so that a sign-in cookie
    survives a restart of ``memarc up`` (Datasette otherwise draws a new one at each start) and
    ``memarc explorer-sign-in-link`` can sign a new link for the running explorer
    (:mod:`shared.archive.explorer_sign_in`).

    :raises OSError: the file cannot be read or written.
    """
    secret = signing_secret(settings.data_dir, create=True)
    assert secret is not None  # created when missing
    return secret


def explorer_app(settings: Settings, resources: Resources | None, workspaces: dict[str, Any],
                 secret: str | None = None):
    """The Datasette explorer over ``settings.database_url``; ``workspaces`` maps actor ids to
    the workspaces they may see (the plugin setting). ``resources``, when given, are shared with
    the explorer (its recall page uses their index). ``secret`` signs actor cookies: the data
    dir's in ``memarc up``, else ``DATASETTE_SECRET`` (Datasette's own variable), else a new one
    per start."""
    from datasette.app import Datasette

    metadata = {
        "title": "Memory archive",
        "plugins": {"memarc-explorer": {"database_url": settings.database_url,
                                         "schema": settings.db_schema,
                                         "workspaces": workspaces,
                                         "admin_url": settings.admin_url}},
    }
    ds = Datasette(memory=False, metadata=metadata, settings={"base_url": "/"},
                   secret=secret or os.environ.get("DATASETTE_SECRET") or None)
    if resources is not None:
        ds.memarc_resources = resources
    return ds


def _server(app: Any, host: str, port: int) -> Any:
    import uvicorn

    class Server(uvicorn.Server):
        """uvicorn without its own signal capture: one handler stops every server and the
        worker together (uvicorn would re-raise the signal after its own shutdown)."""

        @contextlib.contextmanager
        def capture_signals(self):  # type: ignore[override]
            yield

    return Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))


def _check_ports(host: str, ports: list[int]) -> None:
    """Refuse early, before anything is started or printed, when a port is taken."""
    for port in ports:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind((host, port))
            except OSError as exc:
                raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror}; is another "
                                 "memarc running? choose other ports with --port/--explorer-port",
                                 "port_in_use") from exc


@contextlib.contextmanager
def _data_dir_lock(data_dir: Path, refusal: str | None = None):
    """One process per data dir (`memarc up`, or `memarc mcp` over the embedded index): its
    embedded PostgreSQL, Redis and index are not shareable. ``refusal``: the message when another
    process holds it (``{data_dir}`` is filled in)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    fh = open(data_dir / "up.lock", "w")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.close()
        raise UsageError((refusal or "another `memarc up` (or `memarc mcp`) is running with data "
                          "dir {data_dir}; stop it first (or set MEMARC_DATA_DIR)"
                          ).format(data_dir=data_dir), "already_running") from None
    try:
        fh.write(str(os.getpid()))
        fh.flush()
        yield
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


async def _serve(apps: list[tuple[Any, str, int]], worker: Any | None,
                 stop: asyncio.Event | None = None) -> None:
    """Serve each ``(app, host, port)`` and run ``worker`` until SIGINT/SIGTERM, until ``stop``
    is set, or until one of them ends; then stop them all (15 s grace) and re-raise the first
    failure."""
    servers = [_server(app, host, port) for app, host, port in apps]
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal(sig: signal.Signals) -> None:
        if not stop.is_set():  # say so at once: stopping waits for the worker's current batch
            print(json.dumps({"stopping": sig.name, "note": "the worker finishes or gives back "
                              "its current batch first"}), file=sys.stderr, flush=True)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal, sig)
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    if worker is not None:
        tasks.append(asyncio.create_task(supervise_worker(worker)))
    stopper = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
    for s in servers:
        s.should_exit = True
    if worker is not None:
        await stop_worker(worker)
    pending = [t for t in tasks if not t.done()]
    if pending:
        _, still = await asyncio.wait(pending, timeout=15)
        for t in still:
            t.cancel()
        await asyncio.gather(*still, return_exceptions=True)
    for t in tasks:
        if t.done() and not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]


def run_up(host: str = "127.0.0.1", port: int = 8000, explorer_port: int = 8001,
           demo_workspace: str | None = None, cards_path: Path | None = None) -> None:
    """``memarc up``: embedded services, migrate, serve writer + worker + explorer in one process,
    print URLs and the explorer sign-in link; with ``demo_workspace``, also its three tokens
    (:func:`writer.demo.demo_token`: kept across starts on one data dir), import the cards of the cards file it lacks (by key), report
    projection progress and print the ready block (:func:`writer.demo.ready_block`). One
    SIGINT/SIGTERM stops it at any point, also while the import waits for the projection.

    :raises UsageError: another ``memarc up`` holds the data dir, or a port is taken (nothing
        started).
    """
    settings = load_settings()
    with _data_dir_lock(Path(settings.data_dir)):
        _check_ports(host, [port, explorer_port])
        embedded = EmbeddedServices(Path(settings.data_dir))
        embedded_database = not settings.database_url
        settings = embedded.apply(settings)
        try:
            asyncio.run(_up(settings, host, port, explorer_port, demo_workspace, cards_path,
                            embedded_database))
        finally:
            embedded.stop()


async def _up(settings: Settings, host: str, port: int, explorer_port: int,
              demo_workspace: str | None, cards_path: Path | None,
              embedded_database: bool = False) -> None:
    from writer.app import create_app

    import msgspec

    out = sys.stdout
    # the administration and the explorer link to each other
    settings = msgspec.structs.replace(
        settings, admin_url=settings.admin_url or f"http://{host}:{port}/admin",
        explorer_url=settings.explorer_url or f"http://{host}:{explorer_port}/-/memory")
    notices: list[str] = []
    applied = await asyncio.to_thread(migrate, settings.migrator_database_url, settings.db_schema,
                                      login_of(settings.database_url or ""), notices=notices)
    if applied:
        print(json.dumps({"migrated": applied, **({"notices": notices} if notices else {})}),
              file=out, flush=True)
    resources = await Resources.open(settings, with_index=True)
    try:
        assert resources.embedder is not None
        await asyncio.to_thread(resources.embedder.load, LANGUAGES)
        info: dict[str, Any] = {
            "writer": f"http://{host}:{port}",
            "openapi": f"http://{host}:{port}/schema",
            "metrics": f"http://{host}:{port}/metrics",
            "mcp": f"http://{host}:{port}/mcp",
            "explorer": f"http://{host}:{explorer_port}/-/memory",
            "admin": f"http://{host}:{port}/admin",
            "index": settings.qdrant_url or (
                f"embedded Qdrant Edge: {Path(settings.data_dir) / 'edge'}"
                if settings.index_engine == "edge"
                else f"embedded qdrant-client local mode: {settings.resolved_qdrant_path()}"),
            "database_url": settings.database_url,
        }
        token = None
        if demo_workspace:
            token = demo_token(settings, demo_workspace)
            info["workspace"] = demo_workspace
            info["token"] = token["token"]
            info["manage_token"] = token["manage_token"]["token"]
            info["review_token"] = token["review_token"]["token"]
            info["admin_sign_in"] = admin_sign_in_link(settings, demo_workspace,
                                                       f"http://{host}:{port}")
        secret = explorer_secret(settings)
        ds = explorer_app(settings, resources, {}, secret=secret)
        explorer_base = f"http://{host}:{explorer_port}"
        info["explorer_sign_in"] = f"{explorer_base}{SIGN_IN_PATH}?ticket={issue(secret)['ticket']}"
        info["new_sign_in_links"] = new_link_commands(
            explorer_base, f"http://{host}:{port}", demo_workspace,
            settings.migrator_database_url if embedded_database else None,
            Path(settings.data_dir).resolve())
        print(json.dumps(info, indent=2), file=out, flush=True)
        writer = create_app(settings, resources)
        worker = build_worker(resources)
        stop = asyncio.Event()
        serve = asyncio.create_task(_serve([(writer, host, port), (ds.app(), host, explorer_port)],
                                           worker, stop))
        if demo_workspace and token:
            principal = Principal(workspace=demo_workspace,
                                  permissions=frozenset({"memory.manage"}), actor="memarc-up")
            writer_url = f"http://{host}:{port}"
            loader = asyncio.create_task(load_demo_cards(
                resources.archive(), principal, demo_workspace, cards_path or bundled_cards(),
                out, ready=lambda: ready_block(
                    info, admin_sign_in_link(settings, demo_workspace, writer_url),
                    f"{explorer_base}{SIGN_IN_PATH}?ticket={issue(secret)['ticket']}",
                    info["new_sign_in_links"])))
            # A signal (or a server's end) stops the servers and the worker: the import's wait
            # for the projection would then never end, so it is cancelled with them.
            await asyncio.wait([serve, loader], return_when=asyncio.FIRST_COMPLETED)
            if not loader.done():
                loader.cancel()
                await asyncio.gather(loader, return_exceptions=True)
            elif loader.exception() is not None:  # e.g. an invalid cards file: stop, then say so
                stop.set()
                await asyncio.gather(serve, return_exceptions=True)
                raise loader.exception()  # type: ignore[misc]
        await serve
    finally:
        await resources.close()


def new_link_commands(explorer_base: str, writer_base: str, workspace: str | None,
                      embedded_database_url: str | None = None,
                      data_dir: Path | None = None) -> dict[str, str]:
    """The commands that print new one-time sign-in links while ``memarc up`` runs (no restart,
    no token revoked): ``{explorer, admin}`` (``admin`` names the demo workspace, else a
    placeholder), with the path of this ``memarc``, so each runs as printed in any shell and
    folder. The explorer's link is signed with the secret kept in the data dir: with
    ``data_dir`` (absolute) the command sets ``MEMARC_DATA_DIR`` to it (the default, ``.memarc``,
    is relative to the folder the command runs in). The administration's link is written with
    the migrator login: with ``embedded_database_url`` (the embedded PostgreSQL of ``memarc
    up``, which no environment variable names) the command sets
    ``MEMARC_MIGRATOR_DATABASE_URL`` to it."""
    memarc = Path(sys.executable).parent / "memarc"
    exe = str(memarc) if memarc.exists() else "memarc"
    secret_env = f"MEMARC_DATA_DIR={shlex.quote(str(data_dir))} " if data_dir else ""
    db_env = (f"MEMARC_MIGRATOR_DATABASE_URL={shlex.quote(embedded_database_url)} "
              if embedded_database_url else "")
    return {"explorer": f"{secret_env}{exe} explorer-sign-in-link --url {explorer_base}",
            "admin": f"{db_env}{exe} sign-in-link --workspace {workspace or 'WORKSPACE'} "
                     f"--url {writer_base}"}


def refuse_embedded(what: str, settings: Settings) -> None:
    """Exit (status 2, the reason as JSON on stderr) with a pointer to ``memarc up`` when no
    Qdrant server is configured."""
    if settings.embedded_qdrant:
        print(json.dumps({"error": EMBEDDED_REFUSAL.format(what=what), "code": "embedded_index"}),
              file=sys.stderr)
        raise SystemExit(2)


def run_writer(host: str, port: int) -> None:
    """``memarc writer``: the HTTP API alone (needs MEMARC_QDRANT_URL)."""
    settings = load_settings()
    refuse_embedded("writer", settings)
    from writer.app import create_app

    asyncio.run(_serve([(create_app(settings), host, port)], None))


MCP_EMBEDDED_REFUSAL = (
    "the embedded index under {data_dir} is in use by another process (`memarc up`, or another "
    "`memarc mcp`): use that writer's MCP endpoint over HTTP with the Authorization header (the "
    "`mcp` URL `memarc up` printed: http://127.0.0.1:8000/mcp unless it was started with "
    "another --port), or set MEMARC_QDRANT_URL")


def run_mcp() -> None:
    """``memarc mcp``: the MCP server over stdio (:func:`writer.mcp_server.serve_stdio`) for the
    token in ``MEMARC_TOKEN``, in this process over the same settings as ``memarc writer``
    (PostgreSQL at ``MEMARC_DATABASE_URL``, Redis, the index): nothing but MCP messages is written
    to stdout. With a Qdrant server (``MEMARC_QDRANT_URL``) any number of them run next to the
    writer and the workers; without one, it opens the embedded index of ``MEMARC_DATA_DIR``
    itself and so holds the data dir as ``memarc up`` does (one process per data dir).

    :raises UsageError: ``token_missing`` (no ``MEMARC_TOKEN``), ``database_url_missing``, or
        ``already_running`` (the embedded index is held by ``memarc up`` or another ``memarc mcp``;
        the message points to the running writer's ``/mcp``).
    """
    settings = load_settings()
    token = os.environ.get("MEMARC_TOKEN", "").strip()
    if not token:
        raise UsageError("MEMARC_TOKEN is not set: the MCP server acts as the holder of that "
                         "token (memarc token create)", "token_missing")
    if not settings.database_url:
        raise UsageError("MEMARC_DATABASE_URL is not set (memarc mcp uses the writer's settings)",
                         "database_url_missing")
    lock = (_data_dir_lock(Path(settings.data_dir), MCP_EMBEDDED_REFUSAL)
            if settings.embedded_qdrant else contextlib.nullcontext())

    async def main() -> None:
        from writer.mcp_server import serve_stdio

        resources = await Resources.open(settings, with_index=True)
        try:
            await serve_stdio(resources.archive(), token)
        finally:
            await resources.close()

    with lock:
        asyncio.run(main())


def run_worker() -> None:
    """``memarc worker``: projection worker alone (needs MEMARC_QDRANT_URL)."""
    settings = load_settings()
    refuse_embedded("worker", settings)

    async def main() -> None:
        resources = await Resources.open(settings, with_index=True)
        try:
            await _serve([], build_worker(resources))
        finally:
            await resources.close()

    asyncio.run(main())


def run_explorer(host: str, port: int, workspaces_json: str | None) -> None:
    """``memarc explorer``: the Datasette explorer alone. Browsing needs PostgreSQL only; its
    recall page needs a Qdrant server (MEMARC_QDRANT_URL) and otherwise says the index is not
    available in this process. Its signing secret is :func:`explorer_secret`'s, so
    ``memarc explorer-sign-in-link`` prints new sign-in links for it on the same machine (or
    container); a data dir it cannot write leaves Datasette's one-time root link only.

    :raises json.JSONDecodeError: ``workspaces_json`` is not JSON.
    """
    settings = load_settings()
    mapping = json.loads(workspaces_json) if workspaces_json else {}

    async def main() -> None:
        resources = None
        if not settings.embedded_qdrant:
            resources = await Resources.open(settings, with_index=True)
        try:  # as memarc up's: a new link with `memarc explorer-sign-in-link`, no restart
            secret: str | None = explorer_secret(settings)
        except OSError as exc:  # a read-only data dir: Datasette's own one-time root link only
            log.warning("no explorer secret in %s (%s): sign-in links need DATASETTE_SECRET",
                        settings.data_dir, exc)
            secret = None
        ds = explorer_app(settings, resources, mapping, secret=secret)
        base = f"http://{host}:{port}"
        sign_in = (f"{base}{SIGN_IN_PATH}?ticket={issue(secret)['ticket']}" if secret
                   else f"{base}/-/auth-token?token={ds._root_token}")
        print(json.dumps({"explorer": f"{base}/-/memory", "sign_in": sign_in,
                          "new_sign_in_link": f"memarc explorer-sign-in-link --url {base}"}),
              flush=True)
        try:
            await _serve([(ds.app(), host, port)], None)
        finally:
            if resources is not None:
                await resources.close()

    asyncio.run(main())
