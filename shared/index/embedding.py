"""Embeddings through fastembed: a dense model and Qdrant's BM25 (DESIGN §4).

Each model is loaded once per process and reused. Offline machines set
``MEMARC_DENSE_MODEL_PATH`` / ``MEMARC_BM25_MODEL_PATH`` (``specific_model_path`` +
``local_files_only``); otherwise fastembed downloads from its model hub. Embedding is CPU-bound:
the async helpers run it in a worker thread (onnxruntime releases the GIL) so a process that also
serves HTTP keeps answering. BM25 uses the workspace language's Snowball stemmer and no stopword
list (Qdrant's IDF modifier already discounts common words).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import msgspec

from shared.config import Settings
from shared.errors import EmbedderUnavailable

BM25_MODEL = "Qdrant/bm25"
LANGUAGES = {"en": "english", "it": "italian"}


class SparseVector(msgspec.Struct, frozen=True):
    """A BM25 sparse vector: token hashes and term weights."""

    indices: list[int]
    values: list[float]


class Embedder:
    """Dense + BM25 embedding with models loaded lazily, once, and shared by all callers.

    :param settings: model ids, paths and thread count.
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.dense_model_id = settings.dense_model
        self._dense: Any = None
        self._sparse: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._embed_lock = threading.Lock()
        self.dimension: int | None = None

    def _load_dense(self) -> Any:
        if self._dense is None:
            with self._lock:
                if self._dense is None:
                    from fastembed import TextEmbedding

                    kwargs: dict[str, Any] = {"threads": self.settings.embed_threads}
                    if self.settings.dense_model_path:
                        kwargs.update(specific_model_path=self.settings.dense_model_path,
                                      local_files_only=True)
                    try:
                        model = TextEmbedding(self.settings.dense_model, **kwargs)
                        self.dimension = len(next(iter(model.embed(["dimension probe"]))))
                    except Exception as exc:  # fastembed raises plain ValueError/OSError/...
                        raise EmbedderUnavailable(
                            f"cannot load dense model {self.settings.dense_model!r}: {exc}"
                        ) from exc
                    self._dense = model
        return self._dense

    def _load_sparse(self, language: str) -> Any:
        lang = LANGUAGES.get(language, "english")
        if lang not in self._sparse:
            with self._lock:
                if lang not in self._sparse:
                    from fastembed import SparseTextEmbedding

                    kwargs: dict[str, Any] = {"language": lang}
                    if self.settings.bm25_model_path:
                        kwargs.update(specific_model_path=self.settings.bm25_model_path,
                                      local_files_only=True)
                    try:
                        self._sparse[lang] = SparseTextEmbedding(BM25_MODEL, **kwargs)
                    except Exception as exc:
                        raise EmbedderUnavailable(f"cannot load {BM25_MODEL}: {exc}") from exc
        return self._sparse[lang]

    def load(self, languages: tuple[str, ...] = ("en",)) -> None:
        """Load the models now (otherwise on first use).

        :raises EmbedderUnavailable: a model cannot be loaded.
        """
        self._load_dense()
        for lang in languages:
            self._load_sparse(lang)

    def dense_dimension(self) -> int:
        """Dimension of the dense model (loads it)."""
        self._load_dense()
        assert self.dimension is not None
        return self.dimension

    def embed_documents_sync(self, texts: list[str], language: str) -> tuple[list[list[float]], list[SparseVector]]:
        """Dense vectors (L2-normalised floats) and BM25 vectors for documents, in order.

        Documents are embedded in small batches sorted by length (padding to the longest text
        of a batch dominates the cost: measured 1.7-2x faster on the BIRD cards), one call at a
        time per process so concurrent jobs do not oversubscribe the cores.
        """
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        dense_model = self._load_dense()
        sparse_model = self._load_sparse(language)
        with self._embed_lock:
            vectors = list(dense_model.embed([texts[i] for i in order], batch_size=16))
            sparse_sorted = list(sparse_model.embed([texts[i] for i in order], batch_size=256))
        dense: list[list[float]] = [[]] * len(texts)
        sparse: list[SparseVector] = [SparseVector([], [])] * len(texts)
        for pos, i in enumerate(order):
            dense[i] = vectors[pos].tolist()
            e = sparse_sorted[pos]
            sparse[i] = SparseVector(e.indices.tolist(), e.values.tolist())
        return dense, sparse

    def embed_query_sync(self, text: str, language: str) -> tuple[list[float], SparseVector]:
        """Dense and BM25 query vectors for one query text."""
        dense = next(iter(self._load_dense().query_embed(text))).tolist()
        e = next(iter(self._load_sparse(language).query_embed(text)))
        return dense, SparseVector(e.indices.tolist(), e.values.tolist())

    async def embed_documents(self, texts: list[str], language: str) -> tuple[list[list[float]], list[SparseVector]]:
        """:meth:`embed_documents_sync` in a worker thread.

        :raises EmbedderUnavailable: a model cannot be loaded.
        """
        return await asyncio.to_thread(self.embed_documents_sync, texts, language)

    async def embed_query(self, text: str, language: str) -> tuple[list[float], SparseVector]:
        """:meth:`embed_query_sync` in a worker thread.

        :raises EmbedderUnavailable: a model cannot be loaded.
        """
        return await asyncio.to_thread(self.embed_query_sync, text, language)
