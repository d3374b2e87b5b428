"""The index interface: what every engine implements, and the filter and point shapes (DESIGN §4, §11).

Everything above :class:`IndexEngine` (projection, recall, audits) is engine-independent; the
engines are :class:`shared.index.qdrant.QdrantClientEngine` (a Qdrant server, or qdrant-client's
local mode on disk) and :class:`shared.index.edge.QdrantEdgeEngine` (Qdrant Edge in-process).

Points are keyed by the card UUID and carry a named dense vector ``dense`` (cosine) and a named
sparse vector ``bm25`` (``Modifier.IDF``, so IDF is computed per collection, i.e. per workspace).
The payload holds what the filters need plus ``revision`` and ``format``. The collection's
metadata records the dense model id and dimension; a mismatch raises :class:`IndexIncompatible`.

Filters are put inside *each* branch query (never a top-level filter on a fused query: qdrant-client
issue 1372), and the two rankings are fused by the caller with k = 60 (:mod:`shared.recall.fusion`).
"""


from __future__ import annotations

import uuid
from typing import Any, Protocol

import msgspec

from shared.index.embedding import SparseVector

DENSE = "dense"
BM25 = "bm25"


class IndexFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Filters applied inside both branches before candidate selection (DESIGN §5).

    ``physical`` is ``(database, schema, table, column)`` with None for unrequested levels; it
    must be satisfied by one dependency entry, each requested level equal or absent on that entry,
    or the card has no dependencies at all (workspace-wide).
    """

    families: tuple[str, ...] = ()
    scope: str | None = None
    concepts: tuple[str, ...] = ()
    physical: tuple[str | None, str | None, str | None, str | None] = (None, None, None, None)
    exclude: tuple[uuid.UUID, ...] = ()


class PointIn(msgspec.Struct, frozen=True, kw_only=True):
    """A point to upsert: card id, vectors and filter payload."""

    id: uuid.UUID
    dense: list[float]
    sparse: SparseVector
    payload: dict[str, Any]


class Hit(msgspec.Struct, frozen=True):
    """One branch hit: card id, the payload's revision and format, the branch score."""

    id: uuid.UUID
    revision: int | None
    format: int | None
    score: float


class IndexEngine(Protocol):
    """What the archive needs from a vector index. All methods raise :class:`IndexUnavailable`
    when the engine cannot be reached and :class:`IndexIncompatible` on a configuration mismatch."""

    async def ensure_collection(self, workspace: str, dense_model: str, dimension: int) -> None:
        """Create the workspace collection if missing; check model, dimension and BM25 config."""

    async def check_collection(self, workspace: str, dense_model: str, dimension: int) -> bool:
        """True if the collection exists and is compatible; False if it does not exist."""

    async def upsert(self, workspace: str, points: list[PointIn], collection: str | None = None) -> None:
        """Write points (into the workspace's collection, or a named one being rebuilt) and wait
        until the engine confirms them."""

    async def delete(self, workspace: str, ids: list[uuid.UUID], collection: str | None = None) -> None:
        """Delete points (missing ones are ignored) and wait for confirmation."""

    async def create_rebuild_collection(self, workspace: str, dense_model: str, dimension: int) -> str:
        """Create a new, empty collection for a rebuild of ``workspace``; returns its name."""

    async def switch_collection(self, workspace: str, collection: str) -> str | None:
        """Point the workspace at ``collection`` atomically (an alias switch) and drop the
        collection it used before; returns the dropped collection's name."""

    async def drop_collection(self, collection: str) -> None:
        """Drop one named collection (an abandoned rebuild)."""

    async def optimize_collection(self, collection: str) -> bool:
        """Build the search graph (HNSW) of a rebuild's collection before it is switched in,
        where the engine does not do so by itself; returns whether anything was rebuilt."""

    async def hybrid_query(self, workspace: str, dense: list[float], sparse: SparseVector,
                           flt: IndexFilter, limit: int) -> tuple[list[Hit], list[Hit]]:
        """Dense and BM25 rankings (best first), each filtered by ``flt``, ``limit`` each."""

    async def scroll_ids(self, workspace: str, collection: str | None = None) -> dict[uuid.UUID, dict[str, Any]]:
        """Every point id of the collection with its payload (for audits and rebuilds)."""

    async def drop(self, workspace: str) -> None:
        """Remove the workspace collection."""

    async def close(self) -> None:
        """Release the engine."""
