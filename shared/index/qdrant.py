"""The qdrant-client engine of the index interface: a Qdrant server or qdrant-client's local mode.

:class:`QdrantClientEngine` serves both a Qdrant server (``MEMARC_QDRANT_URL``) and qdrant-client's
local mode on disk (one process per storage path). The contract is :class:`shared.index.engine.IndexEngine`.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from typing import Any

from shared.config import Settings
from shared.errors import IndexIncompatible, IndexUnavailable
from shared.index.engine import (BM25, DENSE, Hit, IndexFilter, PointIn, SparseVector,
                                 VectorLayout, physical_of)


def _qdrant_filter(flt: IndexFilter) -> Any:
    from qdrant_client import models as qm

    must: list[Any] = []
    if flt.families:
        must.append(qm.FieldCondition(key="family", match=qm.MatchAny(any=list(flt.families))))
    if flt.scope is not None:
        must.append(qm.FieldCondition(key="scope", match=qm.MatchValue(value=flt.scope)))
    for concept in flt.concepts:
        must.append(qm.FieldCondition(key="concepts", match=qm.MatchValue(value=concept)))
    levels = [(name, value) for name, value in zip(("database", "schema", "table", "column"),
                                                   flt.physical) if value is not None]
    if levels:
        entry = qm.Filter(must=[
            qm.Filter(should=[
                qm.FieldCondition(key=name, match=qm.MatchValue(value=value)),
                qm.IsNullCondition(is_null=qm.PayloadField(key=name)),
            ])
            for name, value in levels
        ])
        must.append(qm.Filter(should=[
            qm.IsEmptyCondition(is_empty=qm.PayloadField(key="deps")),
            qm.NestedCondition(nested=qm.Nested(key="deps", filter=entry)),
        ]))
    must_not: list[Any] = []
    if flt.exclude:
        must_not.append(qm.HasIdCondition(has_id=[str(i) for i in flt.exclude]))
    return qm.Filter(must=must or None, must_not=must_not or None)


#: ids whose neighbours one call reads and searches (:meth:`QdrantClientEngine.neighbours`)
NEIGHBOUR_BATCH = 128

#: HTTP statuses of a Qdrant server that mean "not available now" (overloaded, restarting, a
#: proxy without its upstream, a collection dropped under a running request), not a bad request
UNAVAILABLE_STATUSES = frozenset({404, 408, 429, 500, 502, 503, 504})


def _is_connection_error(exc: BaseException) -> bool:
    """Whether ``exc`` means the Qdrant server cannot be used now: it cannot be reached, or it
    answered with one of :data:`UNAVAILABLE_STATUSES` (qdrant-client's ``UnexpectedResponse``).
    Any other answer (a 400: a request this code should not have sent) is not."""
    import httpx
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    if isinstance(exc, UnexpectedResponse):
        return exc.status_code in UNAVAILABLE_STATUSES
    return isinstance(exc, (ResponseHandlingException, httpx.TransportError, ConnectionError,
                            TimeoutError, OSError))


def connect(settings: Settings) -> Any:
    """A ``qdrant_client.QdrantClient`` for the settings: the server at ``qdrant_url`` (10 s
    timeout), else local mode under ``resolved_qdrant_path()``.

    :raises RuntimeError: the local storage is locked by another client (another process).
    """
    from qdrant_client import QdrantClient

    if settings.embedded_qdrant:
        return QdrantClient(path=settings.resolved_qdrant_path())
    return QdrantClient(url=settings.qdrant_url, api_key=settings.qdrant_api_key, timeout=10,
                        check_compatibility=False)


class QdrantClientEngine:
    """:class:`IndexEngine` on qdrant-client: a server when ``settings.qdrant_url`` is set, else
    local mode under ``settings.resolved_qdrant_path()`` (single process per path).

    Calls run in a worker thread; local mode is additionally serialised by a lock (it is not
    thread-safe). The client is made on first use by ``connect`` (default :func:`connect`; a
    test passes one that wraps the real client to inject faults) and again after :meth:`close`.
    """

    def __init__(self, settings: Settings,
                 connect: Callable[[Settings], Any] = connect) -> None:
        self.settings = settings
        self.prefix = settings.collection_prefix
        self._connect = connect
        self._client: Any = None
        self._local = settings.embedded_qdrant
        self._lock = threading.Lock()
        self._checked: dict[str, VectorLayout] = {}  # physical name -> the layout it passed

    def collection(self, workspace: str) -> str:
        """Name by which a workspace's collection is addressed: prefix + workspace id. It is an
        alias of a physical collection ``<name>__<suffix>`` (so ``index`` can rebuild into a new
        one and switch), or, for collections made before aliases, the collection itself."""
        return f"{self.prefix}{workspace}"

    @staticmethod
    def _resolve(client: Any, name: str) -> str | None:
        for alias in client.get_aliases().aliases:
            if alias.alias_name == name:
                return alias.collection_name
        return name if client.collection_exists(name) else None

    def _open(self) -> Any:
        if self._client is None:
            try:
                self._client = self._connect(self.settings)
            except RuntimeError as exc:  # local storage already locked by another process
                raise IndexUnavailable(f"embedded index unavailable: {exc}") from exc
        return self._client

    def _call_sync(self, fn: Any) -> Any:
        try:
            if self._local:
                with self._lock:
                    return fn(self._open())
            return fn(self._open())
        except (IndexUnavailable, IndexIncompatible):
            raise
        except Exception as exc:
            if _is_connection_error(exc):
                what = ("unavailable" if getattr(exc, "status_code", None) is not None
                        else "unreachable")
                raise IndexUnavailable(f"Qdrant is {what}: {type(exc).__name__}: "
                                       f"{str(exc)[:300]}") from exc
            raise

    async def _call(self, fn: Any) -> Any:
        return await asyncio.to_thread(self._call_sync, fn)

    def _check_sync(self, client: Any, name: str, layout: VectorLayout,
                    collection: str | None = None) -> str | None:
        from qdrant_client import models as qm

        if collection is not None:
            physical = collection if client.collection_exists(collection) else None
        else:
            physical = self._resolve(client, name)
        if physical is None:
            return None
        if self._checked.get(physical) == layout:
            return physical
        info = client.get_collection(physical)
        params = info.config.params
        vectors = params.vectors if isinstance(params.vectors, dict) else {}
        sparse = params.sparse_vectors or {}
        problems = []
        for vector in layout.dense:
            if vector not in vectors:
                problems.append(f"no named dense vector {vector!r}")
            elif vectors[vector].size != layout.dimension:
                problems.append(f"dense vector {vector!r} has dimension {vectors[vector].size}, "
                                f"the model {layout.dimension}")
        for vector in layout.sparse:
            if vector not in sparse:
                problems.append(f"no sparse vector {vector!r} (Qdrant cannot add a vector to an "
                                "existing collection: rebuild it with `memarc index`)")
            elif sparse[vector].modifier != qm.Modifier.IDF:
                problems.append(f"sparse vector {vector!r} lacks the IDF modifier")
        problems += layout.problems(info.config.metadata or {})
        if problems:
            raise IndexIncompatible(f"collection {name}: " + "; ".join(problems))
        self._checked[physical] = layout
        return physical

    async def check_collection(self, workspace: str, layout: VectorLayout,
                               collection: str | None = None) -> str | None:
        """See :meth:`IndexEngine.check_collection`."""
        name = self.collection(workspace)
        return await self._call(lambda c: self._check_sync(c, name, layout, collection))

    async def physical_collection(self, workspace: str) -> str | None:
        """The physical collection the workspace's alias points at (the name itself for a
        collection made before aliases), or None when it has none."""
        name = self.collection(workspace)
        return await self._call(lambda c: self._resolve(c, name))

    async def ensure_collection(self, workspace: str, layout: VectorLayout) -> str:
        """See :meth:`IndexEngine.ensure_collection`."""
        name = self.collection(workspace)

        def run(client: Any) -> str:
            from qdrant_client import models as qm

            found = self._check_sync(client, name, layout)
            if found is not None:
                return found
            physical = self._create_physical(client, name, workspace, layout)
            client.update_collection_aliases(change_aliases_operations=[
                qm.CreateAliasOperation(create_alias=qm.CreateAlias(
                    collection_name=physical, alias_name=name))])
            return physical

        return await self._call(run)

    def _create_physical(self, client: Any, name: str, workspace: str,
                         layout: VectorLayout) -> str:
        from qdrant_client import models as qm

        physical = f"{name}__{uuid.uuid4().hex[:8]}"
        client.create_collection(
            physical,
            vectors_config={v: qm.VectorParams(size=layout.dimension, distance=qm.Distance.COSINE)
                            for v in layout.dense},
            sparse_vectors_config={v: qm.SparseVectorParams(modifier=qm.Modifier.IDF)
                                   for v in layout.sparse},
            metadata=layout.metadata(workspace),
            # cluster layout (None = the server's defaults; local mode has no such notion)
            **({} if self._local else {
                "shard_number": self.settings.qdrant_shards,
                "replication_factor": self.settings.qdrant_replicas,
                "write_consistency_factor": self.settings.qdrant_write_consistency}),
        )
        if not self._local:
            for key, schema in (("family", qm.PayloadSchemaType.KEYWORD),
                                ("scope", qm.PayloadSchemaType.KEYWORD),
                                ("concepts", qm.PayloadSchemaType.KEYWORD),
                                ("deps[].database", qm.PayloadSchemaType.KEYWORD),
                                ("deps[].table", qm.PayloadSchemaType.KEYWORD)):
                client.create_payload_index(physical, key, field_schema=schema, wait=True)
        self._checked[physical] = layout
        return physical

    async def create_rebuild_collection(self, workspace: str, layout: VectorLayout) -> str:
        """See :meth:`IndexEngine.create_rebuild_collection`."""
        name = self.collection(workspace)
        return await self._call(lambda c: self._create_physical(c, name, workspace, layout))

    async def switch_collection(self, workspace: str, collection: str,
                                keep: bool = False) -> str | None:
        """See :meth:`IndexEngine.switch_collection`. A pre-alias collection that bears the
        workspace name itself is dropped first (a brief gap in which recall answers 503), even
        with ``keep``."""
        from qdrant_client import models as qm

        name = self.collection(workspace)

        def run(client: Any) -> str | None:
            old = self._resolve(client, name)
            ops: list[Any] = []
            if old == name:  # a collection made before aliases: it must go before the alias
                client.delete_collection(name)
            elif old is not None:
                ops.append(qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=name)))
            ops.append(qm.CreateAliasOperation(create_alias=qm.CreateAlias(
                collection_name=collection, alias_name=name)))
            client.update_collection_aliases(change_aliases_operations=ops)
            if old is not None and old not in (name, collection) and not keep:
                client.delete_collection(old)
            return old

        return await self._call(run)

    async def drop_collection(self, collection: str) -> None:
        """See :meth:`IndexEngine.drop_collection`."""
        self._checked.pop(collection, None)
        await self._call(lambda c: c.delete_collection(collection))

    async def optimize_collection(self, collection: str) -> bool:
        """See :meth:`IndexEngine.optimize_collection`: nothing to do. A Qdrant server builds HNSW
        with its own optimizers in the background; local mode has no HNSW (exact search)."""
        return False

    async def upsert(self, workspace: str, points: list[PointIn], collection: str | None = None) -> None:
        """See :meth:`IndexEngine.upsert` (``wait=True``)."""
        from qdrant_client import models as qm

        name = collection or self.collection(workspace)
        structs = [
            qm.PointStruct(
                id=str(p.id),
                vector={**p.dense, **{name: qm.SparseVector(indices=v.indices, values=v.values)
                                      for name, v in p.sparse.items()}},
                payload=p.payload,
            )
            for p in points
        ]
        await self._call(lambda c: c.upsert(name, points=structs, wait=True))

    async def delete(self, workspace: str, ids: list[uuid.UUID], collection: str | None = None) -> None:
        """See :meth:`IndexEngine.delete`; a missing collection means nothing to delete."""
        from qdrant_client import models as qm

        name = collection or self.collection(workspace)

        def run(client: Any) -> None:
            if client.collection_exists(name):
                client.delete(name, points_selector=qm.PointIdsList(points=[str(i) for i in ids]),
                              wait=True)

        await self._call(run)

    async def hybrid_query(self, workspace: str, dense: list[float], sparse: SparseVector,
                           flt: IndexFilter, limit: int, *,
                           dense_names: tuple[str, ...] = (DENSE,),
                           sparse_names: tuple[str, ...] = (BM25,),
                           collection: str | None = None) -> dict[str, list[Hit]]:
        """See :meth:`IndexEngine.hybrid_query`: one ``query_batch_points`` call."""
        from qdrant_client import models as qm

        name = collection or self.collection(workspace)
        qfilter = _qdrant_filter(flt)
        payload = ["revision", "format"]
        sparse_query = qm.SparseVector(indices=sparse.indices, values=sparse.values)
        names = [*dense_names, *sparse_names]
        requests = [qm.QueryRequest(query=dense if i < len(dense_names) else sparse_query,
                                    using=vector, filter=qfilter, limit=limit,
                                    with_payload=payload)
                    for i, vector in enumerate(names)]
        responses = await self._call(lambda c: c.query_batch_points(name, requests=requests))

        def hits(resp: Any) -> list[Hit]:
            return [Hit(uuid.UUID(str(p.id)), (p.payload or {}).get("revision"),
                        (p.payload or {}).get("format"), float(p.score)) for p in resp.points]

        return {vector: hits(resp) for vector, resp in zip(names, responses)}

    async def dense_scores(self, workspace: str, dense: list[float], ids: list[uuid.UUID],
                           names: tuple[str, ...], *,
                           collection: str | None = None) -> dict[str, dict[uuid.UUID, float]]:
        """See :meth:`IndexEngine.dense_scores`: one ``query_batch_points`` call."""
        from qdrant_client import models as qm

        if not ids or not names:
            return {name: {} for name in names}
        name = collection or self.collection(workspace)
        only = qm.Filter(must=[qm.HasIdCondition(has_id=[str(i) for i in ids])])
        requests = [qm.QueryRequest(query=dense, using=vector, filter=only, limit=len(ids),
                                    with_payload=False) for vector in names]
        responses = await self._call(lambda c: c.query_batch_points(name, requests=requests))
        return {vector: {uuid.UUID(str(p.id)): float(p.score) for p in resp.points}
                for vector, resp in zip(names, responses)}

    async def neighbours(self, workspace: str, ids: list[uuid.UUID], vector: str,
                         flt: IndexFilter, limit: int, *,
                         collection: str | None = None) -> dict[uuid.UUID, list[Hit]]:
        """See :meth:`IndexEngine.neighbours`: ``retrieve`` then ``query_batch_points``, in
        batches of :data:`NEIGHBOUR_BATCH` ids."""
        from qdrant_client import models as qm

        name = collection or self.collection(workspace)
        qfilter = _qdrant_filter(flt)

        def run(client: Any, chunk: list[uuid.UUID]) -> dict[uuid.UUID, list[Hit]]:
            points = client.retrieve(name, ids=[str(i) for i in chunk], with_payload=False,
                                     with_vectors=[vector])
            stored = {uuid.UUID(str(p.id)): p.vector[vector] for p in points
                      if isinstance(p.vector, dict) and vector in p.vector}
            order = list(stored)
            requests = [qm.QueryRequest(query=stored[i], using=vector, filter=qfilter,
                                        limit=limit + 1, with_payload=["revision", "format"])
                        for i in order]
            responses = client.query_batch_points(name, requests=requests) if requests else []
            return {i: [Hit(uuid.UUID(str(p.id)), (p.payload or {}).get("revision"),
                            (p.payload or {}).get("format"), float(p.score))
                        for p in resp.points if uuid.UUID(str(p.id)) != i][:limit]
                    for i, resp in zip(order, responses)}

        out: dict[uuid.UUID, list[Hit]] = {}
        for start in range(0, len(ids), NEIGHBOUR_BATCH):
            chunk = ids[start:start + NEIGHBOUR_BATCH]
            out.update(await self._call(lambda c: run(c, chunk)))
        return out

    async def scroll_ids(self, workspace: str, collection: str | None = None) -> dict[uuid.UUID, dict[str, Any]]:
        """See :meth:`IndexEngine.scroll_ids`."""
        name = collection or self.collection(workspace)

        def run(client: Any) -> dict[uuid.UUID, dict[str, Any]]:
            out: dict[uuid.UUID, dict[str, Any]] = {}
            if not client.collection_exists(name):
                return out
            offset = None
            while True:
                points, offset = client.scroll(name, limit=1000, offset=offset, with_payload=True,
                                               with_vectors=False)
                for p in points:
                    out[uuid.UUID(str(p.id))] = dict(p.payload or {})
                if offset is None:
                    return out

        return await self._call(run)

    async def drop(self, workspace: str) -> None:
        """See :meth:`IndexEngine.drop`: the alias's collection and every other physical
        collection of the workspace."""
        name = self.collection(workspace)

        def run(client: Any) -> None:
            physical = self._resolve(client, name)
            if physical is not None and physical != name:
                from qdrant_client import models as qm

                client.update_collection_aliases(change_aliases_operations=[
                    qm.DeleteAliasOperation(delete_alias=qm.DeleteAlias(alias_name=name))])
            if physical is not None:
                client.delete_collection(physical)
                self._checked.pop(physical, None)
            # every other physical collection of the workspace: a previous index a shadow
            # switch kept, an abandoned rebuild's
            for other in client.get_collections().collections:
                if physical_of(name, other.name):
                    client.delete_collection(other.name)
                    self._checked.pop(other.name, None)

        await self._call(run)

    async def close(self) -> None:
        """Close the client (releases the local storage lock)."""
        if self._client is not None:
            client, self._client = self._client, None
            await asyncio.to_thread(client.close)
