"""The embedded search index on Qdrant Edge (``qdrant-edge-py``): Qdrant's own engine in-process.

Same contract as :class:`shared.index.qdrant.QdrantClientEngine` (DESIGN §4, §11): one "collection"
per workspace with the named dense (cosine) and sparse (``Modifier.Idf``) vectors of its
:class:`~shared.index.engine.VectorLayout`, payload as given, the same filter semantics
(:func:`_edge_filter` mirrors :func:`shared.index.qdrant._qdrant_filter`), and one ranking per
named vector returned for fusion by the caller.

Layout under ``<data dir>/edge``::

    current.json                    workspace collection name -> physical shard name
    <name>__<suffix>/shard/         an EdgeShard (segments, WAL, edge_config.json)
    <name>__<suffix>/meta.json      the layout: vectors, dense model id, dimension, fingerprint

Edge has no aliases: ``current.json`` plays that part and is replaced atomically
(``os.replace``), so a rebuild switches shards in one step. Edge checks the vector configuration
itself when a shard is loaded with the expected :class:`qdrant_edge.EdgeConfig`; a mismatch there,
or another model or fingerprint in ``meta.json``, raises :class:`IndexIncompatible`.

An open shard holds a lock on its WAL: one process per data dir, as with local mode. Calls run in a
worker thread and are serialised per engine by a lock.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import threading
import uuid
from pathlib import Path
from typing import Any, Callable, TypeVar

from shared.config import Settings
from shared.errors import IndexIncompatible, IndexUnavailable
from shared.index.engine import (BM25, DENSE, Hit, IndexFilter, PointIn, SparseVector,
                                 VectorLayout, physical_of)

T = TypeVar("T")

POINTER_FILE = "current.json"
META_FILE = "meta.json"
SHARD_DIR = "shard"
SCROLL_PAGE = 1000
#: ids whose neighbours one call reads and searches (:meth:`QdrantEdgeEngine.neighbours`)
NEIGHBOUR_BATCH = 128
# keyword payload indexes (the same fields the server path indexes)
INDEXED_FIELDS = ("family", "scope", "concepts")
NESTED_INDEXED_FIELDS = (("deps", "database"), ("deps", "table"))


def _edge_filter(flt: IndexFilter) -> Any:
    """The :class:`IndexFilter` as a Qdrant Edge filter (see :func:`shared.index.qdrant._qdrant_filter`)."""
    import qdrant_edge as qe

    must: list[Any] = []
    if flt.families:
        must.append(qe.FieldCondition(key="family", match=qe.MatchAny(list(flt.families))))
    if flt.scope is not None:
        must.append(qe.FieldCondition(key="scope", match=qe.MatchValue(flt.scope)))
    for concept in flt.concepts:
        must.append(qe.FieldCondition(key="concepts", match=qe.MatchValue(concept)))
    levels = [(name, value) for name, value in zip(("database", "schema", "table", "column"),
                                                   flt.physical) if value is not None]
    if levels:
        entry = qe.Filter(must=[
            qe.Filter(should=[
                qe.FieldCondition(key=name, match=qe.MatchValue(value)),
                qe.IsNullCondition(name),
            ])
            for name, value in levels
        ])
        # Every dependency names its database (DESIGN §2), so (a) a card without dependencies
        # is one whose `deps[].database` is empty, which the nested keyword index answers
        # (IsEmpty on `deps` itself reads every point's payload), and (b) a database alone (the
        # usual context) needs no nested condition: an entry that names it satisfies the filter
        # by itself. Same results; a filtered hybrid query of the 2,251 BIRD cards (4 branches)
        # took 31 ms before, 4 ms now.
        one = (qe.FieldCondition(key="deps[].database", match=qe.MatchValue(levels[0][1]))
               if len(levels) == 1 and levels[0][0] == "database" else None)
        must.append(qe.Filter(should=[
            qe.IsEmptyCondition("deps[].database"),
            one if one is not None else qe.NestedCondition("deps", entry),
        ]))
    must_not: list[Any] = []
    if flt.exclude:
        must_not.append(qe.HasIdCondition(set(flt.exclude)))
    if not must and not must_not:
        return None
    return qe.Filter(must=must or None, must_not=must_not or None)


class QdrantEdgeEngine:
    """:class:`~shared.index.engine.IndexEngine` on Qdrant Edge shards under ``<data dir>/edge``.

    Shards are opened lazily and kept open until :meth:`close`.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.prefix = settings.collection_prefix
        self.root = Path(settings.data_dir) / "edge"
        self._lock = threading.RLock()
        self._shards: dict[str, Any] = {}  # physical name -> open EdgeShard
        self._checked: dict[str, VectorLayout] = {}  # physical name -> the layout it passed

    # -- naming and the pointer file -------------------------------------------------------

    def collection(self, workspace: str) -> str:
        """Name by which a workspace's collection is addressed: prefix + workspace id. It maps,
        through ``current.json``, to a physical shard ``<name>__<suffix>``."""
        return f"{self.prefix}{workspace}"

    def _pointers(self) -> dict[str, str]:
        path = self.root / POINTER_FILE
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def _write_pointers(self, pointers: dict[str, str]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".{POINTER_FILE}.{uuid.uuid4().hex[:8]}"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(pointers, fh, sort_keys=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self.root / POINTER_FILE)

    def _resolve(self, name: str) -> str | None:
        physical = self._pointers().get(name)
        if physical is None:
            return None
        if not (self.root / physical / SHARD_DIR).exists():
            # its files were removed: an open handle would write into nothing (and fail to
            # flush on close); the archive notices the loss (shared.projection.recovery)
            self._close_shard(physical)
            return None
        return physical

    def _target(self, workspace: str, collection: str | None) -> str | None:
        """Physical shard written by upsert/delete/scroll: a named rebuild shard, or the current
        one of the workspace."""
        if collection is not None:
            return collection if (self.root / collection / SHARD_DIR).exists() else None
        return self._resolve(self.collection(workspace))

    # -- shards --------------------------------------------------------------------------

    @staticmethod
    def _config(layout: VectorLayout) -> Any:
        import qdrant_edge as qe

        return qe.EdgeConfig(
            vectors={v: qe.EdgeVectorParams(size=layout.dimension, distance=qe.Distance.Cosine)
                     for v in layout.dense},
            sparse_vectors={v: qe.EdgeSparseVectorParams(modifier=qe.Modifier.Idf)
                            for v in layout.sparse},
        )

    def _meta(self, physical: str) -> dict[str, Any]:
        try:
            return json.loads((self.root / physical / META_FILE).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}

    def _shard(self, physical: str) -> Any:
        """The open shard ``physical`` (loaded on first use)."""
        shard = self._shards.get(physical)
        if shard is None:
            import qdrant_edge as qe

            shard = qe.EdgeShard.load(str(self.root / physical / SHARD_DIR))
            self._shards[physical] = shard
        return shard

    def _close_shard(self, physical: str) -> None:
        shard = self._shards.pop(physical, None)
        self._checked.pop(physical, None)
        if shard is not None:
            shard.close()

    def _remove(self, physical: str) -> None:
        self._close_shard(physical)
        shutil.rmtree(self.root / physical, ignore_errors=True)

    def _create_physical(self, name: str, workspace: str, layout: VectorLayout) -> str:
        import qdrant_edge as qe

        physical = f"{name}__{uuid.uuid4().hex[:8]}"
        folder = self.root / physical
        folder.mkdir(parents=True)
        (folder / META_FILE).write_text(json.dumps(layout.metadata(workspace)), encoding="utf-8")
        shard = qe.EdgeShard.create(str(folder / SHARD_DIR), self._config(layout))
        for key in INDEXED_FIELDS:
            shard.update(qe.UpdateOperation.create_field_index(key, qe.PayloadSchemaType.Keyword))
        for array, key in NESTED_INDEXED_FIELDS:
            shard.update(qe.UpdateOperation.create_field_index(
                f"{array}[].{key}", qe.PayloadSchemaType.Keyword))
        shard.flush()
        self._shards[physical] = shard
        self._checked[physical] = layout
        return physical

    def _check_sync(self, name: str, layout: VectorLayout,
                    collection: str | None = None) -> str | None:
        if collection is not None:
            physical: str | None = (collection if (self.root / collection / SHARD_DIR).exists()
                                    else None)
        else:
            physical = self._resolve(name)
        if physical is None:
            return None
        if self._checked.get(physical) == layout:
            return physical
        import qdrant_edge as qe

        problems = layout.problems(self._meta(physical))
        # Edge validates the stored vectors against the expected configuration on load
        self._close_shard(physical)
        try:
            shard = qe.EdgeShard.load(str(self.root / physical / SHARD_DIR), self._config(layout))
        except Exception as exc:
            if "incompatible" not in str(exc).lower():
                raise
            problems.append(str(exc).removeprefix("Service runtime error: "))
        else:
            self._shards[physical] = shard
        if problems:
            raise IndexIncompatible(f"collection {name}: " + "; ".join(problems))
        self._checked[physical] = layout
        return physical

    # -- calls ---------------------------------------------------------------------------

    def _call_sync(self, fn: Callable[[], T]) -> T:
        try:
            with self._lock:
                return fn()
        except (IndexUnavailable, IndexIncompatible):
            raise
        except Exception as exc:
            raise IndexUnavailable(
                f"embedded index (Qdrant Edge) failed: {type(exc).__name__}: {exc}") from exc

    async def _call(self, fn: Callable[[], T]) -> T:
        return await asyncio.to_thread(self._call_sync, fn)

    # -- IndexEngine ---------------------------------------------------------------------

    async def check_collection(self, workspace: str, layout: VectorLayout,
                               collection: str | None = None) -> str | None:
        """See :meth:`IndexEngine.check_collection`."""
        name = self.collection(workspace)
        return await self._call(lambda: self._check_sync(name, layout, collection))

    async def physical_collection(self, workspace: str) -> str | None:
        """The physical shard that ``current.json`` names for the workspace, or None when it has
        none."""
        name = self.collection(workspace)
        return await self._call(lambda: self._resolve(name))

    async def ensure_collection(self, workspace: str, layout: VectorLayout) -> str:
        """See :meth:`IndexEngine.ensure_collection`."""
        name = self.collection(workspace)

        def run() -> str:
            found = self._check_sync(name, layout)
            if found is not None:
                return found
            physical = self._create_physical(name, workspace, layout)
            pointers = self._pointers()
            pointers[name] = physical
            self._write_pointers(pointers)
            return physical

        return await self._call(run)

    async def create_rebuild_collection(self, workspace: str, layout: VectorLayout) -> str:
        """See :meth:`IndexEngine.create_rebuild_collection`."""
        name = self.collection(workspace)
        return await self._call(lambda: self._create_physical(name, workspace, layout))

    async def switch_collection(self, workspace: str, collection: str,
                                keep: bool = False) -> str | None:
        """See :meth:`IndexEngine.switch_collection`: ``current.json`` is replaced atomically,
        then the previous shard is closed and removed (unless ``keep``).

        :raises IndexUnavailable: ``collection`` does not exist.
        """
        name = self.collection(workspace)

        def run() -> str | None:
            if not (self.root / collection / SHARD_DIR).exists():
                raise IndexUnavailable(f"no shard {collection!r} to switch {name} to")
            self._shard(collection).flush()
            pointers = self._pointers()
            old = pointers.get(name)
            pointers[name] = collection
            self._write_pointers(pointers)
            if old is not None and old != collection and not keep:
                self._remove(old)
            return old

        return await self._call(run)

    async def drop_collection(self, collection: str) -> None:
        """See :meth:`IndexEngine.drop_collection`. As with Qdrant, where dropping a collection
        drops the aliases on it, a workspace whose current shard this is has none afterwards."""

        def run() -> None:
            pointers = self._pointers()
            kept = {k: v for k, v in pointers.items() if v != collection}
            if kept != pointers:
                self._write_pointers(kept)
            self._remove(collection)

        await self._call(run)

    async def optimize_collection(self, collection: str) -> bool:
        """See :meth:`IndexEngine.optimize_collection`: the shard is closed here and optimized by
        ``python -m shared.index.edge_optimize`` in a child process (``optimize()`` holds the GIL), then
        reopened on its next use. Only for a shard no one else uses meanwhile (a rebuild's).

        :returns: whether segments were rebuilt. :raises IndexUnavailable: the child failed.
        """
        import sys

        folder = self.root / collection / SHARD_DIR
        if not folder.exists():
            raise IndexUnavailable(f"no shard {collection!r} to optimize")
        await self._call(lambda: self._close_shard(collection))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "shared.index.edge_optimize", str(folder),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            cwd=str(Path(__file__).resolve().parents[2]))
        try:
            out, err = await proc.communicate()
        except asyncio.CancelledError:
            proc.kill()
            await proc.wait()
            raise
        if proc.returncode != 0:
            raise IndexUnavailable(f"optimizing shard {collection!r} failed: "
                                   f"{err.decode(errors='replace')[-500:]}")
        return bool(json.loads(out.decode().strip().splitlines()[-1])["optimized"])

    async def upsert(self, workspace: str, points: list[PointIn], collection: str | None = None) -> None:
        """See :meth:`IndexEngine.upsert`. Edge applies an update synchronously (and writes it to
        its WAL) before returning.

        :raises IndexUnavailable: the collection does not exist.
        """
        import qdrant_edge as qe

        structs = [
            qe.Point(p.id, {**{name: list(v) for name, v in p.dense.items()},
                            **{name: qe.SparseVector(list(v.indices), list(v.values))
                               for name, v in p.sparse.items()}},
                     p.payload)
            for p in points
        ]

        def run() -> None:
            physical = self._target(workspace, collection)
            if physical is None:
                raise IndexUnavailable(
                    f"no collection {collection or self.collection(workspace)!r} to write to")
            self._shard(physical).update(qe.UpdateOperation.upsert_points(structs))

        await self._call(run)

    async def delete(self, workspace: str, ids: list[uuid.UUID], collection: str | None = None) -> None:
        """See :meth:`IndexEngine.delete`; a missing collection means nothing to delete."""
        import qdrant_edge as qe

        def run() -> None:
            physical = self._target(workspace, collection)
            if physical is not None and ids:
                self._shard(physical).update(qe.UpdateOperation.delete_points(list(ids)))

        await self._call(run)

    async def hybrid_query(self, workspace: str, dense: list[float], sparse: SparseVector,
                           flt: IndexFilter, limit: int, *,
                           dense_names: tuple[str, ...] = (DENSE,),
                           sparse_names: tuple[str, ...] = (BM25,),
                           collection: str | None = None) -> dict[str, list[Hit]]:
        """See :meth:`IndexEngine.hybrid_query`: one planned batch of filtered queries.

        Each sparse branch computes IDF over an explicit corpus (every live point): by default Edge
        takes it from segment statistics that still count deleted points until a vacuum, so the
        scores would drift from qdrant-client's after a delete.

        :raises IndexUnavailable: the collection does not exist.
        """
        import qdrant_edge as qe

        name = self.collection(workspace)
        qfilter = _edge_filter(flt)
        payload = ["revision", "format"]
        sparse_query = qe.SparseVector(list(sparse.indices), list(sparse.values))
        requests = [qe.QueryRequest(limit=limit, query=qe.Query.Nearest(list(dense), using=vector),
                                    filter=qfilter, with_payload=payload)
                    for vector in dense_names]
        requests += [qe.QueryRequest(limit=limit, query=qe.Query.Nearest(sparse_query, using=vector),
                                     filter=qfilter, with_payload=payload,
                                     params=qe.SearchParams(idf=qe.IdfParams(corpus=qe.Filter())))
                     for vector in sparse_names]

        def run() -> list[list[Any]]:
            physical = self._target(workspace, collection)
            if physical is None:
                raise IndexUnavailable(f"no collection {collection or name!r}")
            return self._shard(physical).query_batch(qe.QueryBatchRequest(requests))

        responses = await self._call(run)

        def hits(points: list[Any]) -> list[Hit]:
            out = []
            for p in points:
                pl = p.payload or {}
                out.append(Hit(uuid.UUID(str(p.id)), pl.get("revision"), pl.get("format"),
                               float(p.score)))
            return out

        return {vector: hits(resp)
                for vector, resp in zip([*dense_names, *sparse_names], responses)}

    async def dense_scores(self, workspace: str, dense: list[float], ids: list[uuid.UUID],
                           names: tuple[str, ...], *,
                           collection: str | None = None) -> dict[str, dict[uuid.UUID, float]]:
        """See :meth:`IndexEngine.dense_scores`.

        :raises IndexUnavailable: the collection does not exist."""
        import qdrant_edge as qe

        if not ids or not names:
            return {name: {} for name in names}
        only = qe.Filter(must=[qe.HasIdCondition(set(ids))])
        requests = [qe.QueryRequest(limit=len(ids), query=qe.Query.Nearest(list(dense), using=name),
                                    filter=only, with_payload=False) for name in names]

        def run() -> list[list[Any]]:
            physical = self._target(workspace, collection)
            if physical is None:
                raise IndexUnavailable(f"no collection {collection or self.collection(workspace)!r}")
            return self._shard(physical).query_batch(qe.QueryBatchRequest(requests))

        responses = await self._call(run)
        return {name: {uuid.UUID(str(p.id)): float(p.score) for p in resp}
                for name, resp in zip(names, responses)}

    async def neighbours(self, workspace: str, ids: list[uuid.UUID], vector: str,
                         flt: IndexFilter, limit: int, *,
                         collection: str | None = None) -> dict[uuid.UUID, list[Hit]]:
        """See :meth:`IndexEngine.neighbours`: ``retrieve`` then one ``query_batch`` per
        :data:`NEIGHBOUR_BATCH` ids (the lock is released between batches, so recall is not
        held up for the whole report).

        :raises IndexUnavailable: the collection does not exist."""
        import qdrant_edge as qe

        qfilter = _edge_filter(flt)

        def run(chunk: list[uuid.UUID]) -> dict[uuid.UUID, list[Hit]]:
            physical = self._target(workspace, collection)
            if physical is None:
                raise IndexUnavailable(f"no collection {collection or self.collection(workspace)!r}")
            shard = self._shard(physical)
            stored = {}
            for r in shard.retrieve(list(chunk), with_payload=False, with_vector=[vector]):
                vec = r.vector.get(vector) if isinstance(r.vector, dict) else None
                if vec is not None:
                    stored[uuid.UUID(str(r.id))] = list(vec)
            order = list(stored)
            requests = [qe.QueryRequest(limit=limit + 1,
                                        query=qe.Query.Nearest(stored[i], using=vector),
                                        filter=qfilter, with_payload=["revision", "format"])
                        for i in order]
            responses = shard.query_batch(qe.QueryBatchRequest(requests)) if requests else []
            return {i: [Hit(uuid.UUID(str(p.id)), (p.payload or {}).get("revision"),
                            (p.payload or {}).get("format"), float(p.score))
                        for p in resp if uuid.UUID(str(p.id)) != i][:limit]
                    for i, resp in zip(order, responses)}

        out: dict[uuid.UUID, list[Hit]] = {}
        for start in range(0, len(ids), NEIGHBOUR_BATCH):
            chunk = ids[start:start + NEIGHBOUR_BATCH]
            out.update(await self._call(lambda: run(chunk)))
        return out

    async def scroll_ids(self, workspace: str, collection: str | None = None) -> dict[uuid.UUID, dict[str, Any]]:
        """See :meth:`IndexEngine.scroll_ids`."""
        import qdrant_edge as qe

        def run() -> dict[uuid.UUID, dict[str, Any]]:
            out: dict[uuid.UUID, dict[str, Any]] = {}
            physical = self._target(workspace, collection)
            if physical is None:
                return out
            shard = self._shard(physical)
            offset = None
            while True:
                records, offset = shard.scroll(qe.ScrollRequest(
                    offset=offset, limit=SCROLL_PAGE, with_payload=True, with_vector=False))
                for r in records:
                    out[uuid.UUID(str(r.id))] = dict(r.payload or {})
                if offset is None:
                    return out

        return await self._call(run)

    async def drop(self, workspace: str) -> None:
        """See :meth:`IndexEngine.drop`: the current shard and every other shard of the
        workspace (a previous index a shadow switch kept, an abandoned rebuild's)."""
        name = self.collection(workspace)

        def run() -> None:
            pointers = self._pointers()
            physical = pointers.pop(name, None)
            if physical is not None:
                self._write_pointers(pointers)
                self._remove(physical)
            if self.root.is_dir():
                for folder in self.root.iterdir():
                    if folder.is_dir() and physical_of(name, folder.name):
                        self._remove(folder.name)

        await self._call(run)

    async def close(self) -> None:
        """Flush and close every open shard (releases their WAL locks)."""

        def run() -> None:
            for physical in list(self._shards):
                shard = self._shards[physical]
                try:
                    if (self.root / physical / SHARD_DIR).exists():  # else nothing to flush to
                        shard.flush()
                finally:
                    self._close_shard(physical)

        await self._call(run)
