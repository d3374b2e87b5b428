"""The index interface: what every engine implements, and the filter and point shapes (DESIGN §4, §11).

Everything above :class:`IndexEngine` (projection, recall, audits) is engine-independent; the
engines are :class:`shared.index.qdrant.QdrantClientEngine` (a Qdrant server, or qdrant-client's
local mode on disk) and :class:`shared.index.edge.QdrantEdgeEngine` (Qdrant Edge in-process).

Points are keyed by the card UUID and carry a named dense vector ``dense`` (cosine) and a named
sparse vector ``bm25`` (``Modifier.IDF``, so IDF is computed per collection, i.e. per workspace).
The payload holds what the filters need plus ``revision`` and ``format``. The collection's
metadata records the dense model id and dimension; a mismatch raises :class:`IndexIncompatible`.

Filters are put inside *each* branch query (never a top-level filter on a fused query: qdrant-client
issue 1372), and the rankings are fused by the caller as the recall mode's profile says
(:mod:`shared.recall.profiles`, :mod:`shared.recall.fusion`).
"""


from __future__ import annotations

import re
import uuid
from typing import Any, Protocol

import msgspec


#: The archive's named vectors (DESIGN §4; what text each holds: shared.projection.documents).
DENSE = "dense"          # the card's text (dense), with the questions of the solved cards linking to it
KEY = "key"              # the card's key text (dense): the question, the term, the rule, the error
BM25 = "bm25"            # the card's text (BM25), with the same linked questions
KEY_BM25 = "key_bm25"    # the key text (BM25)
OWN = "own"              # the card's own text (dense), without the linked questions
OWN_BM25 = "own_bm25"    # the card's own text (BM25)
ARCHIVE_DENSE = (DENSE, KEY, OWN)
ARCHIVE_SPARSE = (BM25, KEY_BM25, OWN_BM25)


class SparseVector(msgspec.Struct, frozen=True):
    """A BM25 sparse vector: token hashes and term weights."""

    indices: list[int]
    values: list[float]


class VectorLayout(msgspec.Struct, frozen=True, kw_only=True):
    """What the points of a collection carry and what made them (DESIGN §4): named dense
    vectors (cosine, all of ``dimension``), named sparse vectors (BM25 with Qdrant's IDF
    modifier), the dense model id, and ``fingerprint``, the embedder's fingerprint of the model
    files and BM25 configuration for the workspace language
    (:meth:`shared.index.embedding.Embedder.fingerprint`). A collection records its layout when
    it is created; a process whose layout differs (another vector set, model, dimension or
    fingerprint) gets :class:`~shared.errors.IndexIncompatible` until ``memarc index`` rebuilds.
    """

    dense: tuple[str, ...] = (DENSE,)
    sparse: tuple[str, ...] = (BM25,)
    dimension: int
    dense_model: str
    fingerprint: str

    def metadata(self, workspace: str) -> dict[str, Any]:
        """What a collection records of its layout (JSON-serialisable)."""
        return {"workspace": workspace, "dense_model": self.dense_model,
                "dimension": self.dimension, "fingerprint": self.fingerprint,
                "dense_vectors": list(self.dense), "sparse_vectors": list(self.sparse)}

    def problems(self, meta: dict[str, Any]) -> list[str]:
        """How a collection's recorded metadata disagrees with this layout (empty: compatible).
        The vectors themselves are checked by each engine against its own configuration."""
        out = []
        if meta.get("dense_model") != self.dense_model:
            out.append(f"built with dense model {meta.get('dense_model')!r}, "
                       f"configured {self.dense_model!r}")
        if meta.get("fingerprint") != self.fingerprint:
            out.append(f"built with model fingerprint {meta.get('fingerprint')!r}, this "
                       f"process has {self.fingerprint!r} (other model files, BM25 settings or "
                       "language)")
        for kind, names in (("dense", self.dense), ("sparse", self.sparse)):
            recorded = meta.get(f"{kind}_vectors")
            if recorded is not None and sorted(recorded) != sorted(names):
                out.append(f"{kind} vectors {sorted(recorded)} != expected {sorted(names)}")
        return out


class IndexFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Filters applied inside every branch before candidate selection (DESIGN §5).

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
    """A point to upsert: card id, its named dense and sparse vectors (a name may be absent: a
    card without that text), and the filter payload."""

    id: uuid.UUID
    dense: dict[str, list[float]]
    sparse: dict[str, SparseVector]
    payload: dict[str, Any]


class Hit(msgspec.Struct, frozen=True):
    """One branch hit: card id, the payload's revision and format, the branch score."""

    id: uuid.UUID
    revision: int | None
    format: int | None
    score: float


def physical_of(name: str, physical: str) -> bool:
    """Whether ``physical`` is one of the physical collections of the workspace collection
    ``name`` (``<name>__<8 hex>``; exactly, so workspace ``a`` does not match ``a__b``'s)."""
    return re.fullmatch(re.escape(name) + r"__[0-9a-f]{8}", physical) is not None


class IndexTarget(msgspec.Struct, frozen=True, kw_only=True):
    """A physical collection and the dense model its points were made with (``(model id,
    folder)``, :data:`shared.index.embedding.ModelKey`; None: the process's configured model):
    what recall searches instead of the workspace's recorded index when it evaluates a shadow
    rebuild's collection (:func:`shared.recall.verified.recall`)."""

    collection: str
    model: tuple[str, str | None] | None = None


class IndexEngine(Protocol):
    """What the archive needs from a vector index. All methods raise :class:`IndexUnavailable`
    when the engine cannot be reached and :class:`IndexIncompatible` on a configuration mismatch."""

    async def ensure_collection(self, workspace: str, layout: VectorLayout) -> str:
        """Create the workspace collection with ``layout`` if missing; else check it is
        compatible (:class:`IndexIncompatible` otherwise). Returns the physical collection:
        a new name with a random suffix when it was created (what PostgreSQL records as the
        workspace's collection, migration 022)."""

    async def check_collection(self, workspace: str, layout: VectorLayout,
                               collection: str | None = None) -> str | None:
        """The physical collection behind the workspace's name (as :meth:`physical_collection`;
        or the physical ``collection`` named) if it exists and is compatible with ``layout``;
        None if it does not exist.
        :raises IndexIncompatible: it exists with another layout."""

    async def upsert(self, workspace: str, points: list[PointIn], collection: str | None = None) -> None:
        """Write points (into the workspace's collection, or a named one being rebuilt) and wait
        until the engine confirms them."""

    async def delete(self, workspace: str, ids: list[uuid.UUID], collection: str | None = None) -> None:
        """Delete points (missing ones are ignored) and wait for confirmation."""

    async def create_rebuild_collection(self, workspace: str, layout: VectorLayout) -> str:
        """Create a new, empty collection with ``layout`` for a rebuild of ``workspace``;
        returns its name."""

    async def switch_collection(self, workspace: str, collection: str,
                                keep: bool = False) -> str | None:
        """Point the workspace at ``collection`` atomically (an alias switch) and drop the
        collection it used before (``keep``: leave it, a shadow switch's previous index);
        returns the replaced collection's name."""

    async def drop_collection(self, collection: str) -> None:
        """Drop one named collection (an abandoned rebuild)."""

    async def optimize_collection(self, collection: str) -> bool:
        """Build the search graph (HNSW) of a rebuild's collection before it is switched in,
        where the engine does not do so by itself; returns whether anything was rebuilt."""

    async def hybrid_query(self, workspace: str, dense: list[float], sparse: SparseVector,
                           flt: IndexFilter, limit: int, *,
                           dense_names: tuple[str, ...] = (DENSE,),
                           sparse_names: tuple[str, ...] = (BM25,),
                           collection: str | None = None) -> dict[str, list[Hit]]:
        """One ranking per named vector (best first, ``limit`` each, each filtered by ``flt``)
        of the workspace's collection (or of the physical ``collection`` named: the one recall
        read as recorded, or a shadow rebuild's being evaluated):
        the dense query against every vector of ``dense_names``, the sparse query against every
        vector of ``sparse_names``, in one batch. Keys are the vector names."""

    async def dense_scores(self, workspace: str, dense: list[float], ids: list[uuid.UUID],
                           names: tuple[str, ...], *,
                           collection: str | None = None) -> dict[str, dict[uuid.UUID, float]]:
        """The score of the dense query against each of ``ids``' vectors ``names`` (the cosine
        similarity, -1..1): ``{vector name: {point id: score}}``, a point without that vector (or
        missing) absent. One batch, one request per name restricted to ``ids`` (the similarity
        of a recall result that no dense branch ranked, :mod:`shared.recall.verified`)."""

    async def neighbours(self, workspace: str, ids: list[uuid.UUID], vector: str,
                         flt: IndexFilter, limit: int, *,
                         collection: str | None = None) -> dict[uuid.UUID, list[Hit]]:
        """For each of ``ids``, the ``limit`` points nearest to its own stored dense vector
        ``vector`` (cosine similarity, -1..1, best first) among the points matching ``flt``,
        itself left out: ``{id: hits}``; an id without a point, or without that vector, is
        absent. The stored vectors are read and searched in batches (the curation reports'
        conflicts, :mod:`shared.archive.reports`)."""

    async def scroll_ids(self, workspace: str, collection: str | None = None) -> dict[uuid.UUID, dict[str, Any]]:
        """Every point id of the collection with its payload (for audits and rebuilds)."""

    async def physical_collection(self, workspace: str) -> str | None:
        """The physical collection behind the workspace's name, or None when it has none."""

    async def drop(self, workspace: str) -> None:
        """Remove the workspace collection and every other physical collection of the
        workspace (:func:`physical_of`: a previous index, an abandoned rebuild's)."""

    async def close(self) -> None:
        """Release the engine."""
